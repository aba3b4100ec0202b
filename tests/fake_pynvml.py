"""A stand-in for NVIDIA's `pynvml` (nvidia-ml-py) with the real names, constants and units.

`FakeNVML(gpus=[FakeGPU(...)], clock=FakeClock())` is a module object (it can go into
sys.modules["pynvml"]) whose functions answer from a scripted timeline: each figure
of a `FakeGPU` is a number or a function of the fake time in seconds. Units as NVML's:
utilisation in %, memory in bytes, clocks in MHz, power in mW, energy in mJ, the
clock-event reasons a bitmask. Names and values checked against nvidia-ml-py 13.615.
"""

from __future__ import annotations

import collections
import functools
import math
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
nvmlClocksEventReasonNone = 0x0

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As in pynvml: NVMLError(code) is an instance of that code's subclass; `.value` is it."""

    _by_code: dict[int, type] = {}

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN):
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, NVMLError)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type:
    def new(cls, *args):
        return NVMLError.__new__(cls, code)

    cls = type(name, (NVMLError,), {"__new__": new})
    NVMLError._by_code[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded",
                                         NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound",
                                         NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound",
                                          NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


class FakeClock:
    """A clock the test moves by hand: call it for the time, `advance` it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Figure = float | Callable[[float], float]


def whole(value: float) -> float:
    """A reading as NVML's integer, except a non-finite one, passed on as it is."""
    return int(value) if math.isfinite(value) else value


@dataclass
class FakeGPU:
    """One GPU's script: each figure a number or a function of the fake time (seconds)."""

    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    name: str = "NVIDIA Fake 100"
    util_percent: Figure = 90
    memory_used_bytes: Figure = 2 * 2**30
    memory_total_bytes: int = 80 * 2**30
    sm_clock_mhz: Figure = 1_500
    max_sm_clock_mhz: int | None = 1_980  # the top SM clock; None: NotSupported
    power_mw: Figure = 250_000
    energy_mj: Figure | None = None  # None: the integral of power_mw from time 0
    energy_counter: bool = True  # False: the counter raises NotSupported (before Volta)
    reasons: Figure = 0  # nvmlClocksEventReason* bitmask
    fail_after: int | None = None  # every reading fails (GPU is lost) after this many
    readings: int = field(default=0, init=False)

    def value(self, figure: Figure, now: float) -> float:
        return figure(now) if callable(figure) else figure

    def read(self, figure: Figure, now: float) -> float:
        """One reading, counted toward `fail_after`."""
        if self.fail_after is not None and self.readings >= self.fail_after:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        self.readings += 1
        return self.value(figure, now)

    def energy(self, now: float) -> int:
        """The counter in mJ: `energy_mj`, else power integrated from 0 (1 ms steps)."""
        if self.energy_mj is not None:
            return whole(self.value(self.energy_mj, now))
        steps = max(1, round(now * 1000))
        dt = now / steps
        return int(sum(self.value(self.power_mw, (i + 0.5) * dt) for i in range(steps)) * dt)


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


class FakeNVML(types.ModuleType):
    """A fake `pynvml` module answering for `gpus` on `clock`'s time."""

    def __init__(self, gpus: list[FakeGPU] | None = None, clock: FakeClock | None = None,
                 init_error: int | None = None, event_reasons_api: bool = True,
                 hang_after: int | None = None, hang_seconds: float = 10.0,
                 hang_on: str | None = None) -> None:
        """`hang_after`: every call after that many (and every call of the function named
        `hang_on`) answers only after `hang_seconds` (real time), or at once when `release` is
        set. `calls` counts the calls by thread id."""
        super().__init__("pynvml")
        self.hang_after, self.hang_seconds, self.hang_on = hang_after, hang_seconds, hang_on
        self.release = threading.Event()
        self.calls: collections.Counter = collections.Counter()
        for name, value in globals().items():
            if name.startswith(("NVML_", "NVMLError", "nvmlClocksEventReason")):
                setattr(self, name, value)
        self.gpus = [FakeGPU()] if gpus is None else gpus
        self.clock = clock or FakeClock()
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0
        self.event_reasons_api = event_reasons_api

    def __getattribute__(self, name: str) -> Any:
        # event_reasons_api=False: an NVML that gives no clock-event reasons.
        if (name == "nvmlDeviceGetCurrentClocksEventReasons"
                and not object.__getattribute__(self, "event_reasons_api")):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        found = object.__getattribute__(self, name)
        if name.startswith("nvml") and callable(found):
            return functools.partial(object.__getattribute__(self, "_call"), found)
        return found

    def _call(self, function: Callable, *args: Any) -> Any:
        """Count the call by thread; past `hang_after` calls, hang first (a stuck driver)."""
        self.calls[threading.get_ident()] += 1
        if (self.hang_after is not None and sum(self.calls.values()) > self.hang_after
                or function.__name__ == self.hang_on):
            self.release.wait(self.hang_seconds)
        return function(*args)

    def _ready(self) -> None:
        if self.inits <= self.shutdowns:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle) -> FakeGPU:
        self._ready()
        return self.gpus[handle.index]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._ready()
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._ready()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> types.SimpleNamespace:
        gpu = self._gpu(handle)
        return types.SimpleNamespace(gpu=whole(gpu.read(gpu.util_percent, self.clock.now)),
                                     memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: Any = None):
        gpu = self._gpu(handle)
        used = whole(gpu.read(gpu.memory_used_bytes, self.clock.now))
        return types.SimpleNamespace(total=gpu.memory_total_bytes, used=used,
                                     free=gpu.memory_total_bytes - used)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        if clock_type != NVML_CLOCK_SM:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return whole(gpu.read(gpu.sm_clock_mhz, self.clock.now))

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        if clock_type != NVML_CLOCK_SM or gpu.max_sm_clock_mhz is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.max_sm_clock_mhz

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        return whole(gpu.read(gpu.power_mw, self.clock.now))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        if not gpu.energy_counter:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gpu.read(0, self.clock.now)
        return gpu.energy(self.clock.now)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        return whole(gpu.read(gpu.reasons, self.clock.now))
