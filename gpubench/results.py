"""The results record schema, the environment snapshot, and the JSON Lines store.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gpubench import backends, machine
from gpubench import telemetry as gb_telemetry

SCHEMA = 4
# Versions this code reads: 1 lacks `attempt` (read as 1) and the mode fields (read as None);
# 1 and 2 lack `backend` (read as "tensorflow", the only one then) and `telemetry` (None);
# up to 3, a rigorous or peak matmul's `seconds` was one call up to its sync: read as
# `call_seconds`, its product-time fields as None (see _matmul_as_schema_4).
KNOWN_SCHEMAS = (1, 2, 3, 4)
# The mode a training ran in: what Keras resolved, not what was asked for.
SCHEMA_2_FIELDS = ("jit_compile", "precision", "steps_per_execution", "input_pipeline",
                   "flops_per_sample", "achieved_gflops")

COMMON_FIELDS = ("schema", "run_id", "env", "notebook", "benchmark", "device", "status", "error",
                 "timestamp", "attempt", "backend", "telemetry", "environment")
MATMUL_FIELDS = ("size", "dtype", "method", "seconds", "seconds_min", "seconds_max", "repeats",
                 "gflops", "call_seconds")
# A rigorous or peak matmul's product-time fields (schema 4): blocks of products, one sync each.
PRODUCT_TIME_FIELDS = ("seconds", "seconds_min", "seconds_max", "seconds_iqr", "gflops",
                       "products_per_block")
TRAIN_FIELDS = ("model", "dataset", "data_source", "epochs", "batch_size", "train_samples",
                "epoch_seconds", "first_epoch_seconds", "steady_epoch_seconds", "total_seconds",
                "samples_per_second", "test_accuracy", "test_loss") + SCHEMA_2_FIELDS
SCALING_FIELDS = TRAIN_FIELDS + ("strategy", "replicas", "workers", "global_batch_size",
                                 "per_replica_batch_size", "scaling", "scaling_efficiency")
# Per-epoch telemetry lists of train and scaling records (gpubench.telemetry.epoch_fields).
EPOCH_TELEMETRY = ("epoch_energy_joules", "epoch_gpu_util_percent", "epoch_cpu_util_percent",
                   "epoch_clock_event_reasons")
# Fields beyond DESIGN.md's list that gpubench also records.
EXTRA_FIELDS = {
    "matmul": ("first_seconds", "seconds_iqr", "spec_peak_gflops", "products_per_block",
               "warm_seconds", "aligned_from", "reused_from_attempt"),
    "train": ("validation_samples", "steady_epoch_iqr", "factor", "steps_measured",
              "time_boxed", "steady_epoch_min", "paired_baseline_seconds", "data_verified",
              "busy_region", *EPOCH_TELEMETRY),
    "scaling": ("validation_samples", "steady_epoch_iqr", "steady_epoch_min", "all_reduce",
                "virtual_devices", "devices", "final_loss", "data_verified",
                *EPOCH_TELEMETRY),
}
BENCHMARK_FIELDS = {"matmul": MATMUL_FIELDS, "train": TRAIN_FIELDS, "scaling": SCALING_FIELDS}
ENVIRONMENT_FIELDS = ("python", "tensorflow", "keras", "backend", "cuda_build", "cuda_version",
                      "cudnn_version", "os", "cpu_model", "cpu_count", "ram_gb", "gpus",
                      "git_commit", "hostname", "tf_env")
# Schema 3 adds these to the environment (absent from older records).
ENVIRONMENT_FIELDS_3 = ("backend_version", "jax", "backend_settings")
STATUSES = ("ok", "oom", "error", "skipped")
# Types of the fields the report computes with (None: a value may be missing).
_NUMBER = (int, float, type(None))
FIELD_TYPES = {
    "run_id": str, "env": str, "notebook": str, "device": str, "attempt": int, "environment": dict,
    "size": int, "method": (str, type(None)), "seconds": _NUMBER, "gflops": _NUMBER,
    "model": (str, type(None)), "epochs": (int, type(None)), "train_samples": (int, type(None)),
    "total_seconds": _NUMBER, "steady_epoch_seconds": _NUMBER, "replicas": (int, type(None)),
    "call_seconds": _NUMBER, "warm_seconds": _NUMBER, "products_per_block": (int, type(None)),
    "aligned_from": (int, type(None)), "reused_from_attempt": (int, type(None)),
}
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
    return env_label(backends.current().NAME, backends.current().gpu_count() > 0)


def env_label(backend: str, gpu: bool) -> str:
    """The env label of `backend` with or without a GPU ("jax-gpu", "cpu", ...)."""
    return backends.LABEL_PREFIX[backend] + ("gpu" if gpu else "cpu")


def make_record(benchmark: str, *, notebook: str, env: str, device: str, status: str = "ok",
                error: str | None = None, environment: dict | None = None,
                telemetry: dict | None = None, **fields: Any) -> dict:
    """Build one record with every schema field present (missing measurements are None)."""
    if benchmark not in BENCHMARK_FIELDS:
        raise ValueError(f"unknown benchmark {benchmark!r}; use one of {sorted(BENCHMARK_FIELDS)}")
    allowed = BENCHMARK_FIELDS[benchmark] + EXTRA_FIELDS[benchmark]
    if unknown := sorted(set(fields) - set(allowed)):
        raise ValueError(f"unknown {benchmark} field(s) {unknown}; the schema has {list(allowed)}")
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; use one of {STATUSES}")
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    environment = environment if environment is not None else environment_snapshot()
    record = {"schema": SCHEMA, "run_id": current_run_id(), "env": env, "notebook": notebook,
              "benchmark": benchmark, "device": device, "status": status, "error": error,
              "timestamp": now, "attempt": current_attempt(),
              "backend": environment.get("backend") or "tensorflow",
              "telemetry": telemetry if telemetry is not None else gb_telemetry.unmeasured(
                  "not measured for this record" if status == "ok" else f"status {status}"),
              "environment": environment}
    return record | {name: fields.get(name) for name in allowed}


def validate(record: dict) -> None:
    """Raise ValueError naming the first field of `record` that is missing or of a wrong type.

    Any malformed record is a ValueError (never a TypeError or KeyError), so a reader can skip it.
    """
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, not {type(record).__name__}")
    benchmark = record.get("benchmark")
    if not isinstance(benchmark, str) or benchmark not in BENCHMARK_FIELDS:
        raise ValueError(f"record has unknown benchmark {benchmark!r}; "
                         f"expected one of {sorted(BENCHMARK_FIELDS)}")
    for name in COMMON_FIELDS + BENCHMARK_FIELDS[benchmark] + EXTRA_FIELDS[benchmark]:
        if name not in record:
            if name in EXTRA_FIELDS[benchmark]:
                continue
            raise ValueError(f"{benchmark} record lacks the field {name!r}")
        wanted, value = FIELD_TYPES.get(name), record[name]
        if wanted and (isinstance(value, bool) or not isinstance(value, wanted)):
            raise ValueError(f"{benchmark} field {name!r} has the wrong type: {value!r}")
    status = record["status"]
    if not isinstance(status, str) or status not in STATUSES:
        raise ValueError(f"record has unknown status {status!r}; expected one of {STATUSES}")
    if missing := [k for k in ENVIRONMENT_FIELDS if k not in record["environment"]]:
        raise ValueError(f"record environment lacks {missing}")


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


def _no_negative_zero(text: str) -> float:
    """A JSON number as a float, -0.0 read as 0.0: no measurement is "minus zero"."""
    return float(text) + 0.0


def parse_line(line: str | bytes) -> dict:
    """One results line (text, or UTF-8 bytes) as a record; ValueError says why it is unreadable."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                             f"{exc.start + 1}): a damaged line") from None
    try:
        record = json.loads(line, parse_float=_no_negative_zero)
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
