"""Which backends exist: the ``runnertrace.backends`` entry-point group.

A backend is a :class:`~runnertrace.tracing.backend.Backend` subclass that a
distribution registers under a name, the way the OpenTelemetry SDK finds the
exporter ``OTEL_TRACES_EXPORTER`` names::

    [project.entry-points."runnertrace.backends"]
    mybackend = "mypackage.tracing:MyBackend"

``trace.type: mybackend`` then selects it, and ``trace.mybackend`` is validated
against its ``config_model``. Our own backends are registered the same way (see
``pyproject.toml``). ``trace.type`` may also be a dotted path to a class.

Resolution is lazy: reading the entry points imports nothing, and using one
backend imports only the module its entry point names, so configuring
``local`` never loads a vendor's code. The scan of installed distributions
happens once per process, on first use (not at import); :func:`clear_backend_registry`
forgets it (for tests that install a backend on ``sys.path``).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel

    from runnertrace.tracing.backend import Backend

__all__ = [
    "BUILTIN_BACKENDS",
    "ENTRY_POINT_GROUP",
    "backend_names",
    "clear_backend_registry",
    "load_backend",
    "section_model",
    "validate_backend_name",
]

ENTRY_POINT_GROUP = "runnertrace.backends"

BUILTIN_BACKENDS: Mapping[str, str] = {
    "app": "runnertrace.exporters.app:AppBackend",
    "cloudwatch": "runnertrace.exporters.cloudwatch:CloudWatchBackend",
    "console": "runnertrace.exporters.console:ConsoleBackend",
    "langfuse": "runnertrace.exporters.langfuse:LangfuseBackend",
    "local": "runnertrace.exporters.local:LocalBackend",
    "logfire": "runnertrace.exporters.logfire:LogfireBackend",
    "openllmetry": "runnertrace.exporters.openllmetry:OpenLLMetryBackend",
    "otlp": "runnertrace.exporters.otlp:OtlpBackend",
}
"""Our backends, as ``pyproject.toml`` declares them in the entry-point group.

Installed, these come back from the entry-point scan like any other. The table
is merged in as well because entry points exist only in installed metadata:
running from a source checkout on ``PYTHONPATH``, or from an editable install
made before the group was declared, would otherwise leave even ``local`` (the
default) unknown. A test keeps this table and ``pyproject.toml`` identical.
"""


@dataclass(frozen=True)
class _Registration:
    target: str
    """``module:attr``, as an entry point's value."""
    source: str
    """Who registered it: a distribution's name, or ``runnertrace`` for the table."""


@functools.cache
def _registrations() -> dict[str, tuple[_Registration, ...]]:
    """Name -> every distinct registration of it (more than one is a conflict)."""
    found: dict[str, dict[str, _Registration]] = {
        name: {target: _Registration(target, "runnertrace")}
        for name, target in BUILTIN_BACKENDS.items()
    }
    for point in entry_points(group=ENTRY_POINT_GROUP):
        target = f"{point.module}:{point.attr}" if point.attr else point.module
        source = point.dist.name if point.dist is not None else "an unnamed distribution"
        found.setdefault(point.name, {}).setdefault(target, _Registration(target, source))
    return {name: tuple(by_target.values()) for name, by_target in found.items()}


def clear_backend_registry() -> None:
    """Forget the scanned entry points, so the next lookup sees the current ``sys.path``."""
    _registrations.cache_clear()
    section_model.cache_clear()


def backend_names() -> list[str]:
    """Every registered backend name, sorted (what ``trace.type`` accepts besides a path)."""
    return sorted(_registrations())


def _is_path(name: str) -> bool:
    return "." in name or ":" in name


# Tools reached through a backend of another name: where a user looks for them.
REACHED_THROUGH = {
    "phoenix": (
        "otlp",
        "Arize Phoenix takes OTLP: type: otlp, with trace.otlp.endpoint: "
        "http://localhost:6006/v1/traces",
    ),
    "jaeger": ("otlp", "Jaeger takes OTLP: type: otlp, with trace.otlp.endpoint"),
    "tempo": ("otlp", "Grafana Tempo takes OTLP: type: otlp, with trace.otlp.endpoint"),
    "sqlite": ("local", "the embedded store is type: local"),
}


def _unknown(name: str) -> str:
    names = backend_names()
    valid = ", ".join(names)
    through = REACHED_THROUGH.get(name.lower())
    if through is not None:
        return f"unknown trace type {name!r}; {through[1]}"
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"unknown trace type {name!r}; {hint}expected one of {valid}, "
        "or a dotted path to a backend class"
    )


def validate_backend_name(name: str) -> None:
    """Accept a registered name or a dotted path; reject anything else with the valid list."""
    if name not in _registrations() and not _is_path(name):
        raise ValueError(_unknown(name))


def load_backend(name: str, *, key: str = "trace.type") -> type[Backend]:
    """The backend class for a ``trace.type`` entry (registered name or dotted path).

    Raises :class:`~runnertrace.tracing.errors.ConfigError`, starting with ``key``,
    when it cannot be imported, is not a Backend, or is registered twice.
    """
    from runnertrace._internal.imports import import_dotted
    from runnertrace.tracing.backend import Backend
    from runnertrace.tracing.errors import ConfigError

    registrations = _registrations().get(name)
    if registrations is None:
        if not _is_path(name):
            raise ConfigError(f"{key}: {_unknown(name)}")
        target = name
    elif len(registrations) > 1:
        where = "; ".join(f"{r.target} (from {r.source})" for r in registrations)
        raise ConfigError(
            f"{key}: backend name {name!r} is registered more than once in the "
            f"{ENTRY_POINT_GROUP!r} entry-point group: {where}; uninstall one of them, "
            "or name the class you want by its dotted path"
        )
    else:
        target = registrations[0].target
    try:
        cls = import_dotted(target)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot load backend {name!r}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise ConfigError(
            f"{key}: {name!r} is not a runnertrace Backend subclass "
            "(see runnertrace.tracing.backend.Backend)"
        )
    if registrations is not None and cls.name != name:
        # The section a backend reads is trace.<its name>: the two must agree.
        raise ConfigError(
            f"{key}: the entry point {name!r} loads {target}, whose name is "
            f"{cls.name!r}; set name = {name!r} on the class or register it as {cls.name!r}"
        )
    return cls


@functools.cache
def section_model(name: str) -> type[BaseModel] | None:
    """The config model of the backend registered as ``name`` (``None``: no such backend).

    Loading it imports that backend's module only. Cached, as reading a section
    that was not configured (its defaults) looks the model up again.
    """
    if name not in _registrations():
        return None
    return load_backend(name, key=f"trace.{name}").config_model
