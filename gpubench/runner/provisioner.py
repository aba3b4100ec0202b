"""gpubench's kernel provisioner: jupyter_client's LocalProvisioner with what `gpubench run`
adds to every kernel it starts. pyproject.toml registers it as `gpubench-runner` in the entry
point group jupyter_client.kernel_provisioners; the runner's kernel specs name it
(kernels.kernel_manager_class). Loaded by jupyter_client when a kernel starts, never at import."""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from typing import Any

from jupyter_client.provisioning import LocalProvisioner
from traitlets import Dict

from gpubench import rundir
from gpubench.runner.kernels import LAST_WORDS, PLAIN_RICH_TEXT, _Stop, forward_stderr

# ipykernel's own capture of the file descriptors 1 and 2 is turned off: it reads them in a
# thread of the kernel, so what a C library writes just before it aborts the process (a fatal
# "Unknown flag in XLA_FLAGS") died with it. The kernel writes to its real stderr instead,
# which the runner reads (forward_stderr); Python's own prints still go to the notebook.
NO_FD_CAPTURE = "--IPKernelApp.capture_fd_output=False"


class RunnerProvisioner(LocalProvisioner):
    """A local kernel that gets `extra_env` on top of its environment, dies with the runner,
    stores rich's text plain (PLAIN_RICH_TEXT, ipykernel), passes its stderr on through
    forward_stderr (its last lines kept in `stderr_tail`, read by `stderr_reader`) and is
    listed in _Stop.kernels for Ctrl-C."""

    extra_env = Dict(config=True, help="Environment variables set on top of the kernel's own.")

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """LocalProvisioner's launch keywords and command, with the runner's additions."""
        kwargs = await super().pre_launch(**kwargs)
        kwargs["env"] = {**kwargs.get("env", os.environ), **self.extra_env}
        if sys.platform.startswith("linux"):
            kwargs["preexec_fn"] = rundir.die_with_parent()
        if any("ipykernel" in part for part in kwargs["cmd"]):
            kwargs["cmd"] = [*kwargs["cmd"], f"--IPKernelApp.exec_lines={PLAIN_RICH_TEXT}",
                             NO_FD_CAPTURE]
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict:
        """Start the kernel with its stderr piped to forward_stderr (unless the caller gave a
        stderr), and list it in _Stop.kernels."""
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
        _Stop.kernels.append(self)
        return info
