"""`gpubench run`: every notebook, in every env's kernel, with papermill; then the report. Modules:
targets (what runs where, checked first), manifest (run.json), kernels (the kernels it starts),
loop (the run and each job). Here, stdlib-only for every command: Ctrl-C and SIGTERM."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys

from gpubench.rundir import lock_run_dir  # re-exported: tests/test_scaling.py reaches it here


class Stop:
    """What the Ctrl-C / SIGTERM handler saw, and the running kernels' provisioners."""

    reason: str | None = None
    kernels: list = []


def _on_signal(signum: int, frame) -> None:
    """First Ctrl-C / SIGTERM: interrupt the kernel, stop after it; a second (or no kernel): now."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    pids = [k.pid for k in Stop.kernels if getattr(k, "pid", None)]
    if Stop.reason is not None or not pids:
        Stop.reason = Stop.reason or name
        raise KeyboardInterrupt
    Stop.reason = name
    for pid in pids:  # SIGINT, as KernelManager.interrupt_kernel sends
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGINT)
    os.write(sys.stderr.fileno(), f"\n{name}: interrupting the notebook so it keeps what it "
             f"measured; {name} again stops at once\n".encode())


@contextlib.contextmanager
def signals_stop_the_run():
    """Route SIGINT and SIGTERM to _on_signal while the block runs (main thread only)."""
    Stop.reason, Stop.kernels = None, []
    saved = {}
    with contextlib.suppress(ValueError):  # not the main thread: keep Python's defaults
        for signum in (signal.SIGINT, signal.SIGTERM):
            saved[signum] = signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def __getattr__(name: str):
    """Import the submodules on first use (`runner.loop`, ...)."""
    if name in ("kernels", "loop", "manifest", "targets"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'gpubench.runner' has no attribute {name!r}")
