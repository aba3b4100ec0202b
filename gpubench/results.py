"""The results record (its one declaration: gpubench/schemas/record.schema.json), the
environment snapshot, and the JSON Lines store.

Each measurement is one line of `results.jsonl`, synced to disk as soon as it is measured.
"""

from __future__ import annotations

import datetime as _dt
import errno
import functools
import itertools
import json
import math
import os
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gpubench import backends, machine, schema

RECORD = schema.load("record")  # the one declaration of a record: gpubench/schemas/
KNOWN_SCHEMAS = tuple(RECORD["properties"]["schema"]["enum"])
SCHEMA = max(KNOWN_SCHEMAS)
# Versions this code reads: 1 lacks `attempt` (read as 1) and the mode fields (read as None);
# 1 and 2 lack `backend` (read as "tensorflow", the only one then) and `telemetry` (None);
# up to 3, a rigorous or peak matmul's `seconds` was one call up to its sync: read as
# `call_seconds`, its product-time fields as None (see _matmul_as_schema_4).
# The mode a training ran in (schema 2): what Keras resolved, not what was asked for.
SCHEMA_2_FIELDS = ("jit_compile", "precision", "steps_per_execution", "input_pipeline",
                   "flops_per_sample", "achieved_gflops")
# A rigorous or peak matmul's product-time fields (schema 4): blocks of products, one sync each.
PRODUCT_TIME_FIELDS = ("seconds", "seconds_min", "seconds_max", "seconds_iqr", "gflops",
                       "products_per_block")
STATUSES = tuple(RECORD["properties"]["status"]["enum"])
COMMON_FIELDS = tuple(RECORD["required"])
_ENVIRONMENT = RECORD["properties"]["environment"]
ENVIRONMENT_FIELDS = tuple(_ENVIRONMENT["required"])
# Schema 3 adds these to the environment (absent from older records).
ENVIRONMENT_FIELDS_3 = tuple(k for k in _ENVIRONMENT["properties"] if k not in ENVIRONMENT_FIELDS)


BENCHMARKS = tuple(RECORD["properties"]["benchmark"]["enum"])
# The fields of a record's `telemetry` object, in the schema's order.
TELEMETRY_FIELDS = tuple(RECORD["$defs"]["telemetry"]["properties"])


def unmeasured(reason: str | None) -> dict:
    """The telemetry object of a region no Monitor watched: every figure null, and `reason`."""
    return {**dict.fromkeys(TELEMETRY_FIELDS), "partial": False, "reason": reason}

# Every field a record of each benchmark may hold (make_record writes them all, None where
# not measured), in the schema's order.
FIELDS = {benchmark: tuple(schema.declared(RECORD, RECORD, {"benchmark": benchmark}))
          for benchmark in BENCHMARKS}
WRITE_ERRORS = {errno.ENOSPC: "the disk is full", errno.EROFS: "the file system is read-only",
                errno.EDQUOT: "the disk quota is used up", errno.EACCES: "permission denied"}


class ResultsPathError(ValueError):
    """The results path cannot be written."""


class ResultsWriteError(ResultsPathError):
    """A record could not be appended (full or read-only disk); the message names the path."""


def write_problem(exc: OSError) -> str:
    """A failed write in words: "the disk is full", "the file system is read-only", ..."""
    return WRITE_ERRORS.get(exc.errno, exc.strerror or str(exc))


def new_run_id() -> str:
    """A sortable, unique run id: UTC timestamp plus a short random suffix."""
    now = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{now}-{uuid.uuid4().hex[:6]}"


_process_run_id = functools.cache(new_run_id)


def current_run_id() -> str:
    """The run id set by `gpubench run` (GPUBENCH_RUN_ID), else one for this process."""
    return os.environ.get("GPUBENCH_RUN_ID") or _process_run_id()


def current_attempt() -> int:
    """The runner's attempt number of the job writing records (GPUBENCH_ATTEMPT), else 1."""
    text = os.environ.get("GPUBENCH_ATTEMPT", "1").strip()
    return max(1, int(text)) if text.isdigit() else 1


def default_env_name() -> str:
    """The env label for results: GPUBENCH_ENV when set, else the backend's prefix and what it
    sees: "cpu"/"gpu" on TensorFlow, "jax-cpu"/"jax-gpu" on JAX."""
    if name := os.environ.get("GPUBENCH_ENV"):
        return name
    return backends.env_label(backends.current().NAME, backends.current().gpu_count() > 0)


def make_record(benchmark: str, *, notebook: str, env: str, device: str, status: str = "ok",
                error: str | None = None, environment: dict | None = None,
                telemetry: dict | None = None, **fields: Any) -> dict:
    """Build one record with every schema field present (missing measurements are None)."""
    if benchmark not in FIELDS:
        raise ValueError(f"unknown benchmark {benchmark!r}; use one of {list(BENCHMARKS)}")
    allowed = [name for name in FIELDS[benchmark] if name not in COMMON_FIELDS]
    if unknown := sorted(set(fields) - set(allowed)):
        raise ValueError(f"unknown {benchmark} field(s) {unknown}; the schema has {allowed}")
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; use one of {STATUSES}")
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    environment = environment if environment is not None else environment_snapshot()
    record = {"schema": SCHEMA, "run_id": current_run_id(), "env": env, "notebook": notebook,
              "benchmark": benchmark, "device": device, "status": status, "error": error,
              "timestamp": now, "attempt": current_attempt(),
              "backend": environment.get("backend") or "tensorflow",
              "telemetry": telemetry if telemetry is not None else unmeasured(
                  "not measured for this record" if status == "ok" else f"status {status}"),
              "environment": environment}
    return record | {name: fields.get(name) for name in allowed}


@functools.cache
def checker(ranges: bool = False) -> schema.Checker:
    """The record schema compiled once: with `ranges`, all of it (what the report needs);
    without, the fields and their types (what the writer and every reader hold to)."""
    return schema.Checker(RECORD if ranges else schema.types_only(RECORD))


def validate(record: dict) -> None:
    """Raise ValueError naming the first field of `record` that is missing or of a wrong type.

    Any malformed record is a ValueError (never a TypeError or KeyError), so a reader can skip it.
    """
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, not {type(record).__name__}")
    stored = checker()
    if not stored.valid(record):
        problem = schema.explain(RECORD, next(stored.errors(record)))
        kind = record.get("benchmark") if record.get("benchmark") in BENCHMARKS else "record"
        raise ValueError(f"{kind} field {problem.field!r} is {schema.shown(problem.value)}; "
                         f"expected {problem.wants}")


def _json_safe(value: Any) -> Any:
    """NaN and infinity are not JSON; store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


class ResultsStore:
    """An append-only JSON Lines file of records."""

    def __init__(self, path: str | os.PathLike) -> None:
        """Open (and create if needed) the store at `path`; fail now if it cannot be written."""
        self.path = Path(path)
        if self.path.is_dir():
            raise ResultsPathError(f"results path {str(self.path)!r} is a directory; pass a file "
                                   f"path such as {str(self.path / 'results.jsonl')!r}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise ResultsPathError(
                f"cannot write results to {str(self.path)!r} ({write_problem(exc)}); pass a "
                "results_path in a writable directory, e.g. runs/my-run/results.jsonl") from None

    def append(self, record: dict) -> dict:
        """Validate `record`, append it as one line synced to disk, and return it."""
        validate(record)
        data = (json.dumps(_json_safe(record), allow_nan=False) + "\n").encode("utf-8")
        try:
            _append_bytes(self.path, data)
        except OSError as exc:
            raise ResultsWriteError(
                f"cannot append a record to {str(self.path)!r}: {write_problem(exc)}; "
                "free some space (or make it writable) and resume the run") from exc
        return record

    def read(self) -> list[dict]:
        """All records in the store, in the order they were written."""
        return read_records(self.path)


def _append_bytes(path: Path, data: bytes) -> None:
    """Append `data` with O_APPEND and fsync, after a newline if the last line was cut off."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _json_number(text: str) -> float | None:
    """A JSON number as a float: -0.0 read as 0.0 (no measurement is "minus zero"), and one past
    a float's range (1e309) as None, as the writer stores a value that is not finite."""
    value = float(text) + 0.0
    return value if math.isfinite(value) else None


def _not_a_number(name: str) -> None:
    """NaN, Infinity and -Infinity, which Python writes but JSON has not: read as null."""
    return None


def parse_line(line: str | bytes) -> dict:
    """One results line (text, or UTF-8 bytes) as a record; ValueError says why it is unreadable."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                             f"{exc.start + 1}): a damaged line") from None
    try:
        record = json.loads(line, parse_float=_json_number, parse_constant=_not_a_number)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError("not a JSON record (cut off by a crash or a full disk?)") from None
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, not {type(record).__name__}")
    if "schema" not in record:
        raise ValueError("record lacks the field 'schema'")
    schema = record["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema not in KNOWN_SCHEMAS:
        raise ValueError(f"unknown schema version {schema!r}; this gpubench reads "
                         f"{list(KNOWN_SCHEMAS)}: update gpubench to read it")
    if schema == 1:
        record = {"attempt": 1, **dict.fromkeys(SCHEMA_2_FIELDS), **record}
    if schema in (1, 2):
        record = {"backend": "tensorflow", "telemetry": None, **record}
    if schema <= 3:
        record = _matmul_as_schema_4(record)
    validate(record)
    return record


def _matmul_as_schema_4(record: dict) -> dict:
    """An older matmul record in schema 4's terms: a rigorous or peak `seconds` was one call up
    to its sync, so it is `call_seconds` and the product time is unknown (None)."""
    if record.get("benchmark") != "matmul":
        return record
    if record.get("method") in ("rigorous", "peak"):
        return record | {"call_seconds": record.get("seconds"),
                         **dict.fromkeys(PRODUCT_TIME_FIELDS)}
    return {"call_seconds": None, **record}


BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, which some editors put first


def skipped(message: str, problems: list[str] | None = None) -> None:
    """Warn that a line or record is left out (`message` says where and why), and add it to
    `problems`: how every reader skips what it cannot use."""
    warnings.warn(message, stacklevel=3)
    if problems is not None:
        problems.append(message)


# Unreadable lines named one by one (file:line) per file; the rest are counted in one line.
NAMED_UNREADABLE = 5
MAX_LINE_BYTES = 16 * 2**20  # far above any record; a longer line is read past, never kept whole
_REASON_CHARS = 200  # what a warning keeps of why a line is unreadable


def _lines(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(number, line) of a binary file, one line in memory at a time; None for a line over
    MAX_LINE_BYTES, whose rest is read past in chunks."""
    for number in itertools.count(1):
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):
                line = handle.readline(2**20)
            yield number, None
            continue
        yield number, line.rstrip(b"\r\n")


def read_records(path: str | os.PathLike, problems: list[str] | None = None, *,
                 origin: bool = False) -> list[dict]:
    """Records of a results.jsonl (or of RUN_DIR/results.jsonl when given a directory), as a
    list: `iter_records`' records."""
    return list(iter_records(path, problems, origin=origin))


def iter_records(path: str | os.PathLike, problems: list[str] | None = None, *,
                 origin: bool = False) -> Iterator[dict]:
    """Records of a results.jsonl (or of RUN_DIR/results.jsonl when given a directory), one at a
    time as the file is read, so that a reader keeps only those it needs.

    The file is streamed line by line as bytes: a line that is not UTF-8, not JSON or not a
    valid record is skipped. The first NAMED_UNREADABLE of them get a warning naming file and
    line (also added to `problems`), the rest one warning with their count, so junk cannot
    flood a report. A UTF-8 byte-order mark is accepted. With `origin`, each record gets
    "_origin": "FILE:LINE". Records in a row with equal environments share one (a run's
    records are alike there). A missing file is FileNotFoundError, an unreadable one
    ResultsPathError, raised where they are found.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no results at {str(path)!r}; run `gpubench run` first")
    unreadable, last, environment = 0, 0, None
    try:
        with path.open("rb") as handle:
            for number, line in _lines(handle):
                if number == 1 and line and line.startswith(BOM):
                    line = line[len(BOM):]
                if line is not None and not line.strip():
                    continue
                try:
                    if line is None:
                        raise ValueError(f"a line longer than {MAX_LINE_BYTES:,} bytes, not a "
                                         "record gpubench writes")
                    record = parse_line(line)
                except ValueError as exc:
                    unreadable, last = unreadable + 1, number
                    if unreadable <= NAMED_UNREADABLE:
                        skipped(f"{path}:{number}: skipped: {str(exc)[:_REASON_CHARS]}", problems)
                    continue
                if record["environment"] == environment:  # one run's records share one copy
                    record["environment"] = environment
                environment = record["environment"]
                if origin:
                    record["_origin"] = f"{path}:{number}"
                yield record
    except OSError as exc:
        raise ResultsPathError(
            f"cannot read results from {str(path)!r}: {read_problem(exc)}") from None
    if unreadable > NAMED_UNREADABLE:
        more = unreadable - NAMED_UNREADABLE
        skipped(f"{path}: skipped {unreadable} unreadable lines in all: {more} more after the "
                f"{NAMED_UNREADABLE} named, the last at line {last}", problems)


def read_problem(exc: OSError) -> str:
    """A failed read in words: "permission denied", "it is a directory", ..."""
    words = {errno.EISDIR: "it is a directory", errno.EACCES: "permission denied"}
    return words.get(exc.errno, exc.strerror or str(exc))


def environment_snapshot() -> dict:
    """Hardware and software this process runs on: every environment field of the schema."""
    return dict(_snapshot())


@functools.cache
def _snapshot() -> dict:
    backend = backends.current()
    facts = dict(machine.facts())
    if not facts["gpus"]:  # no nvidia-smi: the names the backend gives
        facts["gpus"] = [{"name": backend.gpu_name(i), "memory_gb": None, "driver": None}
                         for i in range(backend.gpu_count())]
    return {**facts, **backend.build_info()}


def runs_dir() -> Path:
    """Where run directories go by default: runs/ of the checkout, else runs/ in the current
    folder (an installed wheel: never inside the package)."""
    return (machine.checkout() or Path.cwd()) / "runs"


def default_results_path() -> Path:
    """Where notebooks run by hand write: GPUBENCH_RESULTS_PATH, else
    runs/interactive/results.jsonl."""
    env = os.environ.get("GPUBENCH_RESULTS_PATH")
    return Path(env) if env else runs_dir() / "interactive" / "results.jsonl"


# ---------------------------------------------------------------- queries a chapter needs


def job_of(record: dict) -> tuple:
    """The job a record belongs to: run dir, env and notebook."""
    return record.get("_run_dir"), record["env"], record["notebook"]


def latest_attempts(records: list[dict]) -> list[dict]:
    """Only the records of each job's latest attempt (a job: run dir, env and notebook)."""
    last: dict[tuple, int] = defaultdict(int)
    for r in records:
        last[job_of(r)] = max(last[job_of(r)], r["attempt"])
    return [r for r in records if r["attempt"] == last[job_of(r)]]


def ok_records(records: list[dict], benchmark: str) -> list[dict]:
    """The records of `benchmark` whose status is "ok"."""
    return [r for r in records if r["benchmark"] == benchmark and r["status"] == "ok"]


def dtype_of(record: dict) -> str:
    """A matmul record's dtype (older records: float32)."""
    return record.get("dtype") or "float32"


PEAK_METHOD = "peak"  # the method of the matmul probe that every "% of peak" divides by


def peak_record(records: list[dict], env: str, device: str, dtype: str) -> dict | None:
    """The newest ok matmul peak-probe record (method "peak") of that env, device and dtype:
    the one reference of every "% of peak" (chapter, report and Compare_CPU_GPU alike)."""
    found = [r for r in ok_records(records, "matmul")
             if r.get("method") == PEAK_METHOD and r.get("env") == env
             and r.get("device") == device and dtype_of(r) == dtype and r.get("gflops")]
    return max(found, key=lambda r: str(r.get("timestamp") or ""), default=None)


def peak_gflops(records: list[dict], env: str, device: str, dtype: str) -> float | None:
    """The GFLOP/s of `peak_record` (None when that env never ran the probe at that dtype)."""
    found = peak_record(records, env, device, dtype)
    return found["gflops"] if found else None
