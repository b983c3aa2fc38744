"""MCP clients in traced runs: the trace context they carry to the server.

**Every client, in traced runs** (:func:`propagate_from_runs`, called at each
traced run's start): once ``mcp`` is imported (then, or later: the frameworks
import it lazily), its client is made to send the context a carrier should name.
On 1.x, each request a ``ClientSession`` sends gets the W3C carrier of the current
span (our ``execute_tool`` span inside a tool) in ``params._meta``, and a
``tools/call`` under our ``execute_tool`` span gets ``mcp.method.name``. On both,
under a runner's quiet (unsampled) context (``core.quiet``) the carrier names our
span, sampled, so the server does not drop its spans.

It sits apart from :mod:`.mcp` (the traced session and the server side), which
reaches the run's module through ``tracing.remote``: the runner calls this one.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace as trace_api

from runnertrace._internal.errors import handle_internal_errors, internal_log
from runnertrace.core.propagation import inject
from runnertrace.core.quiet import sendable
from runnertrace.tracing import attributes as A

__all__ = [
    "METHOD",
    "PROTOCOL_VERSION",
    "SESSION_ID",
    "TRANSPORT",
    "TRANSPORTS",
    "gate_mcp_tracer",
    "mcp_spans_off",
    "moved",
    "our_tool_span",
    "propagate_from_runs",
]

METHOD = "mcp.method.name"
SESSION_ID = "mcp.session.id"
PROTOCOL_VERSION = "mcp.protocol.version"
TRANSPORT = "network.transport"
TRANSPORTS = {"stdio": "pipe", "streamable-http": "tcp", "sse": "tcp"}

_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_mcp_quiet", default=False
)


class _GatedTracer(trace_api.Tracer):
    """``mcp``'s tracer, silent while :data:`_quiet` is set: a non-recording span that
    carries the current context (so ``_meta`` still gets it), as the API's no-op does.

    A span started with no explicit parent under a runner's quiet context has our
    span as its parent instead (``core.quiet``): ``mcp`` injects the context of the
    span it starts, and the quiet one is unsampled."""

    def __init__(self, inner: trace_api.Tracer) -> None:
        self.inner = inner
        self.noop = trace_api.NoOpTracer()

    def _chosen(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> trace_api.Tracer:
        if len(args) < 2 and kwargs.get("context") is None:  # no parent given
            kwargs["context"] = sendable()
        return self.noop if _quiet.get() else self.inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace_api.Span:
        return self._chosen(args, kwargs).start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._chosen(args, kwargs).start_as_current_span(*args, **kwargs)


def gate_mcp_tracer() -> None:
    """Put the gate on ``mcp``'s module tracer (every span it makes goes through it).

    ``mcp`` has no public switch for its client spans, so this reaches its private
    module (checked against mcp 2.3). A release that moves it loses only the gate: the
    call is then told twice (ours and mcp's), logged once, and nothing else changes."""
    try:  # by name: mcp 1.x (CrewAI's venv, type-checked too) has no such module
        _otel = importlib.import_module("mcp.shared._otel")
    except ImportError:
        moved("mcp.shared._otel", "its client spans repeat our execute_tool spans")
        return
    tracer = getattr(_otel, "_tracer", None)
    if tracer is None:
        moved("mcp.shared._otel._tracer", "its client spans repeat our execute_tool spans")
    elif not isinstance(tracer, _GatedTracer):
        # mcp has no public seam for it
        setattr(_otel, "_tracer", _GatedTracer(tracer))  # noqa: B010


def moved(name: str, effect: str) -> None:
    internal_log.warning(
        f"mcp-moved:{name}",
        "runnertrace: this mcp release has no %s (runnertrace was checked against mcp 2.3): %s",
        name,
        effect,
    )


@contextmanager
def mcp_spans_off() -> Iterator[None]:
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


# -- every client, in traced runs ----------------------------------------------------------------
_CARRIES = "_runnertrace_carries_context"  # marks mcp 1.x's send_request as wrapped
_hooking = threading.Lock()
_hooked = False


def propagate_from_runs() -> None:
    """Make ``mcp``'s client send the right context (see the module), once ``mcp`` is
    imported: now, if it is, else when it is (a hook on its import; importing it here
    would cost every traced run's process about a second). Called at each traced
    run's start; after the first, one flag read."""
    global _hooked
    if _hooked:
        return
    with _hooking:
        if _hooked:
            return
        _hooked = True
        if "mcp" in sys.modules:
            _hook_mcp()
        elif importlib.util.find_spec("mcp") is not None:
            sys.meta_path.insert(0, _WhenImported("mcp", _hook_mcp))


class _WhenImported(importlib.abc.MetaPathFinder):
    """Runs ``then`` right after the module ``name`` is first imported (once): it finds
    the module's spec the ordinary way and wraps that spec's loader."""

    def __init__(self, name: str, then: Any) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        try:
            sys.meta_path.remove(self)  # found the ordinary way from here on
        except ValueError:  # another thread's import got here first
            return None
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec
        then = self.then

        def exec_then_hook(module: Any) -> None:
            exec_module(module)
            with handle_internal_errors("hooking mcp's client"):
                then()

        loader.exec_module = exec_then_hook  # type: ignore[union-attr,method-assign]  # its own
        return spec


def _mcp_major() -> int:
    try:
        return int(importlib.metadata.version("mcp").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 0


def _hook_mcp() -> None:
    """``mcp`` 2.x: the gate on its tracer (which also swaps a quiet parent for ours);
    ``mcp`` 1.x: the carrier on every request a ``ClientSession`` sends."""
    if _mcp_major() >= 2:
        gate_mcp_tracer()
        return
    from mcp.client.session import ClientSession

    send_request = ClientSession.send_request
    if getattr(send_request, _CARRIES, False):
        return

    @functools.wraps(send_request)
    async def send_request_with_context(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        with handle_internal_errors("carrying the trace context to an MCP server"):
            request = _with_carrier(request)
        return await send_request(self, request, *args, **kwargs)

    setattr(send_request_with_context, _CARRIES, True)
    # A public method, wrapped on the class as OpenTelemetry's instrumentations do:
    # mcp 1.x has no hook for outgoing requests.
    ClientSession.send_request = send_request_with_context  # type: ignore[method-assign]


def _with_carrier(request: Any) -> Any:
    """``request`` (an mcp 1.x ``ClientRequest``) with the current context's carrier in
    its ``params._meta`` (keys already there are kept); itself when there is none. A
    ``tools/call`` under our ``execute_tool`` span names its method there."""
    if getattr(request.root, "method", None) == "tools/call":
        span = our_tool_span()
        if span is not None:
            span.set_attribute(METHOD, "tools/call")
    carrier = inject(context=sendable())
    if not carrier:
        return request
    data = request.model_dump(by_alias=True, exclude_none=True)
    params = data.get("params") or {}
    meta = params.get("_meta") or {}
    data["params"] = {**params, "_meta": {**carrier, **meta}}
    return type(request).model_validate(data)


def our_tool_span() -> Any:
    """The current span when it is a recording ``execute_tool`` span, else ``None``."""
    span = trace_api.get_current_span()
    if not span.is_recording():
        return None
    attributes = getattr(span, "attributes", None) or {}
    return span if attributes.get(A.OPERATION) == "execute_tool" else None
