"""Other OpenTelemetry around a crew: silenced in traced runs.

CrewAI's own telemetry uses a tracer provider of its own (never ours): switch it
off with ``CREWAI_DISABLE_TELEMETRY=true``, not ``OTEL_SDK_DISABLED``, which would
switch ours off too. What would tell each call a second time is an OpenTelemetry
instrumentation of CrewAI: OpenInference's CrewAI instrumentor adds a kickoff, a
task and a tool span for what our spans already show. So a *traced* run drives the
crew with OTel instrumentation suppressed (``suppress_instrumentation``, which the
instrumentor and most others honour), so each call is one span, ours, also with the
application's own provider:

- the kickoff is called in :func:`quieted` (run mode: ``kickoff_async``, whose
  thread copies that context; stream mode: the first step of CrewAI's chunk stream,
  where the crew's task starts, in a thread of its own);
- the kickoff's own thread suppresses it for good (:func:`quiet_kickoff`, from our
  ``before_kickoff`` callback; the context ends with the kickoff).

A span a tool or a model call opens with a tracer still nests under our spans
(tracers do not check the flag), but an HTTP client's instrumentation inside a
traced crew is silenced with the rest. Untraced runs are left to the instrumentor.

Every function here is called from the runner's ``quiet`` step or from guarded code
(the kit's bracket around the kickoff, the adapter's kickoff callback): a fault in
one costs the silencing, never the run.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from opentelemetry import context as otel_context

from runnertrace._internal.errors import suppressed_instrumentation, suppressing_context

__all__ = ["quiet_framework_telemetry", "quiet_kickoff", "quieted"]


def quiet_framework_telemetry() -> Callable[[object], AbstractContextManager[None]]:
    """Silence other instrumentation for a traced run: the scope to drive CrewAI in."""
    return quieted


def quieted(_: object = None) -> AbstractContextManager[None]:
    """Where a traced run drives CrewAI (a kit bracket's scope, hence the unused handle):
    OTel instrumentation suppressed, inherited by the threads CrewAI starts there."""
    return suppressed_instrumentation()


def quiet_kickoff() -> None:
    """In the kickoff's own thread: OTel instrumentation suppressed for good (the
    context the kickoff copied ends with it, so nothing is undone)."""
    otel_context.attach(suppressing_context())
