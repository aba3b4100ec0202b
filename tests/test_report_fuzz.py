"""The report fuzzed as the fault-injection campaign did: records with mutated types, nulls,
1e308, NaN, infinities, -0 and deep nesting, and truncated, binary and deeply nested lines
between them. Whatever the reader and the report are given, they never raise, and no cell of
report.md says "inf", "nan", "None" or "-0"."""

from __future__ import annotations

import json
import re
import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpubench import report
from test_report import _fuzz_base, _mutated, _paths

NAN, INF = float("nan"), float("inf")


def _nested(depth: int) -> list:
    """A list nested `depth` deep: [[[...]]]."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# What a damaged or hand-edited file can hold in place of a field's value.
VALUES = st.one_of(
    st.sampled_from([None, NAN, INF, -INF, 1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0,
                     0, -1, 10**30, 2**63, "x", "", "inf", "NaN", True, False, [], {}, [None],
                     [NAN], [-0.0], [1e308, -1.0], {"a": None}, _nested(60), "DELETE"]),
    st.sampled_from([None, -0.0, 1e308, 5e-324]),  # the values that reached readers before
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)
# Whole lines that are not records: cut off, binary, nested past any parser's depth.
JUNK_LINES = st.one_of(
    st.binary(min_size=1, max_size=64).map(lambda b: b.replace(b"\n", b" ")),
    st.just(b"[" * 100_000), st.just(b'{"schema": 3, "benchmark": "matmul", "size": 1'),
    st.just(b"null"), st.just(b"\xef\xbb\xbf{}"),
)

# A word a reader must never see in a cell, and "-0" as a number ("-0", "-0.0 s", "-0%").
FORBIDDEN = re.compile(r"(?i:\b(?:inf|infinity|nan)\b)|\bNone\b|(?<![\w.])-0(?:\.0*)?(?![\d.])")


def _cells(text: str) -> list[str]:
    """Every cell of every Markdown table in `text`."""
    return [cell.strip() for line in text.splitlines() if line.startswith("|")
            for cell in line.strip().strip("|").split(" | ")]


def _lines(records: list[dict], damage: list[tuple[int, bytes, bool]]) -> bytes:
    """results.jsonl's bytes: each record as JSON (NaN and Infinity as Python writes them), with
    the junk of `damage` (position, line, whether it replaces the record there) put in."""
    lines = [json.dumps(r).encode() for r in records]
    for position, junk, replace in damage:
        index = position % (len(lines) + 1)
        if replace and index < len(lines):
            lines[index] = lines[index][: len(junk) % max(1, len(lines[index]))] or junk
        else:
            lines.insert(index, junk)
    return b"\n".join(lines) + b"\n"


def test_no_mutation_or_junk_line_gets_inf_nan_none_or_minus_zero_into_a_cell():
    base = _fuzz_base()
    clean, _ = _compose(_lines(base, []))
    assert not [c for c in _cells(clean) if FORBIDDEN.search(c)]

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def one(data):
        records = list(base)
        for _ in range(data.draw(st.integers(1, 6), label="mutations")):
            index = data.draw(st.integers(0, len(records) - 1), label="record")
            path = data.draw(st.sampled_from(_paths(base[index])), label="field")
            value = data.draw(VALUES, label="value")
            try:
                records[index] = _mutated(records[index], path, value)
            except (KeyError, TypeError):  # its object was mutated away by an earlier draw
                pass
        damage = data.draw(st.lists(st.tuples(st.integers(0, 50), JUNK_LINES, st.booleans()),
                                    max_size=3), label="junk lines")
        text, _ = _compose(_lines(records, damage))
        assert text.startswith("# gpubench report")
        bad = [c for c in _cells(text) if FORBIDDEN.search(c)]
        assert not bad, bad

    one()


def _compose(data: bytes) -> tuple[str, dict]:
    """report.md's text (no charts) for a run directory whose results.jsonl is `data`."""
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (Path(folder) / "results.jsonl").write_bytes(data)
        return report.compose([folder], draw=False)


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.floats(allow_nan=True, allow_infinity=True) | st.none() | st.just(-0.0),
       st.floats(allow_infinity=True, min_value=0),
       st.sampled_from([".0f", ".1f", ".2f", ",.0f", ",.1f", ".0%", ".1%", "g", ".3g", ".4f"]))
def test_the_number_helpers_never_print_inf_nan_none_or_minus_zero(value, high, spec):
    from gpubench.fmt import fmt, fmt_range, fmt_ratio, md_table

    shown = [fmt(value, spec), md_table(["a"], [[value]]).splitlines()[-1], fmt_ratio(value)]
    if value is not None and value >= 0 and high >= value:
        shown.append(fmt_range(value, high))
    assert not [text for text in shown if FORBIDDEN.search(text)], shown
    assert all(len(text) < 40 for text in shown), shown  # 1e308 is no 309-digit number


# What run.json can hold after damage or a hand edit: junk, nesting past any parser's depth, jobs
# with mutated fields, a symlink loop, a symlink to a folder.
JOB = {"env": "cpu", "notebook": "Mnist_CNN", "status": "failed", "error": "boom", "attempt": 1}
RUN_JSON = st.one_of(
    st.binary(max_size=64),
    st.integers(1, 3000).map(lambda depth: ('{"jobs": [{"env": "cpu", "notebook": "x", '
                                            '"status": "ok", "extra": ' + "[" * depth
                                            + "]" * depth + "}]}").encode()),
    st.lists(st.fixed_dictionaries({}, optional={k: VALUES for k in JOB}).map(
        lambda mutated: {**JOB, **{k: v for k, v in mutated.items() if v != "DELETE"}}),
        max_size=4).map(lambda jobs: json.dumps({"jobs": jobs}).encode()),
    st.sampled_from([b"LOOP", b"DIR", b"null", b'{"jobs": null}', b'{"jobs": {}}', b"[]"]),
)


def test_no_damaged_run_json_costs_the_report_or_reaches_a_cell():
    base = _fuzz_base()

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(RUN_JSON)
    def one(content):
        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = Path(folder)
            (run / "results.jsonl").write_bytes(_lines(base, []))
            if content == b"LOOP":
                (run / "run.json").symlink_to(run / "run.json")
            elif content == b"DIR":
                (run / "run.json").mkdir()
            else:
                (run / "run.json").write_bytes(content)
            text, _ = report.compose([folder], draw=False)
        assert text.startswith("# gpubench report") and "## Training" in text
        bad = [c for c in _cells(text) if FORBIDDEN.search(c)]
        assert not bad, bad

    one()
