"""The kernels `gpubench run` starts: jupyter_client's kernel manager and its provisioner, with the
runner's environment, the parent tie, the connection file in the run directory, the `--here`
spec (in memory), and the kernel's stderr passed on without noise, its last lines kept."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections import deque
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from ipykernel.kernelspec import get_kernel_dict
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import KernelProvisionerFactory, LocalProvisioner
from traitlets import Dict, default
from traitlets.config import Config

from gpubench import rundir
from gpubench.rundir import Stop

HERE_KERNEL = "gpubench-here"  # the kernel spec `--here` makes on the fly
PROVISIONER = "gpubench-runner"  # jupyter_client's name of RunnerProvisioner (kernel specs')
KERNEL_NOISE = (b"Kernel is running over TCP without encryption",)  # the stderr line left out
# Run in every kernel first: rich (Keras's model summary) stores its text/plain copy plain.
PLAIN_RICH_TEXT = "import gpubench.chapter as _gb_nb; _gb_nb.store_rich_text_plain(); del _gb_nb"
# ipykernel's capture of fds 1 and 2 is off: its thread died with a C library's last words as it
# aborted the process (a fatal "Unknown flag in XLA_FLAGS"); forward_stderr reads them instead.
NO_FD_CAPTURE = "--IPKernelApp.capture_fd_output=False"
LAST_WORDS, LINE_CHARS = 10, 300  # a dead kernel's last stderr lines kept, each cut to this
ENCRYPTED = Config({"KernelManager": {"transport_encryption": "auto"}})  # the kernel's channels


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
        """Start the kernel, its stderr piped through forward_stderr to ours."""
        read, kwargs["stderr"] = os.pipe()
        self.stderr_tail: deque[str] = deque(maxlen=LAST_WORDS)
        self.stderr_reader = threading.Thread(target=forward_stderr, name="kernel-stderr",
                                              args=(read, 2, self.stderr_tail), daemon=True)
        try:
            info = await super().launch_kernel(cmd, **kwargs)
        finally:
            os.close(kwargs["stderr"])  # the kernel holds its own copy; EOF when it ends
            self.stderr_reader.start()  # it closes `read` (at once if no kernel started)
        Stop.kernels.append(self)
        return info


def kernel_manager_class(env: dict[str, str] | None = None, here: str | None = None,
                         run_dir: Path | None = None) -> type:
    """A kernel manager whose kernels (RunnerProvisioner's) get `env`; HERE_KERNEL runs `here`."""
    KernelProvisionerFactory.instance().provisioners[PROVISIONER] = EntryPoint(
        name=PROVISIONER, value="gpubench.runner.kernels:RunnerProvisioner",
        group="jupyter_client.kernel_provisioners")
    config = {"provisioner_name": PROVISIONER, "config": {"extra_env": dict(env or {})}}

    class RunnerSpecManager(KernelSpecManager):
        """Kernel specs as found, each launched by the runner's provisioner."""

        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            """The spec of `kernel_name`, naming the provisioner."""
            if here and kernel_name == HERE_KERNEL:  # as ipykernel writes one, for `here`
                spec = KernelSpec(resource_dir="", **get_kernel_dict())
                spec.argv[0], spec.display_name = here, f"gpubench --here ({here})"
            else:
                spec = super().get_kernel_spec(kernel_name)
            spec.metadata = {**spec.metadata, "kernel_provisioner": config}
            return spec

    class RunnerKernelManager(AsyncKernelManager):
        """A kernel started by the runner, from RunnerSpecManager's specs."""

        @default("kernel_spec_manager")
        def _specs(self) -> KernelSpecManager:
            return RunnerSpecManager(data_dir=self.data_dir)

        @default("connection_file")  # in the run directory, named as our temp files are
        def _connection_file(self) -> str:
            name = f"{rundir.KERNEL[1:]}{uuid.uuid4().hex[:12]}.json"
            return str(rundir.temp_of(run_dir.resolve() / name)) if run_dir else ""

    return RunnerKernelManager


def forward_stderr(read: int, write: int = 2, tail: deque | None = None) -> None:
    """Copy a kernel's stderr (fd `read`) to `write` without noise, its lines kept in `tail`."""
    with open(read, "rb") as stream:  # each line as soon as it ends, the last one at EOF
        for line in stream:
            if any(noise in line for noise in KERNEL_NOISE):
                continue
            if tail is not None and (text := line.decode(errors="replace").strip()):
                tail.append(text[:LINE_CHARS])
            with contextlib.suppress(OSError):
                while line:
                    line = line[os.write(write, line):]
