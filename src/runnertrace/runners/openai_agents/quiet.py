"""Silencing the SDK's own tracing for a traced run (``OpenAIRunner.quiet``).

With the SDK's tracing on, every trace processor registered with the SDK sees the
run too, and those that export to OpenTelemetry (OpenInference's instrumentor,
Logfire's) would show each model and tool call a second time, tokens counted
twice. So a traced run's ``RunConfig`` (the copy the install step made: the
user's object is never changed; untraced runs are left alone) gets
``tracing_disabled=True``. This also skips the upload to the OpenAI traces
dashboard for that run; ``OpenAIRunner(keep_sdk_tracing=True)`` keeps it, and then
each call does appear in both trees, by choice. An agent run as a tool gets the
same treatment for its own copy (``adapter._AgentTool``).
"""

from __future__ import annotations

from agents import RunConfig


def quiet_framework_telemetry(config: RunConfig) -> None:
    """Switch the SDK's tracing off for the run given ``config`` (our copy)."""
    config.tracing_disabled = True
