"""The kernels `gpubench run` starts: jupyter_client's kernel manager with gpubench's provisioner
(provisioner.py), the `--here` kernel spec (in memory: no folder to leave behind), the kernel's
stderr passed on without noise, its last lines kept for the job's error, and Ctrl-C / SIGTERM:
the first interrupts the kernel (the notebook keeps what it measured), a second stops at once.
No jupyter_client import at module level: `gpubench setup` runs before it is installed."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections import deque
from pathlib import Path

HERE_KERNEL = "gpubench-here"  # the kernel spec `--here` makes on the fly
# The provisioner: pyproject.toml's entry point of this name and group; kernel specs name it.
PROVISIONER, PROVISIONER_GROUP = "gpubench-runner", "jupyter_client.kernel_provisioners"
# ipykernel's notice that its channels are not encrypted: the one stderr line left out.
KERNEL_NOISE = (b"Kernel is running over TCP without encryption",)
# Run in every kernel first: rich (Keras's model summary) stores its text/plain copy plain.
PLAIN_RICH_TEXT = "import gpubench.chapter as _gb_nb; _gb_nb.store_rich_text_plain(); del _gb_nb"
LAST_WORDS, LINE_CHARS = 10, 300  # a dead kernel's last stderr lines kept, each cut to this


class Stop:
    """What the Ctrl-C / SIGTERM handler saw, and the running kernels' provisioners."""

    reason: str | None = None
    kernels: list = []


def register_provisioner() -> None:
    """Make gpubench's provisioner known to jupyter_client where no entry point declares it (a
    checkout only on sys.path): the same entry, in jupyter_client's registry."""
    from importlib.metadata import EntryPoint, entry_points  # noqa: PLC0415 - `run` only

    from jupyter_client.provisioning import KernelProvisionerFactory  # noqa: PLC0415

    if not entry_points(group=PROVISIONER_GROUP, name=PROVISIONER):
        KernelProvisionerFactory.provisioners[PROVISIONER] = EntryPoint(
            name=PROVISIONER, value="gpubench.runner.provisioner:RunnerProvisioner",
            group=PROVISIONER_GROUP)


def kernel_config() -> dict:
    """papermill's (or a KernelManager's) keywords that encrypt the kernel's channels, if it can."""
    from jupyter_client.manager import KernelManager  # noqa: PLC0415
    from traitlets.config import Config  # noqa: PLC0415

    if "transport_encryption" not in KernelManager.class_trait_names():
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


def kernel_manager_class(env: dict[str, str] | None = None, here: str | None = None,
                         run_dir: Path | None = None) -> type:
    """An AsyncKernelManager whose kernel specs name gpubench's provisioner (it adds `env` and
    lists the connection file in `run_dir`); HERE_KERNEL is a kernel of Python `here`."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager  # noqa: PLC0415
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415
    from traitlets import default  # noqa: PLC0415

    config = {"extra_env": dict(env or {}), **({"run_dir": str(run_dir)} if run_dir else {})}

    class RunnerSpecManager(KernelSpecManager):
        """Kernel specs as found, each launched by the runner's provisioner."""

        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            """The spec of `kernel_name`, its metadata naming the provisioner and its config."""
            if here and kernel_name == HERE_KERNEL:
                spec = KernelSpec(resource_dir="", **here_spec(here))
            else:
                spec = super().get_kernel_spec(kernel_name)
            spec.metadata = {**spec.metadata, "kernel_provisioner": {
                "provisioner_name": PROVISIONER, "config": config}}
            return spec

    class RunnerKernelManager(AsyncKernelManager):
        """A kernel started by the runner, from RunnerSpecManager's specs."""

        @default("kernel_spec_manager")
        def _specs(self) -> KernelSpecManager:
            return RunnerSpecManager(data_dir=self.data_dir)

    return RunnerKernelManager


def here_spec(python: str) -> dict:
    """The kernel spec of a kernel of `python` (`--here`), as ipykernel writes one."""
    from ipykernel.kernelspec import get_kernel_dict  # noqa: PLC0415 - --here needs ipykernel

    spec = get_kernel_dict()
    spec["argv"] = [python, *spec["argv"][1:]]  # the run's Python, also when resumed by another
    spec["display_name"] = f"gpubench --here ({python})"
    return spec


def forward_stderr(read: int, write: int = 2, tail: deque | None = None) -> None:
    """Copy a kernel's stderr (file descriptor `read`, closed at the end) to `write` line by line
    without KERNEL_NOISE, keeping its non-blank lines in `tail`; keeps reading when `write`
    fails, so the kernel never blocks on a full pipe."""
    def put(lines: list[bytes], end: bytes = b"\n") -> None:
        lines = [line for line in lines if not any(noise in line for noise in KERNEL_NOISE)]
        if tail is not None:
            tail.extend(text[:LINE_CHARS] for line in lines
                        if (text := line.decode(errors="replace").strip()))
        data = b"".join(line + end for line in lines)
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(write, data):]

    pending = b""
    with open(read, "rb", buffering=0) as stream:
        while chunk := stream.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            put(lines)
    put([pending], end=b"")


def last_words(wait: float = 2.0) -> list[str]:
    """The last lines the running job's kernel wrote to its stderr, once it has ended (waiting
    up to `wait` seconds)."""
    words: list[str] = []
    for provisioner in Stop.kernels:
        if (reader := getattr(provisioner, "stderr_reader", None)) is not None:
            reader.join(wait)
            words += provisioner.stderr_tail
    return words[-LAST_WORDS:]


def _on_signal(signum: int, frame) -> None:
    """First Ctrl-C / SIGTERM: interrupt the kernel and stop after it; a second one (or no kernel
    running): stop now."""
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
