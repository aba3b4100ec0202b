"""NVML through `pynvml` (nvidia-ml-py): start and shutdown, gpu:N, its readers (%, bytes, MHz, mW,
mJ), clock-event names. A call not answered in WAIT_S is given up on: while it is stuck, no Monitor
asks NVML anything and NVML is not shut down at exit (a hung shutdown is left after WAIT_S)."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import threading
from collections.abc import Callable
from typing import Any

WAIT_S = 2.0  # the longest any caller waits for an NVML call
# Clock-event reason bits (nvmlClocksEventReason*) and the record's names for the slowdowns; the
# others (idle, clocks set by the user or the display) are no slowdown of the work.
REASON_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
               0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
               0x80: "hw_power_brake_slowdown", 0x200: "board_limit", 0x400: "reliability"}
GPU_IDLE = 0x1
IGNORED_REASON_BITS = GPU_IDLE | 0x2 | 0x100
NO_PYNVML = "nvidia-ml-py is not installed, so NVML cannot be asked (pip install nvidia-ml-py)"
NO_DRIVER = "no NVIDIA driver: the NVML library could not be loaded"
NOT_LOADED = "the NVIDIA driver is installed but not loaded (NVML: Driver Not Loaded)"
LEFT_OPEN = "NVML is not shut down at exit"
ORDER_CAVEAT = ("the GPUs differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA's numbering may "
                "not be NVML's: set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure of the device")

_lock = threading.Lock()
_started: dict[Any, str | None] = {}  # module -> why nvmlInit failed, None if it did not
_stuck: list[threading.Thread] = []  # threads inside a call given up on, until they leave it


def give_up(thread: threading.Thread) -> None:
    """Note a thread whose NVML call was given up on: NVML is stuck while the thread lives."""
    _stuck.append(thread)  # no lock: the thread may hold `_lock`, inside nvmlInit


def stuck() -> bool:
    """Whether a thread given up on is still inside NVML."""
    return any(thread.is_alive() for thread in _stuck)


def start(nvml: Any) -> str | None:
    """nvmlInit once per process and module (`shutdown` at exit); the failure in words."""
    with _lock:
        if nvml not in _started:
            if not _started:
                atexit.register(shutdown)
            _started[nvml] = None
            try:
                nvml.nvmlInit()
            except Exception as error:  # noqa: BLE001  (an NVMLError, or ctypes' OSError)
                _started[nvml] = {
                    getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): NO_DRIVER,
                    getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): NOT_LOADED,
                }.get(getattr(error, "value", None), f"NVML could not start: {error_text(error)}")
        return _started[nvml]


def shutdown() -> None:
    """nvmlShutdown of each started module, waited for at most WAIT_S; none while one is stuck."""
    for nvml in [nvml for nvml, failure in _started.items() if failure is None]:
        if stuck():
            return
        thread = threading.Thread(target=_quietly, args=(nvml.nvmlShutdown,), daemon=True)
        thread.start()
        thread.join(WAIT_S)
        give_up(thread)
    _started.clear()


def _quietly(function: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):  # the process is ending
        function()


def error_text(error: Exception) -> str:
    """An NVML error (or any other) as a short phrase."""
    return str(error) or type(error).__name__


def resolve_handle(nvml: Any, index: int) -> tuple[Any, str | None, str | None]:
    """(NVML handle of gpu:`index`, failure, caveat): the N-th entry of CUDA_VISIBLE_DEVICES as
    CUDA reads it (an index, a UUID or its prefix), else NVML index N; asks no framework."""
    count = nvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [str(i) for i in range(count)] if visible is None else list(itertools.takewhile(
        lambda e: re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", e), map(str.strip, visible.split(","))))
    if index >= len(entries):
        return None, (f"gpu:{index} does not exist: NVML sees {count} GPU(s)" if visible is None
                      else f"gpu:{index} is not visible: CUDA_VISIBLE_DEVICES={visible!r} "
                      f"names {len(entries)} GPU(s)"), None
    entry = entries[index]
    if entry.isdigit():
        if int(entry) >= count:
            return None, (f"gpu:{index} is NVML device {entry} (CUDA_VISIBLE_DEVICES), but NVML "
                          f"sees {count} GPU(s)"), None
        caveat = None  # an index is right in PCI bus order; CUDA's own order may differ
        if count > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
            with contextlib.suppress(Exception):  # no name, no check
                if len({str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                        for i in range(count)}) > 1:
                    caveat = ORDER_CAVEAT
        return nvml.nvmlDeviceGetHandleByIndex(int(entry)), None, caveat
    if entry.upper().startswith("MIG-"):
        return None, (f"gpu:{index} is a MIG instance ({entry}): NVML gives no utilisation, "
                      "power or energy of its own for one"), None
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    matches = [h for h in handles if str(nvml.nvmlDeviceGetUUID(h)).lower().startswith(
        (entry.lower(), "gpu-" + entry.lower()))]
    if len(matches) != 1:
        return None, (f"gpu:{index} is {entry!r} in CUDA_VISIBLE_DEVICES, and "
                      f"{len(matches) or 'no'} NVML device has that UUID"), None
    return matches[0], None, None


def open_gpu(nvml: Any, index: int) -> tuple[dict[str, Callable[[], Any]], dict, str | None]:
    """(a reader per figure gpu:`index` gives, their first reading, the reason or caveat); `nvml`
    None: pynvml, if installed. "max_clock" is read only here."""
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415  (optional: nvidia-ml-py may be absent)
        except ImportError:
            return {}, {}, NO_PYNVML
    failure = start(nvml)
    if failure is None:
        handle, failure, caveat = resolve_handle(nvml, index)
    if failure is not None:
        return {}, {}, failure
    reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    readers = {
        "util": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,  # %
        "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used,  # bytes
        "clock": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),  # MHz
        "max_clock": lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),  # MHz
        "power": lambda: nvml.nvmlDeviceGetPowerUsage(handle),  # mW
        "energy": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),  # mJ
        "reasons": lambda: reasons(handle),  # bitmask
    }
    first, errors = {}, []
    for name, read in list(readers.items()):
        try:  # a figure this GPU does not give (NotSupported and the like) stays null
            first[name] = read()
        except Exception as error:  # noqa: BLE001
            errors.append(error_text(error))
            del readers[name]
    readers.pop("max_clock", None)
    if not readers:
        return {}, {}, f"NVML reads nothing for gpu:{index}: {errors[0]}"
    return readers, first, caveat


def reason_names(mask: int) -> list[str]:
    """The record's names for the slowdown bits of an NVML clock-event-reason bitmask."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~(IGNORED_REASON_BITS | sum(REASON_BITS))
    names += [f"other_{1 << n:#x}" for n in range(unknown.bit_length()) if unknown >> n & 1]
    return names
