"""The package's two tiers, as docs/architecture.md declares them: the chapter tier never imports
the tools tier (GPU telemetry alone, inside a function, where a GPU is measured), and no
import, at module level or inside a function, closes a circle."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "gpubench"
ARCHITECTURE = REPO / "docs" / "architecture.md"
# The one import the chapter tier makes of the tools tier: NVML telemetry, inside a function,
# only where a GPU is measured (a CPU run loads none of it; test_notebooks checks that).
LAZY_EXCEPTION = "gpubench.telemetry"


def declared_tiers(text: str | None = None) -> dict[str, list[str]]:
    """{tier: [module or subpackage]} from the tier table of docs/architecture.md: the rows
    "| chapter | `name`, ... |" and "| tools | ... |", names as gpubench.NAME."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    tiers = {}
    for tier in ("chapter", "tools"):
        row = re.search(rf"^\| {tier} \| (.*?) \|", text, re.M)
        assert row, f"docs/architecture.md lacks the row '| {tier} | ... |' of the tier table"
        names = re.findall(r"`([\w/]+)`", row[1])
        tiers[tier] = ["gpubench" if n == "__init__" else "gpubench." + n.strip("/").replace("/", ".")
                       for n in names]
    return tiers


def tier_of(module: str, tiers: dict[str, list[str]]) -> str | None:
    """A module's tier: its own entry, else its subpackage's; None when neither is listed."""
    listed = {m: tier for tier, modules in tiers.items() for m in modules}
    while module:
        if module in listed:
            return listed[module]
        module = module.rpartition(".")[0]
    return None


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path, root: Path, known: set[str]) -> dict[str, bool]:
    """{package module imported anywhere in the file at `path`: whether only inside functions}."""
    module = _module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, path.name == "__init__.py", node)
            # `from gpubench import x`: the submodule x when there is one, else the package
            names = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source
                     for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import gpubench.x.y` -> the longest known
                name = name.rpartition(".")[0]
            if name and name != module:
                found[name] = found.get(name, True) and id(node) in in_function
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, bool]]:
    """module -> {the package modules it imports: whether only inside functions}."""
    files, root = sorted(package.rglob("*.py")), package.parent
    known = {_module_name(f, root) for f in files}
    return {_module_name(f, root): imports_of(f, root, known) for f in files}


def find_cycle(graph: dict) -> list[str] | None:
    """One import circle in `graph` (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def crossings(graph: dict[str, dict[str, bool]], tiers: dict[str, list[str]]) -> list[str]:
    """Each import of the tools tier by the chapter tier (but telemetry inside a function)."""
    return [f"{m} -> {t}" for m, targets in sorted(graph.items()) for t, lazy in sorted(targets.items())
            if tier_of(m, tiers) == "chapter" and tier_of(t, tiers) == "tools"
            and not (lazy and tier_of(t, {"x": [LAZY_EXCEPTION]}) == "x")]


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_every_module_has_a_tier_in_the_architecture_page(graph):
    tiers = declared_tiers()
    unlisted = sorted(m for m in graph if tier_of(m, tiers) is None)
    assert unlisted == [], "add the new module (or its subpackage) to docs/architecture.md"
    gone = sorted(m for ms in tiers.values() for m in ms
                  if not any(g == m or g.startswith(m + ".") for g in graph))
    assert gone == [], "docs/architecture.md names a module that is gone"


def test_the_chapter_tier_never_imports_the_tools_tier(graph):
    assert crossings(graph, declared_tiers()) == []


def test_no_import_cycle(graph):
    assert find_cycle(graph) is None


def test_the_checks_find_a_planted_cycle_and_a_crossing():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(planted) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    tiers = declared_tiers("| chapter | `params`, `timing` |\n| tools | `report/`, `telemetry/` |\n")
    planted = {"gpubench.params": {"gpubench.report.matmul": True},
               "gpubench.timing": {"gpubench.telemetry": True, "gpubench.report": False},
               "gpubench.report": {"gpubench.params": False}}
    assert crossings(planted, tiers) == ["gpubench.params -> gpubench.report.matmul",
                                         "gpubench.timing -> gpubench.report"]
    planted["gpubench.timing"]["gpubench.telemetry"] = False  # at module level: a crossing
    assert "gpubench.timing -> gpubench.telemetry" in crossings(planted, tiers)


def test_the_graph_sees_every_form_of_import(tmp_path):
    pkg = tmp_path / "gpubench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("from .. import top\n")
    (pkg / "top.py").write_text("import gpubench.other\n\ndef f():\n    from gpubench import sub\n")
    (pkg / "other.py").write_text("from gpubench.sub.leaf import name\nfrom gpubench import x\n")
    found = import_graph(pkg)
    assert found == {"gpubench": {}, "gpubench.sub": {"gpubench.sub.leaf": False},
                     "gpubench.sub.leaf": {"gpubench.top": False},
                     "gpubench.top": {"gpubench.other": False, "gpubench.sub": True},
                     "gpubench.other": {"gpubench.sub.leaf": False, "gpubench": False}}
    cycle = find_cycle(found)
    assert cycle and cycle[0] == cycle[-1]
    assert all(b in found[a] for a, b in zip(cycle, cycle[1:], strict=False))
    del found["gpubench.top"]  # `top` gone: no circle left
    assert find_cycle(found) is None


def test_params_checks_load_nothing_but_the_stdlib():
    script = ("import sys; before = set(sys.modules)\n"
              "from gpubench import params\n"
              "params.check_params('Speed_Factors', {'devices': 'gpu,cpu', 'epochs': 3})\n"
              "new = {m.partition('.')[0] for m in set(sys.modules) - before}\n"
              "sys.exit(sorted(new - {'gpubench'} - set(sys.stdlib_module_names)) or 0)")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
