"""Imports run one way: errors → ir → plan → codegen → operators → compiler → runtime → the top.

Every `import` in onyxia/ counts, at module level or inside a function (a lazy import still
couples the two modules; it only hides the cycle until run time). A module may import its own
layer or the layers below it; the runtime replays plain plans and never sees the IR or the
compiler; and no import cycle exists among onyxia's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import onyxia

# Layers, lowest first. A module belongs to the layer of its longest matching prefix; the bare
# package name "onyxia" (its __init__: re-exports only) matches itself alone.
LAYERS: list[tuple[str, ...]] = [
    ("onyxia.errors", "onyxia.paths"),  # paths: file names from a model folder stay inside it
    ("onyxia.ir", "onyxia.onnx", "onyxia.onnx_checks"),  # the loader builds IR and nothing else
    ("onyxia.plan",),  # the package: steps, select, check, archive, cost (bytes and flops read off a plan)
    ("onyxia.codegen",),
    ("onyxia.operators",),
    ("onyxia.compiler",),
    ("onyxia.runtime",),
    # loading: the load report, compile through the plan cache (plan_cache), load an executor
    ("onyxia", "onyxia.session", "onyxia.session_containers", "onyxia.backend", "onyxia.llm", "onyxia.cli",
     "onyxia.cli_feeds", "onyxia.loading", "onyxia.web", "onyxia.plan_cache"),
]
# Lower modules a layer must still not import: the runtime replays plans, whose value types
# (dims, dtypes) are all it needs of the IR; `onyxia.ir` itself re-exports the graph.
FORBIDDEN = {"onyxia.runtime": ("onyxia.compiler", "onyxia.operators", "onyxia.onnx", "onyxia.ir")}
EXCEPTIONS = {"onyxia.runtime": ("onyxia.ir.dtypes", "onyxia.ir.shapes")}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix if "." not in prefix else _within(module, prefix)
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """{dotted module name: file} for every .py file of the package at `root`."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def import_edges(root: Path, package: str) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, from every import statement in its file."""
    modules = module_names(root, package)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    anchor = module.split(".")[: len(module.split(".")) - node.level + int(is_package)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule when there is one, else pkg itself.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]  # `import onyxia.x.y` of a name inside y
                if target in modules and target != module:
                    edges[module].add(target)
    return edges


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Every layering violation and import cycle, one readable line each."""
    found = []
    for module, targets in sorted(edges.items()):
        own = layer_of(module)
        if own is None:
            found.append(f"{module} is in no layer: add it to LAYERS in tests/unit/test_imports.py")
            continue
        for target in sorted(targets):
            layer = layer_of(target)
            if layer is not None and layer > own:
                found.append(f"{module} (layer {own}) imports {target} (layer {layer}, above it)")
            for scope, banned in FORBIDDEN.items():
                if (_within(module, scope) and target not in EXCEPTIONS.get(scope, ())
                        and any(_within(target, b) for b in banned)):
                    found.append(f"{module} imports {target}: {scope} must not depend on it")
    graph = nx.DiGraph([(m, t) for m, targets in edges.items() for t in targets])
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            cycle = nx.find_cycle(graph.subgraph(component))
            found.append("import cycle: " + " -> ".join([u for u, _ in cycle] + [cycle[0][0]]))
    return found


ONYXIA_ROOT = Path(onyxia.__file__).parent


def test_onyxia_imports_run_one_way_without_cycles():
    edges = import_edges(ONYXIA_ROOT, "onyxia")
    assert len(edges) > 40 and edges["onyxia.compiler.pipeline"]  # the walk found the package
    problems = violations(edges)
    assert not problems, "\n".join(problems)


def test_nothing_under_operators_imports_the_compiler():
    edges = import_edges(ONYXIA_ROOT, "onyxia")
    bad = {(m, t) for m, targets in edges.items() if _within(m, "onyxia.operators")
           for t in targets if _within(t, "onyxia.compiler")}
    assert not bad


# ---- the checker catches what it is meant to catch ------------------------------------------

def _fake_package(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    root = tmp_path / "onyxia"
    for name, source in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    return import_edges(root, "onyxia")


@pytest.mark.parametrize("files, expected", [
    # a lazy (function-level) upward import
    ({"operators/__init__.py": "", "compiler/__init__.py": "",
      "operators/quantized.py": "def f():\n    from onyxia.compiler.pipeline import Pass\n",
      "compiler/pipeline.py": ""},
     "onyxia.operators.quantized (layer 4) imports onyxia.compiler.pipeline (layer 5, above it)"),
    # a cycle inside one layer, through `from package import submodule`
    ({"compiler/__init__.py": "", "compiler/a.py": "from onyxia.compiler import b\n",
      "compiler/b.py": "import onyxia.compiler.a\n"},
     "import cycle: "),
    # a relative import that reaches the compiler from the runtime
    ({"runtime/__init__.py": "", "runtime/executor.py": "from ..compiler.pipeline import CompilerPipeline\n",
      "compiler/__init__.py": "", "compiler/pipeline.py": ""},
     "onyxia.runtime.executor imports onyxia.compiler.pipeline: onyxia.runtime must not depend on it"),
    # the runtime reading the IR graph
    ({"runtime/__init__.py": "", "runtime/session.py": "from onyxia.ir.graph import IrGraph\n",
      "ir/__init__.py": "", "ir/graph.py": ""},
     "onyxia.runtime.session imports onyxia.ir.graph: onyxia.runtime must not depend on it"),
    # a new top-level module nobody placed
    ({"extras.py": ""}, "onyxia.extras is in no layer"),
])
def test_checker_reports_violations(tmp_path, files, expected):
    problems = violations(_fake_package(tmp_path, files))
    assert any(p.startswith(expected) for p in problems), problems


def test_checker_accepts_downward_imports_and_value_types_in_the_runtime(tmp_path):
    files = {"ir/__init__.py": "", "ir/shapes.py": "", "ir/dtypes.py": "",
             "plan.py": "from onyxia.ir.shapes import Dim\n", "runtime/__init__.py": "",
             "runtime/executor.py": "from onyxia.ir import dtypes\nimport onyxia.plan\n"}
    assert violations(_fake_package(tmp_path, files)) == []
