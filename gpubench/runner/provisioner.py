"""gpubench's kernel provisioner: jupyter_client's LocalProvisioner with what `gpubench run` adds
to every kernel it starts. pyproject.toml registers it as `gpubench-runner`; the runner's
kernel specs name it (kernels.kernel_manager_class). Loaded by jupyter_client, never at import."""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from jupyter_client.provisioning import LocalProvisioner
from traitlets import Dict, Unicode

from gpubench import rundir
from gpubench.runner.kernels import LAST_WORDS, PLAIN_RICH_TEXT, Stop, forward_stderr

# ipykernel's own capture of the file descriptors 1 and 2 is off: it reads them in a thread of
# the kernel, so a C library's last words before it aborts the process (a fatal "Unknown flag in
# XLA_FLAGS") died with it. The runner reads the kernel's real stderr instead (forward_stderr).
NO_FD_CAPTURE = "--IPKernelApp.capture_fd_output=False"


class RunnerProvisioner(LocalProvisioner):
    """A local kernel that gets `extra_env` on top of its environment, dies with the runner,
    stores rich's text plain, passes its stderr on (its last lines in `stderr_tail`), is listed
    in Stop.kernels for Ctrl-C, and has its connection file listed in `run_dir`."""

    extra_env = Dict(config=True, help="Environment variables set on top of the kernel's own.")
    run_dir = Unicode("", config=True, help="The run directory whose kernels.txt lists it.")

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """LocalProvisioner's launch keywords and command (its connection file written), with
        the runner's additions."""
        kwargs = await super().pre_launch(**kwargs)
        if self.run_dir and self.parent.connection_file:
            rundir.note_connection_file(Path(self.run_dir), self.parent.connection_file)
        kwargs["env"] = {**kwargs.get("env", os.environ), **self.extra_env}
        if sys.platform.startswith("linux"):
            kwargs["preexec_fn"] = rundir.die_with_parent()
        if any("ipykernel" in part for part in kwargs["cmd"]):
            kwargs["cmd"] = [*kwargs["cmd"], f"--IPKernelApp.exec_lines={PLAIN_RICH_TEXT}",
                             NO_FD_CAPTURE]
        return kwargs

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict:
        """Start the kernel with its stderr piped to forward_stderr (unless the caller gave a
        stderr), and list it in Stop.kernels."""
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
