"""The public surface, pinned: the ``__all__`` of each public module, against a snapshot.

The rule is the one ``runnertrace``'s docstring states: the modules listed
there (and each framework's runner module) are public, by their ``__all__``;
everything else is internal. A change to a public name shows up here as a diff
against ``tests/public_api.json``; after a deliberate change, rewrite it with

    UPDATE_PUBLIC_API=1 pytest tests/test_public_api.py

and review the diff. ``__all__`` is read from the source (no import), so the
runners of frameworks missing here (CrewAI) are pinned too.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
from pathlib import Path

import pytest

import runnertrace

SRC = Path(__file__).resolve().parent.parent.parent / "src"
SNAPSHOT = Path(__file__).resolve().parent.parent / "public_api.json"

LISTED = (
    "runnertrace",
    "runnertrace.core",
    "runnertrace.core.events",
    "runnertrace.core.models",
    "runnertrace.testing",
    "runnertrace.tracing",
    "runnertrace.tracing.config",
    "runnertrace.tracing.backend",
    "runnertrace.tracing.content",
    "runnertrace.exporters.local_store",
    "runnertrace.runners.native",
    "runnertrace.core.propagation",
    "runnertrace.serve",
    "runnertrace.tracing.mcp",
    "runnertrace.tracing.a2a",
)
"""The public modules ``runnertrace``'s docstring names one by one."""


def _path(module: str) -> Path:
    base = SRC.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def public_modules() -> list[str]:
    """The listed modules, and each framework's runner package with its ``testing``
    module (``runners/<name>/__init__.py``, ``runners/<name>/testing.py``)."""
    runners = SRC / "runnertrace" / "runners"
    found: list[str] = []
    for package in sorted(p.parent for p in runners.glob("*/__init__.py")):
        if package.name.startswith("_") or package.name == "native":
            continue  # the kit is private; the native runner is listed above
        found.append(f"runnertrace.runners.{package.name}")
        if (package / "testing.py").exists():
            found.append(f"runnertrace.runners.{package.name}.testing")
    found += [  # a runner not yet moved into its package
        f"runnertrace.runners.{p.stem}" for p in runners.glob("*.py") if not p.stem.startswith("_")
    ]
    return [*LISTED, *sorted(found)]


def declared_all(module: str) -> list[str]:
    """The module's ``__all__``, read from its source."""
    tree = ast.parse(_path(module).read_text(encoding="utf-8"))
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert node.value is not None
            value = ast.literal_eval(node.value)
            return sorted(value)
    raise AssertionError(f"{module} declares no literal __all__")


def surface() -> dict[str, list[str]]:
    return {module: declared_all(module) for module in public_modules()}


def test_the_public_surface_matches_the_snapshot() -> None:
    current = surface()
    if os.environ.get("UPDATE_PUBLIC_API"):
        SNAPSHOT.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    pinned = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    changes = [
        f"{module}: {sign}{name}"
        for module in sorted({*current, *pinned})
        for sign, names in (
            ("+", set(current.get(module, [])) - set(pinned.get(module, []))),
            ("-", set(pinned.get(module, [])) - set(current.get(module, []))),
        )
        for name in sorted(names)
    ]
    changes += [
        f"{m}: module {'added' if m in current else 'removed'}"
        for m in current.keys() ^ pinned.keys()
    ]
    assert not changes, (
        "the public surface changed (rewrite tests/public_api.json with "
        "UPDATE_PUBLIC_API=1 if this is meant):\n  " + "\n  ".join(changes)
    )


def test_the_root_docstring_names_every_listed_module() -> None:
    """The rule users read and the list this test pins are the same list."""
    doc = runnertrace.__doc__ or ""
    missing = [m for m in LISTED if f"``{m}``" not in doc]
    assert not missing, f"runnertrace's docstring does not name {missing}"


@pytest.mark.parametrize("module", public_modules())
def test_every_public_name_resolves(module: str) -> None:
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:  # a framework not installed in this venv (CrewAI)
        pytest.skip(f"{module}: {exc}")
    missing = [name for name in declared_all(module) if not hasattr(imported, name)]
    assert not missing, f"{module}.__all__ names what it does not define: {missing}"


def test_the_root_exports_tracing_and_configuration_lazily() -> None:
    from runnertrace.tracing import TracingRunner, traced
    from runnertrace.tracing.config import ConfigError, Settings, TraceConfig, load_settings

    assert (runnertrace.TracingRunner, runnertrace.traced) == (TracingRunner, traced)
    assert runnertrace.load_settings is load_settings
    assert (runnertrace.Settings, runnertrace.TraceConfig) == (Settings, TraceConfig)
    assert runnertrace.ConfigError is ConfigError
    assert set(runnertrace.__all__) <= set(dir(runnertrace))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = runnertrace.nothing_here  # type: ignore[attr-defined]


def test_tolerate_internal_errors_is_a_test_helper() -> None:
    from runnertrace._internal import errors
    from runnertrace.testing import tolerate_internal_errors

    assert tolerate_internal_errors is errors.tolerate_internal_errors
