"""The package's layers: every import goes to the module's own layer or lower, and no import,
at module level or inside a function, closes a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "gpubench"

# Lowest first. A module may import its own layer and the layers below it, never above.
LAYERS = {
    # Stdlib only, no gpubench import: parameters and their rules (the runner checks -p values
    # with them before any kernel starts), the machine's facts (nvidia-smi, CPU, RAM), the
    # datasheet peaks. The package itself holds __version__ and imports submodules by name
    # on first use (importlib, not counted here).
    "ground": ["gpubench", "gpubench.params", "gpubench.machine", "gpubench.peaks"],
    # Everything that differs by backend; the only modules that load TensorFlow, JAX or PyTorch.
    "seam": ["gpubench.backends", "gpubench.backends.tensorflow", "gpubench.backends.jax",
             "gpubench.backends.torch", "gpubench.backends.tensorflow_feeds",
             "gpubench.backends.jax_feeds", "gpubench.backends.torch_feeds", "gpubench.backends.tf_data",
             "gpubench.backends.tensorflow_parallel", "gpubench.backends.jax_parallel"],
    # Clocks, telemetry (and the one-line summary in words that training prints), datasets,
    # the book's models, device names and placement.
    "building blocks": ["gpubench.timing", "gpubench.telemetry",
                        "gpubench.data", "gpubench.models", "gpubench.devices"],
    # The record schema and store, the queries over records, and the run directory's lock and
    # atomic writes. Below the measurements, which write records (results.make_record) and
    # hold the run-directory lock (scaling's workers).
    "records": ["gpubench.schema", "gpubench.results", "gpubench.records", "gpubench.rundir"],
    # The chapters' engines, and what a chapter does first (`notebook.start`). No measurement
    # imports `notebook`: its rules live in `params` (asserted below).
    "measurements": ["gpubench.matmul", "gpubench.training", "gpubench.factors",
                     "gpubench.scaling", "gpubench.notebook"],
    # The report's tables, charts and text.
    "presentation": ["gpubench.report"],
    # The CLI, `gpubench run` across env kernels, creating envs and kernels.
    "orchestration": ["gpubench.__main__", "gpubench.cli", "gpubench.runner", "gpubench.envs"],
}
LISTED = {module: level for level, modules in enumerate(LAYERS.values()) for module in modules}


def layer_of(module: str) -> int | None:
    """A module's layer: its own entry, else its subpackage's (gpubench.report.matmul is in
    gpubench.report's layer); None when neither is listed."""
    while module and module != "gpubench":
        if module in LISTED:
            return LISTED[module]
        module = module.rpartition(".")[0]
    return LISTED.get(module)


class _Levels(dict):
    def __missing__(self, module: str) -> int:
        level = layer_of(module)
        if level is None:
            raise KeyError(module)
        return level


LEVEL = _Levels(LISTED)


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


def imports_of(path: Path, root: Path, known: set[str]) -> set[str]:
    """The package modules that the file at `path` imports anywhere in it (functions too)."""
    module = _module_name(path, root)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
                found.add(name)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package modules it imports."""
    files, root = sorted(package.rglob("*.py")), package.parent
    known = {_module_name(f, root) for f in files}
    return {_module_name(f, root): imports_of(f, root, known) for f in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
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


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a higher layer, as "module (layer) -> module (layer)"."""
    names = list(LAYERS)
    return [f"{m} ({names[LEVEL[m]]}) -> {t} ({names[LEVEL[t]]})"
            for m, targets in sorted(graph.items()) for t in sorted(targets)
            if LEVEL[t] > LEVEL[m]]


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_every_module_has_a_layer(graph):
    unlisted = sorted(m for m in graph if layer_of(m) is None)
    assert unlisted == [], "add the new module (or its subpackage) to LAYERS and architecture.md"
    assert sorted(set(LISTED) - set(graph)) == [], "LAYERS names a module that is gone"


def test_imports_go_downward_only(graph):
    assert upward_imports(graph) == []


def test_no_import_cycle(graph):
    assert find_cycle(graph) is None


def test_measurements_do_not_import_the_notebook_layer(graph):
    level = list(LAYERS).index("measurements")
    measurements = {m for m in graph if layer_of(m) == level} - {"gpubench.notebook"}
    assert "gpubench.matmul" in measurements
    assert {m: sorted(graph[m] & {"gpubench.notebook"}) for m in measurements} == \
        {m: [] for m in measurements}


def test_ground_imports_nothing_of_the_package(graph):
    assert {m: sorted(graph[m]) for m in LAYERS["ground"]} == {m: [] for m in LAYERS["ground"]}


def test_only_the_seam_imports_tensorflow_jax_or_torch():
    frameworks = {"tensorflow", "jax", "jaxlib", "torch"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "backends":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            found += [f"{path.name}: {n}" for n in names if n.partition(".")[0] in frameworks]
    assert found == []


def test_the_checks_find_a_planted_cycle_and_an_upward_import():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(planted) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    upward = {"gpubench.params": {"gpubench.report"}, "gpubench.report": set()}
    assert upward_imports(upward) == ["gpubench.params (ground) -> gpubench.report (presentation)"]


def test_the_graph_sees_every_form_of_import(tmp_path):
    pkg = tmp_path / "gpubench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("from .. import top\n")
    (pkg / "top.py").write_text("import gpubench.other\n\ndef f():\n    from gpubench import sub\n")
    (pkg / "other.py").write_text("from gpubench.sub.leaf import name\nfrom gpubench import x\n")
    found = import_graph(pkg)
    assert found == {"gpubench": set(), "gpubench.sub": {"gpubench.sub.leaf"},
                     "gpubench.sub.leaf": {"gpubench.top"},
                     "gpubench.top": {"gpubench.other", "gpubench.sub"},
                     "gpubench.other": {"gpubench.sub.leaf", "gpubench"}}
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
