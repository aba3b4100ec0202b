"""The processes of `gpubench scaling --local-workers`: free ports, starting the workers,
relaying their output, waiting on them, and ending every one of them on every way out."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpubench import results, rundir
from gpubench.scaling.rules import LAUNCHER_ENV, LOCKED_ENV


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


def _launch(count: int, profile: str | None, out: Path, replicas: int | None,
            timeout: float) -> int:
    """Start `count` workers of a cluster on 127.0.0.1, each tied to this process, and wait."""
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
                                    preexec_fn=rundir.die_with_parent())
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
