"""GPU and CPU telemetry around a timed region: busy %, clocks, power, energy and CPU use.

A building block: the standard library and, where it is installed, NVIDIA's own
binding `pynvml` (the nvidia-ml-py package). It never imports an ML framework and
never syncs a device; the caller's timing does that. `Monitor` samples in a
daemon thread while the region runs and leaves the record's `telemetry` object in
`.result`; nothing in it raises once it has started: where a figure cannot be read
it is null, and `reason` says why in words. Every NVML call is made in that thread: a hung
driver costs the region at most `monitor.NVML_WAIT_S`, and an impossible reading costs only
its own figure.

Units: NVML gives power in mW, energy in mJ, clocks in MHz, utilisation in % and
memory in bytes; the record has W, J, MHz, % and MiB (`gpu_memory_used_mb_max`,
1 MiB = 2**20 bytes, as nvidia-smi counts).

NVML's utilisation is the share of time in which at least one kernel ran, not how
full the SMs were: a GPU 100 % busy with one small kernel at a time shows 100 %.

Modules: `nvml` (pynvml: start, device mapping, readers, clock-event reasons), `cpu` (CPU
use and RAPL energy), `monitor` (the sampler), `summary` (the record's object: fields,
combining regions, per-epoch lists) and `text` (all of it in words).
"""

from __future__ import annotations

from gpubench.telemetry.monitor import DEFAULT_INTERVAL, MIN_AVERAGED_SECONDS, Monitor
from gpubench.telemetry.nvml import (
    CPU_DEVICE,
    IGNORED_REASON_BITS,
    NO_DRIVER,
    NO_PYNVML,
    REASON_BITS,
    reason_names,
    resolve_handle,
)
from gpubench.telemetry.summary import EMPTY, FIELDS, combine, epoch_fields, unmeasured

__all__ = ["CPU_DEVICE", "DEFAULT_INTERVAL", "EMPTY", "FIELDS", "IGNORED_REASON_BITS",
           "MIN_AVERAGED_SECONDS", "NO_DRIVER", "NO_PYNVML", "REASON_BITS",
           "Monitor", "combine", "epoch_fields", "reason_names", "resolve_handle",
           "unmeasured"]
