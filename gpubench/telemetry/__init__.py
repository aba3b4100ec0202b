"""GPU telemetry (tools tier, loaded where a GPU is measured): NVML's busy % (the share of time a
kernel ran, not how full the SMs were), memory, SM clock and throttling, power and energy, with CPU
use and RAPL energy, sampled by `Monitor`. Modules: `nvml` and `monitor`."""

from gpubench.telemetry.monitor import DEFAULT_INTERVAL, Monitor, combine, epoch_fields
from gpubench.telemetry.nvml import NO_DRIVER, NO_PYNVML, reason_names
