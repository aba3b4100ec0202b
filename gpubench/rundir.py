"""A run directory's files: the lock that keeps it to one process, and writes that never leave
a half-written file.

RUN_DIR/run.lock is flock-ed by the process using the directory (`gpubench run`, `--resume`,
`gpubench scaling`'s launcher or worker 0); the OS drops the lock when that process dies.
Files are written through a temp file of this process's own and `os.replace`, so a reader
sees the old file or the new one, and two writers never share a temp file; the process that
takes the lock next removes the temp files of a writer killed mid-write.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: gpubench runs in WSL2 there; no locks
    fcntl = None

from gpubench import results

LOCK = "run.lock"


class UsageError(ValueError):
    """Bad usage of `gpubench run` (or `scaling`): the CLI exits with code 2."""


@contextlib.contextmanager
def locked(path: Path, *, wait: bool = True) -> Iterator[int]:
    """Hold an exclusive flock on `path` (the OS drops it if we die); wait=False raises
    BlockingIOError when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def holder(run_dir: Path) -> str:
    """The PID written in run.lock by the process holding it (it may still be writing it)."""
    for _ in range(20):
        if pid := (run_dir / LOCK).read_text().strip():
            return pid
        time.sleep(0.05)
    return "unknown"


def lock_run_dir(run_dir: Path, stack: contextlib.ExitStack) -> None:
    """Hold run.lock in `run_dir` until `stack` closes; a second process: UsageError naming it."""
    try:
        fd = stack.enter_context(locked(run_dir / LOCK, wait=False))
    except BlockingIOError:
        raise UsageError(f"{run_dir} is in use by another gpubench run (PID {holder(run_dir)}); "
                         "wait for it to end, or stop it first") from None
    except OSError as exc:
        raise UsageError(f"cannot write in {run_dir}: {results.write_problem(exc)}; "
                         "choose a writable --out") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as exc:
        raise UsageError(f"cannot write {run_dir / LOCK}: {results.write_problem(exc)}; free "
                         f"some space or make {run_dir} writable") from None
    if removed := remove_leftovers(run_dir):
        print(f"Removed {len(removed)} temp file(s) that an interrupted writer left in {run_dir}: "
              + ", ".join(p.name for p in removed), flush=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        return True
    return True


def remove_leftovers(run_dir: Path) -> list[Path]:
    """Remove the temp files of `write_atomic` whose writer is dead (killed mid-write); a live
    writer's (a `gpubench report` now) stay. Returns those removed."""
    removed = []
    for path in sorted(run_dir.glob(".*.tmp")):
        match = _TEMP.fullmatch(path.name)
        if match and int(match[1]) != os.getpid() and not _alive(int(match[1])):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


_TEMP = re.compile(r"\..+\.(\d+)\.tmp")  # write_atomic's temp file: .NAME.PID.tmp


def write_atomic(target: Path, save: Callable[[Path], None]) -> Path:
    """`save(tmp)` into a temp file beside `target` (.NAME.PID.tmp), then replace `target` with
    it; on any failure the temp file is removed and the error raised. Returns `target`."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        save(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return target


def _pdeathsig() -> Callable[..., int]:
    """Linux's prctl, bound now (nothing is imported between fork and exec)."""
    import ctypes  # noqa: PLC0415 - only where a process is tied to its parent

    return ctypes.CDLL(None, use_errno=True).prctl


def tie_to_parent(parent: int, prctl: Callable[..., int] | None = None) -> None:
    """End this process when `parent` (its parent's PID) dies, even by kill -9: the kernel sends
    SIGKILL (PR_SET_PDEATHSIG) on Linux; elsewhere a thread polls the parent's PID."""
    if sys.platform.startswith("linux"):
        (prctl or _pdeathsig())(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        if os.getpgid(0) == os.getpid():  # a group leader: end its children too
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def die_with_parent() -> Callable[[], None] | None:
    """A Popen preexec_fn that ties the child to this process (`tie_to_parent`, set between fork
    and exec so no moment of the child's life is untied); None off Linux, where the child
    ties itself."""
    if not sys.platform.startswith("linux"):
        return None
    parent, prctl = os.getpid(), _pdeathsig()
    return lambda: tie_to_parent(parent, prctl)
