"""runnertrace: tracing and observability for AI agent runners.

``import runnertrace`` is light: it loads no framework and no vendor SDK. The
names below are resolved on first attribute access.

What is public, and so kept stable: the names in the ``__all__`` of

* ``runnertrace``: tracing a runner and its configuration, and ``feedback`` on its runs;
* ``runnertrace.core`` (the runner contract), with ``runnertrace.core.events``
  and ``runnertrace.core.models``;
* ``runnertrace.testing``: test helpers;
* ``runnertrace.tracing``, ``runnertrace.tracing.config``,
  ``runnertrace.tracing.backend`` (for writing a backend) and
  ``runnertrace.tracing.content`` (content policy and redaction);
* ``runnertrace.exporters.local_store``: reading the ``local`` backend's traces;
* across processes: ``runnertrace.core.propagation`` (the W3C carrier),
  ``runnertrace.serve`` (``AgentService``, its HTTP app and client),
  ``runnertrace.tracing.mcp`` and ``runnertrace.tracing.a2a``;
* ``runnertrace.runners.native`` and each framework's runner module,
  ``runnertrace.runners.<framework>`` and ``runnertrace.runners.<framework>.testing``.

Every other module, and every name missing from those ``__all__`` lists, is
internal and may change in any release; so is anything with a leading
underscore. ``tests/public_api.json`` pins the public names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runnertrace._internal.version import __version__

if TYPE_CHECKING:
    from runnertrace.store.feedback import feedback
    from runnertrace.tracing import TracingRunner, traced
    from runnertrace.tracing.config import ConfigError, Settings, TraceConfig, load_settings

_TRACING = frozenset({"TracingRunner", "traced"})
_CONFIG = frozenset({"ConfigError", "Settings", "TraceConfig", "load_settings"})

__all__ = [
    "ConfigError",
    "Settings",
    "TraceConfig",
    "TracingRunner",
    "__version__",
    "feedback",
    "load_settings",
    "traced",
]


def __getattr__(name: str) -> Any:
    # Plain imports, not import_module: what loads what stays visible to readers and tools.
    if name in _TRACING:
        from runnertrace import tracing

        return getattr(tracing, name)
    if name == "feedback":  # thumbs up or down on a run, from the app
        from runnertrace.store.feedback import feedback

        return feedback
    if name in _CONFIG:
        from runnertrace.tracing import config

        return getattr(config, name)
    raise AttributeError(f"module 'runnertrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
