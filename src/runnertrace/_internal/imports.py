"""Lazy imports of optional dependencies with an actionable error."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or fail with ``pip install 'runnertrace[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'runnertrace[{extra}]'"
        ) from exc


def missing_extra(error: ImportError, extra: str) -> MissingExtraError:
    """The error for a module whose optional dependency failed to import: it names
    the extra to install. A runner's framework imports sit in one ``try`` block::

        try:
            from pydantic_ai import Agent
        except ImportError as exc:
            raise missing_extra(exc, "pydantic-ai") from exc
    """
    module = error.name or str(error)
    return MissingExtraError(
        f"{module!r} is not installed; install it with: pip install 'runnertrace[{extra}]'"
    )


def import_dotted(path: str) -> object:
    """Resolve ``package.module.attr`` (or ``package.module:attr``) to the object."""
    module_name, sep, attr = path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise ValueError(f"{path!r} is not a dotted path of the form 'package.module.name'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from exc


# -- the OpenTelemetry range ------------------------------------------------------------------
#: The OpenTelemetry range that pyproject.toml declares (tests/test_dependency_range.py keeps
#: the two equal). The floor is the oldest release the test suite passes on (.ci/floor runs it
#: there); the cap is the next minor after the newest release we have tested.
OTEL_FLOOR = (1, 43)
OTEL_CAP = (1, 46)
OTEL_RANGE = f">={OTEL_FLOOR[0]}.{OTEL_FLOOR[1]},<{OTEL_CAP[0]}.{OTEL_CAP[1]}"
#: The distributions runnertrace.tracing imports from (they are released in lockstep).
OTEL_DISTRIBUTIONS = ("opentelemetry-api", "opentelemetry-sdk")


def release(version: str) -> tuple[int, ...]:
    """The leading numeric components of a version string: ``"1.35.0rc1"`` -> ``(1, 35, 0)``."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def otel_versions() -> dict[str, str | None]:
    """The installed version of each OTel distribution we import (``None``: no metadata)."""
    found: dict[str, str | None] = {}
    for dist in OTEL_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def otel_upgrade_hint(found: dict[str, str | None]) -> str:
    """One sentence naming what is installed, what is needed and the command that fixes it."""
    have = ", ".join(f"{dist} {version or '(no metadata)'}" for dist, version in found.items())
    pins = " ".join(f"'{dist}{OTEL_RANGE}'" for dist in found)
    return f"runnertrace needs {OTEL_RANGE} of {', '.join(found)}; found {have}: pip install {pins}"


def check_otel_version() -> None:
    """Refuse an OpenTelemetry older than the floor, before anything imports from it.

    An SDK below the floor fails in ways that name neither package nor version (a
    missing attribute deep in an import, or a 5xx retry loop that ignores the
    export timeout), so the version is compared first and the error says what to
    install. A version above the cap is untested, not known to be broken: pip's
    resolver keeps it out, and it is not refused here. Missing metadata (a vendored
    copy) gives no verdict.
    """
    found = otel_versions()
    if any(version is not None and release(version) < OTEL_FLOOR for version in found.values()):
        raise ImportError(otel_upgrade_hint(found))
