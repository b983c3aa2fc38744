"""The observer channel between a runner and whoever traces it.

In stream mode the tracing layer could read the events it passes through, and
for a foreign runner that is all it does. Our runners do more, in both modes:
they *report* each event to an :class:`Observer` the moment they produce it
(so a span starts when a model request is sent, not when a consumer gets to
the event), and they tell it when a tool or a model call is running, so that
spans opened there (an HTTP client, a database, a user's own span, a nested
agent) nest under that call's span.

* Run mode: :func:`claim_observer` takes the observer the tracing layer
  installed around ``base.run()`` and hides it from code nested in the run, so
  a nested untraced run never reports into the outer run's tree.
* Stream mode: :func:`stream_observer` takes it without changing any context
  variable (a generator's context changes would straddle its ``yield``\\s); the
  observer is then hidden inside each tool scope instead.
* When nothing traces the run, both give :data:`NULL_OBSERVER`, whose methods do
  nothing: an untraced run pays one context-variable read per run.

An observer is called synchronously on the runner's task and must be fast and
never raise (the tracing observer guards itself).

Four context variables say "a traced run is here", each to a different reader and
with its own visibility. This is the one table of them (all are set by the tracing
layer around the base runner, in both modes, unless the row says otherwise):

==============  ==========================  ===============================  =======================
variable        hidden where                read by                          for
==============  ==========================  ===============================  =======================
``_observer``   run mode: the whole run     a runner, once per run           reporting its events
                (:func:`claim_observer`);   (:func:`claim_observer`,
                a tool's body               :func:`stream_observer`)
                (:class:`ToolBoundary`)
``_traced``     a tool's body               a runner                         silencing the
                (:class:`ToolBoundary`)     (:func:`in_traced_run`)          framework's own spans
``_nesting``    never: a tool's body is     a runner whose framework runs    nesting the inner run
                where inner agents run      an inner agent                   under the tool
                                            (:func:`open_nested_run`)
``active_run``  never; each tool scope      the tracing layer                a nested run's parent
(tracing.       sets it to the run that     (``tracing/runner.py``)          (totals roll up there)
state)          owns the tool
==============  ==========================  ===============================  =======================

So inside a tool of a traced run, a runner called there sees no observer and no
traced mark (its own run is traced afresh, by its own tracing layer, or not at
all), while a nested run opened there finds the opener and its parent run.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Literal, Protocol

from runnertrace.core.context import reset_var
from runnertrace.core.events import StreamEvent

__all__ = [
    "NULL_OBSERVER",
    "EventSink",
    "NestedRun",
    "NestedRunOpener",
    "Observer",
    "ScopeKind",
    "ToolBoundary",
    "can_nest_runs",
    "claim_observer",
    "end_nesting_runs",
    "enter_traced_run",
    "exit_traced_run",
    "in_traced_run",
    "install_observer",
    "nesting_runs",
    "observing",
    "open_nested_run",
    "stream_observer",
    "uninstall_observer",
]

EventSink = Callable[[StreamEvent], None]
ScopeKind = Literal["tool", "model"]


class Observer(Protocol):
    """What a runner reports to."""

    def __call__(self, event: StreamEvent) -> None:
        """Record one event (already yielded or about to be)."""

    def scope(self, kind: ScopeKind, key: str) -> AbstractContextManager[None]:
        """Around the framework's own execution of a tool (``key``: its call id) or
        a model call (``key``: its message id): what runs inside nests under that
        call's span. Enter and leave in the same context (never across a ``yield``).
        A tool's span starts when its scope is first taken: the execution, not the
        model's announcement of the call."""

    def claim(self) -> None:
        """Called by :func:`stream_observer`: the runner will report every event of
        its stream itself, so the tracing layer need not read them off the stream."""


class _NullObserver:
    """The observer of an untraced run: every method does nothing."""

    __slots__ = ()
    _NULL_SCOPE: AbstractContextManager[None] = nullcontext()

    def __call__(self, event: StreamEvent) -> None:
        return None

    def scope(self, kind: ScopeKind, key: str) -> AbstractContextManager[None]:
        return self._NULL_SCOPE

    def claim(self) -> None:
        return None


NULL_OBSERVER: Observer = _NullObserver()


class _SinkObserver:
    """A plain event sink (a callable) seen as an observer with no scopes."""

    __slots__ = ("sink",)

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def __call__(self, event: StreamEvent) -> None:
        self.sink(event)

    def scope(self, kind: ScopeKind, key: str) -> AbstractContextManager[None]:
        # no spans to make current, but a tool's body must still not see this sink
        return ToolBoundary() if kind == "tool" else NULL_OBSERVER.scope(kind, key)

    def claim(self) -> None:
        return None


_observer: contextvars.ContextVar[Observer | None] = contextvars.ContextVar(
    "runnertrace_observer", default=None
)


def install_observer(observer: Observer | EventSink) -> contextvars.Token[Observer | None]:
    """Install ``observer`` for runners called from here on; undo with :func:`uninstall_observer`.

    A plain callable is accepted as an event sink without scopes. The function
    pair is for hot paths (once per traced run, or per streamed step);
    :func:`observing` is the same as a ``with`` block.
    """
    if getattr(observer, "scope", None) is None:  # (cheaper than a Protocol isinstance)
        return _observer.set(_SinkObserver(observer))
    return _observer.set(observer)  # type: ignore[arg-type]


def uninstall_observer(token: contextvars.Token[Observer | None]) -> None:
    reset_var(_observer, token)


@contextmanager
def observing(observer: Observer | EventSink) -> Iterator[None]:
    """Install ``observer`` for the runner called inside the block."""
    token = install_observer(observer)
    try:
        yield
    finally:
        uninstall_observer(token)


@contextmanager
def claim_observer() -> Iterator[Observer]:
    """Run mode: take the current observer for this run and hide it from nested runs.

    Yields an observer that is never ``None`` (:data:`NULL_OBSERVER` when
    nothing observes), so runners can report unconditionally.
    """
    observer = _observer.get()
    if observer is None:
        yield NULL_OBSERVER
        return
    token = _observer.set(None)
    try:
        yield observer
    finally:
        reset_var(_observer, token)


def stream_observer() -> Observer:
    """Stream mode: take the current observer, changing no context variable.

    Call it in the stream's first step, before the first ``yield``.
    """
    observer = _observer.get()
    if observer is None:
        return NULL_OBSERVER
    observer.claim()
    return observer


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


class ToolBoundary:
    """Inside a tool's body, the run that called the tool is out of sight.

    A nested run there (an agent used as a tool) must neither report into the
    outer run's tree nor think it is traced: it hides the observer and the
    traced-run mark until the tool returns. Observers use it in their tool
    scopes; enter and exit in the same context.
    """

    __slots__ = ("_marked", "_observed")

    def __enter__(self) -> None:
        self._observed = _observer.set(None)
        self._marked = _traced.set(False)

    def __exit__(self, *exc: object) -> None:
        reset_var(_traced, self._marked)
        reset_var(_observer, self._observed)


def in_traced_run() -> bool:
    """Whether a ``TracingRunner`` is tracing the current run.

    Runners ask this to decide whether to silence a framework's own
    instrumentation (which would otherwise count each model call twice); it is
    a core fact, so no runner needs to inspect OTel spans to find out.
    """
    return _traced.get()


class NestedRun(Observer, Protocol):
    """A traced run opened for an agent that a framework runs by itself inside a tool
    of a traced run (Agent Framework's ``agent.as_tool()``, for example): the runner
    reports the inner agent's events to it, as to any observer, and ends it."""

    def finish(
        self, reply: Any = None, error: BaseException | None = None, cancelled: bool = False
    ) -> None:
        """End the run: whatever is still open, then its run span."""


class NestedRunOpener(Protocol):
    """What the tracing layer offers while it traces a run (see :func:`nesting_runs`)."""

    def __call__(self, agent_name: str, mode: str, requests: Any = None) -> NestedRun | None: ...


_nesting: contextvars.ContextVar[NestedRunOpener | None] = contextvars.ContextVar(
    "runnertrace_nesting", default=None
)


def nesting_runs(opener: NestedRunOpener) -> contextvars.Token[NestedRunOpener | None]:
    """The tracing layer, around a traced run: runs opened with :func:`open_nested_run`
    from here on are traced with ``opener``. Unlike the observer, it stays visible in
    a tool's body: that is where the nested agent runs. Undo with
    :func:`end_nesting_runs` in the same context."""
    return _nesting.set(opener)


def end_nesting_runs(token: contextvars.Token[NestedRunOpener | None]) -> None:
    reset_var(_nesting, token)


def can_nest_runs() -> bool:
    """Whether :func:`open_nested_run` would trace here (a runner decides on that
    before the inner agent starts: whether the framework's own spans stand for it)."""
    return _nesting.get() is not None


def open_nested_run(agent_name: str, *, mode: str, requests: Any = None) -> NestedRun | None:
    """A traced run for ``agent_name`` nested where the code runs now (inside a tool's
    scope: under its ``execute_tool`` span), or ``None`` when nothing traces here.

    For a runner whose framework runs an inner agent itself, where no runner of ours
    is called for it; a runner that is called for the inner agent is traced by the
    tracing layer's own nesting and needs none of this. ``requests``: what the inner
    agent was asked (its run span's input, under content capture)."""
    opener = _nesting.get()
    return opener(agent_name, mode, requests) if opener is not None else None
