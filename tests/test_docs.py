"""The documentation keeps up with the code: every record field documented, a short README,
live relative links, real make targets, and no issue-tracker numbers in the project's text."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

from gpubench import results, telemetry

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RECORDS = REPO / "docs" / "records.md"
NOTEBOOKS_README = REPO / "notebooks" / "README.md"
README_MAX_LINES = 250
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
ISSUE_NUMBER = re.compile(r"\bissues?\s*(?:#|no\.?|number)?\s*\d+", re.IGNORECASE)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _sections(markdown: str) -> dict[str, str]:
    """Each `## ` heading's text -> the lines up to the next one."""
    parts = re.split(r"^## (.*)$", markdown, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _table_names(markdown: str) -> set[str]:
    """The code spans in the first cell of each table row: the names a table documents."""
    names = set()
    for line in markdown.splitlines():
        if line.startswith("|"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([^`]+)`", first))
    return names


def _section(markdown: str, marker: str) -> str:
    """The one `## ` section whose heading contains `marker`."""
    (found,) = [body for heading, body in _sections(markdown).items() if marker in heading]
    return found


def _documented(text: str) -> tuple[set[str], set[str], set[str]]:
    """The field names docs/records.md's tables list: of a record, its environment, telemetry."""
    sections = _sections(text)
    objects = [heading for heading in sections if "`environment`" in heading or "`telemetry`" in heading]
    record = set().union(*(_table_names(body) for heading, body in sections.items()
                           if heading not in objects))
    return record, _table_names(_section(text, "`environment`")), _table_names(
        _section(text, "`telemetry`"))


def _schema_names() -> tuple[set[str], set[str], set[str]]:
    """The field names the record schema declares: of a record, its environment, telemetry."""
    return (set().union(*map(set, results.FIELDS.values())),
            set(results.RECORD["properties"]["environment"]["properties"]),
            set(results.RECORD["$defs"]["telemetry"]["properties"]))


def test_records_page_and_the_record_schema_name_the_same_fields():
    """docs/records.md is tested against gpubench/schemas/record.schema.json both ways."""
    for part, documented, declared in zip(("record", "environment", "telemetry"),
                                          _documented(_text(RECORDS)), _schema_names(), strict=True):
        assert not (missing := sorted(declared - documented)), \
            f"docs/records.md's {part} tables lack {missing}"
        assert not (extra := sorted(documented - declared)), \
            f"docs/records.md's {part} tables name {extra}, which the schema does not declare"
    with telemetry.Monitor("cpu") as monitor:  # what a Monitor writes
        pass
    assert set(monitor.result) == _schema_names()[2]


def test_the_records_page_check_fails_on_a_field_missing_either_way():
    """The check above can fail: a field the page lacks, or one the schema lacks, is found."""
    record, _, _ = _documented(_text(RECORDS))
    assert "no_such_field_xyz" not in record and {"schema", "backend", "size"} <= record
    declared, _, _ = _schema_names()
    assert record - {"size"} != declared and record | {"no_such_field_xyz"} != declared


def test_records_page_documents_the_per_epoch_telemetry_lists():
    """The lists a train record carries, from telemetry.epoch_fields itself."""
    names = set(telemetry.epoch_fields([{}]))
    assert names and not (names - _table_names(_text(RECORDS)))


def test_records_page_check_fails_on_an_undocumented_field():
    """The check above can fail: a field the page does not name is found missing."""
    assert "no_such_field_xyz" not in _table_names(_text(RECORDS))
    assert {"schema", "backend", "energy_joules"} <= _table_names(_text(RECORDS))


def test_readme_is_short():
    lines = len(_text(README).splitlines())
    assert lines <= README_MAX_LINES, \
        f"README.md has {lines} lines; keep it at {README_MAX_LINES} at most and move detail to docs/"


def _doc_pages() -> list[Path]:
    return [README, NOTEBOOKS_README, *sorted((REPO / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = "".join(c for c in heading.strip().lower()
                   if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.*)$", _text(path), flags=re.M)}


def test_slug_matches_github():
    assert _slug("The `telemetry` object") == "the-telemetry-object"
    assert _slug("`scaling` records (Multi_GPU_Scaling, `gpubench scaling`)") == \
        "scaling-records-multi_gpu_scaling-gpubench-scaling"


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_files_that_exist(page):
    broken = []
    for target in LINK.findall(_text(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(REPO)} links to {broken}"


def _quick_start() -> str:
    return _text(README).split("## Quick start", 1)[1].split("\n## ", 1)[0]


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z-]+):", _text(REPO / "Makefile"), re.M))


def test_readme_quick_start_fits_on_one_screen_and_names_real_targets():
    quick = _quick_start()
    assert len(quick.strip().splitlines()) <= 24, "the quick start must fit on one screen"
    named = set(re.findall(r"^make (\w+)", quick, re.M))
    assert named == {"run", "test", "quick"} and named <= _make_targets()


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_pages_name_only_make_targets_that_exist(page):
    named = set(re.findall(r"`make (\w+)", _text(page)))
    assert named <= _make_targets(), f"{page.name} names make targets {named - _make_targets()}"


def test_readme_keeps_the_gpu_facts():
    readme = _text(README)
    for needle in ("conda", "WSL2", "TensorFlow 2.10", "make setup GPU=1"):
        assert needle in readme, needle


def test_strict_nbval_command_uses_the_shipped_sanitize_file_and_this_checkouts_kernels():
    text = _text(NOTEBOOKS_README).replace("\\\n", " ")
    (command,) = re.findall(r"^JUPYTER_PATH=\S+ .*pytest --nbval .*$", text, re.M)
    sanitize = re.search(r"--nbval-sanitize-with (\S+)", command).group(1)
    assert (REPO / sanitize).is_file()
    assert "GPUBENCH_PROFILE=full" in command  # the profile the stored outputs come from


def test_notebooks_readme_lists_every_chapter_in_order():
    chapters = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    order = re.findall(r"^\d+\. \*\*(\w+)\*\*", _text(NOTEBOOKS_README), re.M)
    assert sorted(order) == chapters
    assert order[0] == "performanceTest" and order[-1] == "Compare_CPU_GPU"


def _project_files() -> list[Path]:
    """Tracked files and new ones git does not ignore, as they are in the working tree."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others",
                              "--exclude-standard", "-z"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in sorted(set(out.stdout.decode().split("\0"))) if name]


def test_issue_number_pattern():
    for text in ("issue 9", "Issue #12", "(issue 8, Smaller)", "issues 9 and 10"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("keras-team/keras#20585", "an issue with 3 GPUs", "tissue 4"):
        assert not ISSUE_NUMBER.search(text), text


def test_no_issue_numbers_in_the_projects_text():
    """Issue-tracker numbers mean nothing to a reader: name the subject instead."""
    found = []
    for path in _project_files():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if match := ISSUE_NUMBER.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)!r}")
    assert not found, "issue numbers in the text:\n" + "\n".join(found)
