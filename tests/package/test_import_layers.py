"""The layers of ``src/runnertrace``, checked statically from every module's imports.

From the bottom up: ``_internal``; ``core`` (the contract); ``runners`` and
``tracing``, side by side and blind to each other; ``exporters`` (the
backends), which see tracing and ``store`` (the span store, which sees tracing) but no
runner; ``report``; ``ui``; the tools
(``cli``, ``testing``); and the package root, a facade over them. A module may
import its own layer and those :data:`LAYERS` lists for it, with two exceptions:

* ``core/runtime.py`` reaches ``tracing`` lazily: it reads the configuration
  and wraps a registered agent's runner when ``trace.enabled``. Those imports
  must sit in a function body or under ``if TYPE_CHECKING:``.

The version lives at the bottom (``_internal/version.py``): no module reaches up
to the package face for it.

Every import counts, lazy (in a function) and type-only ones included, for the
layers and for the cycles: no import cycle may cross a layer.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent.parent / "src"
ROOT = "runnertrace"

_BASE = frozenset({"_internal", "core"})
LAYERS: dict[str, frozenset[str]] = {
    "_internal": frozenset(),
    "core": frozenset({"_internal"}),
    "runners": _BASE,
    "tracing": _BASE,
    "store": _BASE | {"tracing"},
    "exporters": _BASE | {"tracing", "store"},
    "report": _BASE | {"tracing", "store", "exporters"},
    "ui": _BASE | {"tracing", "store", "exporters", "report"},
    "serve": _BASE | {"tracing"},
    "cli": _BASE | {"tracing", "store", "exporters", "report", "ui", "runners", "serve"},
    "testing": _BASE | {"tracing", "store", "exporters"},
    ROOT: _BASE
    | {"tracing", "store", "exporters", "report", "ui", "runners", "serve", "cli", "testing"},
}
"""Each top-level part of the package -> the parts it may import (besides itself)."""

LAZY_EXCEPTIONS: dict[str, str] = {"runnertrace.core.runtime": "tracing"}
"""Module -> the layer above it that it may reach, lazily or for types only."""


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    lazy: bool
    """Inside a function body: runs when called, not at import."""
    type_only: bool
    """Under ``if TYPE_CHECKING:``: never runs."""
    names: tuple[str, ...] = ()


def module_names(src: Path) -> dict[str, Path]:
    """Every module under ``src/runnertrace``, by dotted name."""
    modules: dict[str, Path] = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, lazy: bool, type_only: bool) -> Iterator[tuple[ast.AST, bool, bool]]:
    for child in ast.iter_child_nodes(node):
        yield child, lazy, type_only
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, True, type_only)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield statement, lazy, True
                yield from _walk(statement, lazy, True)
            for statement in child.orelse:
                yield statement, lazy, type_only
                yield from _walk(statement, lazy, type_only)
        else:
            yield from _walk(child, lazy, type_only)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """The imports of our own modules in one file, each resolved to the module it loads."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    for node, lazy, type_only in _walk(tree, False, False):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    found.append(
                        Import(name, _owner(alias.name, modules), node.lineno, lazy, type_only)
                    )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] != ROOT:
                continue
            names = tuple(a.name for a in node.names)
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            targets = submodules or [_owner(base, modules)]
            if submodules and len(submodules) < len(names):
                targets.append(_owner(base, modules))  # some names are the package's own
            found.extend(
                Import(name, target, node.lineno, lazy, type_only, names) for target in targets
            )
    return found


def _owner(dotted: str, modules: dict[str, Path]) -> str:
    """The module that defines ``dotted``: itself, or its nearest enclosing module."""
    while dotted not in modules and "." in dotted:
        dotted = dotted.rpartition(".")[0]
    return dotted


def layer_of(module: str) -> str:
    return ROOT if module == ROOT else module.split(".")[1]


def all_imports(src: Path) -> list[Import]:
    """Every import between our modules."""
    modules = module_names(src)
    return [found for name, path in modules.items() for found in imports_of(name, path, modules)]


def violations(src: Path) -> list[str]:
    """Imports that reach a layer above, or a layer beside, their own."""
    problems: list[str] = []
    for edge in all_imports(src):
        here, there = layer_of(edge.importer), layer_of(edge.target)
        if here == there or there in LAYERS[here]:
            continue
        if LAZY_EXCEPTIONS.get(edge.importer) == there and (edge.lazy or edge.type_only):
            continue
        kind = "type-only" if edge.type_only else "lazy" if edge.lazy else "import-time"
        problems.append(
            f"{edge.importer}:{edge.line} imports {edge.target} ({kind}): "
            f"{here} may import only {', '.join(sorted(LAYERS[here])) or 'nothing of ours'}"
        )
    return problems


def _graph(src: Path, *, through_packages: bool = True) -> dict[str, set[str]]:
    """Module -> the modules loading it loads, the one allowed upward reach left out.

    Importing ``a.b.c`` first runs the ``__init__`` of ``a.b`` (and of ``a``), so
    those packages count as imported too; the root is left out, as everything
    imports it and it imports nothing at import time.
    """
    graph: dict[str, set[str]] = {name: set() for name in module_names(src)}
    for edge in all_imports(src):
        if LAZY_EXCEPTIONS.get(edge.importer) == layer_of(edge.target):
            continue
        target = edge.target
        if not through_packages:  # the modules named, not the package faces loaded on the way
            if target != edge.importer:
                graph[edge.importer].add(target)
            continue
        while target != ROOT:
            if target != edge.importer:
                graph[edge.importer].add(target)
            target = target.rpartition(".")[0]
    return graph


def cycles(src: Path, *, through_packages: bool = True) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively).

    ``through_packages=False`` follows only the imports written in the modules, not
    the package ``__init__`` each one loads on the way: the circles between modules.
    """
    graph = _graph(src, through_packages=through_packages)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def cycles_across_layers(src: Path) -> list[list[str]]:
    return [c for c in cycles(src) if len({layer_of(m) for m in c}) > 1]


# -- the package as it is ---------------------------------------------------------------------
def test_every_import_stays_in_its_layer_or_below() -> None:
    problems = violations(SRC)
    assert not problems, "imports that cross the layers:\n  " + "\n  ".join(problems)


def test_no_import_cycle_crosses_a_layer() -> None:
    crossing = cycles_across_layers(SRC)
    assert not crossing, "import cycles across layers:\n  " + "\n  ".join(
        " <-> ".join(c) for c in crossing
    )


def test_core_reaches_tracing_only_from_the_runtime_and_never_at_import() -> None:
    reach = [
        (e.importer, e.target, e.lazy or e.type_only)
        for e in all_imports(SRC)
        if layer_of(e.importer) == "core" and layer_of(e.target) == "tracing"
    ]
    assert {importer for importer, _, _ in reach} == {"runnertrace.core.runtime"}
    assert all(deferred for _, _, deferred in reach), reach
    # The wrapping for trace.enabled and the configuration it reads, nothing more.
    assert {target for _, target, _ in reach} == {
        "runnertrace.tracing",
        "runnertrace.tracing.config",
    }


def test_every_module_is_placed_in_a_layer() -> None:
    unplaced = sorted({layer_of(m) for m in module_names(SRC)} - set(LAYERS))
    assert not unplaced, f"place these in LAYERS: {unplaced}"


# -- the checker catches what it must ---------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = tmp_path / ROOT / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    for directory in [tmp_path / ROOT, *(tmp_path / ROOT).rglob("*")]:
        if directory.is_dir() and not (directory / "__init__.py").exists():
            (directory / "__init__.py").write_text("", encoding="utf-8")
    return tmp_path


def test_the_checker_reports_a_reach_up_sideways_or_into_core_at_import(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "exporters/otlp.py": "from runnertrace.runners.langgraph import Graph\n",
            "runners/langgraph.py": "def f():\n    from runnertrace.tracing import state\n",
            "tracing/state.py": "from runnertrace.runners import langgraph\n",
            "core/events.py": "from runnertrace.tracing.config import TraceConfig\n",
            "core/runtime.py": (
                "from runnertrace.tracing.config import Settings\n"
                "def wrap():\n    from runnertrace.tracing import TracingRunner\n"
            ),
            "exporters/console.py": "from runnertrace.cli import render\n",
            "cli.py": "",
        },
    )
    reported = {line.split(" imports ")[0] for line in violations(src)}
    assert reported == {
        "runnertrace.exporters.otlp:1",
        "runnertrace.runners.langgraph:2",
        "runnertrace.tracing.state:1",
        "runnertrace.core.events:1",
        "runnertrace.core.runtime:1",  # import-time; its lazy import on line 3 is the allowed one
        "runnertrace.exporters.console:1",
    }


def test_the_checker_finds_a_cycle_across_layers_but_not_within_one(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "core/config.py": "from runnertrace.core.backends import names\n",
            "core/backends.py": (
                "from runnertrace.core.config import ConfigError\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from runnertrace.tracing.backend import Backend\n"
            ),
            "tracing/backend.py": "from runnertrace.core.config import TraceConfig\n",
            "tracing/a.py": "from runnertrace.tracing import b\n",
            "tracing/b.py": "def f():\n    from runnertrace.tracing import a\n",
        },
    )
    assert cycles_across_layers(src) == [
        ["runnertrace.core.backends", "runnertrace.core.config", "runnertrace.tracing.backend"]
    ]
    assert ["runnertrace.tracing.a", "runnertrace.tracing.b"] in cycles(src)


def test_no_two_tracing_modules_import_each_other_in_a_circle() -> None:
    """The configuration, the backend registry, the backend base, export and metrics
    used to import each other in a circle; each now sits below the ones that read it."""
    circles = [c for c in cycles(SRC, through_packages=False) if layer_of(c[0]) == "tracing"]
    assert circles == []


def test_the_checker_finds_a_circle_between_modules_of_one_layer(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "tracing/config.py": "def f():\n    from runnertrace.tracing import backend\n",
            "tracing/backend.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from runnertrace.tracing.config import TraceConfig\n"
            ),
        },
    )
    assert cycles(src, through_packages=False) == [
        ["runnertrace.tracing.backend", "runnertrace.tracing.config"]
    ]
