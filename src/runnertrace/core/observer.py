"""The run-mode observer channel.

In stream mode the tracing layer reads the events it passes through. In run mode
nothing is yielded, so runners *report* the same events to a context-local sink
that the tracing layer installs around ``base.run()``.

A runner claims the sink once at the start of its run with :func:`claim_observer`.
Claiming also hides the sink from code nested inside the run (a tool that calls
another, untraced agent), so a nested run can never feed its events into the
outer run's span tree. A nested *traced* run installs a sink of its own.

Sinks are called synchronously on the runner's task and must be fast and never
raise (the tracing sink guards itself).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from runnertrace.core.context import reset_var
from runnertrace.core.events import StreamEvent

__all__ = [
    "EventSink",
    "claim_observer",
    "enter_traced_run",
    "exit_traced_run",
    "in_traced_run",
    "install_observer",
    "observing",
    "uninstall_observer",
]

EventSink = Callable[[StreamEvent], None]

_sink: contextvars.ContextVar[EventSink | None] = contextvars.ContextVar(
    "runnertrace_event_sink", default=None
)


_traced: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runnertrace_traced_run", default=False
)


def enter_traced_run() -> contextvars.Token[bool]:
    """Mark the code called from here on as running inside a traced run.

    The tracing layer sets it around the base runner (in both modes); undo with
    :func:`exit_traced_run` in the same context.
    """
    return _traced.set(True)


def exit_traced_run(token: contextvars.Token[bool]) -> None:
    reset_var(_traced, token)


def in_traced_run() -> bool:
    """Whether a ``TracingRunner`` is tracing the current run.

    Runners ask this to decide whether to silence a framework's own
    instrumentation (which would otherwise count each model call twice); it is
    a core fact, so no runner needs to inspect OTel spans to find out.
    """
    return _traced.get()


def _discard(event: StreamEvent) -> None:
    """The sink used when nobody observes the run."""


def install_observer(sink: EventSink) -> contextvars.Token[EventSink | None]:
    """Install ``sink`` for runners called from here on; undo with :func:`uninstall_observer`.

    The function pair is for hot paths (one per traced run); :func:`observing`
    is the same as a ``with`` block.
    """
    return _sink.set(sink)


def uninstall_observer(token: contextvars.Token[EventSink | None]) -> None:
    reset_var(_sink, token)


@contextmanager
def observing(sink: EventSink) -> Iterator[None]:
    """Install ``sink`` for the runner called inside the block."""
    token = install_observer(sink)
    try:
        yield
    finally:
        uninstall_observer(token)


@contextmanager
def claim_observer() -> Iterator[EventSink]:
    """Take the current sink for this run and hide it from nested runs.

    Yields a callable that is never ``None`` (a no-op when nothing observes),
    so runners can report unconditionally.
    """
    sink = _sink.get()
    if sink is None:
        yield _discard
        return
    token = _sink.set(None)
    try:
        yield sink
    finally:
        reset_var(_sink, token)
