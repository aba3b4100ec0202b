"""A run directory: its file names, the lock that keeps it to one process (run.lock, dropped by
the OS when its holder dies), writes that never leave a half-written file, the removal of what
dead processes left there; a run's Ctrl-C and SIGTERM, its children's tie to it; its records."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: gpubench runs in WSL2 there; no locks
    fcntl = None

from gpubench import results

LOCK = "run.lock"
MANIFEST = "run.json"  # the job list of `gpubench run`
KERNEL = ".kernel-"  # a kernel's connection file (its key and ports): .kernel-ID.json.PID.tmp
_TEMP = re.compile(r"\..+\.(\d+)\.tmp")  # temp_of's name: .NAME.PID.tmp


class UsageError(ValueError):
    """Bad usage of `gpubench run` (or `scaling`): the CLI exits with code 2."""


@contextlib.contextmanager
def locked(path: Path, *, wait: bool = True) -> Iterator[int]:
    """Hold a flock on `path` (dropped if we die); wait=False: BlockingIOError if it is held."""
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
    """Hold run.lock in `run_dir` until `stack` closes, and tidy it; UsageError if it is held."""
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


def temp_of(target: Path) -> Path:
    """The temp file (.NAME.PID.tmp) this process fills before it replaces `target` with it."""
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        pass
    return True


def remove_leftovers(run_dir: Path, *, ours: bool = False) -> list[Path]:
    """Remove and return the temp files of dead processes in `run_dir` (`ours`: our kernels')."""
    removed = []
    for path in sorted(Path(run_dir).glob(".*.tmp")):
        if not (match := _TEMP.fullmatch(path.name)):
            continue
        pid = int(match[1])
        if ((pid == os.getpid() and path.name.startswith(KERNEL)) if ours
                else (pid != os.getpid() and not _alive(pid))):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def tidy(run_dir: Path) -> None:
    """Remove, and name, what dead processes left in `run_dir`."""
    removed = remove_leftovers(run_dir)
    if temps := [p.name for p in removed if not p.name.startswith(KERNEL)]:
        print(f"Removed {len(temps)} temp file(s) that an interrupted writer left in {run_dir}: "
              + ", ".join(temps), flush=True)
    if keys := [str(p) for p in removed if p.name.startswith(KERNEL)]:
        print(f"Removed {len(keys)} connection file(s) of dead kernels of {run_dir} (each held a "
              "kernel's key and ports): " + ", ".join(keys), flush=True)


def write_atomic(target: Path, save: Callable[[Path], None]) -> None:
    """`save(tmp)` into `temp_of(target)`, then replace `target` with it (no temp file left)."""
    tmp = temp_of(target)
    try:
        save(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


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


def _pdeathsig() -> Callable[..., int]:  # bound before a fork: nothing is imported after it
    import ctypes  # noqa: PLC0415 - only where a process is tied to its parent

    return ctypes.CDLL(None, use_errno=True).prctl


def tie_to_parent(parent: int, prctl: Callable[..., int] | None = None) -> None:
    """End this process when `parent` dies, even by kill -9 (else a thread polls its PID)."""
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
    """A Popen preexec_fn tying the child to this process; None off Linux (it ties itself)."""
    if not sys.platform.startswith("linux"):
        return None
    parent, prctl = os.getpid(), _pdeathsig()
    return lambda: tie_to_parent(parent, prctl)


BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, which some editors put first
NAMED_UNREADABLE = 5  # unreadable lines named one by one (file:line); the rest are counted
MAX_LINE_BYTES = 16 * 2**20  # far above any record; a longer line is read past, never kept


def skipped(message: str, problems: list[str] | None = None) -> None:
    """Warn that a line or record is left out (`message`: where and why); add it to `problems`."""
    warnings.warn(message, stacklevel=3)
    if problems is not None:
        problems.append(message)


def read_records(path: str | os.PathLike, problems: list[str] | None = None, *,
                 origin: bool = False) -> list[dict]:
    """The records of `iter_records`, as a list."""
    return list(iter_records(path, problems, origin=origin))


def iter_records(path: str | os.PathLike, problems: list[str] | None = None, *,
                 origin: bool = False) -> Iterator[dict]:
    """Records of a results.jsonl (or RUN_DIR's) as read, with "_origin" FILE:LINE if `origin`; an
    unreadable line is skipped, the first NAMED_UNREADABLE named (warned, in `problems`), the rest
    counted."""
    path = Path(path) / results.RESULTS_FILE if Path(path).is_dir() else Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results at {str(path)!r}; run `gpubench run` first")
    unreadable, last, environment = 0, 0, None
    try:
        with path.open("rb") as handle:  # one line in memory at a time
            lines = iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b"")
            for number, line in enumerate(lines, start=1):
                try:
                    if len(line) > MAX_LINE_BYTES:
                        while line and not line.endswith(b"\n"):  # read past the rest
                            line = handle.readline(2**20)
                        raise ValueError(f"a line longer than {MAX_LINE_BYTES:,} bytes, not a "
                                         "record gpubench writes")
                    if not line.strip():
                        continue
                    record = results.parse_line(line.rstrip(b"\r\n").removeprefix(
                        BOM if number == 1 else b""))
                except ValueError as exc:
                    unreadable, last = unreadable + 1, number
                    if unreadable <= NAMED_UNREADABLE:
                        skipped(f"{path}:{number}: skipped: {str(exc)[:200]}", problems)
                    continue
                if record["environment"] == environment:  # one copy of a run's environment
                    record["environment"] = environment
                environment = record["environment"]
                yield record | ({"_origin": f"{path}:{number}"} if origin else {})
    except OSError as exc:
        raise results.ResultsPathError(f"cannot read results from {str(path)!r}: "
                                       f"{results.write_problem(exc)}") from None
    if unreadable > NAMED_UNREADABLE:
        skipped(f"{path}: skipped {unreadable} unreadable lines in all: "
                f"{unreadable - NAMED_UNREADABLE} more after the {NAMED_UNREADABLE} named, the "
                f"last at line {last}", problems)
