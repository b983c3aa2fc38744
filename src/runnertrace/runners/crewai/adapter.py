"""The framework adapter: what CrewAI calls of ours (the sink, a callback, tool functions).

CrewAI reports a run on its event bus. Bus *handlers* run in a thread pool, in no
guaranteed order, and see every crew in the process; so the runner does not
register one. It adds a *stream sink* instead (``crewai.events.stream_context.
add_stream_sink``), which the bus calls synchronously in ``emit``, in the emitting
thread, before any handler: the events arrive in emission order, at the moment they
happen, and a sink is a context variable, so each run sees only its own crew's
events (20 concurrent runs are tested). Three things of ours are CrewAI's to call:

- :class:`_Sink`, the run's stream sink: the one entry of every event, handed to
  the mapper's method for its type (:data:`_HANDLERS`) unless it is another crew's;
- :data:`kickoff_callback`, the ``before_kickoff`` callback that adds the sink
  inside the kickoff's own thread, in the context the kickoff copied, so what it
  adds there lasts for this crew only (in a traced run it also silences other
  instrumentation there, :func:`~runnertrace.runners.crewai.quiet.quiet_kickoff`);
- :func:`timed`, a ReAct tool's function wrapped so that the tool's scope (its
  ``execute_tool`` span) times the function itself; it calls into the tool, so it
  is the kit's :func:`~runnertrace.runners._kit.adapter.bracket_sync` around the
  call, never a guard of it: the tool's exceptions stay the agent's.

The classes are guarded: a fault in them is a telemetry fault, reported once, and
CrewAI goes on (the callback then hands the inputs back as it would).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from crewai import Crew
from crewai.events.stream_context import add_stream_sink
from crewai.events.types.agent_events import (
    AgentExecutionCompletedEvent,
    AgentExecutionErrorEvent,
    AgentExecutionStartedEvent,
)
from crewai.events.types.llm_events import (
    LLMCallCompletedEvent,
    LLMCallFailedEvent,
    LLMCallStartedEvent,
    LLMStreamChunkEvent,
    LLMThinkingChunkEvent,
)
from crewai.events.types.task_events import (
    TaskCompletedEvent,
    TaskFailedEvent,
    TaskStartedEvent,
)
from crewai.events.types.tool_usage_events import (
    ToolUsageErrorEvent,
    ToolUsageFinishedEvent,
    ToolUsageStartedEvent,
)
from opentelemetry import baggage

from runnertrace.runners._kit.adapter import bracket_sync, fault_returns, guarded
from runnertrace.runners.crewai.mapper import _BOUNDARY, _Mapper, _Running
from runnertrace.runners.crewai.quiet import quiet_kickoff

__all__ = ["attach_sink", "detach_sink", "kickoff_callback", "timed"]

T = TypeVar("T")

# Event class -> the mapper's method for it. Everything else is not mapped.
_HANDLERS: dict[type, str] = {
    TaskStartedEvent: "on_task_started",
    TaskCompletedEvent: "on_task_ended",
    TaskFailedEvent: "on_task_ended",
    AgentExecutionStartedEvent: "on_agent_started",
    AgentExecutionCompletedEvent: "on_agent_ended",
    AgentExecutionErrorEvent: "on_agent_ended",
    LLMCallStartedEvent: "on_llm_started",
    LLMStreamChunkEvent: "on_llm_chunk",
    LLMThinkingChunkEvent: "on_llm_thinking",
    LLMCallCompletedEvent: "on_llm_completed",
    LLMCallFailedEvent: "on_llm_failed",
    ToolUsageStartedEvent: "on_tool_started",
    ToolUsageFinishedEvent: "on_tool_finished",
    ToolUsageErrorEvent: "on_tool_error",
}

_TIMED_BY = "__runnertrace_mapping__"  # on a tool function timed(): the mapping it reports to


@guarded(_BOUNDARY)
class _Sink:
    """One run's stream sink: CrewAI's bus calls it with every event emitted in the
    crew's context (and the threads that copy it), before any bus handler.

    ``quiet``: the run is traced, so the kickoff that adds it also silences other
    instrumentation in its thread (set by the runner's ``quiet`` step).
    """

    def __init__(self, mapper: _Mapper) -> None:
        self.mapper = mapper
        self.quiet = False

    def __call__(self, source: Any, event: Any) -> None:
        handler = _HANDLERS.get(type(event))
        mapper = self.mapper
        if handler is None or mapper.closed:
            return
        with mapper.lock:
            if not mapper.foreign(event):
                getattr(mapper, handler)(source, event)


# Crew id -> the sink of the run that kicks that crew off (while the run lasts).
_SINKS: dict[str, _Sink] = {}


def _inputs_back(inputs: Any) -> Any:
    """What the callback hands CrewAI back, also after a fault: the inputs, ``None``
    for the empty ones CrewAI hands it (so CrewAI does not try to fill in
    ``{placeholders}`` in the user's request, just as when there is no callback)."""
    return inputs or None


@guarded(_BOUNDARY)
class _Kickoff:
    """The ``before_kickoff`` callback (a plain function on a class, not a bound method
    or a closure, which CrewAI warns would prevent checkpointing)."""

    @staticmethod
    @fault_returns(_inputs_back)
    def before_kickoff(inputs: Any) -> Any:
        """In the kickoff's own thread: add the run's sink, found by the crew's id
        (CrewAI puts the crew in the OTel baggage), and in a traced run silence other
        instrumentation there. Neither is undone: the context ends with the kickoff."""
        crew = baggage.get_baggage("crew_context")
        sink = _SINKS.get(str(getattr(crew, "id", "")))
        if sink is not None:
            add_stream_sink(sink)
            if sink.quiet:
                quiet_kickoff()
        return _inputs_back(inputs)


kickoff_callback = _Kickoff.before_kickoff
"""The callback the install step adds to a crew's ``before_kickoff_callbacks``."""


def attach_sink(crew: Crew, sink: _Sink) -> None:
    """The kickoff of ``crew`` adds ``sink`` (the install step; :func:`detach_sink`
    undoes it when the run ends)."""
    _SINKS[str(crew.id)] = sink
    crew.before_kickoff_callbacks = [*crew.before_kickoff_callbacks, kickoff_callback]


def detach_sink(crew: Crew) -> None:
    """Take back what :func:`attach_sink` put in place (also after a partial install)."""
    _SINKS.pop(str(crew.id), None)
    crew.before_kickoff_callbacks = [
        c for c in crew.before_kickoff_callbacks if c is not kickoff_callback
    ]


def _scope_of(running: _Running | None) -> AbstractContextManager[None]:
    return nullcontext() if running is None else running[1]


def timed(mapper: _Mapper, func: Callable[..., T]) -> Callable[..., T]:
    """``func``, a ReAct tool's function, run in the scope of the call it serves (see
    :meth:`~runnertrace.runners.crewai.mapper._Mapper.function_started`), so the
    tool's span times the function; a function timed for ``mapper`` already is
    given back as it is."""
    if getattr(func, _TIMED_BY, None) is mapper:
        return func

    @functools.wraps(func)
    def in_its_scope(*args: Any, **kwargs: Any) -> T:
        result: T = bracket_sync(
            _BOUNDARY,
            lambda: func(*args, **kwargs),
            start=mapper.function_started,
            scope=_scope_of,
            done=mapper.function_ended,
            failed=mapper.function_ended,
        )
        return result

    setattr(in_its_scope, _TIMED_BY, mapper)
    return in_its_scope
