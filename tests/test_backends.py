"""The backend seam: one home for what differs between Keras backends, and each backend's rules.

Tests marked `jax` run in the TensorFlow-free JAX env, those marked `torch` in the PyTorch env
(`make test` runs them there); the others run in the TensorFlow env.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import PYTHON, REPO, chapter_fit, python_env
from gpubench import backends, devices, matmul, results, timing, training
from gpubench.factors import rules as factor_rules

H200 = "echo 'GPU 0: NVIDIA H200 (UUID: GPU-1234)'"
FRAMEWORKS = ("tensorflow", "jax", "jaxlib", "torch")


def _modules_a_matmul_loads(backend: str, *names: str) -> str:
    """Whether each of `names` is in sys.modules after a 64 x 64 performance_test on `backend`,
    run in a fresh Python: "False False", ..."""
    flags = ", ".join(f"{name!r} in sys.modules" for name in names)
    code = f"import gpubench as gb, sys; gb.matmul.performance_test('cpu', 64); print({flags})"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300, env=python_env(KERAS_BACKEND=backend))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _framework_imports(path: Path) -> list[str]:
    """`import X` / `from X import` of a framework anywhere in `path`, inside functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{path.name}:{node.lineno}: {n}" for n in names
                  if n.split(".")[0] in FRAMEWORKS]
    return found


def _named_for_a_backend(path) -> bool:
    """backends/ and a module named for its backend (factors/jax_feeds.py, scaling/tf_data.py)."""
    return "backends" in path.parts or path.stem.split("_")[0] in ("tensorflow", "jax", "torch", "tf")


def test_a_framework_is_imported_only_by_the_backends_and_modules_named_for_one():
    package = REPO / "gpubench"
    outside = [p for p in package.rglob("*.py") if not _named_for_a_backend(p)]
    assert outside and not [hit for p in outside for hit in _framework_imports(p)]
    inside = [hit for p in package.rglob("*.py") if _named_for_a_backend(p)
              for hit in _framework_imports(p)]
    assert inside  # the check does find them where they belong


def test_the_env_table_is_one_and_each_name_follows_from_it():
    assert backends.ENVS == ("cpu", "gpu", "jax-cpu", "jax-gpu", "torch-cpu", "torch-gpu")
    assert [backends.env_backend(e) for e in backends.ENVS] == [
        "tensorflow", "tensorflow", "jax", "jax", "torch", "torch"]
    assert [backends.is_gpu_env(e) for e in backends.ENVS] == [False, True] * 3
    assert backends.is_gpu_env("jax-gpu-a100") and not backends.is_gpu_env("my-cpu")
    assert backends.env_backend("torch-gpu-2") == "torch" and backends.env_backend("x") == \
        "tensorflow"
    assert [backends.kernel_name(e) for e in backends.ENVS[:3]] == [
        "gpubench-cpu", "gpubench-gpu", "gpubench-jax-cpu"]
    assert all(backends.env_label(backends.env_backend(e), backends.is_gpu_env(e)) == e
               for e in backends.ENVS)
    assert backends.COMPILER == {"tensorflow": "XLA", "jax": "XLA", "torch": "torch.compile"}
    assert set(backends.BACKEND_TITLES) == set(backends.COMPILER) == set(backends.SUPPORTED)
    titles = [ast.literal_eval(node.value) for path in (REPO / "gpubench").rglob("*.py")
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and node.value.value in ("TensorFlow", "JAX", "PyTorch")
              and any(getattr(t, "id", "") == "TITLE" for t in node.targets)]
    assert titles == []  # each backend's TITLE comes from BACKEND_TITLES, no second copy
    assert backends.current().TITLE == backends.backend_title(backends.current().NAME)


def test_the_no_gpu_hint_says_where_a_gpu_is_seen_and_what_one_here_needs():
    hint = backends.no_gpu_hint("torch")
    assert hint.startswith("No GPU is visible to PyTorch here.")
    assert "reference/h200-jax/report.md" in hint and "gpubench report" in hint
    assert "`gpubench doctor --gpu`" in hint and "\n" not in hint
    assert "make" not in hint  # no `make` target: the hint holds outside a checkout too


def _tf32_follows_the_block(backend) -> None:
    """float32_precision sets TF32 for its block, restores the setting after, even on error."""
    before = backend.tf32_enabled()
    for wanted in (False, True):
        with backend.float32_precision(wanted):
            assert backend.tf32_enabled() is wanted
        assert backend.tf32_enabled() is before
    with pytest.raises(KeyError), backend.float32_precision(not before):
        raise KeyError("a failing product")
    assert backend.tf32_enabled() is before


@pytest.mark.parametrize("name", ["tensorflow", pytest.param("jax", marks=pytest.mark.jax),
                                  pytest.param("torch", marks=pytest.mark.torch)])
def test_float32_precision_times_true_float32_beside_tf32(name):
    backend = backends.current()
    assert backend.NAME == name
    _tf32_follows_the_block(backend)
    with backend.float32_precision(False):
        assert backend.build_info()["backend_settings"]["tf32"] is False  # the record says so


@pytest.mark.parametrize("name", [pytest.param("jax", marks=pytest.mark.jax),
                                  pytest.param("torch", marks=pytest.mark.torch)])
def test_a_tensorflow_beside_another_backend_imports_quietly(name, tmp_path):
    """Keras imports TensorFlow lazily (tf.data) where it is installed beside JAX or PyTorch:
    its start-up lines on stderr (absl, oneDNN) stay out of the kernel's output."""
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os\nos.write(2, b'absl: oneDNN custom operations "
                                      "are on\\n')\ndata = 'tf.data'\n")
    code = ("import gpubench as gb\ngb.backends.keras()\n"
            "from keras.src.utils.module_utils import tensorflow\nprint(tensorflow.data)")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300, env=python_env(KERAS_BACKEND=name, PYTHONPATH=str(tmp_path)))
    assert out.returncode == 0 and out.stdout.strip() == "tf.data", out.stderr[-2000:]
    assert "oneDNN" not in out.stderr


@pytest.mark.parametrize("name,message", [("numpy", "numpy cannot train"),
                                          ("theano", "unknown Keras backend")])
def test_an_unsupported_backend_is_refused_by_name(name, message):
    with pytest.raises(backends.BackendError, match=rf"KERAS_BACKEND='{name}': {message}.*jax"):
        backends.check_name(name)


def test_the_requested_backend_follows_keras_rules(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert backends.requested() == "tensorflow"  # Keras's own default
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert backends.requested() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert backends.requested() == "torch"
    monkeypatch.setenv("KERAS_BACKEND", "numpy")
    with pytest.raises(backends.BackendError, match="numpy"):
        backends.requested()


def test_every_record_names_its_backend_and_the_env_label_follows_it(tmp_path):
    record = matmul.performance_test("cpu", 64, method="rigorous", repeats=2)
    name = backends.current().NAME
    assert record["backend"] == name == record["environment"]["backend"]
    assert record["environment"]["backend_version"] == backends.current().version()
    assert backends.env_label(name, False) == {"tensorflow": "cpu", "jax": "jax-cpu",
                                              "torch": "torch-cpu"}[name]
    assert record["telemetry"]["reason"] == "the device is the CPU"
    assert record["telemetry"]["cpu_util_percent_mean"] is not None


@pytest.mark.jax
def test_jax_env_has_no_tensorflow_and_records_say_so():
    assert backends.current().NAME == "jax"
    snapshot = results.environment_snapshot()
    assert snapshot["tensorflow"] is None and snapshot["jax"] == backends.current().version()
    assert snapshot["backend_settings"]["gpu_memory_preallocate"] is False
    assert results.default_env_name() in ("jax-cpu", "jax-gpu")
    assert _modules_a_matmul_loads("jax", "tensorflow") == "False"


@pytest.mark.jax
def test_jax_sync_waits_for_the_work_it_is_given():
    fn = matmul.rigorous_product("cpu", 3000, "float32")
    fn()  # compiled
    product = fn()
    assert not product.is_ready()  # JAX dispatched it and returned at once
    timing.sync(product)
    assert product.is_ready()


@pytest.mark.jax
def test_without_the_sync_a_timed_jax_matmul_would_end_before_its_work(monkeypatch):
    fn = matmul.rigorous_product("cpu", 3000, "float32")
    seen = []
    monkeypatch.setattr(timing, "sync", lambda *values: seen.extend(values))
    timing.measure(fn, warmup=1, repeats=1)
    assert not seen[-1].is_ready()  # what measure would have timed: dispatch only
    monkeypatch.undo()
    timing.measure(lambda: seen.append(fn()) or seen[-1], warmup=1, repeats=1)
    assert seen[-1].is_ready()  # the real sync waited for it before the clock stopped


# What the GPU guard of a CPU-only build names, by backend: the backend, and its own fix.
CPU_ONLY_FIX = {"jax": ("JAX sees none", "CPU-only", 'pip install "jax[cuda12]"'),
                "torch": ("PyTorch sees none", "CPU-only build", "gpubench-torch-gpu",
                          "torch==2.13.*")}


@pytest.mark.parametrize("name", [pytest.param("jax", marks=pytest.mark.jax),
                                  pytest.param("torch", marks=pytest.mark.torch)])
def test_gpu_guard_on_a_cpu_only_build_names_the_fix(name, fake_command, monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_command("nvidia-smi", H200)
    assert backends.current().NAME == name and not backends.current().is_cuda_build()
    with pytest.raises(devices.GPUNotAvailableError) as info:
        devices.resolve("gpu")
    text = str(info.value)
    assert "NVIDIA H200" in text and all(words in text for words in CPU_ONLY_FIX[name])
    with pytest.warns(UserWarning, match="runs on the CPU although nvidia-smi lists a GPU"):
        assert devices.resolve("auto") == "cpu"  # never silently


@pytest.mark.jax
def test_jax_platforms_cpu_is_named_as_the_reason(fake_command, monkeypatch):
    fake_command("nvidia-smi", H200)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    with pytest.raises(devices.GPUNotAvailableError, match="JAX_PLATFORMS='cpu'"):
        devices.check_gpu()


@pytest.mark.jax
def test_jax_never_trains_eagerly_and_the_record_says_what_ran(tmp_path):
    from gpubench import data

    loaded = data.load("mnist", source="synthetic", max_train_samples=300)
    model = training.build_model("mlp_h1000", "cpu", xla="off")
    store = results.ResultsStore(tmp_path / "r.jsonl")
    made, _ = chapter_fit(model, loaded, epochs=2, batch_size=100, store=store)
    record = store.read()[0]
    assert record["jit_compile"] is True and record["backend"] == "jax"
    assert len(record["epoch_seconds"]) == 2 and record["status"] == "ok"
    assert len(record["epoch_cpu_util_percent"]) == 2
    assert np.isfinite(made["test_loss"]) and record == made


@pytest.mark.jax
def test_jax_oom_is_recognised():
    class XlaRuntimeError(RuntimeError):
        pass

    assert backends.is_oom(XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 8GB"))
    assert not backends.is_oom(XlaRuntimeError("INVALID_ARGUMENT: shapes"))
    assert backends.failure(MemoryError())[0] == "oom"


def _gpubench(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m gpubench ARGS` in this env, run from `cwd` with `env` added."""
    return subprocess.run([PYTHON, "-m", "gpubench", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=python_env(PYTHONPATH=str(REPO), **env))


@pytest.mark.jax
@pytest.mark.parametrize("flags", [["--gpu"], ["--gpu", "--json"]])
def test_jax_platforms_cuda_on_a_cpu_only_jaxlib_is_one_line_for_doctor(tmp_path, flags):
    """One line on stderr; with --json, one JSON document on stdout (its "error" that line)."""
    done = _gpubench("doctor", *flags, cwd=tmp_path, KERAS_BACKEND="jax", JAX_PLATFORMS="cuda")
    said = json.loads(done.stdout)["error"] if "--json" in flags else done.stderr
    assert done.returncode == 1 and (done.stdout if "--json" not in flags else done.stderr) == ""
    assert "Traceback" not in done.stderr and len(said.splitlines()) == 1, done.stderr
    assert "JAX_PLATFORMS='cuda' but this jaxlib" in said and "no CUDA plugin" in said
    assert "set JAX_PLATFORMS=cpu or unset it" in said and "jax[cuda12]" in said


@pytest.mark.jax
@pytest.mark.parametrize("where", [["--here"], ["--envs", "jax-cpu"]])
def test_jax_platforms_cuda_on_a_cpu_only_jaxlib_stops_a_run_before_any_kernel(tmp_path, where):
    """Exit 2 naming JAX_PLATFORMS, and no run directory: the probe of the env says why."""
    kernel = tmp_path / "jupyter" / "kernels" / "gpubench-jax-cpu"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jax", "language": "python",
        "env": {"KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)}}))
    out = tmp_path / "r"
    done = _gpubench("run", *where, "--profile", "quick", "--notebooks", "performanceTest",
                     "--out", str(out), cwd=tmp_path, KERAS_BACKEND="jax", JAX_PLATFORMS="cuda",
                     JUPYTER_PATH=str(tmp_path / "jupyter"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "JAX_PLATFORMS='cuda'" in done.stderr
    assert "set JAX_PLATFORMS=cpu or unset it" in done.stderr and not out.exists()


@pytest.mark.jax
@pytest.mark.parametrize("platforms, error", [("cuda", "GPUNotAvailableError"),
                                              ("tpu", "PlatformError")])
def test_a_jax_platform_that_cannot_start_is_named_in_the_notebooks_too(platforms, error):
    code = ("import gpubench as gb\ntry:\n    gb.devices.list_devices()\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env=python_env(KERAS_BACKEND="jax",
                                                      JAX_PLATFORMS=platforms))
    assert done.stdout.startswith(f"{error} ") and f"JAX_PLATFORMS='{platforms}'" in done.stdout


def test_tensorflow_gpus_that_cannot_be_listed_are_none_seen_with_its_words(fake_command,
                                                                           monkeypatch):
    """Whatever TensorFlow raises listing its GPUs, the guard answers, with TensorFlow's words."""
    backend = backends.current()
    tf = backend.tf()

    def broken(kind=None):
        raise tf.errors.InternalError(None, None, "cuInit failed: CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(tf.config, "list_physical_devices", broken)
    monkeypatch.setattr(backend, "is_cuda_build", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_command("nvidia-smi", H200)
    assert devices.list_devices() == ["cpu"]
    with pytest.raises(devices.GPUNotAvailableError) as info:
        devices.resolve("gpu")
    assert "TensorFlow said: InternalError: cuInit failed: CUDA_ERROR_NO_DEVICE" in str(info.value)


def test_cuda_visible_devices_minus_one_with_a_gpu_asked_is_the_guard(tmp_path):
    """TensorFlow's equivalent of JAX_PLATFORMS=cuda without a GPU: exit 1, no traceback."""
    done = _gpubench("doctor", "--gpu", cwd=tmp_path, CUDA_VISIBLE_DEVICES="-1")
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "GPU check: no usable GPU" in done.stdout and "Fix:" in done.stdout
    code = "import gpubench as gb\ngb.devices.resolve('gpu')"
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=300, env=python_env(CUDA_VISIBLE_DEVICES="-1"))
    assert done.returncode == 1 and "GPUNotAvailableError: device 'gpu' asked for a GPU" in (
        done.stderr)


# PyTorch: these run in the TensorFlow-free torch env (make test: `pytest -m torch` there).

@pytest.mark.torch
def test_torch_env_has_no_tensorflow_and_records_say_so():
    backend = backends.current()
    assert backend.NAME == "torch"
    snapshot = results.environment_snapshot()
    assert snapshot["tensorflow"] is None and snapshot["jax"] is None
    assert snapshot["backend_version"] == backend.version() == backend.torch().__version__.split(
        "+")[0]
    assert snapshot["cuda_build"] is (backend.torch().version.cuda is not None)
    assert snapshot["backend_settings"]["tf32"] is False  # torch's default: "highest"
    assert results.default_env_name() in ("torch-cpu", "torch-gpu")
    assert _modules_a_matmul_loads("torch", "tensorflow", "jax") == "False False"


@pytest.mark.torch
def test_torch_tf32_follows_its_matmul_precision():
    torch = backends.current().torch()
    assert backends.current().tf32_enabled() is False
    try:
        torch.set_float32_matmul_precision("high")
        assert backends.current().tf32_enabled() is True
        assert backends.current().build_info()["backend_settings"]["tf32"] is True
    finally:
        torch.set_float32_matmul_precision("highest")


@pytest.mark.torch
def test_torch_sync_waits_for_every_gpu_torch_started(monkeypatch):
    """CUDA work is queued: the clock of a timed call stops only after each GPU's synchronize;
    a run that never started CUDA (the CPU) never touches it."""
    cuda = backends.current().torch().cuda
    events = []
    monkeypatch.setattr(cuda, "synchronize", lambda index=None: events.append(("sync", index)))
    monkeypatch.setattr(cuda, "device_count", lambda: 2)
    monkeypatch.setattr(cuda, "is_initialized", lambda: False)
    timing.measure(lambda: events.append("call"), warmup=1, repeats=2)
    assert events == ["call"] * 3  # CUDA not started: no GPU is touched
    events.clear()
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)
    timing.measure(lambda: events.append("call"), warmup=1, repeats=2)
    assert events == ["call", ("sync", 0), ("sync", 1)] * 3


@pytest.mark.torch
def test_torch_places_the_work_on_the_device_asked_for():
    backend = backends.current()
    keras = backends.keras()
    with backend.scope("cpu:1"):  # a virtual CPU of Multi_GPU_Scaling is the CPU to torch
        assert keras.random.normal((4, 4)).device.type == "cpu"
    with backend.scope("cpu"):
        made = keras.random.normal((4, 4))
        model = training.build_model("mlp_h1000", "cpu")
    assert made.device.type == "cpu"
    assert {v.value.device.type for v in model.weights} == {"cpu"}


@pytest.mark.torch
def test_torch_oom_is_recognised():
    torch = backends.current().torch()
    assert backends.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert backends.failure(torch.OutOfMemoryError("CUDA out of memory"))[0] == "oom"
    assert not backends.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


@pytest.mark.torch
@pytest.mark.parametrize("xla, compiled", [("off", False), ("on", True), ("auto", False)])
def test_torch_xla_on_is_torch_compile_and_the_record_says_what_ran(xla, compiled):
    model = training.build_model("mlp_h1000", "cpu", xla=xla)
    assert training.mode_fields(model)["jit_compile"] is compiled
    model.make_train_function()
    wrapped = hasattr(model.train_function, "_torchdynamo_orig_callable")
    assert wrapped is compiled  # Keras's jit_compile=True on torch is torch.compile


@pytest.mark.torch
def test_torch_gpu_guard_names_a_hidden_gpu_and_an_old_driver(fake_command, monkeypatch):
    backend = backends.current()
    cuda = backend.torch().cuda
    fake_command("nvidia-smi", H200)
    monkeypatch.setattr(backend, "is_cuda_build", lambda: True)
    monkeypatch.setattr(backend.torch().version, "cuda", "13.0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(devices.GPUNotAvailableError, match="CUDA_VISIBLE_DEVICES='-1' hides"):
        devices.check_gpu()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")

    def too_old() -> bool:
        warnings.warn("The NVIDIA driver on your system is too old (found version 12020).",
                      UserWarning, stacklevel=1)
        return False

    monkeypatch.setattr(cuda, "is_available", too_old)
    backend.cuda_available.cache_clear()
    try:
        with pytest.raises(devices.GPUNotAvailableError) as info:
            devices.check_gpu()
    finally:
        monkeypatch.undo()
        backend.cuda_available.cache_clear()
    text = str(info.value)
    assert "built for CUDA 13.0" in text and "too old (found version 12020)" in text
    assert "update the NVIDIA driver" in text


def _gpu_train(env: str, backend: str, steady: float, *, jit: bool, tf32: bool) -> dict:
    """A book MLP train record on gpu:0 of machine "h200", float32, with the backend's TF32."""
    environment = {k: None for k in results.ENVIRONMENT_FIELDS}
    environment.update(hostname="h200", gpus=[], cuda_build=True, cpu_model="Test CPU",
                       cpu_count=16, ram_gb=128.0, keras="3.15", python="3.11", backend=backend,
                       backend_version={"tensorflow": "2.21", "jax": "0.10.0",
                                        "torch": "2.11.0"}[backend],
                       tensorflow="2.21" if backend == "tensorflow" else None,
                       backend_settings={"tf32": tf32})
    return results.make_record(
        "train", notebook="Mnist_MLP_h1000", env=env, device="gpu:0", model="mlp_h1000",
        environment=environment, dataset="mnist", data_source="keras", epochs=15,
        batch_size=100, train_samples=55000, total_seconds=steady * 16,
        first_epoch_seconds=steady * 2, steady_epoch_seconds=steady,
        epoch_seconds=[steady] * 15, samples_per_second=55000 / steady, test_accuracy=0.95,
        jit_compile=jit, precision="float32", steps_per_execution=1, input_pipeline="arrays",
        tf32=tf32)


def test_the_backends_section_puts_tensorflow_jax_and_pytorch_side_by_side(tmp_path):
    from gpubench import report

    store = results.ResultsStore(tmp_path / "results.jsonl")
    for record in (_gpu_train("gpu", "tensorflow", 2.4, jit=False, tf32=True),
                   _gpu_train("jax-gpu", "jax", 1.2, jit=True, tf32=True),
                   _gpu_train("torch-gpu", "torch", 3.2, jit=True, tf32=False)):
        store.append(record)
    text = report.build([tmp_path]).read_text()
    start = text.index("## Backends: TensorFlow vs JAX vs PyTorch")
    section = text[start:text.find("\n## ", start + 1)]
    header = report.training.BACKEND_HEADERS
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| MNIST MLP h1000 |")]
    assert [(r[header.index("backend")], r[header.index("env")], r[header.index("steady epoch")],
             r[header.index("images/s")], r[header.index("ratio")]) for r in rows] == [
        ("TensorFlow 2.21", "gpu", "2.4 s", "22,917", "1.00x (reference)"),
        ("JAX 0.10.0", "jax-gpu", "1.2 s", "45,833", "2.00x"),
        ("PyTorch 2.11.0", "torch-gpu", "3.2 s", "17,188", "0.75x")]
    jax, torch = (r[header.index("like for like?")] for r in rows[1:])
    assert jax.startswith("**not like for like**: XLA on against XLA off") and "TF32" not in jax
    # each side's compiler by its own name: torch.compile on PyTorch, XLA on TensorFlow
    assert torch.startswith(  # and the precision as it ran: "float32 (TF32)" where TF32 was on
        "**not like for like**: torch.compile on, float32 against XLA off, float32 (TF32)")
    modes = [r[header.index("mode")] for r in rows]  # each row's precision as it ran
    assert ["float32 (TF32)" in m for m in modes] == [True, True, False], modes


def test_what_torch_cannot_run_is_left_out_with_a_note_or_refused_by_name():
    from gpubench.factors import rules

    values = {"xla": ["off", "on"], "steps_per_execution": [1, 10], "input_pipeline": ["arrays"]}
    checked, notes = rules.for_backend(values, "torch", tf_data=False)
    assert checked["xla"] == ["off", "on"]  # torch.compile is a factor on torch
    assert checked["steps_per_execution"] == [1] and "one step per call" in notes[0]
    assert rules.for_backend(values, "tensorflow", tf_data=True)[0] == values
    with pytest.raises(ValueError, match=r"steps_per_execution=\[1, 10\]: .*use "
                                         "steps_per_execution=1"):
        factor_rules.check_for_backend("Speed_Factors", {"steps_per_execution": [1, 10]}, "torch", False)
    assert factor_rules.check_for_backend("Speed_Factors", {"steps_per_execution": [1]}, "torch", False)
    for name in backends.SUPPORTED:  # Multi_GPU_Scaling runs on each, torch.distributed too
        assert importlib.util.find_spec(f"gpubench.scaling.{name}_parallel") is not None, name
    with pytest.raises(backends.BackendError, match="numpy cannot train"):
        backends.check_name("numpy")  # a backend gpubench does not support is refused by name
