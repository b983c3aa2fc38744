"""Silencing smolagents' own telemetry inside a traced run.

smolagents emits no telemetry of its own; what would tell each run, step, model
call and tool call a second time is an instrumentor that wraps its methods
(OpenInference's ``SmolagentsInstrumentor`` does, with ``wrapt``). Those wrappers
honour OTel's suppress-instrumentation flag, so a traced run's worker thread runs
with it set when smolagents' entry points are wrapped. Untraced runs are the
instrumentor's to trace (the template calls this only inside a traced run). The
flag also quiets HTTP-client instrumentation inside the run; a user's own spans
are not affected.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from smolagents import MultiStepAgent, Tool

from runnertrace._internal.errors import suppressed_instrumentation

__all__ = ["instrumented", "quiet_framework_telemetry"]


def instrumented() -> bool:
    """Whether an instrumentor wraps smolagents' entry points (``wrapt`` exposes the
    wrapped function as ``__wrapped__``)."""
    return any(hasattr(method, "__wrapped__") for method in (MultiStepAgent.run, Tool.__call__))


def quiet_framework_telemetry() -> Callable[[], AbstractContextManager[None]]:
    """What a traced run's worker thread runs in: OTel's suppress-instrumentation flag
    when an instrumentor wraps smolagents, else nothing. Decided once per run, here
    (the worker thread enters it around the agent's run)."""
    return suppressed_instrumentation if instrumented() else nullcontext
