"""The kernels `gpubench run` starts: jupyter_client's kernel manager pointed at gpubench's
kernel provisioner (gpubench/runner/provisioner.py), the `--here` kernel spec (made in memory:
no folder to leave behind), the kernel's stderr passed on without noise and its last lines kept
for the job's error, and Ctrl-C / SIGTERM: the first interrupts the running kernel
(the notebook keeps what it measured), a second stops at once. No jupyter_client import at
module level: `gpubench setup` runs before it is installed."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections import deque

HERE_KERNEL = "gpubench-here"  # the kernel spec `--here` makes on the fly
# The kernel provisioner every kernel of the runner is launched by: the name pyproject.toml's
# entry point registers in this group, and a kernel spec's metadata names.
PROVISIONER = "gpubench-runner"
PROVISIONER_GROUP = "jupyter_client.kernel_provisioners"
# Lines of a kernel's stderr the run's log leaves out: ipykernel's notice that its channels are
# not encrypted (they are where the kernel and jupyter_client can; it says nothing about the
# run). Every other line, errors included, is passed on.
KERNEL_NOISE = (b"Kernel is running over TCP without encryption",)
# Run in every ipykernel the runner starts, before the notebook: rich (Keras's model summary)
# shows in Jupyter as HTML plus a text/plain copy full of ANSI colour codes, which no
# environment variable turns off there; this stores the text copy plain.
PLAIN_RICH_TEXT = "import gpubench.chapter as _gb_nb; _gb_nb.store_rich_text_plain(); del _gb_nb"
# A kernel's last lines on stderr shown with the job's error when it dies (a C library's fatal
# message, e.g. "Unknown flag in XLA_FLAGS"), each cut to LINE_CHARS.
LAST_WORDS, LINE_CHARS = 10, 300


class _Stop:
    """What the runner's Ctrl-C / SIGTERM handler saw, and the kernels it can interrupt (the
    provisioners of the running kernels: RunnerProvisioner)."""

    reason: str | None = None
    kernels: list = []


def register_provisioner() -> None:
    """Make gpubench's kernel provisioner known to jupyter_client. An install of gpubench
    declares it as an entry point (pyproject.toml); a checkout that is only on sys.path (the
    offline GPU check, a user's own env with PYTHONPATH) has none, so the same entry is added
    to jupyter_client's public registry of provisioners in this process."""
    from importlib.metadata import EntryPoint, entry_points  # noqa: PLC0415 - `run` only

    from jupyter_client.provisioning import KernelProvisionerFactory  # noqa: PLC0415

    if entry_points(group=PROVISIONER_GROUP, name=PROVISIONER):
        return
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


def kernel_manager_class(env: dict[str, str] | None = None, here: str | None = None) -> type:
    """jupyter_client's AsyncKernelManager whose kernel specs name gpubench's provisioner, which
    gives the kernel `env` on top of its own environment, ties it to the runner's life, lists it
    for Ctrl-C, stores rich's text plain and passes its stderr on without KERNEL_NOISE; with
    `here` (a Python), the kernel HERE_KERNEL is a kernel of that Python (`--here`)."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager  # noqa: PLC0415
    from jupyter_client.manager import AsyncKernelManager  # noqa: PLC0415
    from traitlets import default  # noqa: PLC0415

    class RunnerSpecManager(KernelSpecManager):
        """Kernel specs as found, launched by the runner's provisioner: a kernel of `gpubench
        run` is always a local process of the runner (the spec's own provisioner, if any, is
        replaced)."""

        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            """The spec of `kernel_name`, its metadata naming the provisioner and its `env`."""
            if here and kernel_name == HERE_KERNEL:
                spec = KernelSpec(resource_dir="", **here_spec(here))
            else:
                spec = super().get_kernel_spec(kernel_name)
            spec.metadata = {**spec.metadata, "kernel_provisioner": {
                "provisioner_name": PROVISIONER, "config": {"extra_env": dict(env or {})}}}
            return spec

    class RunnerKernelManager(AsyncKernelManager):
        """A kernel started by the runner, from RunnerSpecManager's specs."""

        @default("kernel_spec_manager")
        def _specs(self) -> KernelSpecManager:
            return RunnerSpecManager(data_dir=self.data_dir)

    return RunnerKernelManager


def forward_stderr(read: int, write: int = 2, tail: deque | None = None) -> None:
    """Copy a kernel's stderr (file descriptor `read`, closed at the end) to `write`, line by
    line, leaving out KERNEL_NOISE, and keep its non-blank lines (text) in `tail`; keeps reading
    when `write` fails, so the kernel never blocks on a full pipe."""
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
    """The last lines (LAST_WORDS at most) the running job's kernel wrote to its stderr, once its
    stderr has ended (waiting up to `wait` seconds for a kernel that is still going)."""
    words: list[str] = []
    for provisioner in _Stop.kernels:
        if (reader := getattr(provisioner, "stderr_reader", None)) is not None:
            reader.join(wait)
            words += provisioner.stderr_tail
    return words[-LAST_WORDS:]


def here_spec(python: str) -> dict:
    """The kernel spec of a kernel of `python` (`--here`), as ipykernel writes one (its metadata
    says the kernel can encrypt its channels)."""
    from ipykernel.kernelspec import get_kernel_dict  # noqa: PLC0415 - --here needs ipykernel

    spec = get_kernel_dict()
    spec["argv"] = [python, *spec["argv"][1:]]  # the run's Python, also when resumed by another
    spec["display_name"] = f"gpubench --here ({python})"
    return spec


def _interrupt_kernels() -> bool:
    """SIGINT to each running kernel, as KernelManager.interrupt_kernel sends; whether any ran."""
    pids = [k.pid for k in _Stop.kernels if getattr(k, "pid", None)]
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGINT)
    return bool(pids)


def _on_signal(signum: int, frame) -> None:
    """First Ctrl-C / SIGTERM: interrupt the kernel and stop after it; a second one: stop now."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    if _Stop.reason is not None or not _interrupt_kernels():
        _Stop.reason = _Stop.reason or name
        raise KeyboardInterrupt
    _Stop.reason = name
    os.write(sys.stderr.fileno(), f"\n{name}: interrupting the notebook so it keeps what it "
             f"measured; {name} again stops at once\n".encode())


@contextlib.contextmanager
def signals_stop_the_run():
    """Route SIGINT and SIGTERM to _on_signal while the run goes on (main thread only)."""
    _Stop.reason, _Stop.kernels = None, []
    saved = {}
    with contextlib.suppress(ValueError):  # not the main thread: keep Python's defaults
        for signum in (signal.SIGINT, signal.SIGTERM):
            saved[signum] = signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
