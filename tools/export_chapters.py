"""Copy the chapters' `#@save` cells into the library: `python tools/export_chapters.py [--check]`.

Code that a chapter shows is written once, in the chapter (d2l's way), and exported. A module
of gpubench/ says which chapters it holds with marker lines:

    # BEGIN CHAPTER CODE from Mnist_MLP_h1000, Mnist_CNN, Keras_Cifar_CNN
    ...
    # END CHAPTER CODE

The code below the `#@save` line of every marked cell of those notebooks (in the order named,
each notebook's cells in order) goes between the markers; a cell marked `#@save NAME` goes to
gpubench/NAME.py alone. With --check nothing is written and the exit status is 1 when a module
differs from its chapters.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpubench"
NOTEBOOKS = ROOT / "notebooks"
MARKER = "#@save"
_SAVE = re.compile(rf"^{MARKER}(?: (?P<module>\w+))?\n", re.MULTILINE)
BEGIN, END = "# BEGIN CHAPTER CODE from ", "# END CHAPTER CODE"
_BLOCK = re.compile(rf"^{re.escape(BEGIN)}(?P<names>[^\n]*)\n(?P<body>.*?)^{re.escape(END)}$",
                    re.MULTILINE | re.DOTALL)


def saved_cells(notebook: Path, module: str | None = None) -> list[str]:
    """The code below the `#@save` line of each of the notebook's marked cells; with `module`,
    of those marked for it (`#@save` alone, or `#@save MODULE`)."""
    found = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        marker = _SAVE.search(cell.source) if cell.cell_type == "code" else None
        if marker and (module is None or marker["module"] in (None, module)):
            found.append(cell.source[marker.end():].strip("\n"))
    if not found:
        raise SystemExit(f"{notebook.name}: no cell has a {MARKER} line" + (
            f" for {module}" if module else ""))
    return found


def saved_code(notebook: Path, module: str | None = None) -> str:
    """A notebook's `#@save` code (for `module`, as in `saved_cells`), cells apart by two blank
    lines."""
    return "\n\n\n".join(saved_cells(notebook, module))


def chapters_of(module_text: str) -> list[list[str]]:
    """The notebook names of each marked block of a module, in order."""
    return [[n.strip() for n in m["names"].split(",") if n.strip()]
            for m in _BLOCK.finditer(module_text)]


def render(module_text: str, notebooks: Path = NOTEBOOKS, module: str | None = None) -> str:
    """`module_text` (of gpubench/`module`.py) with its chapters' code between each pair of
    markers."""
    def block(match: re.Match) -> str:
        names = [n.strip() for n in match["names"].split(",") if n.strip()]
        body = "\n\n\n".join(saved_code(notebooks / f"{name}.ipynb", module) for name in names)
        return f"{BEGIN}{match['names']}\n\n\n{body}\n\n\n{END}"
    return _BLOCK.sub(block, module_text)


def exporting_modules() -> list[Path]:
    """The package's modules that hold chapter code."""
    return sorted(p for p in PACKAGE.rglob("*.py") if BEGIN in p.read_text(encoding="utf-8"))


def stale() -> list[Path]:
    """The modules whose chapter code differs from the chapters."""
    return [p for p in exporting_modules() if (text := p.read_text(encoding="utf-8"))
            != render(text, module=p.stem)]


def main() -> int:
    """Write each marked module from its chapters, or with --check say which are stale."""
    for path in stale():
        name = path.relative_to(ROOT)
        if "--check" in sys.argv[1:]:
            print(f"{name} differs from its chapters' {MARKER} cells: "
                  "run `python tools/export_chapters.py`")
            continue
        path.write_text(render(path.read_text(encoding="utf-8"), module=path.stem),
                        encoding="utf-8")
        print(f"wrote {name} from its chapters")
    if "--check" in sys.argv[1:] and stale():
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
