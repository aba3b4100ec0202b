"""gpubench.telemetry, driven by a stand-in pynvml on a hand-moved clock, and the telemetry in
words (fmt's chapter line, report.telemetry's table and findings)."""

from __future__ import annotations

import importlib
import sys
import threading
import time
from pathlib import Path

import pytest

from fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeClock,
    FakeGPU,
    FakeNVML,
)
from gpubench import fmt, machine, results, telemetry
from gpubench.telemetry import Monitor

HOUR = 3600.0  # an interval the sampler thread never reaches: the test takes the samples


def telemetry_text():
    """gpubench.report.telemetry, the telemetry in words (imported by the tests that read it)."""
    return importlib.import_module("gpubench.report.telemetry")


class CPUClock:
    """A process-time clock that runs `rate` CPU seconds per second of the fake clock."""

    def __init__(self, clock: FakeClock, rate: float = 1.0) -> None:
        self.clock, self.rate, self.used, self.last = clock, rate, 0.0, clock.now

    def __call__(self) -> float:
        self.used += (self.clock.now - self.last) * self.rate
        self.last = self.clock.now
        return self.used


def region(fake: FakeNVML, device: str = "gpu:0", seconds: float = 1.0, steps: int = 10,
           cpu: CPUClock | None = None, **kwargs) -> dict:
    """Monitor `seconds` of fake time, sampled `steps` times (start and stop included)."""
    monitor = Monitor(device, interval=HOUR, nvml=fake, clock=fake.clock,
                      cpu_clock=cpu or CPUClock(fake.clock), **kwargs)
    monitor.start()
    for _ in range(steps - 1):
        fake.clock.advance(seconds / steps)
        monitor.sample()  # what the thread does every interval
    fake.clock.advance(seconds / steps)
    return monitor.stop()


def test_result_has_every_field_of_the_record():
    result = region(FakeNVML())
    assert set(result) == set(results.TELEMETRY_FIELDS) == set(results.unmeasured("x"))


def test_counter_path_gives_end_minus_start_and_the_gpu_figures():
    fake = FakeNVML([FakeGPU(power_mw=250_000, energy_mj=lambda t: 5_000_000 + 300_000 * t)])
    result = region(fake, seconds=1.0, steps=10)
    assert result["source"] == "nvml" and result["reason"] is None
    assert result["partial"] is False
    assert result["energy_method"] == "counter"
    assert result["energy_joules"] == pytest.approx(300.0)  # the counter, not power x time
    assert result["samples"] == 11 and result["seconds"] == pytest.approx(1.0)
    assert result["gpu_util_percent_mean"] == 90 and result["gpu_util_percent_max"] == 90
    assert result["gpu_memory_used_mb_max"] == 2048.0  # 2 GiB in MiB
    assert result["sm_clock_mhz_mean"] == 1500
    assert result["power_watts_mean"] == 250.0 and result["power_watts_max"] == 250.0
    assert result["clock_event_reasons"] == []


def test_a_steady_sm_clock_is_not_throttled():
    result = region(FakeNVML([FakeGPU(sm_clock_mhz=1_900, max_sm_clock_mhz=1_980)]))
    assert (result["sm_clock_mhz_min"], result["sm_clock_mhz_max"]) == (1900, 1980)
    assert result["throttled"] is False


def test_an_sm_clock_that_drops_mid_region_below_75_percent_of_its_top_is_throttled():
    fake = FakeNVML([FakeGPU(sm_clock_mhz=lambda t: 1_400 if 0.4 < t < 0.6 else 1_900,
                             max_sm_clock_mhz=1_980)])  # 1,400 < 0.75 x 1,980 = 1,485
    result = region(fake)
    assert result["sm_clock_mhz_min"] == 1400 and result["throttled"] is True
    assert result["sm_clock_mhz_mean"] > 1400


def test_an_idle_gpus_low_clock_is_no_throttling():
    fake = FakeNVML([FakeGPU(sm_clock_mhz=lambda t: 345 if 0.4 < t < 0.6 else 1_900,
                             reasons=lambda t: 0x1 if 0.4 < t < 0.6 else 0)])  # gpu_idle
    result = region(fake)
    assert result["sm_clock_mhz_min"] == 1900 and result["throttled"] is False


def test_without_the_top_clock_throttling_is_unknown():
    result = region(FakeNVML([FakeGPU(max_sm_clock_mhz=None)]))
    assert result["sm_clock_mhz_min"] == 1500 and result["sm_clock_mhz_max"] is None
    assert result["throttled"] is None and result["source"] == "nvml"


def test_without_the_counter_250_watts_for_one_second_is_250_joules():
    fake = FakeNVML([FakeGPU(power_mw=250_000, energy_counter=False)])
    result = region(fake, seconds=1.0, steps=10)
    assert result["energy_method"] == "power_integral"
    assert result["energy_joules"] == pytest.approx(250.0, rel=0.10)


def test_power_integral_is_the_trapezoid_of_the_samples():
    fake = FakeNVML([FakeGPU(power_mw=lambda t: 100_000 + 200_000 * t, energy_counter=False)])
    result = region(fake, seconds=1.0, steps=4)  # a ramp from 100 W to 300 W
    assert result["energy_joules"] == pytest.approx(200.0)
    assert result["power_watts_max"] == pytest.approx(300.0)


def test_a_region_shorter_than_the_interval_still_has_its_two_samples():
    fake = FakeNVML([FakeGPU(energy_counter=False, util_percent=lambda t: 0 if t == 0 else 80)])
    result = region(fake, seconds=0.6, steps=1)
    assert result["samples"] == 2
    assert result["gpu_util_percent_mean"] == 80  # the start reading tells of before the region
    assert result["energy_joules"] == pytest.approx(250 * 0.6)


def test_a_region_shorter_than_nvml_averages_over_reports_no_busy_or_energy():
    fake = FakeNVML([FakeGPU(util_percent=lambda t: 0 if t == 0 else 80)])
    result = region(fake, seconds=0.016, steps=1)  # 10 matmuls of 1.6 ms, as seen on an H200
    assert result["source"] == "nvml" and result["samples"] == 2
    assert result["gpu_util_percent_mean"] is None and result["energy_joules"] is None
    assert "16 ms is shorter than NVML's utilisation window" in result["reason"]
    assert result["power_watts_mean"] is not None  # what was read is still kept


def test_means_and_maxima_follow_the_timeline():
    fake = FakeNVML([FakeGPU(util_percent=lambda t: 20 if t < 0.5 else 100,
                             memory_used_bytes=lambda t: (1 + t) * 2**30)])
    result = region(fake, seconds=1.0, steps=10)
    assert result["gpu_util_percent_max"] == 100
    assert 20 < result["gpu_util_percent_mean"] < 100
    assert result["gpu_memory_used_mb_max"] == pytest.approx(2048.0)


def test_nvml_is_initialised_once_per_process():
    fake = FakeNVML()
    region(fake)
    region(fake)
    assert fake.inits == 1 and fake.shutdowns == 0


def test_pynvml_not_installed_gives_the_reason_and_cpu_figures(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    clock = FakeClock()
    monitor = Monitor("gpu:0", interval=HOUR, clock=clock, cpu_clock=CPUClock(clock, 0.5))
    monitor.start()
    clock.advance(1.0)
    result = monitor.stop()
    assert result["source"] is None and result["reason"] == telemetry.NO_PYNVML
    assert "nvidia-ml-py" in result["reason"]
    assert result["partial"] is False
    assert result["gpu_util_percent_mean"] is None and result["energy_joules"] is None
    assert result["energy_method"] is None and result["clock_event_reasons"] is None
    assert result["cpu_util_percent_mean"] == 50.0


@pytest.mark.parametrize("code, words", [(NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver"),
                                         (NVML_ERROR_DRIVER_NOT_LOADED, "not loaded")])
def test_no_driver_gives_the_reason_in_words(code, words):
    result = region(FakeNVML(init_error=code))
    assert result["source"] is None and words in result["reason"]
    assert result["power_watts_mean"] is None and result["cpu_util_percent_mean"] == 100.0


def test_the_fake_is_found_through_sys_modules(monkeypatch):
    fake = FakeNVML()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monitor = Monitor("gpu:0", interval=HOUR, clock=fake.clock, cpu_clock=CPUClock(fake.clock))
    monitor.start()
    fake.clock.advance(1.0)
    assert monitor.stop()["source"] == "nvml"


def test_nvml_failing_mid_run_is_partial_and_keeps_the_earlier_samples():
    # The first sample reads six figures, each later one five (the counter only at the ends):
    # 6 + 5 + 5 readings succeed, then the GPU is lost.
    fake = FakeNVML([FakeGPU(util_percent=lambda t: 40 if t < 0.25 else 100, fail_after=16)])
    result = region(fake, seconds=1.0, steps=10)
    assert result["partial"] is True and result["source"] == "nvml"
    assert "GPU is lost" in result["reason"]
    assert result["gpu_util_percent_mean"] == 40  # the two good samples after the first
    assert result["power_watts_mean"] == 250.0
    assert result["energy_joules"] is None and result["energy_method"] is None
    assert result["samples"] == 11 and result["seconds"] == pytest.approx(1.0)
    assert result["cpu_util_percent_mean"] == 100.0


def test_nvml_failing_at_the_last_sample_is_partial_too():
    fake = FakeNVML([FakeGPU(fail_after=6 + 5 * 9)])
    result = region(fake, seconds=1.0, steps=10)
    assert result["partial"] is True and result["energy_joules"] is None
    assert result["gpu_util_percent_mean"] == 90


def test_figures_a_gpu_does_not_give_are_null_and_not_partial():
    fake = FakeNVML([FakeGPU(energy_counter=False)], event_reasons_api=False)  # no reasons
    result = region(fake)
    assert result["partial"] is False and result["clock_event_reasons"] is None
    assert result["energy_method"] == "power_integral"


def test_an_unexpected_error_at_the_start_does_not_raise():
    fake = FakeNVML()
    fake.nvmlDeviceGetCount = lambda: 1 / 0
    result = region(fake)
    assert result["source"] is None and "NVML failed at the start" in result["reason"]
    assert result["cpu_util_percent_mean"] == 100.0


def test_clock_event_reasons_by_name_without_idle_and_application_clocks():
    def reasons(t: float) -> int:
        return 0x1 | 0x4 if t < 0.5 else 0x2 | 0x20 | 0x80

    result = region(FakeNVML([FakeGPU(reasons=reasons)]))
    assert result["clock_event_reasons"] == ["hw_power_brake_slowdown", "sw_power_cap",
                                             "sw_thermal_slowdown"]


def test_reason_names_of_unknown_bits():
    assert telemetry.reason_names(0x4 | 0x800) == ["sw_power_cap", "other_0x800"]
    assert telemetry.reason_names(0x1 | 0x2 | 0x100) == []


UUIDS = ["GPU-aaaa1111-0000-0000-0000-000000000000", "GPU-bbbb2222-0000-0000-0000-000000000000",
         "GPU-bbbc3333-0000-0000-0000-000000000000"]


def three_gpus(names: tuple[str, ...] = ("A100",) * 3) -> FakeNVML:
    """Three GPUs told apart by their utilisation: 10, 20 and 30 %."""
    return FakeNVML([FakeGPU(uuid=u, name=n, util_percent=10 * (i + 1))
                     for i, (u, n) in enumerate(zip(UUIDS, names, strict=True))])


@pytest.mark.parametrize("visible, device, util", [
    (None, "gpu:0", 10), (None, "gpu:2", 30),
    ("2,0", "gpu:0", 30), ("2,0", "gpu:1", 10), (" 1 , 2", "gpu:1", 30),
    (f"{UUIDS[1]},{UUIDS[0]}", "gpu:0", 20), (f"{UUIDS[1]},{UUIDS[0]}", "gpu:1", 10),
    ("GPU-bbbc", "gpu:0", 30), ("aaaa1111", "gpu:0", 10), (UUIDS[2].upper(), "gpu:0", 30),
])
def test_cuda_visible_devices_maps_gpu_n_to_its_nvml_device(monkeypatch, visible, device, util):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    result = region(three_gpus(), device=device)
    assert result["source"] == "nvml" and result["gpu_util_percent_mean"] == util


@pytest.mark.parametrize("visible, device, words", [
    ("1", "gpu:1", "is not visible"), ("", "gpu:0", "is not visible"),
    ("0,-1,2", "gpu:2", "is not visible"),  # CUDA stops at the first bad entry
    ("7", "gpu:0", "NVML sees 3"), ("GPU-bbb", "gpu:0", "2 NVML device"),
    ("GPU-ffff", "gpu:0", "no NVML device"), ("MIG-1234abcd", "gpu:0", "MIG instance"),
    (None, "gpu:3", "does not exist"),
])
def test_gpus_that_cannot_be_matched_say_why(monkeypatch, visible, device, words):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    result = region(three_gpus(), device=device)
    assert result["source"] is None and words in result["reason"]
    assert result["gpu_util_percent_mean"] is None


def test_different_gpus_in_cuda_default_order_carry_a_caveat(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    result = region(three_gpus(("A100", "T4", "T4")))
    assert result["source"] == "nvml" and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in result["reason"]
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert region(three_gpus(("A100", "T4", "T4")))["reason"] is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS[1])
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    assert region(three_gpus(("A100", "T4", "T4")))["reason"] is None  # a UUID is exact


def test_cpu_device_measures_the_cpu_and_says_why_no_gpu():
    fake = FakeNVML()
    rates = iter([1.0, 3.0, 1.0, 1.0])

    class Varying(CPUClock):
        def __call__(self) -> float:
            self.used += (self.clock.now - self.last) * self.rate
            self.last, self.rate = self.clock.now, next(rates, 1.0)
            return self.used

    result = region(fake, device="cpu", seconds=1.0, steps=4, cpu=Varying(fake.clock))
    assert result["source"] is None and result["reason"] == "the device is the CPU"
    assert result["gpu_util_percent_mean"] is None and fake.inits == 0
    assert result["cpu_util_percent_max"] == pytest.approx(300.0)
    assert result["cpu_util_percent_mean"] == pytest.approx(150.0)


def write_rapl(root: Path, domain: str, name: str, energy: int, wrap: int) -> Path:
    path = root / domain
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy}\n")
    (path / "max_energy_range_uj").write_text(f"{wrap}\n")
    return path / "energy_uj"


def test_rapl_package_energy_with_wrap_around(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "RAPL_ROOT", tmp_path)
    package0 = write_rapl(tmp_path, "intel-rapl:0", "package-0", 990_000_000, 1_000_000_000)
    package1 = write_rapl(tmp_path, "intel-rapl:1", "package-1", 5_000_000, 1_000_000_000)
    write_rapl(tmp_path, "intel-rapl:0:0", "core", 0, 10)  # a subdomain: inside package 0
    write_rapl(tmp_path, "intel-rapl:2", "psys", 0, 10)  # the platform: would count twice
    fake = FakeNVML()
    monitor = Monitor("cpu", interval=HOUR, nvml=fake, clock=fake.clock,
                      cpu_clock=CPUClock(fake.clock))
    monitor.start()
    fake.clock.advance(0.5)
    package0.write_text("999000000\n")
    monitor.sample()
    fake.clock.advance(0.5)
    package0.write_text("4000000\n")  # wrapped: 1 J to the wrap, then 4 J
    package1.write_text("7000000\n")
    result = monitor.stop()
    assert result["cpu_energy_method"] == "rapl"
    assert result["cpu_energy_joules"] == pytest.approx(10.0 + 4.0 + 2.0)


def test_unreadable_rapl_is_null_without_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "RAPL_ROOT", tmp_path)
    write_rapl(tmp_path, "intel-rapl:0", "package-0", 1, 10).unlink()  # as if root-only
    result = region(FakeNVML(), device="cpu")
    assert result["cpu_energy_joules"] is None and result["cpu_energy_method"] is None
    assert result["reason"] == "the device is the CPU"


@pytest.mark.parametrize("device", ["gpu", "GPU:0", "/gpu:0", "tpu:0", 0])
def test_a_device_that_is_not_canonical_is_refused_by_name(device):
    with pytest.raises(ValueError, match=r"not \"cpu\" or \"gpu:N\""):
        Monitor(device)


def test_the_thread_samples_on_its_own_and_stop_returns(monkeypatch):
    fake = FakeNVML()
    with Monitor("gpu:0", interval=0.001, nvml=fake) as monitor:
        deadline = time.monotonic() + 30
        while len(monitor.rows) < 5 and time.monotonic() < deadline:
            time.sleep(0.001)
    assert monitor.result["samples"] >= 6 and monitor.result["source"] == "nvml"
    monitor.start().stop()  # its thread is gone: it starts again


def test_start_twice_is_refused_and_stop_twice_returns_the_same():
    monitor = Monitor("cpu").start()
    with pytest.raises(RuntimeError, match="already running"):
        monitor.start()
    first = monitor.stop()
    assert monitor.stop() is first
    assert Monitor("cpu").stop()["reason"] == "the Monitor was never started"


def test_a_real_monitor_on_this_machine_measures_the_cpu_and_says_why_no_gpu():
    with Monitor("gpu:0") as monitor:
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
    result = monitor.result
    if result["source"] == "nvml":
        pytest.skip("this machine has an NVIDIA GPU and NVML")
    assert "NVML" in result["reason"]
    assert result["gpu_util_percent_mean"] is None and result["energy_joules"] is None
    assert result["cpu_util_percent_mean"] is not None and result["cpu_util_percent_mean"] > 0
    assert result["samples"] >= 2 and result["partial"] is False


def epoch(energy, util, cpu, reasons, seconds=2.0, samples=20, **extra):
    return {**results.unmeasured(None), "source": "nvml", "interval_s": 0.1,
            "samples": samples, "seconds": seconds, "energy_joules": energy,
            "energy_method": "counter", "gpu_util_percent_mean": util,
            "gpu_util_percent_max": util + 5, "power_watts_mean": 200.0,
            "power_watts_max": 250.0, "sm_clock_mhz_mean": 1800.0,
            "gpu_memory_used_mb_max": 1000.0, "cpu_util_percent_mean": cpu,
            "cpu_util_percent_max": cpu + 10, "clock_event_reasons": reasons, **extra}


def test_combine_sums_energy_weights_means_and_unites_reasons():
    epochs = [epoch(400.0, 90.0, 100.0, []), epoch(200.0, 60.0, 40.0, ["sw_power_cap"],
                                                   seconds=1.0, gpu_memory_used_mb_max=3000.0)]
    run = telemetry.combine(epochs)
    assert run["energy_joules"] == 600.0 and run["energy_method"] == "counter"
    assert run["gpu_util_percent_mean"] == pytest.approx(80.0)  # weighted by seconds
    assert run["cpu_util_percent_mean"] == pytest.approx(80.0)
    assert run["gpu_util_percent_max"] == 95.0 and run["gpu_memory_used_mb_max"] == 3000.0
    assert run["clock_event_reasons"] == ["sw_power_cap"]
    assert run["samples"] == 40 and run["seconds"] == 3.0 and run["partial"] is False
    assert run["source"] == "nvml" and set(run) == set(results.TELEMETRY_FIELDS)


def test_combine_is_partial_if_any_epoch_is_and_never_sums_a_part():
    broken = epoch(None, 50.0, 10.0, [], partial=True, reason="NVML failed after 3 samples")
    broken["energy_method"] = None
    run = telemetry.combine([epoch(400.0, 90.0, 100.0, []), broken])
    assert run["partial"] is True and run["energy_joules"] is None
    assert run["energy_method"] is None and "NVML failed" in run["reason"]
    assert telemetry.combine([])["reason"] == "no region was measured"


def test_combine_takes_the_lowest_clock_and_flags_a_throttled_run():
    steady = epoch(400.0, 90.0, 100.0, [], sm_clock_mhz_min=1900, sm_clock_mhz_max=1980,
                   throttled=False)
    slowed = epoch(400.0, 90.0, 100.0, [], sm_clock_mhz_min=1200, sm_clock_mhz_max=1980,
                   throttled=True)
    run = telemetry.combine([steady, slowed, epoch(400.0, 90.0, 100.0, [])])
    assert (run["sm_clock_mhz_min"], run["sm_clock_mhz_max"]) == (1200, 1980)
    assert run["throttled"] is True
    assert telemetry.combine([steady, steady])["throttled"] is False
    assert telemetry.combine([epoch(400.0, 90.0, 100.0, [])])["throttled"] is None


def test_combine_says_why_a_region_lacks_a_figure():
    short = "a region of 5 ms is shorter than NVML's utilisation window"
    regions = [epoch(400.0, 0.2, 100.0, [])] + [
        epoch(None, 0.0, 100.0, [], seconds=0.005, reason=short,
              gpu_util_percent_mean=None)] * 4
    assert telemetry.combine(regions)["reason"] == short
    assert telemetry.combine(regions[1:])["reason"] == short


def test_combine_of_unmeasured_regions_stays_null():
    cpu = [results.unmeasured("the device is the CPU") | {"cpu_util_percent_mean": 100.0,
                                                             "seconds": 1.0}] * 3
    run = telemetry.combine(cpu)
    assert run["source"] is None and run["reason"] == "the device is the CPU"
    assert run["clock_event_reasons"] is None and run["gpu_util_percent_mean"] is None
    assert run["cpu_util_percent_mean"] == 100.0 and run["cpu_energy_method"] is None


def test_epoch_fields_are_the_per_epoch_lists():
    fields = telemetry.epoch_fields([epoch(400.0, 90.0, 100.0, []),
                                     results.unmeasured("x")])
    assert fields == {"epoch_energy_joules": [400.0, None],
                      "epoch_gpu_util_percent": [90.0, None],
                      "epoch_cpu_util_percent": [100.0, None],
                      "epoch_clock_event_reasons": [[], None]}


def test_unmeasured_is_a_fresh_dict():
    record = results.unmeasured("why")
    record["samples"] = 3
    fresh = results.unmeasured(None)
    assert fresh["samples"] is None and fresh["partial"] is False


# --- the telemetry in words: the chapter's line (fmt) and the report's (report.telemetry) ---

GPU_RUN = {**results.unmeasured(None), "source": "nvml", "gpu_util_percent_mean": 91.2,
           "power_watts_mean": 287.4, "sm_clock_mhz_mean": 1930.0, "energy_joules": 6180.0,
           "energy_method": "counter", "cpu_util_percent_mean": 104.0}


def test_line_for_a_gpu_run():
    steady = [3.0] + [90.0, 91.0, 92.0] * 4 + [91.0, 91.0]  # epoch 1 compiles: left out
    energy = [700.0] + [412.0] * 14  # busy and energy over the same steady epochs
    assert fmt.telemetry_line(GPU_RUN, 15, steady, energy) == (
        "GPU: busy 91 %, 287 W mean, 1,930 MHz, 412 J per steady epoch; "
        "CPU: 104 % of one core")
    assert "busy 91 % (run mean)" in fmt.telemetry_line(GPU_RUN, epochs=15)
    assert "6,180 J in all" in fmt.telemetry_line(GPU_RUN)  # no per-epoch figures: the run's
    power_only = {**GPU_RUN, "energy_method": "power_integral", "partial": True}
    assert "J in all (power x time), partial: NVML failed" in fmt.telemetry_line(power_only,
                                                                               epochs=15)


def test_line_names_the_energy_method():
    assert "6,180 J in all (counter)" in fmt.telemetry_line(GPU_RUN)
    power_only = {**GPU_RUN, "energy_method": "power_integral"}
    assert "(power x time)" in fmt.telemetry_line(power_only, epochs=15)


def test_line_without_a_gpu():
    cpu_only = {**results.unmeasured(telemetry.NO_DRIVER), "cpu_util_percent_mean": 196.0,
                "cpu_energy_joules": 1500.0, "cpu_energy_method": "rapl"}
    assert fmt.telemetry_line(cpu_only, epochs=15) == (
        f"GPU: none ({telemetry.NO_DRIVER}); CPU: 196 % of one core, 100 J per epoch (RAPL)")
    assert fmt.telemetry_line(None) == "telemetry: not recorded"


def train_record(utils, reasons=None, **telemetry_extra):
    epochs = len(utils)
    return {"benchmark": "train", "epochs": epochs, "train_samples": 60_000,
            "epoch_seconds": [2.0] * epochs, "samples_per_second": 30_000.0,
            "epoch_gpu_util_percent": utils, "epoch_energy_joules": [400.0] * epochs,
            "epoch_clock_event_reasons": reasons or [[] for _ in utils],
            "telemetry": {**GPU_RUN, "energy_joules": 400.0 * epochs, **telemetry_extra}}


def test_diagnosis_of_a_gpu_that_waits():
    lines = telemetry_text().diagnosis(train_record([5.0] + [23.0] * 14))
    assert lines == ["GPU busy 23 % of the epoch: it waits on the input feed or on Python "
                     "between steps; see Speed_Factors' input pipelines and steps per execution"]


def test_diagnosis_of_the_power_cap_in_4_of_15_epochs():
    reasons = [["sw_power_cap"] if i in (3, 5, 8, 13) else [] for i in range(15)]
    lines = telemetry_text().diagnosis(train_record([95.0] * 15, reasons))
    assert len(lines) == 1
    assert lines[0].startswith("clocks held back by the power cap in 4 of 15 epochs")


def test_diagnosis_of_heat_and_of_a_partial_run():
    reasons = [["hw_thermal_slowdown", "sw_power_cap"]] * 2 + [[]] * 3
    lines = telemetry_text().diagnosis(train_record([95.0] * 5, reasons, partial=True))
    assert any(line.startswith("clocks slowed by heat (thermal slowdown) in 2 of 5 epochs")
               for line in lines)
    assert any("power cap in 2 of 5" in line for line in lines)
    assert lines[-1].startswith("telemetry partial")


def test_diagnosis_is_empty_when_all_is_fine_or_there_is_no_gpu():
    assert telemetry_text().diagnosis(train_record([95.0] * 15)) == []
    no_gpu = {**train_record([None] * 3), "telemetry": results.unmeasured("x")}
    assert telemetry_text().diagnosis(no_gpu) == []


def test_diagnosis_of_a_matmul_record_uses_the_run_figures():
    record = {"benchmark": "matmul", "telemetry": {**GPU_RUN, "gpu_util_percent_mean": 30.0,
                                                   "clock_event_reasons": ["hw_slowdown"]}}
    lines = telemetry_text().diagnosis(record)  # no epochs: the reasons of the whole run
    assert len(lines) == 1 and lines[0].startswith(
        "clocks slowed by the hardware (slowdown or power brake) during the run")
    # a timed matmul region's busy % is no wait on an input feed: no such finding
    assert not any("busy" in line for line in lines)


def test_energy_cells_of_a_gpu_run_and_of_a_cpu_run_without_rapl():
    text = telemetry_text()

    def cells(record: dict) -> dict:  # the telemetry table's cells of a record, by header
        row = [text.busy_cell(record), *text.energy_cells(record)]
        return dict(zip(text.TELEMETRY_HEADERS[3:], row, strict=True))

    assert cells(train_record([91.0] * 15)) == {
        "GPU busy": "91 %", "GPU mean power": "287 W", "GPU energy per steady epoch": "400 J",
        "images per joule (GPU)": "150", "CPU use (one core = 100 %)": "104 %",
        "CPU energy per epoch": "n/a (no RAPL on this machine)", "images per joule (CPU)": "n/a"}
    cpu_run = {"benchmark": "train", "epochs": 15, "train_samples": 60_000,
               "telemetry": {**results.unmeasured(machine.CPU_REASON),
                             "cpu_util_percent_mean": 196.4}}
    found = cells(cpu_run)
    assert found["GPU energy per steady epoch"] == "n/a" and found["GPU busy"] == "n/a"
    assert found["CPU energy per epoch"] == "n/a (no RAPL on this machine)"
    assert found["CPU use (one core = 100 %)"] == "196 %"
    with_rapl = {**cpu_run, "telemetry": {**cpu_run["telemetry"], "cpu_energy_joules": 9000.0}}
    found = cells(with_rapl)
    assert found["CPU energy per epoch"] == "600 J" and found["images per joule (CPU)"] == "100"


def test_telemetry_loads_no_ml_framework():
    import subprocess

    code = ("import sys, gpubench.telemetry, gpubench.report.telemetry; "
            "print(sorted({'tensorflow', 'jax', 'keras'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[1]).stdout
    assert out.strip() == "[]"


# ---- a hung NVML: bounded waits, no NVML call on the caller's thread

@pytest.fixture
def hung(monkeypatch):
    """A FakeNVML factory whose hangs are released, and whose stuck samplers are waited for,
    when the test ends (so no later Monitor sees them); the wait is 0.2 s instead of 2 s."""
    monkeypatch.setattr(telemetry, "WAIT_S", 0.2)
    fakes = []

    def make(**kwargs) -> FakeNVML:
        fakes.append(FakeNVML(**kwargs))
        return fakes[-1]

    yield make
    for fake in fakes:
        fake.release.set()
    for thread in threading.enumerate():
        if thread.name == "gpubench-telemetry":
            thread.join(30)
    assert not telemetry.stuck(), "a sampler stayed inside NVML after the hang was released"


def test_a_hung_nvml_at_the_start_costs_a_bounded_wait_and_is_partial(hung):
    fake = hung(hang_after=0, hang_seconds=20)  # every call: 20 s, as a stuck driver
    caller = threading.get_ident()
    monitor = Monitor("gpu:0", interval=HOUR, nvml=fake, clock=fake.clock,
                      cpu_clock=CPUClock(fake.clock))
    monitor.start()
    fake.clock.advance(1.0)
    result = monitor.stop()
    assert fake.calls[caller] == 0 and sum(fake.calls.values()) == 1  # nvmlInit, in the thread
    assert result["partial"] is True and result["source"] is None
    assert result["reason"] == ("NVML did not answer within 0.2 s at the start: no GPU figures "
                                "for this region, and NVML is not shut down at exit while a "
                                "call is stuck")
    assert result["gpu_util_percent_mean"] is None and result["energy_joules"] is None
    assert result["cpu_util_percent_mean"] == 100.0 and result["seconds"] == 1.0
    # while that call hangs, the next region asks NVML nothing and waits for nothing
    later = Monitor("gpu:0", interval=HOUR, nvml=fake, clock=fake.clock,
                    cpu_clock=CPUClock(fake.clock)).start()
    fake.clock.advance(1.0)
    second = later.stop()
    assert second["partial"] is True and "an earlier NVML call has not answered" in (
        second["reason"])
    assert sum(fake.calls.values()) == 1


def test_a_nvml_that_hangs_mid_region_costs_a_bounded_wait_at_stop(hung):
    fake = hung(hang_after=12, hang_seconds=20)  # start-up's 9 calls and one sample answer
    caller = threading.get_ident()
    monitor = Monitor("gpu:0", interval=0.01, nvml=fake, clock=fake.clock,
                      cpu_clock=CPUClock(fake.clock)).start()
    assert monitor.source == "nvml"  # start() found the GPU
    deadline = time.monotonic() + 30
    while sum(fake.calls.values()) <= 12 and time.monotonic() < deadline:
        time.sleep(0.01)  # the thread samples until NVML hangs
    fake.clock.advance(1.0)
    result = monitor.stop()
    assert fake.calls[caller] == 0
    assert result["partial"] is True and result["source"] == "nvml"
    assert result["reason"].startswith("an NVML call took over 0.2 s")
    assert result["energy_joules"] is None and result["seconds"] == 1.0


# ---- impossible readings: dropped figure by figure, with the reason

def test_impossible_readings_are_dropped_field_by_field_with_a_reason():
    fake = FakeNVML([FakeGPU(util_percent=-35.9, power_mw=lambda t: 250_000 if t < 0.5 else -1,
                             sm_clock_mhz=float("nan"),
                             energy_mj=lambda t: 5_000_000 - 1_000_004 * t)])
    result = region(fake)
    assert result["source"] == "nvml" and result["partial"] is False
    assert result["gpu_util_percent_mean"] is None and result["gpu_util_percent_max"] is None
    assert result["sm_clock_mhz_mean"] is None
    assert result["power_watts_mean"] == 250.0 and result["power_watts_max"] == 250.0
    assert result["gpu_memory_used_mb_max"] == 2048.0  # the figures that were right stay
    assert result["energy_method"] == "power_integral" and result["energy_joules"] > 0
    reason = result["reason"]
    assert reason.startswith("NVML gave impossible readings, dropped: ")
    assert "utilisation % -35 is outside 0-100" in reason and "power (mW) -1 is outside" in reason
    assert "SM clock (MHz) nan is outside" in reason
    assert "the energy counter ran backwards (5000000 to 3999996 mJ)" in reason


@pytest.mark.parametrize("name, value, ok", [
    ("util", 100, True), ("util", 0, True), ("util", 101, False), ("util", -1, False),
    ("power", float("inf"), False), ("memory", 1e308, False), ("clock", True, False),
    ("energy", None, False), ("reasons", 0x4, True)])
def test_plausible_readings(name, value, ok):
    assert (telemetry.plausible(name, value) is None) is ok


def test_a_stored_record_with_impossible_telemetry_keeps_its_row_and_timing(tmp_path):
    """What an older gpubench stored (-1,000,004 J, -35.9 % busy) costs those fields only."""
    from test_report import _gpu_run, _lines_with, build_text, table_rows, train

    bad = {**_gpu_run(23.0), "epoch_gpu_util_percent": [-35.9] * 15}
    bad["telemetry"].update(energy_joules=-1_000_004.0, gpu_util_percent_mean=-35.9)
    with pytest.warns(UserWarning, match="dropped") as warned:
        text = build_text(_lines_with(tmp_path, [train("cpu", 300.0), bad]))
    dropped = sorted(str(w.message).split(": ", 1)[1] for w in warned)
    assert dropped == [
        "train field 'epoch_gpu_util_percent' is [-35.9, -35.9, -35.9, -35.9, -35.9, -35.9, "
        "-35.9, -35.9, ..., dropped; the report needs a list of (a number from 0 to 100 or null) or null",
        "train field 'telemetry.energy_joules' is -1000004.0, dropped; the report needs a finite "
        "number >= 0 or null",
        "train field 'telemetry.gpu_util_percent_mean' is -35.9, dropped; the report needs a "
        "number from 0 to 100 or null"]
    assert [row[1] for row in table_rows(text, "MNIST MLP h1000")] == ["vm · cpu", "vm · gpu"]
    assert "skipped" not in text and "-35.9 %" not in text and "-1,000,004" not in text
    assert "telemetry.energy_joules' is -1000004.0, dropped" in text  # What went wrong names it


def test_the_first_sample_is_the_first_kept_however_short_the_interval():
    fake = FakeNVML()
    for _ in range(20):
        with Monitor("gpu:0", interval=1e-6, nvml=fake) as monitor:
            deadline = time.monotonic() + 30
            while len(monitor.rows) < 3 and time.monotonic() < deadline:
                time.sleep(0.0005)
        times = [row[0] for row in monitor.rows]
        assert times == sorted(times) and monitor.result["samples"] >= 4


EXIT_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from fake_pynvml import FakeNVML
from gpubench import telemetry

fake = FakeNVML(hang_seconds=120, **{hang!r})
with telemetry.Monitor("gpu:0", interval=0.01, nvml=fake) as monitor:
    time.sleep(0.3)
print(monitor.result["partial"], monitor.result["reason"], flush=True)
print("region", time.monotonic(), flush=True)
"""


@pytest.mark.slow  # starts a Python: in `make test`, not in `make check`
@pytest.mark.parametrize("hang, partial", [
    ({"hang_on": "nvmlShutdown"}, "False"),  # the shutdown at exit hangs
    ({"hang_after": 15}, "True"),  # a call of the region hangs: no shutdown is tried
])
def test_a_hung_nvml_never_holds_the_process_at_exit(hang, partial):
    import subprocess

    code = EXIT_SCRIPT.format(tests=str(Path(__file__).parent), hang=hang)
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).parents[1])
    first = process.stdout.readline().split(" ", 1)
    region_end = float(process.stdout.readline().split()[1])
    assert process.wait(timeout=100) == 0, "the process waited for the hung NVML call"
    assert time.monotonic() - region_end < 5  # it exits within 5 s of its last region
    assert first[0] == partial
    if partial == "True":
        assert "NVML is not shut down at exit while it is stuck" in first[1]
