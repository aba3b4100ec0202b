"""devices: names, the no-silent-fallback guard and its diagnosis, memory growth."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest

from conftest import PYTHON, REPO
from gpubench import backends, devices, machine


@pytest.mark.parametrize("name", ["cpu", "CPU", "/cpu:0", "/CPU:0", "cpu:0", "/device:CPU:0"])
def test_cpu_names_resolve(name):
    assert devices.resolve(name) == "cpu"


def test_auto_is_cpu_without_gpu(fake_machine):
    fake_machine(gpus=0)
    assert devices.resolve("auto") == "cpu"


def test_auto_prefers_first_gpu(fake_machine):
    fake_machine(gpus=2, cuda_build=True)
    assert devices.resolve("auto") == "gpu:0"
    assert devices.list_devices() == ["cpu", "gpu:0", "gpu:1"]


@pytest.mark.parametrize("name,expected", [("gpu", "gpu:0"), ("/gpu:0", "gpu:0"),
                                           ("GPU:1", "gpu:1"), ("/device:GPU:1", "gpu:1")])
def test_gpu_names_resolve(fake_machine, name, expected):
    fake_machine(gpus=2, cuda_build=True)
    assert devices.resolve(name) == expected


def test_unknown_name_is_named(fake_machine):
    fake_machine(gpus=1, cuda_build=True)
    with pytest.raises(devices.DeviceError, match=r"'tpu'.*\"auto\", \"cpu\", \"gpu\""):
        devices.resolve("tpu")


def test_gpu_index_out_of_range_names_the_real_ones(fake_machine):
    fake_machine(gpus=1, cuda_build=True)
    with pytest.raises(devices.DeviceError, match=r"'gpu:7'.*1 GPU.*gpu:0"):
        devices.resolve("gpu:7")


def test_name_syntax_is_checked_without_tensorflow():
    code = ("import sys; from gpubench import devices\n"
            "assert [devices.check_name(n) for n in (' auto', 'GPU:3', '/device:CPU:0')] == "
            "['auto', 'GPU:3', '/device:CPU:0']\n"
            "for bad in ('tpu', 'cpu:1', 'gpu:x', 7):\n"
            "    try: devices.check_name(bad)\n"
            "    except devices.DeviceError as e: assert repr(bad) in str(e), e\n"
            "    else: raise SystemExit(f'{bad!r} accepted')\n"
            "assert 'tensorflow' not in sys.modules")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr


def test_second_cpu_is_rejected():
    with pytest.raises(devices.DeviceError, match="cpu:1"):
        devices.resolve("cpu:1")


def test_non_string_is_rejected():
    with pytest.raises(devices.DeviceError, match="7"):
        devices.resolve(7)


H200 = 'echo "GPU 0: NVIDIA H200 (UUID: GPU-1234)"'


@pytest.mark.parametrize("smi,why", [(None, "nvidia-smi not found"), ("echo", "nvidia-smi lists none")])
@pytest.mark.parametrize("cuda_build", [False, True])
def test_machine_without_any_gpu_is_told_so(fake_machine, fake_command, monkeypatch, tmp_path,
                                            smi, why, cuda_build):
    fake_machine(gpus=0, cuda_build=cuda_build)
    monkeypatch.setenv("PATH", str(tmp_path / "fakebin"))  # only the fake commands
    if smi is not None:
        fake_command("nvidia-smi", smi)
    with pytest.raises(devices.GPUNotAvailableError) as info:
        devices.resolve("gpu")
    message = str(info.value)
    assert f"no NVIDIA GPU on this machine ({why})" in message
    assert "GPU=1" not in message and "--gpu" not in message and "tensorflow[and-cuda]" not in message


def test_gpu_on_cpu_only_build_fails_loudly(fake_machine, fake_command):
    fake_machine(gpus=0, cuda_build=False)
    fake_command("nvidia-smi", H200)
    with pytest.raises(devices.GPUNotAvailableError) as info:
        devices.resolve("gpu")
    message = str(info.value)
    assert "CPU-only build" in message and "NVIDIA H200" in message
    # `gpubench doctor --gpu` names the command where the user is (make in a checkout, pip
    # outside): the diagnosis itself names neither
    assert "`gpubench doctor --gpu`" in message and "`make" not in message
    assert "tensorflow[and-cuda]" in message


def test_cuda_build_without_driver(fake_machine, fake_command, monkeypatch):
    fake_machine(gpus=0, cuda_build=True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_command("nvidia-smi", "exit 9")
    with pytest.raises(devices.GPUNotAvailableError, match="driver is missing or not working"):
        devices.resolve("gpu:0")


def test_cuda_build_with_driver_but_no_libraries(fake_machine, fake_command, monkeypatch):
    fake_machine(gpus=0, cuda_build=True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_command("nvidia-smi", H200)
    with pytest.raises(devices.GPUNotAvailableError) as info:
        devices.check_gpu()
    assert "NVIDIA H200" in str(info.value)
    assert "CUDA/cuDNN libraries" in str(info.value)


def test_hidden_gpus_are_diagnosed(fake_machine, fake_command, monkeypatch):
    fake_machine(gpus=0, cuda_build=True)
    fake_command("nvidia-smi", H200)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(devices.GPUNotAvailableError, match="CUDA_VISIBLE_DEVICES"):
        devices.resolve("gpu")


def test_memory_growth_is_enabled_for_every_gpu():
    from gpubench.backends import tensorflow as tf_backend

    calls = []
    gpus = ["gpu-a", "gpu-b"]
    fake = SimpleNamespace(config=SimpleNamespace(
        list_physical_devices=lambda kind: gpus if kind == "GPU" else [],
        experimental=SimpleNamespace(set_memory_growth=lambda g, flag: calls.append((g, flag)))))
    tf_backend.enable_memory_growth(fake)
    assert calls == [("gpu-a", True), ("gpu-b", True)]


def test_real_machine_devices_exist_and_take_work():
    """Every listed device is one the backend has, and work placed on it by name runs there."""
    keras = backends.keras()
    listed = devices.list_devices()
    assert listed == ["cpu"] + [f"gpu:{i}" for i in range(backends.current().gpu_count())]
    if not machine.nvidia_smi_gpus() or not backends.current().is_cuda_build():
        assert listed == ["cpu"]
    for name in listed:
        with devices.scope(name) as canonical:
            product = keras.ops.multiply(keras.ops.convert_to_tensor([1.0, 2.0]), 2.0)
        assert canonical == name
        assert keras.ops.convert_to_numpy(product).tolist() == [2.0, 4.0]
        assert name.split(":")[0] in _placed_on(product).lower()


def _placed_on(value) -> str:
    """The device a backend tensor lives on, in the backend's words."""
    if backends.current().NAME == "jax":
        return str(next(iter(value.devices())).platform)
    return str(value.device)


@pytest.mark.slow  # trains or starts a Python: in `make test`, not in `make check`
def test_doctor_reports_the_build_and_the_check():
    out = subprocess.run([PYTHON, "-m", "gpubench", "doctor"], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert ("TensorFlow 2.21" if backends.requested() == "tensorflow" else "JAX 0.") in out.stdout
    if devices.list_devices()[1:]:
        assert "GPU check: OK" in out.stdout
        return
    if machine.nvidia_smi_gpus():
        assert "Diagnosis" in out.stdout
    else:  # a machine with no GPU at all is told so, not sent to set one up
        assert "no NVIDIA GPU on this machine" in out.stdout and "GPU=1" not in out.stdout
    strict = subprocess.run([PYTHON, "-m", "gpubench", "doctor", "--gpu"],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    assert strict.returncode == 1


def test_the_diagnosis_loads_only_when_a_gpu_is_missing(tmp_path):
    """A CPU chapter's device choices load no diagnosis text; a GPU asked for and missing does."""
    code = ("import sys; from gpubench import devices\n"
            "devices.resolve('cpu'); devices.list_devices()\n"
            "print('gpubench.backends.diagnosis' in sys.modules)\n"
            "try:\n    devices.resolve('gpu')\nexcept devices.GPUNotAvailableError:\n"
            "    print('gpubench.backends.diagnosis' in sys.modules)")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300, env={**os.environ, "PATH": str(tmp_path)})  # no nvidia-smi
    assert out.stdout.split() == ["False", "True"], out.stderr[-2000:]


def test_load_average_is_a_number_or_none(monkeypatch):
    assert isinstance(machine.load_average(), float)

    def unavailable():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert machine.load_average() is None
