"""The kernels `gpubench run` starts: jupyter_client's kernel manager and its provisioner, with the
runner's environment, the parent tie, the connection file in the run directory, the `--here`
spec (in memory), and the kernel's stderr passed on without noise, its last lines kept."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from ipykernel.kernelspec import get_kernel_dict
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager, KernelManager
from jupyter_client.provisioning import KernelProvisionerFactory, LocalProvisioner
from traitlets import Dict, default
from traitlets.config import Config

from gpubench import rundir
from gpubench.runner import Stop

HERE_KERNEL = "gpubench-here"  # the kernel spec `--here` makes on the fly
PROVISIONER = "gpubench-runner"  # jupyter_client's name of RunnerProvisioner (kernel specs')
# ipykernel's notice that its channels are not encrypted: the one stderr line left out.
KERNEL_NOISE = (b"Kernel is running over TCP without encryption",)
# Run in every kernel first: rich (Keras's model summary) stores its text/plain copy plain.
PLAIN_RICH_TEXT = "import gpubench.chapter as _gb_nb; _gb_nb.store_rich_text_plain(); del _gb_nb"
# ipykernel's own capture of the file descriptors 1 and 2 is off: it reads them in a thread of
# the kernel, so a C library's last words before it aborts the process (a fatal "Unknown flag in
# XLA_FLAGS") died with it. The runner reads the kernel's real stderr instead (forward_stderr).
NO_FD_CAPTURE = "--IPKernelApp.capture_fd_output=False"
LAST_WORDS, LINE_CHARS = 10, 300  # a dead kernel's last stderr lines kept, each cut to this


class RunnerProvisioner(LocalProvisioner):
    """A local kernel with `extra_env`, tied to the runner, its stderr passed on (and kept)."""

    extra_env = Dict(config=True, help="Environment variables set on top of the kernel's own.")

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """LocalProvisioner's launch keywords and command, with the runner's additions."""
        kwargs = await super().pre_launch(**kwargs)
        kwargs["env"] = {**kwargs.get("env", os.environ), **self.extra_env}
        kwargs["preexec_fn"] = rundir.die_with_parent()  # None off Linux
        if any("ipykernel" in part for part in kwargs["cmd"]):
            kwargs["cmd"] = [*kwargs["cmd"], f"--IPKernelApp.exec_lines={PLAIN_RICH_TEXT}",
                             NO_FD_CAPTURE]
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict:
        """Start the kernel, its stderr piped to forward_stderr unless the caller gave one."""
        read = None
        if kwargs.get("stderr") is None:  # the kernel's stderr, through a filter to ours
            read, kwargs["stderr"] = os.pipe()
        try:
            info = await super().launch_kernel(cmd, **kwargs)
        except BaseException:
            if read is not None:
                os.close(read)
            raise
        finally:
            if read is not None:
                os.close(kwargs["stderr"])  # the kernel holds its own copy
        if read is not None:
            self.stderr_tail: deque[str] = deque(maxlen=LAST_WORDS)
            self.stderr_reader = threading.Thread(
                target=forward_stderr, args=(read, 2, self.stderr_tail), daemon=True,
                name="kernel-stderr")
            self.stderr_reader.start()
        Stop.kernels.append(self)
        return info


def register_provisioner() -> None:
    """Make RunnerProvisioner known to jupyter_client, whatever entry points are installed."""
    KernelProvisionerFactory.instance().provisioners[PROVISIONER] = EntryPoint(
        name=PROVISIONER, value="gpubench.runner.kernels:RunnerProvisioner",
        group="jupyter_client.kernel_provisioners")


def kernel_config() -> dict:
    """papermill's (or a KernelManager's) keywords that encrypt the kernel's channels, if it can."""
    if "transport_encryption" not in KernelManager.class_trait_names():
        return {}
    return {"config": Config({"KernelManager": {"transport_encryption": "auto"}})}


def kernel_manager_class(env: dict[str, str] | None = None, here: str | None = None,
                         run_dir: Path | None = None) -> type:
    """A kernel manager whose kernels get `env`; HERE_KERNEL is one of Python `here`."""
    register_provisioner()
    config = {"provisioner_name": PROVISIONER, "config": {"extra_env": dict(env or {})}}

    class RunnerSpecManager(KernelSpecManager):
        """Kernel specs as found, each launched by the runner's provisioner."""

        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            """The spec of `kernel_name`, naming the provisioner."""
            if here and kernel_name == HERE_KERNEL:  # as ipykernel writes one, for `here`
                made = get_kernel_dict()
                spec = KernelSpec(resource_dir="", **{
                    **made, "argv": [here, *made["argv"][1:]],
                    "display_name": f"gpubench --here ({here})"})
            else:
                spec = super().get_kernel_spec(kernel_name)
            spec.metadata = {**spec.metadata, "kernel_provisioner": config}
            return spec

    class RunnerKernelManager(AsyncKernelManager):
        """A kernel started by the runner, from RunnerSpecManager's specs."""

        @default("kernel_spec_manager")
        def _specs(self) -> KernelSpecManager:
            return RunnerSpecManager(data_dir=self.data_dir)

        @default("connection_file")
        def _connection_file(self) -> str:
            return rundir.connection_file(run_dir) if run_dir else ""

    return RunnerKernelManager


def forward_stderr(read: int, write: int = 2, tail: deque | None = None) -> None:
    """Copy a kernel's stderr (fd `read`) to `write` without noise, its lines kept in `tail`."""
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
    """The last lines the job's kernel wrote to stderr, once it ended (waiting up to `wait` s)."""
    words: list[str] = []
    for provisioner in Stop.kernels:
        if (reader := getattr(provisioner, "stderr_reader", None)) is not None:
            reader.join(wait)
            words += provisioner.stderr_tail
    return words[-LAST_WORDS:]
