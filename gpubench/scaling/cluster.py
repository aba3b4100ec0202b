"""The chapter's sweep on this machine, and `gpubench scaling`'s worker processes (--local-workers,
--cluster, PyTorch's chapter): each checks its port and an all-reduce, trains; worker 0 writes."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from gpubench import backends, params, results, rundir
from gpubench.scaling import rules
from gpubench.scaling.step import record, train

_split: int | None = None  # the CPU devices split_cpu made in this process


def split_cpu(count: int | None) -> None:
    """Split the CPU into `count` devices (PyTorch: processes; None: leave it), before anything."""
    global _split
    try:
        if count is not None and count != _split:
            _split = rules.parallel().split_cpu(params.positive_int("virtual_devices", count))
    except RuntimeError:
        title = backends.current().TITLE
        raise RuntimeError(
            f"virtual_devices={count}: {title} has already set up its devices in this process "
            f"({rules.parallel().split_cpu(None)} CPU device(s)); restart the kernel and call "
            f"gb.scaling.split_cpu({count}) before anything runs on {title}") from None


def local_devices(names: Sequence[str] | None = None) -> list[str]:
    """The canonical devices to replicate over: `names`, else every GPU, else the CPU's."""
    from gpubench import devices  # noqa: PLC0415 - loads the backend, after split_cpu

    cpus = [f"cpu:{i}" for i in range(_split or rules.parallel().split_cpu(None))]
    if names is None:
        return devices.list_devices()[1:] or cpus
    chosen = [name if name.startswith("cpu") else rules.canonical(devices.resolve(given))
              for name, given in zip(map(rules.canonical, names), names, strict=True)]
    if unknown := [name for name in chosen if name.startswith("cpu") and name not in cpus]:
        raise devices.DeviceError(
            f"unknown device {unknown[0]!r}: {backends.requested()} has {len(cpus)} CPU "
            f"device(s); use cpu:0 to {cpus[-1]}, or set virtual_devices to split the CPU")
    if len(set(chosen)) != len(chosen):
        raise devices.DeviceError(f"devices {list(names)!r} name a device twice; give each once")
    return chosen


def strategy(device_names: Sequence[str]):
    """(the backend's distribution over `device_names` in this process, its record's fields)."""
    return rules.parallel().strategy([rules.canonical(d) for d in device_names])


def sweep(model_name: str, data, *, devices: Sequence[str] | None = None,
          replicas: Sequence[int] | None = None, per_replica_batch_size: int = 100,
          scaling: str = "weak", epochs: int = 3, virtual_devices: int | None = None,
          store: results.ResultsStore | None = None, env: str | None = None,
          notebook: str = rules.NOTEBOOK, seed: int = 0) -> list[dict]:
    """Train `model_name` on 1, 2, ... of `devices`; a record per count, stored as measured."""
    from gpubench import training  # noqa: PLC0415 - loads the backend

    checked = rules.check_parameters(dict(
        model=model_name, devices=devices, replicas=replicas, scaling=scaling, epochs=epochs,
        per_replica_batch_size=per_replica_batch_size, virtual_devices=virtual_devices))
    split_cpu(virtual_devices)
    par, chosen = rules.parallel(), local_devices(checked["devices"])
    counts = rules.check_replicas(checked["replicas"], len(chosen))
    if chosen[0].startswith("cpu") and (_split or par.split_cpu(None)) > 1:
        virtual_devices = _split or par.split_cpu(None)  # here, or before the sweep (XLA_FLAGS)
    split = None if par.PROCESSES else training.split(model_name, data)
    records, base = [], None
    for count in counts:
        batch, per_replica = rules.global_batch(scaling, per_replica_batch_size, count)
        fields = dict(notebook=notebook, env=env or results.default_env_name(),
                      device=",".join(chosen[:count]), devices=chosen[:count], model=model_name,
                      dataset=data.name, data_source=data.source, data_verified=data.verified,
                      strategy=par.STRATEGY, replicas=count, workers=count if par.PROCESSES else 1,
                      global_batch_size=batch, per_replica_batch_size=per_replica, scaling=scaling,
                      virtual_devices=virtual_devices)
        print(f"{count} replica(s) on {fields['device']}: global batch {batch} ({per_replica} "
              "per replica)", flush=True)
        try:
            if par.PROCESSES:
                records.append(in_processes(chosen[:count], data, checked | {
                    "seed": seed, "fields": fields, "base": base}))
            else:
                found, facts = strategy(chosen[:count])
                print(f"  all-reduce: {facts['all_reduce']}", flush=True)
                measured = train(found, model_name, split, batch=batch, epochs=epochs, seed=seed,
                                 monitor=chosen[0] if chosen[0].startswith("gpu") else "cpu")
                records.append(record(measured, base, **(fields | facts)))
        except BaseException as exc:
            if store is not None:
                status, error = backends.failure(exc)
                store.append(results.make_record("scaling", status=status, error=error, **fields))
            raise
        base = base or (records[-1]["samples_per_second"] if count == 1 else None)
        if store is not None:
            store.append(records[-1])
    return records


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with contextlib.suppress(OSError), socket.create_connection((host.strip("[]"), int(port)), 5):
        return True
    return False


def check_address(cluster: Sequence[str], index: int, listens: bool) -> None:
    """ValueError if this worker's port is taken (`listens`); RuntimeError if worker 0's is mute."""
    port = int(cluster[index].rpartition(":")[2])
    try:
        if listens:
            socket.create_server(("", port)).close()
    except OSError as exc:
        raise ValueError(f"port {port} of --cluster entry {index} ({cluster[index]}) is in use on "
                         f"this machine ({os.strerror(exc.errno)}); free it or pick another "
                         "port") from None
    deadline = time.monotonic() + (wait := float(os.environ.get(rules.CONNECT_TIMEOUT_ENV) or 300))
    while index and not _answers(cluster[0]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker {index}: worker 0 at {cluster[0]} did not answer in "
                               f"{wait:.0f} s; start it, check the address, and open the port "
                               "between the machines")
        time.sleep(0.5)


def check_collective(found, fields: dict, index: int, workers: int) -> None:
    """All-reduce (i + 1) x [1..8] from each replica of worker i; RuntimeError if the sum is off."""
    import numpy as np  # noqa: PLC0415

    base = np.arange(1.0, 9.0, dtype="float32")
    mine = base * (index + 1) + (os.environ.get(rules.CORRUPT_ENV) == str(index))
    got = rules.parallel().all_reduce(found, mine)
    want = base * workers * (workers + 1) / 2 * (fields["replicas"] // workers)
    if not np.allclose(got, want):
        raise RuntimeError(
            f"worker {index} ({backends.requested()}, {fields['engine']} over "
            f"{fields['collective']}): the all-reduce check summed {got.tolist()} where "
            f"{want.tolist()} was expected; the collective returns wrong data: not training")


def run_worker(cluster: Sequence[str], index: int, out: Path, *, profile: str | None = None,
               replicas: int | None = None) -> int:
    """Worker `index` of `cluster`: join, check one all-reduce, train; worker 0 writes records."""
    if (launcher := os.environ.get(rules.LAUNCHER_ENV, "")).isdigit():
        rundir.tie_to_parent(int(launcher))  # it dies with its launcher, even by kill -9
    extra = json.loads(os.environ.get(rules.PARAMS_ENV) or "{}")  # a chapter's, or a test's
    settings = rules.check_parameters(params.resolve(rules.NOTEBOOK, profile=profile)[0]) | extra
    device = extra["devices"][index] if "fields" in extra else None  # a chapter's: one each
    par = rules.parallel()
    with contextlib.ExitStack() as stack:
        if index == 0 and launcher != str(os.getppid()):  # else its launcher holds the lock
            rundir.lock_run_dir(out, stack)
        print(f"worker {index} of {len(cluster)}: pid {os.getpid()}", flush=True)
        check_address(cluster, index, index == 0 or par.EVERY_WORKER_LISTENS)
        try:
            found, fields = par.join(cluster, index, 1 if device else replicas, device)
        except (ValueError, RuntimeError) as exc:  # the engine's own words, in one line
            first = (str(exc).strip().splitlines() or ["could not join"])[0]
            raise type(exc)(f"worker {index} ({backends.requested()}): {first}") from None
        stack.callback(par.leave, found)  # however it ends (a second leave does nothing)
        check_collective(found, fields, index, len(cluster))
        print(f"worker {index}: {fields['replicas']} replica(s), {fields['engine']} over "
              f"{fields['collective']}; the all-reduce check passed", flush=True)
        from gpubench import data, training  # noqa: PLC0415 - after join: they start the backend
        loaded = data.load(settings["dataset"], source=settings["data_source"],
                           data_dir=settings["data_dir"],
                           max_train_samples=settings["max_train_samples"])
        fields["global_batch_size"], fields["per_replica_batch_size"] = rules.global_batch(
            settings["scaling"], settings["per_replica_batch_size"], fields["replicas"])
        watch = device or ("gpu:0" if fields["collective"] == "nccl" else "cpu")
        measured = train(found, settings["model"], training.split(settings["model"], loaded),
                         batch=fields["global_batch_size"], epochs=settings["epochs"],
                         seed=settings.get("seed", 0),
                         monitor=watch if watch.startswith("gpu") else "cpu")
        print(f"final_loss {measured.epoch_losses[-1]!r}", flush=True)
        par.leave(found)
        if index == 0:
            _write(out, settings, loaded, cluster, measured, fields | {"workers": len(cluster)})
        while index and _answers(cluster[0]):  # TensorFlow's workers watch each other's heartbeat
            time.sleep(1)
    return 0


def _write(out: Path, settings: dict, loaded, cluster: Sequence[str], measured,
           fields: dict) -> None:
    """Worker 0's records: a chapter's run, or this run and the same in one process on a device."""
    store = results.ResultsStore(out / results.RESULTS_FILE)
    if "fields" in settings:  # a chapter's sweep reads its record back
        store.append(record(measured, settings["base"], **(settings["fields"] | fields)))
        return
    from gpubench.report.scaling import table  # noqa: PLC0415

    print("worker 0: the one-process run on this machine, for the efficiency", flush=True)
    common = dict(notebook=rules.CLI_NOTEBOOK, env=results.default_env_name(),
                  model=settings["model"], dataset=loaded.name, data_source=loaded.source,
                  data_verified=loaded.verified, scaling=settings["scaling"])
    local = ["gpu:0" if fields["collective"] == "nccl" else "cpu:0"]
    base = in_processes(local, loaded, settings | {
        "fields": common | {"device": local[0], "devices": local, "workers": 1}, "base": None})
    multi = record(measured, base["samples_per_second"], **common, device=",".join(cluster),
                   devices=list(cluster), **fields)
    store.append(base)
    store.append(multi)
    print(f"{table([base, multi])}\nRecords: {store.path}; `gpubench report "
          f"{store.path.parent}` puts them in a report", flush=True)


def launch(count: int, out: Path, args: Sequence[str] = (), env: dict | None = None,
           timeout: float = 1800.0) -> int:
    """Start `count` workers on 127.0.0.1 and wait: 0, or the first failure's 1 (2: bad input)."""
    with contextlib.ExitStack() as stack:  # free ports, each held until all are chosen
        held = [stack.enter_context(socket.create_server(("127.0.0.1", 0))) for _ in range(count)]
        cluster = ",".join(f"127.0.0.1:{sock.getsockname()[1]}" for sock in held)
    env = dict(os.environ, GPUBENCH_RUN_ID=results.current_run_id(), **(env or {}),
               **{rules.LAUNCHER_ENV: str(os.getpid())})
    workers: list[subprocess.Popen] = []
    with contextlib.ExitStack() as stack:  # however it ends (Ctrl-C too): every worker stopped
        for index in range(count):
            cmd = [sys.executable, "-m", "gpubench", "scaling", "--cluster", cluster,
                   "--index", str(index), "--out", str(out), *args]
            workers.append(stack.enter_context(subprocess.Popen(  # it ties itself to us
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
                start_new_session=True, env=env)))
            stack.callback(_stop, workers[-1])  # before Popen's exit waits for it
            print(f"worker {index}: pid {workers[-1].pid} on {cluster.split(',')[index]}",
                  flush=True)
        return _watch(workers, time.monotonic() + timeout)


def _stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:  # it leads its process group: its children go with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)


def _watch(workers: list[subprocess.Popen], deadline: float) -> int:
    last = [""] * len(workers)
    with selectors.DefaultSelector() as selector:
        for index, worker in enumerate(workers):
            selector.register(worker.stdout, selectors.EVENT_READ, index)
        while selector.get_map():
            if time.monotonic() > deadline:
                print("gpubench scaling: the workers did not finish in time; stopping them",
                      file=sys.stderr, flush=True)
                return 1
            for key, _ in selector.select(timeout=1):
                index, line = key.data, key.fileobj.readline().decode(errors="replace")
                if line:  # unbuffered: each readline reads one line, and no more
                    last[index] = line.strip() or last[index]
                    print(f"[worker {index}] {line}", end="", flush=True)
                    continue
                selector.unregister(key.fileobj)
                if code := workers[index].wait():
                    how = (f"was killed by signal {-code}" if code < 0
                           else f"exited with code {code}")
                    print(f"gpubench scaling: worker {index} (pid {workers[index].pid}) {how}; "
                          f"its last output line: {last[index] or '(none)'}", file=sys.stderr,
                          flush=True)
                    return 2 if code == 2 else 1
    return 0


def in_processes(devices: list[str], data, settings: dict) -> dict:
    """The record of training on `devices`, a worker process each, with `settings`."""
    with tempfile.TemporaryDirectory(prefix="gpubench-scaling-") as tmp:
        loaded = {"dataset": data.name, "data_source": data.source, "max_train_samples": len(
            data.x_train), "data_dir": data.origin if data.source == "dir" else None}
        code = launch(len(devices), Path(tmp), env={
            rules.PARAMS_ENV: json.dumps(settings | loaded | {"devices": devices})})
        if code:
            raise RuntimeError(f"the {len(devices)} worker process(es) on {', '.join(devices)} "
                               "failed; their output is above")
        return rundir.read_records(Path(tmp) / results.RESULTS_FILE)[-1]


def cli_main(args) -> int:
    """`gpubench scaling`: local workers, or this machine's part of a cluster."""
    out = Path(args.out or results.runs_dir() / f"scaling-{results.current_run_id()}")
    if args.replicas is not None:
        params.positive_int("--replicas", args.replicas)
    if args.local_workers is not None:
        params.positive_int("--local-workers", args.local_workers)
        rules.check_parameters(params.resolve(rules.NOTEBOOK, profile=args.profile)[0])
        with contextlib.ExitStack() as stack:
            rundir.lock_run_dir(out, stack)
            options = ["--profile", args.profile] if args.profile else []
            options += ["--replicas", str(args.replicas)] if args.replicas else []
            return launch(args.local_workers, out, options)
    if args.index is None:
        raise ValueError("--cluster needs --index, this machine's position in the list (0 first)")
    return run_worker(rules.parse_cluster(args.cluster, args.index), args.index, out,
                      profile=args.profile, replicas=args.replicas)
