"""A run directory's file names, the lock that keeps it to one process (RUN_DIR/run.lock, dropped
by the OS when its holder dies), writes that never leave a half-written file (.NAME.PID.tmp, then
`os.replace`), and the kernels' connection files (jupyter_client's tmpXXXX.json, with a kernel's
key and ports), listed in RUN_DIR/kernels.txt. What dead processes left is removed, and named,
by the next process that takes the lock or reports on the run."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
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
MANIFEST = "run.json"  # the job list of `gpubench run`
KERNELS = "kernels.txt"  # "PID PATH" per line: a kernel connection file, its runner's PID
_TEMP = re.compile(r"\..+\.(\d+)\.tmp")  # write_atomic's temp file: .NAME.PID.tmp


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


def resume_command(run_dir: Path) -> str:
    """`gpubench run --resume RUN_DIR`, quoted for a shell."""
    return f"gpubench run --resume {shlex.quote(str(run_dir))}"


def lock_run_dir(run_dir: Path, stack: contextlib.ExitStack) -> None:
    """Hold run.lock in `run_dir` until `stack` closes, then tidy it; a second process:
    UsageError naming the holder."""
    try:
        fd = stack.enter_context(locked(run_dir / LOCK, wait=False))
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BlockingIOError:
        for _ in range(20):  # the holder may still be writing its PID
            if pid := (run_dir / LOCK).read_text().strip():
                break
            time.sleep(0.05)
        raise UsageError(f"{run_dir} is in use by another gpubench run (PID {pid or 'unknown'}); "
                         "wait for it to end, or stop it first") from None
    except OSError as exc:
        what = f"in {run_dir}" if exc.filename else str(run_dir / LOCK)
        fix = ("choose a writable --out" if not (run_dir / MANIFEST).exists() else
               f"copy it to a writable folder and resume the copy (`cp -r "
               f"{shlex.quote(str(run_dir))} COPY && gpubench run --resume COPY`)")
        raise UsageError(f"cannot write {what}: {results.write_problem(exc)}; free some space, "
                         f"or {fix}") from None
    tidy(run_dir)


def tidy(run_dir: Path) -> None:
    """Remove, and name, what dead processes left in `run_dir`: write_atomic's temp files and
    the connection files of their kernels."""
    if removed := remove_leftovers(run_dir):
        print(f"Removed {len(removed)} temp file(s) that an interrupted writer left in {run_dir}: "
              + ", ".join(p.name for p in removed), flush=True)
    if removed := remove_connection_files(run_dir):
        print(f"Removed {len(removed)} connection file(s) of dead kernels of {run_dir} (each held "
              "a kernel's key and ports): " + ", ".join(removed), flush=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        pass
    return True


def remove_leftovers(run_dir: Path) -> list[Path]:
    """Remove the temp files of `write_atomic` whose writer is dead; returns those removed."""
    removed = []
    for path in sorted(run_dir.glob(".*.tmp")):
        match = _TEMP.fullmatch(path.name)
        if match and int(match[1]) != os.getpid() and not _alive(int(match[1])):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def note_connection_file(run_dir: Path, path: str) -> None:
    """List kernel connection file `path` in RUN_DIR/kernels.txt, as this process's."""
    with open(run_dir / KERNELS, "a", encoding="utf-8") as listed:
        listed.write(f"{os.getpid()} {path}\n")


def remove_connection_files(run_dir: Path, *, ours: bool = False) -> list[str]:
    """Remove the connection files kernels.txt lists of dead processes (`ours`: of this one, at
    the end of its job) and their lines; returns the files that were still there."""
    try:
        lines = (run_dir / KERNELS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    kept, removed, me = [], [], str(os.getpid())
    for line in lines:
        pid, _, path = line.partition(" ")
        if (pid == me) != ours or (not ours and pid.isdigit() and _alive(int(pid))):
            kept.append(line)
            continue
        with contextlib.suppress(OSError):
            os.remove(path)
            removed.append(path)
    with contextlib.suppress(OSError):
        if kept:
            write_atomic(run_dir / KERNELS, lambda tmp: tmp.write_text("\n".join(kept) + "\n"))
        else:
            (run_dir / KERNELS).unlink()
    return removed


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
    """A Popen preexec_fn that ties the child to this process between fork and exec; None off
    Linux, where the child ties itself."""
    if not sys.platform.startswith("linux"):
        return None
    parent, prctl = os.getpid(), _pdeathsig()
    return lambda: tie_to_parent(parent, prctl)
