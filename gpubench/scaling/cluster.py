"""`gpubench scaling`: TensorFlow's MultiWorkerMirroredStrategy over several machines (one
worker per machine, `--cluster`), or over local worker processes (`--local-workers`).

Worker 0 measures the one-replica run the efficiency is measured against, in a child
process, and writes both records; the run directory's lock is held by the launcher, or by
worker 0 when there is none.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path

from gpubench import backends, results, rundir
from gpubench.params import check_scaling, positive_int
from gpubench.params import resolve as resolve_params
from gpubench.scaling.placement import canonical, parallel, strategy, telemetry_device
from gpubench.scaling.rules import (
    CLI_NOTEBOOK,
    CLUSTER_BACKEND,
    LAUNCHER_ENV,
    LOCKED_ENV,
    NOTEBOOK,
    check_index,
    global_batch,
    parse_cluster,
)
from gpubench.scaling.step import Measured, train
from gpubench.scaling.sweep import _placed, record
from gpubench.scaling.workers import _launch


def cli_params(profile: str | None) -> dict:
    """Multi_GPU_Scaling's parameters in `profile`, as `gpubench scaling` uses them."""
    return check_scaling(resolve_params(NOTEBOOK, profile=profile)[0])


def check_cluster_backend() -> None:
    """A ValueError unless the backend runs the several-machine mode (TensorFlow only)."""
    name = backends.requested()
    if name != CLUSTER_BACKEND:
        raise ValueError(
            f"KERAS_BACKEND={name!r}: gpubench scaling (--local-workers, --cluster) runs "
            f"TensorFlow's MultiWorkerMirroredStrategy and has no {name} mode; run it with "
            "KERAS_BACKEND=tensorflow, or run the chapter Multi_GPU_Scaling for JAX's "
            "DataParallel over one machine's devices")


def lock_out(out: Path, stack: contextlib.ExitStack) -> None:
    """Hold the run-directory lock of `out` until `stack` closes, unless this process is a worker
    whose launcher holds it for `out`; a second holder gets a UsageError naming the first."""
    launcher, held = os.environ.get(LAUNCHER_ENV), os.environ.get(LOCKED_ENV)
    if launcher == str(os.getppid()) and held == str(out.resolve()):
        return
    rundir.lock_run_dir(out, stack)


def default_out() -> Path:
    """A new run directory under runs/ for `gpubench scaling`."""
    return results.runs_dir() / f"scaling-{results.current_run_id()}"


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
        rundir.tie_to_parent(int(launcher))
    with contextlib.ExitStack() as stack:
        if index == 0:
            out = Path(out or default_out())
            lock_out(out, stack)
        print(f"worker {index} of {len(cluster)}: pid {os.getpid()}", flush=True)
        if index == 0:  # first, on a quiet machine and in a fresh process: the one-replica run
            print("worker 0: the one-replica run on this machine, for the efficiency", flush=True)
            with multiprocessing.get_context("spawn").Pool(
                    1, initializer=rundir.tie_to_parent, initargs=(os.getpid(),)) as pool:
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
    print(f"Records: {store.path} (one replica, and {count} over {len(cluster)} workers); "
          f"`gpubench report {Path(out)}` tabulates them", flush=True)
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
    return loaded, training.split(params["model"], loaded)


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
