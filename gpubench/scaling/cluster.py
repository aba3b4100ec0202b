"""`gpubench scaling`: training across worker processes, on several machines (`--cluster`) or on
this one (`--local-workers`, and PyTorch's chapter), with tf.distribute, jax.distributed or
torch.distributed. Each worker checks its port and one all-reduce before it trains; worker 0 then
runs the same command in one process (the efficiency's reference) and writes both records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from gpubench import backends, results, rundir
from gpubench.params import check_scaling, positive_int
from gpubench.params import resolve as resolve_params
from gpubench.scaling import rules
from gpubench.scaling.step import placed, record, telemetry_device, train


def cli_params(profile: str | None) -> dict:
    """Multi_GPU_Scaling's parameters in `profile`, as `gpubench scaling` uses them."""
    return check_scaling(resolve_params(rules.NOTEBOOK, profile=profile)[0])


def default_out() -> Path:
    """A new run directory under runs/ for `gpubench scaling`."""
    return results.runs_dir() / f"scaling-{results.current_run_id()}"


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError:
        return False
    return True


def check_address(cluster: Sequence[str], index: int, listens: bool) -> None:
    """ValueError if this worker's port is taken (`listens`); RuntimeError if worker 0's is mute."""
    port = int(cluster[index].rpartition(":")[2])
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            if listens:
                sock.bind(("", port))
        except OSError as exc:
            raise ValueError(f"port {port} of --cluster entry {index} ({cluster[index]}) is in "
                             f"use on this machine ({exc.strerror}); free it or pick another "
                             "port") from None
    wait = float(os.environ.get(rules.CONNECT_TIMEOUT_ENV) or 300)
    deadline = time.monotonic() + wait
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


def run_worker(cluster: Sequence[str], index: int, *, profile: str | None = None,
               out: str | os.PathLike | None = None, replicas: int | None = None) -> int:
    """Worker `index` of `cluster`: join, check one all-reduce, train; worker 0 writes records."""
    if (launcher := os.environ.get(rules.LAUNCHER_ENV, "")).isdigit():
        rundir.tie_to_parent(int(launcher))  # it dies with its launcher, even by kill -9
    extra = json.loads(os.environ.get(rules.PARAMS_ENV) or "{}")  # a chapter's, or a test's
    params, chapter = cli_params(profile) | extra, "fields" in extra
    par, out = rules.parallel(), Path(out or default_out())
    with contextlib.ExitStack() as stack:
        if index == 0 and not chapter and launcher != str(os.getppid()):  # else the launcher's
            rundir.lock_run_dir(out, stack)
        print(f"worker {index} of {len(cluster)}: pid {os.getpid()}", flush=True)
        check_address(cluster, index, index == 0 or par.EVERY_WORKER_LISTENS)
        device = extra["devices"][index] if chapter else None
        try:
            found, fields = par.join(cluster, index, 1 if chapter else replicas, device)
        except (ValueError, RuntimeError) as exc:  # the engine's own words, in one line
            first = (str(exc).strip().splitlines() or ["could not join"])[0]
            raise type(exc)(f"worker {index} ({backends.requested()}): {first}") from None
        stack.callback(par.leave, found)  # however it ends (a second leave does nothing)
        check_collective(found, fields, index, len(cluster))
        print(f"worker {index}: {fields['replicas']} replica(s), {fields['engine']} over "
              f"{fields['collective']}; the all-reduce check passed", flush=True)
        loaded, split = _data(params)
        fields["global_batch_size"], fields["per_replica_batch_size"] = rules.global_batch(
            params["scaling"], params["per_replica_batch_size"], fields["replicas"])
        gpu = "gpu:0" if fields["collective"] == "nccl" else "cpu"
        measured = train(found, params["model"], split, batch=fields["global_batch_size"],
                         epochs=params["epochs"], seed=params.get("seed", 0),
                         monitor=telemetry_device([device or gpu]))
        print(f"final_loss {measured.epoch_losses[-1]!r}", flush=True)
        par.leave(found)
        store = results.ResultsStore(out / results.RESULTS_FILE)
        if index == 0 and chapter:  # the chapter's record, which its sweep reads back
            store.append(record(measured, extra["base"], **(extra["fields"] | fields)))
        elif index == 0:
            _write(store, params, loaded, cluster, measured, fields)
        while index and _answers(cluster[0]):  # TensorFlow's workers watch each other's heartbeat
            time.sleep(1)
    return 0


def _write(store: results.ResultsStore, params: dict, loaded, cluster: Sequence[str],
           measured, fields: dict) -> None:
    """Worker 0 after training: the same run in one process on one device, then both records."""
    from gpubench.report.scaling import table  # noqa: PLC0415

    print("worker 0: the one-process run on this machine, for the efficiency", flush=True)
    common = dict(notebook=rules.CLI_NOTEBOOK, env=results.default_env_name(),
                  model=params["model"], dataset=loaded.name, data_source=loaded.source,
                  data_verified=loaded.verified, scaling=params["scaling"])
    local = ["gpu:0" if fields["collective"] == "nccl" else "cpu:0"]
    base = in_processes(local, loaded, params | {
        "fields": common | placed(local) | {"workers": 1}, "base": None})
    multi = record(measured, base["samples_per_second"], **common, **placed(cluster), **fields,
                   workers=len(cluster))
    store.append(base)
    store.append(multi)
    print(f"{table([base, multi])}\nRecords: {store.path}; `gpubench report "
          f"{store.path.parent}` puts them in a report", flush=True)


def _data(params: dict):
    from gpubench import data, training  # noqa: PLC0415 - loads the backend

    loaded = data.load(params["dataset"], source=params["data_source"],
                       data_dir=params["data_dir"], max_train_samples=params["max_train_samples"])
    return loaded, training.split(params["model"], loaded)


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 right now."""
    with contextlib.ExitStack() as stack:  # each stays bound until all are chosen
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


@dataclasses.dataclass
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


def launch(count: int, out: Path, args: Sequence[str] = (), env: dict | None = None,
           timeout: float = 1800.0) -> int:
    """Start `count` workers on 127.0.0.1 and wait: 0, or the first failure's 1 (2: bad input)."""
    cluster = ",".join(f"127.0.0.1:{port}" for port in free_ports(count))
    env = dict(os.environ, GPUBENCH_RUN_ID=results.current_run_id(), **(env or {}),
               **{rules.LAUNCHER_ENV: str(os.getpid())})
    workers: list[_Worker] = []
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # KeyboardInterrupt
    try:
        for index in range(count):
            cmd = [sys.executable, "-m", "gpubench", "scaling", "--cluster", cluster,
                   "--index", str(index), "--out", str(out), *args]
            workers.append(_Worker(index, subprocess.Popen(  # it ties itself (run_worker)
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                start_new_session=True, env=env)))
            print(f"worker {index}: pid {workers[-1].proc.pid} on {cluster.split(',')[index]}",
                  flush=True)
        return _watch(workers, time.monotonic() + timeout)
    except KeyboardInterrupt:
        print("gpubench scaling: interrupted; stopping every worker", file=sys.stderr)
        return 130
    finally:
        for w in workers:  # each leads its process group: its children go with it
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGKILL)
            w.proc.wait()
            w.reader.join(timeout=2)
        signal.signal(signal.SIGTERM, previous)


def _watch(workers: list[_Worker], deadline: float) -> int:
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


def in_processes(devices: list[str], data, settings: dict) -> dict:
    """The record of training on `devices`, a worker process each, with `settings`."""
    with tempfile.TemporaryDirectory(prefix="gpubench-scaling-") as tmp:
        loaded = {"dataset": data.name, "data_source": data.source, "max_train_samples": len(
            data.x_train), "data_dir": data.origin if data.source == "dir" else None}
        code = launch(len(devices), Path(tmp), env={
            rules.PARAMS_ENV: json.dumps(settings | loaded | {"devices": devices})})
        if code == 130:
            raise KeyboardInterrupt
        if code:
            raise RuntimeError(f"the {len(devices)} worker process(es) on {', '.join(devices)} "
                               "failed; their output is above")
        return results.read_records(Path(tmp) / results.RESULTS_FILE)[-1]


def cli_main(args) -> int:
    """`gpubench scaling`: local workers, or this machine's part of a cluster."""
    if args.replicas is not None:
        positive_int("--replicas", args.replicas)
    if args.local_workers is not None:
        positive_int("--local-workers", args.local_workers)
        cli_params(args.profile)  # bad profile or parameters: fail before any worker starts
        out = Path(args.out or default_out())
        with contextlib.ExitStack() as stack:
            rundir.lock_run_dir(out, stack)
            options = ["--profile", args.profile] if args.profile else []
            options += ["--replicas", str(args.replicas)] if args.replicas else []
            return launch(args.local_workers, out, options)
    if args.index is None:
        raise ValueError("--cluster needs --index, this machine's position in the list (0 first)")
    cluster = rules.parse_cluster(args.cluster)
    index = rules.check_index(args.index, len(cluster))
    return run_worker(cluster, index, profile=args.profile, out=args.out, replicas=args.replicas)
