"""NVML, asked through NVIDIA's `pynvml` (nvidia-ml-py): starting it, finding the device, the
figures it reads and the names of its clock-event reason bits.

gpu:N is mapped to its NVML device through CUDA_VISIBLE_DEVICES without asking an ML
framework. NVML gives power in mW, energy in mJ, clocks in MHz, utilisation in % and memory in
bytes; the readers here return those units, and `gpubench.telemetry.monitor` converts them.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from collections.abc import Callable
from typing import Any

# Clock-event reason bits (NVML's nvmlClocksEventReason* values) and the names the
# record uses. Reasons that are not a slowdown of the work (idle, clocks set by the
# user or the display) are left out of `clock_event_reasons`.
REASON_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x200: "board_limit",
    0x400: "reliability",
}
IGNORED_REASON_BITS = 0x1 | 0x2 | 0x100  # gpu_idle, applications_clocks_setting, display clock

# Why a region has no GPU figures, in words (the telemetry object's `reason`).
NO_PYNVML = "nvidia-ml-py is not installed, so NVML cannot be asked (pip install nvidia-ml-py)"
NO_DRIVER = "no NVIDIA driver: the NVML library could not be loaded"
CPU_DEVICE = "the device is the CPU"

_nvml_lock = threading.Lock()
_nvml_started: dict[int, tuple[Any, str | None]] = {}  # id(module) -> (module, failure or None)


def import_pynvml() -> Any:
    """The `pynvml` module, or None where nvidia-ml-py is not installed."""
    try:
        import pynvml  # noqa: PLC0415  (optional: nvidia-ml-py may be absent)
    except ImportError:
        return None
    return pynvml


def start_nvml(nvml: Any) -> str | None:
    """nvmlInit once per process and module (kept open until exit); the failure in words."""
    with _nvml_lock:
        known = _nvml_started.get(id(nvml))
        if known is not None and known[0] is nvml:
            return known[1]
        try:
            nvml.nvmlInit()
            failure = None
            atexit.register(_shutdown_nvml, nvml)
        except Exception as error:  # noqa: BLE001  (an NVMLError, or ctypes' OSError)
            failure = _init_failure(nvml, error)
        _nvml_started[id(nvml)] = (nvml, failure)
        return failure


def _shutdown_nvml(nvml: Any) -> None:
    """nvmlShutdown at exit, matching the one nvmlInit."""
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  (the process is ending)
        pass


def _init_failure(nvml: Any, error: Exception) -> str:
    """Why nvmlInit failed, in words."""
    code = getattr(error, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", object()):
        return NO_DRIVER
    if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", object()):
        return "the NVIDIA driver is installed but not loaded (NVML: Driver Not Loaded)"
    return f"NVML could not start: {error}"


def error_text(error: Exception) -> str:
    """An NVML error (or any other) as a short phrase."""
    return str(error) or type(error).__name__


def device_index(device: str) -> int | None:
    """N of "gpu:N", None for "cpu"; ValueError naming the value for anything else."""
    if device == "cpu":
        return None
    match = re.fullmatch(r"gpu:(\d+)", device) if isinstance(device, str) else None
    if not match:
        raise ValueError(f"telemetry device {device!r} is not \"cpu\" or \"gpu:N\"; "
                         "pass the canonical name from gpubench.devices.resolve")
    return int(match[1])


def _visible_entries(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: comma-separated, up to the first bad entry."""
    entries = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.startswith("-") or not re.fullmatch(r"[A-Za-z0-9-]+", entry):
            break  # empty, negative or odd: CUDA ignores it and every entry after it
        entries.append(entry)
    return entries


def resolve_handle(nvml: Any, index: int) -> tuple[Any, str | None, str | None]:
    """(NVML handle of gpu:`index`, failure in words, caveat in words), asking no framework.

    gpu:N is the N-th GPU the process can see. Where CUDA_VISIBLE_DEVICES is set, that
    is its N-th entry: an index, a UUID ("GPU-..."), or a unique prefix of one. UUIDs
    are matched through nvmlDeviceGetUUID over all of NVML's devices. Indices (unset, or
    integer entries) are taken as NVML indices, which is right when CUDA numbers GPUs in
    PCI bus order as NVML does: always with CUDA_DEVICE_ORDER=PCI_BUS_ID, and with
    identical GPUs (CUDA's default "fastest first" then falls back to PCI order). With
    different GPUs and no PCI_BUS_ID the match cannot be checked without CUDA itself, so
    the caveat says so.
    """
    count = nvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        entry = str(index)
        if index >= count:
            return None, f"gpu:{index} does not exist: NVML sees {count} GPU(s)", None
    else:
        entries = _visible_entries(visible)
        if index >= len(entries):
            return None, (f"gpu:{index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} "
                          f"names {len(entries)} GPU(s)"), None
        entry = entries[index]
    if entry.isdigit():
        nvml_index = int(entry)
        if nvml_index >= count:
            return None, (f"gpu:{index} is NVML device {nvml_index} (CUDA_VISIBLE_DEVICES), "
                          f"but NVML sees {count} GPU(s)"), None
        return nvml.nvmlDeviceGetHandleByIndex(nvml_index), None, _order_caveat(nvml, count)
    if entry.upper().startswith("MIG-"):
        return None, (f"gpu:{index} is a MIG instance ({entry}): NVML gives no utilisation, "
                      "power or energy of its own for one"), None
    wanted = entry.lower()
    matches = []
    for i in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = str(nvml.nvmlDeviceGetUUID(handle)).lower()
        if uuid.startswith(wanted) or uuid.startswith("gpu-" + wanted):
            matches.append(handle)
    if len(matches) != 1:
        found = "no" if not matches else f"{len(matches)}"
        return None, (f"gpu:{index} is {entry!r} in CUDA_VISIBLE_DEVICES, and {found} NVML "
                      "device has that UUID"), None
    return matches[0], None, None


def _order_caveat(nvml: Any, count: int) -> str | None:
    """Words on an index match that may be wrong (different GPUs, CUDA's default order)."""
    if count < 2 or os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return None
    try:
        names = {str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(count)}
    except Exception:  # noqa: BLE001  (no name, no check)
        return None
    if len(names) < 2:
        return None
    return ("the GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA's numbering "
            "may not be NVML's: set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure of the device")


def gpu_readers(nvml: Any, handle: Any) -> dict[str, Callable[[], Any]]:
    """One zero-argument reader per GPU figure, in NVML's units."""
    reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    readers = {
        "util": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,  # %
        "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used,  # bytes
        "clock": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),  # MHz
        "power": lambda: nvml.nvmlDeviceGetPowerUsage(handle),  # mW
        "energy": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),  # mJ
    }
    if reasons is not None:
        readers["reasons"] = lambda: reasons(handle)  # bitmask
    return readers


def reason_names(mask: int) -> list[str]:
    """The record's names for the slowdown bits of an NVML clock-event-reason bitmask."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~(IGNORED_REASON_BITS | sum(REASON_BITS))
    names += [f"other_{1 << n:#x}" for n in range(unknown.bit_length()) if unknown >> n & 1]
    return names

