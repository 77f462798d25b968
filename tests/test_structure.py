"""The package's shape: every module short enough to hold one concept, and no import cycle among its modules.

The import graph is read from the source with ``ast``: imports at module level and inside
functions alike, relative ones resolved, ``from package import submodule`` taken as an import
of the submodule. Imports under ``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simsched"
MAX_LINES = 600


def modules(package: Path) -> dict[str, Path]:
    """Every module of a package folder by its dotted name (a package by its own name for its __init__.py)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if "__pycache__" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def extensions(package: Path) -> set[str]:
    """The compiled modules of a package folder by dotted name: each C source's, built or not."""
    found = set()
    for path in [*package.rglob("*.c"), *package.rglob("*.so"), *package.rglob("*.pyd")]:
        parts = path.relative_to(package.parent).parts
        found.add(".".join([*parts[:-1], parts[-1].split(".")[0]]))
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for part in node.body for inner in ast.walk(part))
    return skipped


def _owner(name: str, known: set[str]) -> str | None:
    """The module an imported dotted name lies in, its longest known prefix (None: not the package's)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path) -> nx.DiGraph:
    """The package's modules, an edge from each to every module of the package it imports.

    An edge's ``file`` is the importing module's file, its ``lines`` those that import. A compiled
    module is a node without imports (``from . import _native`` imports it, not its package).
    """
    sources = modules(package)
    known = set(sources) | extensions(package)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in sources.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skipped = _type_checking_only(tree)
        # A relative import counts from the module's own package (a package's __init__ is that package).
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [_owner(alias.name, known) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                if node.level == 0:
                    base = node.module or ""
                elif node.module:
                    base = f"{base}.{node.module}" if base else node.module
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in known else _owner(base, known))
            for target in targets:
                if target is not None and target != name:
                    if not graph.has_edge(name, target):
                        graph.add_edge(name, target, file=str(path.relative_to(package.parent)), lines=[])
                    if node.lineno not in graph.edges[name, target]["lines"]:  # one per statement, not name
                        graph.edges[name, target]["lines"].append(node.lineno)
    return graph


def import_cycles(graph: nx.DiGraph) -> list[str]:
    """One line per group of modules that import each other: its modules, then every import among them.

    Within such a group (a strongly connected component) every one of those imports lies on a
    cycle, so each is one that breaking the cycle may remove.
    """
    lines = []
    for group in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        edges = ", ".join(f"{a} -> {b} ({graph.edges[a, b]['file']}:{', '.join(map(str, sorted(at)))})"
                          for a, b, at in sorted(graph.subgraph(group).edges(data="lines")))
        lines.append(f"{{{', '.join(group)}}}: {edges}")
    return lines


def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
            for path in modules(PACKAGE).values()}
    offenders = [f"{path}: {lines} lines" for path, lines in sorted(long.items()) if lines > MAX_LINES]
    assert not offenders, f"modules over {MAX_LINES} lines (split them by concept):\n" + "\n".join(offenders)


def test_no_import_cycle_among_the_package_modules():
    cycles = import_cycles(import_graph(PACKAGE))
    assert not cycles, "modules that import each other:\n" + "\n".join(cycles)


def test_the_graph_has_the_imports_the_package_makes():
    graph = import_graph(PACKAGE)
    # A module-level relative import, one inside a function, a package's face imported by a submodule,
    # and a compiled module.
    assert graph.has_edge("simsched.engine", "simsched.locality")
    assert graph.has_edge("simsched.cli.report_commands", "simsched.analysis.fidelity")
    assert graph.has_edge("simsched.workloads.sparse", "simsched.workloads")
    assert graph.has_edge("simsched.memory", "simsched._speedups") and not graph.out_degree("simsched._speedups")


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_cycles_through_functions_and_submodule_imports_are_found(tmp_path):
    package = _write(tmp_path, {
        "pkg/__init__.py": "from .e import y\n",
        "pkg/e.py": "from . import _fast\ny = 1\n",                   # a compiled module, not the package
        "pkg/_fast.c": "",
        "pkg/a.py": "from . import b\n",                              # from package import submodule
        "pkg/sub/__init__.py": "",
        "pkg/b.py": "def f():\n    from .sub.c import g\n\n\ndef h():\n    from .sub import c\n",  # functions
        "pkg/sub/c.py": "import pkg.a\nfrom ..d import x\n",          # absolute, and two levels up
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import c\nx = 1\n",
    })
    graph = import_graph(package)
    assert set(graph.edges) == {("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"), ("pkg.sub.c", "pkg.a"),
                                ("pkg.sub.c", "pkg.d"), ("pkg", "pkg.e"), ("pkg.e", "pkg._fast")}
    cycles = import_cycles(graph)
    assert cycles == ["{pkg.a, pkg.b, pkg.sub.c}: pkg.a -> pkg.b (pkg/a.py:1), "
                      "pkg.b -> pkg.sub.c (pkg/b.py:2, 6), pkg.sub.c -> pkg.a (pkg/sub/c.py:1)"]
