"""Tracing: ``TracingRunner`` / ``traced`` turn runner events into OpenTelemetry spans.

The OpenTelemetry version is checked before anything is imported from it, and a
dependency that breaks our imports anyway (an ``AttributeError`` at import time,
which a lazy ``runnertrace.TracingRunner`` lookup would otherwise report as a
missing attribute) surfaces as an ``ImportError`` that names the installed versions.
"""

from typing import TYPE_CHECKING, Any

from runnertrace._internal.imports import check_otel_version, otel_upgrade_hint, otel_versions

check_otel_version()

if TYPE_CHECKING:
    from runnertrace.tracing.runner import TracingRunner, traced
    from runnertrace.tracing.setup import get_tracing_setup, reset_tracing_setups

__all__ = ["TracingRunner", "get_tracing_setup", "reset_tracing_setups", "traced"]

# Loaded on first use, so that importing one module of the package (its configuration,
# say) does not load the whole tracing layer, and no module of it sits in a circle
# with the package's face.
_LAZY = {
    "TracingRunner": "runnertrace.tracing.runner",
    "traced": "runnertrace.tracing.runner",
    "get_tracing_setup": "runnertrace.tracing.setup",
    "reset_tracing_setups": "runnertrace.tracing.setup",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(module), name)
    except AttributeError as exc:  # a dependency that breaks our imports: name the versions
        raise ImportError(f"{exc}; {otel_upgrade_hint(otel_versions())}") from exc
    globals()[name] = value
    return value
