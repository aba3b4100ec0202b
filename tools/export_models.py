"""Copy the chapters' `#@save` model cells into gpubench/models.py: `python tools/export_models.py [--check]`.

Each model is written once, in its chapter (d2l's way). The code below a cell's
`#@save` line goes between the BEGIN/END CHAPTER MODELS markers of
gpubench/models.py, in the order of params.TRAINING_NOTEBOOKS. With --check,
nothing is written and the exit status is 1 when models.py differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from gpubench import params

ROOT = Path(__file__).resolve().parents[1]
MODELS_PY = ROOT / "gpubench" / "models.py"
MARKER = "#@save"
BEGIN, END = "# BEGIN CHAPTER MODELS", "# END CHAPTER MODELS"


def saved_code(notebook: Path) -> str:
    """The code below the `#@save` line of the notebook's one marked cell."""
    found = [c.source.split(MARKER + "\n", 1)[1].strip("\n")
             for c in nbformat.read(notebook, as_version=4).cells
             if c.cell_type == "code" and (MARKER + "\n") in c.source]
    if len(found) != 1:
        raise SystemExit(f"{notebook.name}: expected one cell with a {MARKER} line, found {len(found)}")
    return found[0]


def render(models_py: str, chapters: list[str]) -> str:
    """`models_py` with the chapters' code between its markers."""
    head, sep, rest = models_py.partition(BEGIN)
    marker_line, _, _ = rest.partition("\n")
    _, end, tail = rest.partition("\n" + END)
    if not sep or not end:
        raise SystemExit(f"{MODELS_PY}: the {BEGIN} / {END} markers are missing")
    body = "\n\n\n".join(chapters)
    return f"{head}{BEGIN}{marker_line}\n\n\n{body}\n\n{END}{tail}"


def exported() -> str:
    """What gpubench/models.py should read, given the notebooks."""
    chapters = [saved_code(ROOT / "notebooks" / f"{name}.ipynb") for name in params.TRAINING_NOTEBOOKS]
    return render(MODELS_PY.read_text(encoding="utf-8"), chapters)


def main() -> int:
    """Write models.py from the notebooks, or with --check say whether it is up to date."""
    text = exported()
    if text == MODELS_PY.read_text(encoding="utf-8"):
        print(f"{MODELS_PY.relative_to(ROOT)} is up to date with the chapters")
        return 0
    if "--check" in sys.argv[1:]:
        print(f"{MODELS_PY.relative_to(ROOT)} differs from the chapters' {MARKER} cells: "
              "run `python tools/export_models.py`")
        return 1
    MODELS_PY.write_text(text, encoding="utf-8")
    print(f"wrote {MODELS_PY.relative_to(ROOT)} from the chapters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
