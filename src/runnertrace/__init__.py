"""runnertrace: tracing and observability for AI agent runners.

``import runnertrace`` is light: it loads no framework and no vendor SDK. The
tracing entry points are resolved on first attribute access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from runnertrace.tracing import TracingRunner, traced

__all__ = ["TracingRunner", "__version__", "traced"]


def __getattr__(name: str) -> Any:
    if name in ("TracingRunner", "traced"):
        from runnertrace import tracing

        return getattr(tracing, name)
    raise AttributeError(f"module 'runnertrace' has no attribute {name!r}")
