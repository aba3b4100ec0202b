"""Data-parallel training over a machine's devices, or several machines, and its scaling efficiency.

What differs by backend lives in `gpubench.backends.<backend>_parallel` (`parallel()`):
- TensorFlow: `tf.distribute.MirroredStrategy` over the chosen devices of one machine,
  and `MultiWorkerMirroredStrategy` over several machines (`gpubench scaling`);
- JAX: `keras.distribution.DataParallel` over the chosen devices (one machine only).
Either way the devices are GPUs, or the CPU split into `virtual_devices` devices so the
mechanics run without GPUs.

Every replica count runs the same kind of training step: one compiled step per global batch,
the loss averaged over the global batch, the gradients added across replicas (the
all-reduce), the data split by the distribution. Epochs are timed as `training` times them:
a sync on the model's variables ends each, epoch 1 is reported on its own, the steady figure
is the median of epochs 2..n (`training.timing_fields`), and a telemetry.Monitor covers each.

No framework at import time: `include_in_run` and `split_cpu`'s choice of
backend are pure Python (`split_cpu` must run before the framework sets up its devices).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from gpubench import backends, machine, results, rundir, telemetry
from gpubench.params import check_scaling, positive_int
from gpubench.params import resolve as resolve_params

NOTEBOOK = "Multi_GPU_Scaling"
CLI_NOTEBOOK = "gpubench scaling"
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")
_CPU_N = re.compile(r"^/?(?:device:)?cpu:(\d+)$", re.IGNORECASE)
# Set by `launch_local` in each worker's environment: the launcher's PID (the worker dies with
# it), and the run directory whose lock the launcher holds for the workers.
LAUNCHER_ENV = "GPUBENCH_SCALING_LAUNCHER"
LOCKED_ENV = "GPUBENCH_SCALING_LOCKED"
CLUSTER_BACKEND = "tensorflow"  # the backend of the several-machine mode


# ---------------------------------------------------------------- rules without a framework


def include_in_run(env_is_gpu: bool, gpu_count: int, profile: str,
                   asked_by_name: bool) -> dict | None:
    """Extra notebook parameters for `gpubench run`, or None to leave Multi_GPU_Scaling out.

    Two or more GPUs: as it is. Else on the CPU split into two virtual devices, only in a CPU
    env's quick profile or when asked for by name, so the full run keeps to its time budget.
    On JAX the chapter's first cell splits the CPU (XLA_FLAGS) before JAX loads: no kernel
    environment is needed.
    """
    if env_is_gpu and gpu_count >= 2:
        return {}
    if asked_by_name or (profile == "quick" and not env_is_gpu):
        return {"virtual_devices": 2}
    return None


def parse_cluster(text: str) -> list[str]:
    """"host:port,host:port,..." -> the list of addresses; a ValueError names a malformed one."""
    entries = [part.strip() for part in str(text).split(",")]
    for entry in entries:
        match = _HOST_PORT.match(entry)
        if not match or not 0 < int(match.group("port")) < 65536:
            raise ValueError(f"malformed --cluster entry {entry!r} in {text!r}; give HOST:PORT "
                             "pairs separated by commas, e.g. 10.0.0.1:12345,10.0.0.2:12345")
    if len(set(entries)) != len(entries):
        raise ValueError(f"--cluster {text!r} names an address twice; give each worker once")
    return entries


def check_index(index: int, workers: int) -> int:
    """This worker's index in a cluster of `workers`, or a ValueError naming it."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < workers:
        raise ValueError(f"--index {index!r} is out of range for a cluster of {workers} "
                         f"worker(s); use 0 to {workers - 1}")
    return index


def global_batch(scaling: str, per_replica_batch_size: int, replicas: int) -> tuple[int, int]:
    """(global batch, batch per replica): weak keeps `per_replica_batch_size` per replica, strong
    keeps it as the global batch, split as evenly as whole images allow."""
    if scaling == "weak":
        return per_replica_batch_size * replicas, per_replica_batch_size
    per_replica = per_replica_batch_size // replicas
    if per_replica < 1:
        raise ValueError(f"strong scaling splits a global batch of {per_replica_batch_size} over "
                         f"{replicas} replicas: less than one image each; use a larger "
                         "per_replica_batch_size or fewer replicas")
    return per_replica * replicas, per_replica


# ---------------------------------------------------------------- devices and strategies


def backend_name() -> str:
    """The backend this process trains on: Keras's, once loaded, else the one it will load."""
    if "keras" in sys.modules:
        return backends.current().NAME
    return backends.requested()


def parallel() -> ModuleType:
    """The backend's data-parallel module (gpubench.backends.<backend>_parallel); loads no framework
    by itself."""
    return importlib.import_module(f"gpubench.backends.{backend_name()}_parallel")


def split_cpu(count: int | None) -> None:
    """Split the CPU into `count` devices (None: leave it); must run before the backend sets up
    its devices: first thing in a chapter (on JAX it sets XLA_FLAGS before JAX loads)."""
    if count is None:
        return
    positive_int("virtual_devices", count)
    parallel().split_cpu(count)


def local_devices(names: Sequence[str] | None = None) -> list[str]:
    """Canonical names of the devices to replicate over: `names`, else every GPU, else every CPU
    device ("cpu:0", "cpu:1", ... when the CPU is split).

    "cpu:N" names a virtual CPU device (see `split_cpu`); other names go through
    `devices.resolve`, so a GPU asked for and not there raises GPUNotAvailableError.
    """
    from gpubench import devices  # noqa: PLC0415 - loads the backend

    cpus = parallel().cpu_count()
    if names is None:
        return devices.list_devices()[1:] or [f"cpu:{i}" for i in range(cpus)]
    chosen = []
    for name in names:
        match = _CPU_N.match(str(name).strip())
        if match and int(match.group(1)) > 0:
            if int(match.group(1)) >= cpus:
                raise devices.DeviceError(
                    f"unknown device {name!r}: {backend_name()} has {cpus} CPU device(s); use "
                    f"cpu:0 to cpu:{cpus - 1}, or set virtual_devices to split the CPU into more")
            chosen.append(f"cpu:{match.group(1)}")
        else:
            chosen.append(canonical(devices.resolve(name)))
    if len(set(chosen)) != len(chosen):
        raise devices.DeviceError(f"devices {list(names)!r} name a device twice; give each once")
    return chosen


def canonical(device: str) -> str:
    """"/GPU:1" -> "gpu:1", "/CPU:0" and "cpu" -> "cpu:0" (the names records carry)."""
    kind, _, index = device.strip("/").lower().removeprefix("device:").partition(":")
    return f"{kind}:{index or 0}"


def check_replicas(replicas: Sequence[int] | None, device_count: int) -> list[int]:
    """The replica counts to run, ascending: `replicas`, else 1..device_count; checked."""
    if replicas is None:
        return list(range(1, device_count + 1))
    for count in replicas:  # each a positive int already: check_scaling
        if count > device_count:
            raise ValueError(f"replicas {count} is more than the {device_count} device(s) to "
                             f"replicate over; use at most {device_count} (or more devices, "
                             "or virtual_devices on a CPU)")
    return sorted(set(replicas))


def strategy(device_names: Sequence[str]):
    """(the backend's distribution over `device_names`, the all-reduce it uses): MirroredStrategy
    on TensorFlow, DataParallel on JAX."""
    return parallel().strategy([canonical(d) for d in device_names])


def telemetry_device(device_names: Sequence[str]) -> str:
    """The device a telemetry.Monitor watches for a run on `device_names`: the first GPU, else
    "cpu" (NVML reads one GPU at a time)."""
    gpus = [canonical(d) for d in device_names if canonical(d).startswith("gpu")]
    return gpus[0] if gpus else "cpu"


# ---------------------------------------------------------------- the shared training step


@dataclass
class Measured:
    """What one training run under a strategy gave."""

    epoch_seconds: list[float]
    epoch_losses: list[float]
    steps: int
    train_samples: int
    test_loss: float
    test_accuracy: float
    flops_per_sample: int | None = None
    epoch_telemetry: list[dict] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        """Mean training loss of the last epoch."""
        return self.epoch_losses[-1]


def steps_per_epoch(images: int, batch: int) -> tuple[int, int]:
    """(steps, images used) of an epoch of whole global batches of `batch`: every replica gets
    the same number of full batches, so no replica or worker waits on another."""
    steps = images // batch
    if steps == 0:
        raise ValueError(f"{images} training images are fewer than one global batch of {batch}; "
                         "use a larger max_train_samples or a smaller per_replica_batch_size")
    return steps, steps * batch


def train(found, model_name: str, split, *, batch: int, epochs: int, seed: int = 0,
          shuffle: bool = True, verbose: bool = True, monitor: str = "cpu") -> Measured:
    """Build `model_name` in the distribution `found`'s scope and train it for `epochs` with the
    backend's shared step; a telemetry.Monitor on `monitor` ("cpu" or "gpu:N") covers each epoch."""
    from gpubench import models  # noqa: PLC0415 - loads the backend

    positive_int("epochs", epochs)
    par = parallel()
    models.keras.utils.set_random_seed(seed)
    with par.scope(found):
        model = models.build(model_name)
        model.optimizer.build(model.trainable_variables)
    steps, used = steps_per_epoch(len(split.x_train), batch)
    data = par.distributed_input(found, split.x_train[:used], split.y_train[:used], batch,
                                 seed=seed, shuffle=shuffle)
    step = par.make_step(found, model, batch)
    seconds, losses, watched = [], [], []
    for epoch in range(epochs):
        watch = telemetry.Monitor(monitor).start()
        start = time.perf_counter()
        loss = par.run_epoch(step, data, steps)
        par.sync(model)  # the epoch's updates, all of them
        seconds.append(time.perf_counter() - start)
        watched.append(watch.stop())
        losses.append(float(loss) / steps)
        if verbose:
            print(f"  epoch {epoch + 1}/{epochs}: {seconds[-1]:.2f} s, loss {losses[-1]:.4f}",
                  flush=True)
    test_loss, test_accuracy = evaluate(model, split.x_test, split.y_test)
    return Measured(seconds, losses, steps, used, test_loss, test_accuracy,
                    models.flops_per_sample(model), watched)


def evaluate(model, x, y, batch: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) on the test set, computed locally (no collective ops)."""
    import numpy as np  # noqa: PLC0415 - no numpy at import time
    if len(x) == 0:
        return float("nan"), float("nan")
    out = np.concatenate([np.asarray(model(x[i:i + batch], training=False))
                          for i in range(0, len(x), batch)])
    return float(model.loss(y, out)), float(np.mean(np.argmax(out, axis=1) == y))


# ---------------------------------------------------------------- records


def _placed(devices: Sequence[str]) -> dict:
    """A record's `device` ("cpu:0,cpu:1") and `devices` (["cpu:0", "cpu:1"]) fields."""
    names = [canonical(d) for d in devices]
    return {"device": ",".join(names), "devices": names}


def record(measured: Measured, one_replica_sps: float | None, **fields) -> dict:
    """The `scaling` record of one run (`fields`: where and how), with its efficiency against
    the one-replica run's `one_replica_sps`, and the telemetry of its epochs."""
    from gpubench import training  # noqa: PLC0415 - loads the backend

    par = parallel()
    timed = training.timing_fields(measured.epoch_seconds, measured.train_samples,
                                   measured.flops_per_sample)
    base = fields["replicas"] * one_replica_sps if one_replica_sps else None
    return results.make_record(
        "scaling", **fields, **timed, epochs=len(measured.epoch_seconds),
        batch_size=fields["global_batch_size"], train_samples=measured.train_samples,
        validation_samples=0, steady_epoch_min=min(measured.epoch_seconds[1:], default=None),
        test_accuracy=measured.test_accuracy, test_loss=measured.test_loss,
        jit_compile=par.JIT_COMPILE, precision="float32", steps_per_execution=1,
        input_pipeline=par.INPUT_PIPELINE, flops_per_sample=measured.flops_per_sample,
        final_loss=measured.final_loss,
        scaling_efficiency=timed["samples_per_second"] / base if base else None,
        telemetry=telemetry.combine(measured.epoch_telemetry),
        **telemetry.epoch_fields(measured.epoch_telemetry),
    )


def sweep(model_name: str, data, *, devices: Sequence[str] | None = None,
          replicas: Sequence[int] | None = None, per_replica_batch_size: int = 100,
          scaling: str = "weak", epochs: int = 3, virtual_devices: int | None = None,
          store: results.ResultsStore | None = None, env: str | None = None,
          notebook: str = NOTEBOOK, seed: int = 0) -> list[dict]:
    """Train `model_name` data-parallel on 1, 2, ... of `devices`; one record per count.

    Efficiency compares each count with the one-replica run of this sweep (None
    when 1 is not among `replicas`). Records go to `store` as each run finishes.
    """
    from gpubench import training  # noqa: PLC0415

    params = check_scaling({"model": model_name, "devices": devices, "replicas": replicas,
                           "per_replica_batch_size": per_replica_batch_size, "scaling": scaling,
                           "epochs": epochs, "virtual_devices": virtual_devices})
    split_cpu(virtual_devices)
    chosen = local_devices(params["devices"])
    counts = check_replicas(params["replicas"], len(chosen))
    cpus = parallel().cpu_count()
    if virtual_devices is None and chosen[0].startswith("cpu") and cpus > 1:
        virtual_devices = cpus  # the CPU was split before the sweep (XLA_FLAGS, split_cpu)
    split = training.prepare(model_name, data)
    env = env or results.default_env_name()
    kind = parallel().STRATEGY
    records, base = [], None
    for count in counts:
        batch, per_replica = global_batch(scaling, per_replica_batch_size, count)
        fields = dict(notebook=notebook, env=env, **_placed(chosen[:count]), model=model_name,
                      dataset=data.name, data_source=data.source, data_verified=data.verified,
                      strategy=kind,
                      replicas=count, workers=1, global_batch_size=batch,
                      per_replica_batch_size=per_replica, scaling=scaling,
                      virtual_devices=virtual_devices)
        try:
            found, fields["all_reduce"] = strategy(chosen[:count])
            print(f"{count} replica(s) on {', '.join(fields['devices'])}: global batch {batch} "
                  f"({per_replica} per replica), all-reduce {fields['all_reduce']}", flush=True)
            measured = train(found, model_name, split, batch=batch, epochs=epochs, seed=seed,
                             monitor=telemetry_device(chosen[:count]))
        except BaseException as exc:
            if store is not None:
                status, error = backends.failure(exc)
                store.append(results.make_record("scaling", status=status, error=error, **fields))
            raise
        records.append(record(measured, base, **fields))
        if count == 1:
            base = records[-1]["samples_per_second"]
            records[-1]["scaling_efficiency"] = 1.0
        if store is not None:
            store.append(records[-1])
    return records


# ---------------------------------------------------------------- reading the numbers


def table(records: Sequence[dict]) -> str:
    """A Markdown table: replicas, workers, batch, samples/s against ideal, efficiency, accuracy."""
    base = next((r["samples_per_second"] for r in records if r["replicas"] == 1
                 and r["status"] == "ok"), None)
    lines = ["| strategy | replicas | workers | global batch | samples/s | ideal samples/s "
             "| efficiency | test accuracy | final loss |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in records:
        if r["status"] != "ok":
            lines.append(f"| {r['strategy']} | {r['replicas']} | {r['workers']} | "
                         f"{r['global_batch_size']} | {r['status']}: {r['error']} | | | | |")
            continue
        ideal = f"{base * r['replicas']:,.0f}" if base else "n/a"
        eff = f"{r['scaling_efficiency']:.2f}" if r["scaling_efficiency"] is not None else "n/a"
        lines.append(f"| {r['strategy']} | {r['replicas']} | {r['workers']} | "
                     f"{r['global_batch_size']} | {r['samples_per_second']:,.0f} | {ideal} | "
                     f"{eff} | {r['test_accuracy']:.4f} | {r['final_loss']:.4f} |")
    return "\n".join(lines)


def plot(records: Sequence[dict], fig=None):
    """Samples/s and efficiency against replicas, each with its ideal line, on `fig` (a Figure).

    Given no figure, it makes a pyplot one, so that a chapter shows it inline.
    """
    if fig is None:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - only for a caller without a figure

        fig = plt.figure()
    fig.set_size_inches(10, 4)
    fig.set_layout_engine("constrained")
    ok = [r for r in records if r["status"] == "ok"]
    reps = [r["replicas"] for r in ok]
    base = next((r["samples_per_second"] for r in ok if r["replicas"] == 1), None)
    speed, eff = fig.subplots(1, 2)
    speed.plot(reps, [r["samples_per_second"] for r in ok], "o-", label="measured")
    if base:
        speed.plot(reps, [base * n for n in reps], "--", color="grey", label="ideal (linear)")
    speed.set(xlabel="replicas", ylabel="training images per second",
              title="Throughput", xticks=reps)
    speed.legend()
    eff.plot(reps, [r["scaling_efficiency"] for r in ok], "o-", label="measured")
    eff.axhline(1.0, linestyle="--", color="grey", label="ideal")
    eff.set(xlabel="replicas", ylabel="scaling efficiency", title="Efficiency", xticks=reps,
            ylim=(0, max(1.1, *[(r["scaling_efficiency"] or 0) + 0.1 for r in ok])))
    eff.legend()
    virtual = any(r.get("virtual_devices") for r in ok)
    fig.suptitle(f"{ok[0]['model']}, {ok[0]['scaling']} scaling"
                 + (" (virtual CPU devices: mechanics, not scaling)" if virtual else "")
                 if ok else "no successful runs")
    return fig


def reading(records: Sequence[dict]) -> str:
    """A few sentences written from the numbers: where efficiency drops and what that suggests."""
    ok = [r for r in records if r["status"] == "ok" and r["scaling_efficiency"] is not None]
    if len(ok) < 2:
        return "Only one replica count ran, so there is no scaling to read."
    lines = []
    if any(r.get("virtual_devices") for r in ok):
        lines.append(
            "These replicas are virtual devices carved out of one CPU: they share the same cores, "
            "so the numbers show that the distributed mechanics work, not how the machine scales.")
    first, last = ok[0], ok[-1]
    lines.append(
        f"From {first['replicas']} to {last['replicas']} replicas, throughput went from "
        f"{first['samples_per_second']:,.0f} to {last['samples_per_second']:,.0f} images/s: "
        f"efficiency {last['scaling_efficiency']:.1%} of linear.")
    drop = next((r for r in ok if r["scaling_efficiency"] < 0.9), None)
    if drop is not None and drop.get("virtual_devices"):
        lines.append(f"Efficiency falls below 90% at {drop['replicas']} replicas "
                     f"({drop['scaling_efficiency']:.1%}), as expected here: the replicas share "
                     "the same cores, so adding one adds no compute, only the all-reduce.")
    elif drop is None:
        lines.append("Efficiency stays at 90% or above throughout: the work per step hides the "
                     f"all-reduce ({last['all_reduce']}).")
    else:
        lines.append(
            f"Efficiency first falls below 90% at {drop['replicas']} replicas "
            f"({drop['scaling_efficiency']:.1%}). Each step then spends a visible share of its "
            f"time synchronising gradients ({drop['all_reduce']}) or waiting for input; larger "
            "per-replica batches (weak scaling), a bigger model per step or faster links between "
            "devices raise it.")
    lines.append(
        f"Test accuracy: {first['test_accuracy']:.4f} with a global batch of "
        f"{first['global_batch_size']}, {last['test_accuracy']:.4f} with "
        f"{last['global_batch_size']}; a larger global batch takes fewer optimiser steps per "
        "epoch, so compare accuracy before counting a speed-up as a gain.")
    return lines[0] + "\n\n" + " ".join(lines[1:])


# ---------------------------------------------------------------- the command line


def cli_params(profile: str | None) -> dict:
    """Multi_GPU_Scaling's parameters in `profile`, as `gpubench scaling` uses them."""
    return check_scaling(resolve_params(NOTEBOOK, profile=profile)[0])


def check_cluster_backend() -> None:
    """A ValueError unless the backend runs the several-machine mode (TensorFlow only)."""
    name = backends.requested()
    if name != CLUSTER_BACKEND:
        raise ValueError(
            f"KERAS_BACKEND={name!r}: gpubench scaling (--local-workers, --cluster) runs "
            "TensorFlow's MultiWorkerMirroredStrategy and has no JAX mode; run it with "
            "KERAS_BACKEND=tensorflow, or run the chapter Multi_GPU_Scaling for JAX's "
            "DataParallel over one machine's devices")


def lock_out(out: Path, stack: contextlib.ExitStack) -> None:
    """Hold the run-directory lock of `out` until `stack` closes, unless this process is a worker
    whose launcher holds it for `out`; a second holder gets a UsageError naming the first."""
    launcher, held = os.environ.get(LAUNCHER_ENV), os.environ.get(LOCKED_ENV)
    if launcher == str(os.getppid()) and held == str(out.resolve()):
        return
    rundir.lock_run_dir(out, stack)


def run_worker(cluster: Sequence[str], index: int, *, profile: str | None = None,
               out: str | os.PathLike | None = None, replicas: int | None = None) -> int:
    """Worker `index` of `cluster`: train with MultiWorkerMirroredStrategy; worker 0 writes records.

    Worker 0 first trains the same model on one local device, the one-replica run the
    efficiency is measured against, then writes both records to RUN_DIR/results.jsonl,
    holding the run-directory lock (unless its launcher holds it).
    """
    check_cluster_backend()
    params = cli_params(profile)
    launcher = os.environ.get(LAUNCHER_ENV)
    if launcher and launcher.isdigit():
        machine.tie_to_parent(int(launcher))
    with contextlib.ExitStack() as stack:
        if index == 0:
            out = Path(out or default_out())
            lock_out(out, stack)
        print(f"worker {index} of {len(cluster)}: pid {os.getpid()}", flush=True)
        if index == 0:  # first, on a quiet machine and in a fresh process: the one-replica run
            print("worker 0: the one-replica run on this machine, for the efficiency", flush=True)
            with multiprocessing.get_context("spawn").Pool(
                    1, initializer=machine.tie_to_parent, initargs=(os.getpid(),)) as pool:
                single = pool.apply(_one_replica, (params,))
        return _cluster_part(cluster, index, params, out, replicas,
                             single if index == 0 else None)


def _cluster_part(cluster: Sequence[str], index: int, params: dict, out: Path | None,
                  replicas: int | None, single) -> int:
    """Train in the cluster; worker 0 writes its record and the one-replica run's."""
    par = parallel()  # TensorFlow's: check_cluster_backend
    _, gpus = par.worker_devices(replicas)
    found, all_reduce = par.multi_worker(cluster, index)
    count = found.num_replicas_in_sync
    print(f"worker {index} of {len(cluster)}: {count} replica(s) in sync, all-reduce "
          f"{all_reduce}", flush=True)
    loaded, split = _data(params)
    batch, per_replica = global_batch(params["scaling"], params["per_replica_batch_size"], count)
    measured = train(found, params["model"], split, batch=batch, epochs=params["epochs"],
                     monitor="gpu:0" if gpus else "cpu")
    print(f"final_loss {measured.final_loss!r}", flush=True)
    if index != 0:
        return 0
    single, local, one_reduce = single
    store = results.ResultsStore(Path(out) / "results.jsonl")
    common = dict(notebook=CLI_NOTEBOOK, env=results.default_env_name(), model=params["model"],
                  dataset=loaded.name, data_source=loaded.source,
                  data_verified=loaded.verified, scaling=params["scaling"])
    one = params["per_replica_batch_size"]
    base = record(single, None, **common, **_placed(local), strategy="mirrored", replicas=1,
                  workers=1, global_batch_size=one, per_replica_batch_size=one,
                  all_reduce=one_reduce) | {"scaling_efficiency": 1.0}
    multi = record(measured, base["samples_per_second"], **common, **_placed(cluster),
                   strategy="multi_worker", replicas=count, workers=len(cluster),
                   global_batch_size=batch, per_replica_batch_size=per_replica,
                   all_reduce=all_reduce)
    store.append(base)
    store.append(multi)
    print(table([base, multi]))
    print(f"Records: {store.path}")
    return 0


def _one_replica(params: dict) -> tuple[Measured, list[str], str]:
    """The one-replica run of `params` on this machine's first device (run in a child process)."""
    from gpubench import devices  # noqa: PLC0415 - loads the backend

    print(f"worker 0: the one-replica run in pid {os.getpid()}", flush=True)
    local = devices.list_devices()[1:2] or ["cpu:0"]
    found, all_reduce = strategy(local)
    measured = train(found, params["model"], _data(params)[1],
                     batch=params["per_replica_batch_size"], epochs=params["epochs"],
                     monitor=telemetry_device(local))
    return measured, [canonical(d) for d in local], all_reduce


def _data(params: dict):
    """(`params`' dataset, loaded; its split for `params["model"]`)."""
    from gpubench import data, training  # noqa: PLC0415 - loads the backend

    loaded = data.load(params["dataset"], source=params["data_source"], data_dir=params["data_dir"],
                       max_train_samples=params["max_train_samples"])
    return loaded, training.prepare(params["model"], loaded)


def default_out() -> Path:
    """A new run directory under runs/ for `gpubench scaling`."""
    return results.runs_dir() / f"scaling-{results.current_run_id()}"


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 right now."""
    with contextlib.ExitStack() as stack:  # each stays bound until all are chosen
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


@dataclass
class _Worker:
    """A worker process, and a thread that prints its output, keeping its last non-empty line."""

    index: int
    proc: subprocess.Popen
    last_line: str = ""

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=self._relay, daemon=True)
        self.reader.start()

    def _relay(self) -> None:
        for line in self.proc.stdout:
            self.last_line = line.strip() or self.last_line
            print(f"[worker {self.index}] {line}", end="", flush=True)


def _stop(workers: Sequence[_Worker], grace: float = 5.0) -> None:
    """End every worker still running (its whole process group): TERM, then KILL after `grace`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [w for w in workers if w.proc.poll() is None]
        for w in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.proc.pid, sig)
        deadline = time.monotonic() + grace
        while any(w.proc.poll() is None for w in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
    for w in workers:
        w.proc.wait()
        w.reader.join(timeout=2)


def launch_local(count: int, *, profile: str | None = None, out: str | os.PathLike | None = None,
                 replicas: int | None = None, timeout: float = 1800.0) -> int:
    """Run `count` workers on 127.0.0.1 (free ports) and wait; 0 when all succeed.

    The launcher holds the run directory's lock for the run. Each worker dies with the launcher
    (even by kill -9) and leads its own process group. A worker that fails ends the run at once
    (exit 1, or 2 for bad input), naming it and its last output line; every worker is ended on
    every way out, Ctrl-C included.
    """
    check_cluster_backend()
    positive_int("--local-workers", count)
    cli_params(profile)  # bad profile or parameters: fail before any worker starts
    out = Path(out or default_out())
    with contextlib.ExitStack() as stack:
        lock_out(out, stack)
        return _launch(count, profile, out, replicas, timeout)


def _launch(count: int, profile: str | None, out: Path, replicas: int | None,
            timeout: float) -> int:
    cluster = ",".join(f"127.0.0.1:{port}" for port in free_ports(count))
    env = dict(os.environ, GPUBENCH_RUN_ID=results.current_run_id(),
               **{LAUNCHER_ENV: str(os.getpid()), LOCKED_ENV: str(out.resolve())})
    workers: list[_Worker] = []
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # KeyboardInterrupt
    try:
        for index in range(count):
            cmd = [sys.executable, "-m", "gpubench", "scaling", "--cluster", cluster,
                   "--index", str(index), "--out", str(out)]
            cmd += ["--profile", profile] if profile else []
            cmd += ["--replicas", str(replicas)] if replicas else []
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, bufsize=1, start_new_session=True, env=env,
                                    preexec_fn=machine.die_with_parent())
            workers.append(_Worker(index, proc))
            print(f"worker {index}: pid {proc.pid} on {cluster.split(',')[index]}", flush=True)
        return _watch(workers, time.monotonic() + timeout)
    except KeyboardInterrupt:
        print("gpubench scaling: interrupted; stopping every worker", file=sys.stderr)
        return 130
    finally:
        _stop(workers)
        signal.signal(signal.SIGTERM, previous)


def _watch(workers: Sequence[_Worker], deadline: float) -> int:
    """Wait for every worker; the first failure or the deadline ends the wait."""
    while True:
        codes = [w.proc.poll() for w in workers]
        for w, code in zip(workers, codes, strict=True):
            if code not in (None, 0):
                w.reader.join(timeout=2)  # its last words
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                print(f"gpubench scaling: worker {w.index} (pid {w.proc.pid}) {how}; its last "
                      f"output line: {w.last_line or '(none)'}", file=sys.stderr, flush=True)
                return 2 if code == 2 else 1
        if all(code == 0 for code in codes):
            return 0
        if time.monotonic() > deadline:
            print("gpubench scaling: the workers did not finish in time; stopping them",
                  file=sys.stderr, flush=True)
            return 1
        time.sleep(0.1)


def cli_main(args) -> int:
    """`gpubench scaling`: local workers, or this machine's part of a cluster (TensorFlow only)."""
    check_cluster_backend()
    if args.replicas is not None:
        positive_int("--replicas", args.replicas)
    if args.local_workers is not None:
        return launch_local(args.local_workers, profile=args.profile, out=args.out,
                            replicas=args.replicas)
    if args.index is None:
        raise ValueError("--cluster needs --index, this machine's position in the list (0 first)")
    cluster = parse_cluster(args.cluster)
    index = check_index(args.index, len(cluster))
    return run_worker(cluster, index, profile=args.profile, out=args.out, replicas=args.replicas)
