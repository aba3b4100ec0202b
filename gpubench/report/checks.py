"""The report's record checks: each record against the record schema, ranges included
(gpubench/schemas/record.schema.json, the one declaration of every field), before a table or
chart computes with it. A record that fails is skipped with a warning naming its file, line and
field; a droppable field that fails (telemetry, the environment's details) costs only itself:
it is dropped (null), with a warning naming it, and the record and its timings stay."""

from __future__ import annotations

import itertools

from gpubench import results, schema

_TELEMETRY = results.RECORD["$defs"]["telemetry"]["properties"]
# The telemetry fields that hold a number (the report looks for any measured one).
TELEMETRY_NUMBERS = tuple(name for name, rule in _TELEMETRY.items()
                          if "number" in schema.json_types(results.RECORD, rule))


def _nulled(record: dict, path: list[str]) -> dict:
    """`record` with the field at `path` set to null (its objects copied, not changed)."""
    name, *rest = path
    return {**record, name: _nulled(record[name], rest) if rest else None}


def checked(record: dict) -> tuple[dict, list[str], str | None]:
    """`record` against the whole record schema (results.RECORD), ranges included: the record
    with each failing field marked droppable set to null, a message naming each one dropped,
    and why the report cannot use the record (None: it can).

    A droppable field describes rather than measures: a bad one never costs the record or its
    timing. The messages name origin (file:line), field, value and what the report needs."""
    full = results.checker(ranges=True)
    if full.valid(record):
        return record, [], None
    original, dropped, why, where = record, [], None, record.get("_origin", "a record")
    for error in full.errors(record):
        problem = schema.explain(results.RECORD, error)
        path = list(itertools.takewhile(lambda step: isinstance(step, str), problem.path))
        field = (f"{record['benchmark']} field {problem.field!r} is "
                 f"{schema.shown(schema.value_at(original, problem.path))}")
        wants = f"the report needs {problem.wants}"
        if problem.droppable:
            record = _nulled(record, path)
            dropped.append(f"{where}: {field}, dropped; {wants}")
        elif why is None:
            why = f"{field}; {wants}"
    return record, dropped, why


def usable(records: list[dict], problems: list[str] | None = None) -> list[dict]:
    """The records the report can use (`checked`), each bad description dropped. The
    first results.NAMED_UNREADABLE records skipped or fields dropped get a warning each, naming
    origin (file:line) and field, the rest one warning with the total, as unreadable lines do;
    each warning is also added to `problems`."""
    kept, said = [], []
    for record in records:
        record, dropped, why = checked(record)
        said += dropped
        if why:
            said.append(f"{record.get('_origin', 'a record')}: skipped: {why}")
            continue
        kept.append(record)
    named = results.NAMED_UNREADABLE
    for message in said[:named]:
        results.skipped(message, problems)
    if len(said) > named:
        results.skipped(f"{len(said)} records or fields in all left out by the report's checks: "
                        f"{len(said) - named} more after the {named} named", problems)
    return kept
