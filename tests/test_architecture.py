"""The house stays acyclic: no import cycle in p2pem, function-level and type-checking imports included.

import-linter's layers contract (pyproject.toml) fixes the order of the rooms; this test counts
cycles from the source text alone, so an import hidden inside a function cannot close a loop
that the contract's order would not show.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import p2pem

PACKAGE = Path(p2pem.__file__).parent


def import_graph(root: Path) -> nx.DiGraph:
    """Module -> imported module, over every ``import`` statement of every module under ``root``.

    Module names are dotted from ``root``'s name; ``from a.b import c`` counts as importing
    ``a.b`` and, when it is a module, ``a.b.c``; relative imports are resolved; imports of
    other packages are left out.
    """
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                found = resolve(target)
                if found is not None and found != name:
                    graph.add_edge(name, found)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return [c for c in nx.simple_cycles(graph) if len(c) > 1]


def test_a_cycle_closed_by_a_function_level_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from toy.sub import high  # hidden from a module-level scan\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "high.py").write_text("from ..low import f\n")
    (pkg / "leaf.py").write_text("import numpy\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy import low\n")
    graph = import_graph(pkg)
    assert cycles(graph) == [["toy.low", "toy.sub.high"]] or cycles(graph) == [["toy.sub.high", "toy.low"]]
    assert graph.has_edge("toy.leaf", "toy.low")  # type-checking imports count too
    assert not any(n.startswith("numpy") for n in graph)


def test_p2pem_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert graph.number_of_nodes() > 50 and graph.number_of_edges() > 200  # the scan saw the package
    found = sorted(cycles(graph), key=len)
    assert not found, f"{len(found)} import cycle(s) in p2pem, e.g. {' -> '.join(found[0])}"
