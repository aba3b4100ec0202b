"""The results record (declared once: gpubench/schemas/record.schema.json), the environment
snapshot, and the JSON Lines store: one line per measurement, synced to disk when measured."""

import contextlib
import datetime as _dt
import errno
import functools
import json
import math
import os
import uuid
from pathlib import Path
from typing import Any

from gpubench import backends, machine, schema

RECORD = schema.load("record")
(SCHEMA,) = RECORD["properties"]["schema"]["enum"]  # the one version this code writes and reads
RESULTS_FILE = "results.jsonl"
BENCHMARKS = tuple(RECORD["properties"]["benchmark"]["enum"])
COMMON_FIELDS = tuple(RECORD["required"])
ENVIRONMENT_FIELDS = tuple(RECORD["properties"]["environment"]["required"])
TELEMETRY_FIELDS = tuple(RECORD["$defs"]["telemetry"]["properties"])
FIELDS = {benchmark: tuple(schema.declared(RECORD, RECORD, {"benchmark": benchmark}))
          for benchmark in BENCHMARKS}
WRITE_ERRORS = {errno.ENOSPC: "the disk is full", errno.EROFS: "the file system is read-only",
                errno.EDQUOT: "the disk quota is used up", errno.EACCES: "permission denied",
                errno.EISDIR: "it is a directory"}
PEAK_METHOD = "peak"  # the method of the matmul probe that every "% of peak" divides by


class ResultsPathError(ValueError):
    """The results path cannot be written (or read)."""


class ResultsWriteError(ResultsPathError):
    """A record could not be appended (full or read-only disk); the message names the path."""


def write_problem(exc: OSError) -> str:
    """A failed write (or read) in words: "the disk is full", "it is a directory", ..."""
    return WRITE_ERRORS.get(exc.errno, exc.strerror or str(exc))


def unmeasured(reason: str | None) -> dict:
    """The telemetry object of a region no Monitor watched: every figure null, and `reason`."""
    return {**dict.fromkeys(TELEMETRY_FIELDS), "partial": False, "reason": reason}


def new_run_id() -> str:
    """A sortable, unique run id: UTC timestamp plus a short random suffix."""
    return f"{_dt.datetime.now(_dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


_process_run_id = functools.cache(new_run_id)


def current_run_id() -> str:
    """The run id set by `gpubench run` (GPUBENCH_RUN_ID), else one for this process."""
    return os.environ.get("GPUBENCH_RUN_ID") or _process_run_id()


def current_attempt() -> int:
    """The runner's attempt number of the job writing records (GPUBENCH_ATTEMPT), else 1."""
    text = os.environ.get("GPUBENCH_ATTEMPT", "1").strip()
    return max(1, int(text)) if text.isdigit() else 1


def default_env_name() -> str:
    """GPUBENCH_ENV, else the backend's env label for what it sees ("cpu", "jax-gpu", ...)."""
    return os.environ.get("GPUBENCH_ENV") or backends.env_label(
        backends.current().NAME, backends.current().gpu_count() > 0)


def make_record(benchmark: str, *, notebook: str, env: str, device: str, status: str = "ok",
                error: str | None = None, environment: dict | None = None,
                telemetry: dict | None = None, **fields: Any) -> dict:
    """One record with every schema field present (missing measurements are None)."""
    for kind, value, known in (("benchmark", benchmark, BENCHMARKS),
                               ("status", status, RECORD["properties"]["status"]["enum"])):
        if value not in known:
            raise ValueError(f"unknown {kind} {value!r}; use one of {list(known)}")
    allowed = [name for name in FIELDS[benchmark] if name not in COMMON_FIELDS]
    if unknown := sorted(set(fields) - set(allowed)):
        raise ValueError(f"unknown {benchmark} field(s) {unknown}; the schema has {allowed}")
    environment = environment if environment is not None else environment_snapshot()
    why = "not measured for this record" if status == "ok" else f"status {status}"
    record = {"schema": SCHEMA, "run_id": current_run_id(), "env": env, "notebook": notebook,
              "benchmark": benchmark, "device": device, "status": status, "error": error,
              "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
              "attempt": current_attempt(), "backend": environment.get("backend") or "tensorflow",
              "telemetry": telemetry if telemetry is not None else unmeasured(why),
              "environment": environment}
    return record | {name: fields.get(name) for name in allowed}


@functools.cache
def checker(ranges: bool = False) -> schema.Checker:
    """The record schema compiled: with `ranges` (the report's), else its fields and types."""
    return schema.Checker(RECORD if ranges else schema.types_only(RECORD))


def validate(record: Any) -> None:
    """Raise ValueError (never another error) naming the first missing or mistyped field."""
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, not {type(record).__name__}")
    if not checker().valid(record):
        from gpubench import schema_words  # noqa: PLC0415 - its words only where a record fails

        problem = schema_words.explain(RECORD, next(checker().errors(record)))
        kind = record.get("benchmark") if record.get("benchmark") in BENCHMARKS else "record"
        raise ValueError(f"{kind} field {problem.field!r} is {schema_words.shown(problem.value)}; "
                         f"expected {problem.wants}")


class ResultsStore:
    """An append-only JSON Lines file of records."""

    def __init__(self, path: str | os.PathLike) -> None:
        """Open (and create if needed) the store at `path`; fail now if it cannot be written."""
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))  # a directory: EISDIR
        except OSError as exc:
            raise ResultsPathError(
                f"cannot write results to {str(self.path)!r} ({write_problem(exc)}); pass a "
                f"results_path in a writable directory, e.g. runs/my-run/{RESULTS_FILE}") from None

    def append(self, record: dict) -> dict:
        """Validate `record`, append it as one line (NaN as null) synced to disk; return it."""
        validate(record)
        text = json.dumps(json.loads(json.dumps(record), parse_constant=lambda name: None))
        data = (text + "\n").encode("utf-8")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
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
        except OSError as exc:
            raise ResultsWriteError(
                f"cannot append a record to {str(self.path)!r}: {write_problem(exc)}; "
                "free some space (or make it writable) and resume the run") from exc
        return record

    def read(self) -> list[dict]:
        """The store's records in the order written, lines that are no record left out."""
        found = []
        for line in self.path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                found.append(parse_line(line))
        return found


def _json_number(text: str) -> float | None:
    value = float(text) + 0.0  # -0.0 read as 0.0, one past a float's range (1e309) as None
    return value if math.isfinite(value) else None


def parse_line(line: str | bytes) -> dict:
    """One results line (text or UTF-8 bytes) as a record; ValueError says why it is unreadable."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                             f"{exc.start + 1}): a damaged line") from None
    try:  # NaN and Infinity, which Python writes but JSON has not, read as null
        record = json.loads(line, parse_float=_json_number, parse_constant=lambda name: None)
    except (json.JSONDecodeError, RecursionError):
        raise ValueError("not a JSON record (cut off by a crash or a full disk?)") from None
    if isinstance(record, dict):
        if "schema" not in record:
            raise ValueError("record lacks the field 'schema'")
        version = record["schema"]
        if type(version) is int and 0 < version < SCHEMA:
            raise ValueError(f"schema version {version}, older than the {SCHEMA} this gpubench "
                             "reads; convert the file once: python tools/convert_records.py FILE")
        if version != SCHEMA or isinstance(version, bool):
            raise ValueError(f"unknown schema version {version!r}; this gpubench reads {SCHEMA}:"
                             " update gpubench to read it")
    validate(record)
    return record


def environment_snapshot() -> dict:
    """Every environment field of a record: the machine (`machine.facts`) and the backend."""
    backend, facts = backends.current(), dict(machine.facts())
    if not facts["gpus"]:  # no nvidia-smi: the names the backend gives
        facts["gpus"] = [{"name": backend.gpu_name(i), "memory_gb": None, "driver": None}
                         for i in range(backend.gpu_count())]
    return {**facts, **backend.build_info()}


def runs_dir() -> Path:
    """Where run directories go: runs/ of the checkout, else runs/ in the current folder."""
    return (machine.checkout() or Path.cwd()) / "runs"


def job_of(record: dict) -> tuple:
    """The job a record belongs to: run dir, env and notebook."""
    return record.get("_run_dir"), record["env"], record["notebook"]


def latest_attempts(records: list[dict]) -> list[dict]:
    """Only the records of each job's latest attempt."""
    last: dict[tuple, int] = {}
    for r in records:
        last[job_of(r)] = max(last.get(job_of(r), 0), r["attempt"])
    return [r for r in records if r["attempt"] == last[job_of(r)]]


def ok_records(records: list[dict], benchmark: str) -> list[dict]:
    """The records of `benchmark` whose status is "ok"."""
    return [r for r in records if r["benchmark"] == benchmark and r["status"] == "ok"]


def dtype_of(record: dict) -> str:
    """A matmul record's dtype (float32 where it names none)."""
    return record.get("dtype") or "float32"


def peak_record(records: list[dict], env: str, device: str, dtype: str) -> dict | None:
    """The newest ok peak-probe record of that env, device and dtype: every "% of peak"'s base."""
    found = [r for r in ok_records(records, "matmul")
             if r.get("method") == PEAK_METHOD and r.get("env") == env
             and r.get("device") == device and dtype_of(r) == dtype and r.get("gflops")]
    return max(found, key=lambda r: str(r.get("timestamp") or ""), default=None)

