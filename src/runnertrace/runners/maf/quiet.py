"""Agent Framework's own OpenTelemetry spans, silenced where ours stand for them.

Agent Framework emits ``invoke_agent`` / ``chat`` / ``execute_tool`` spans to the
global tracer provider by default. Next to ours (or nested under them, since ours are
current) they would show each call twice and count its tokens twice. Its only switch,
``OBSERVABILITY_SETTINGS``, is process-wide, so the first traced run
(:func:`quiet_framework_telemetry`, from ``MAFRunner.quiet``) gives that settings
object a subclass whose ``enable_instrumentation`` also reads :data:`_quiet`, a
context variable of ours. It reads "off" for the agent, model and tool calls of a
traced ``MAFRunner`` run (the ones our spans stand for), and exactly as before
everywhere else: untraced runs, concurrent runs of other agents, and what a tool body
runs that we do not map (a bare ``other_agent.run()`` in a tool keeps its own spans,
nested under our ``execute_tool`` span, so it is seen once). Inside our tool scope the
one read that decides on the tool's own span is the quiet one (:class:`_ToolSpanOnly`).

The reading runs in the runner's boundary (:class:`_Silence`): a fault there leaves
the framework's spans on, next to ours, and never fails the framework's call.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent_framework import observability as maf_observability

from runnertrace.core.context import reset_var
from runnertrace.runners._kit.adapter import guarded
from runnertrace.runners.maf.mapper import _BOUNDARY


class _ToolSpanOnly:
    """The quiet state inside our tool scope: Agent Framework's first read of its
    settings there is ``FunctionTool.invoke`` deciding on its own ``execute_tool``
    span, which ours replaces, so that one read is quiet; every later read (what
    the tool body runs: a sub-agent from ``agent.as_tool()``, a bare agent) is not,
    and those spans nest under our ``execute_tool`` span."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent = False

    def quiet(self) -> bool:
        spent, self.spent = self.spent, True
        return not spent


_quiet: contextvars.ContextVar[bool | _ToolSpanOnly] = contextvars.ContextVar(
    "runnertrace_maf_quiet", default=False
)


@guarded(_BOUNDARY)
class _Silence:
    """Whether Agent Framework's own instrumentation is off in the current context:
    what the settings subclass asks on every read (``None`` after a fault, which
    reads "on")."""

    __slots__ = ()

    def __call__(self) -> bool:
        state = _quiet.get()
        return state if isinstance(state, bool) else state.quiet()


_silenced = _Silence()


def _quiet_settings(base: type[Any]) -> type[Any]:
    """``base`` (Agent Framework's settings class) whose ``enable_instrumentation``
    also reads "off" while :data:`_quiet` is set in the current context. Every
    other read (``ENABLED``, ``SENSITIVE_DATA_ENABLED``, ...) derives from it."""
    flag: Any = base.enable_instrumentation

    class QuietWhenTraced(base):  # type: ignore[misc]
        @property
        def enable_instrumentation(self) -> bool:
            return bool(flag.fget(self)) and not _silenced()

        @enable_instrumentation.setter
        def enable_instrumentation(self, value: bool) -> None:
            flag.fset(self, value)

    return QuietWhenTraced


_quiet_kinds: set[type[Any]] = set()  # the settings classes made by _quiet_settings


def quiet_framework_telemetry() -> None:
    """Make Agent Framework's settings object honour :data:`_quiet` (once; the same
    object, so every module that imported it sees the change)."""
    settings = maf_observability.OBSERVABILITY_SETTINGS
    if type(settings) not in _quiet_kinds:
        quiet = _quiet_settings(type(settings))
        _quiet_kinds.add(quiet)
        settings.__class__ = quiet


def quiet_here() -> bool:
    """Whether the code here runs quiet as a whole (inside a traced run's framework
    call): a tool here is a traced run's tool."""
    return _quiet.get() is True


@contextmanager
def quiet_as(value: bool | _ToolSpanOnly) -> Iterator[None]:
    """:data:`_quiet` set to ``value`` for the block (a no-op when it already is)."""
    if _quiet.get() is value:
        yield
        return
    token = _quiet.set(value)
    try:
        yield
    finally:
        reset_var(_quiet, token)


def tool_quiet(delegating: bool) -> bool | _ToolSpanOnly:
    """The quiet state of a traced run's tool body: all of it when the tool runs an
    inner agent we map (its spans are ours), else only the tool's own span."""
    return True if delegating else _ToolSpanOnly()
