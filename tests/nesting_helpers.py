"""A traced composition of two agents, for the totals tests: an outer agent whose tool
starts an inner one, through either path a nested run takes (the tracing layer's own
nesting of a runner of ours, or ``open_nested_run`` for an agent the framework runs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from runnertrace.core import events as ev
from runnertrace.core.models import AgentReplyText
from runnertrace.core.observer import claim_observer, open_nested_run, stream_observer
from runnertrace.tracing.runner import traced
from tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

__all__ = ["Outer", "call", "drive", "inner_opened", "inner_traced_runner"]


def call(
    prefix: str,
    tokens_in: int,
    tokens_out: int = 5,
    *,
    model: str = "fake-model",
    provider: str = "fake",
    response_model: str | None = None,
    error: ev.EventError | None = None,
) -> list[ev.StreamEvent]:
    """One step with one model call."""
    return [
        ev.StepStart(step_name=prefix, step_index=0),
        ev.MessageStart(message_id=f"{prefix}-m", model=model, provider=provider),
        ev.TextDelta(message_id=f"{prefix}-m", delta="ok"),
        ev.MessageEnd(
            message_id=f"{prefix}-m",
            finish_reason="stop",
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            response_model=response_model,
            error=error,
        ),
        ev.StepEnd(step_name=prefix, step_index=0),
    ]


class Outer:
    """A runner whose one tool starts an inner agent (``inner``: an async callable run
    inside the tool's scope), between two model calls of its own."""

    framework = "outer"

    def __init__(
        self, inner: Callable[[], Any], first: int = 1000, second: int = 1200, **call_kw: Any
    ) -> None:
        self.inner = inner
        self.first, self.second, self.call_kw = first, second, call_kw

    def _before(self) -> list[ev.StreamEvent]:
        return [
            ev.StepStart(step_name="plan", step_index=0),
            ev.MessageStart(message_id="o1", model="fake-model", provider="fake"),
            ev.ToolCallStart(tool_call_id="t1", tool_name="helper", parent_message_id="o1"),
            ev.ToolCallEnd(tool_call_id="t1"),
            ev.MessageEnd(
                message_id="o1",
                finish_reason="tool_calls",
                input_tokens=self.first,
                output_tokens=10,
            ),
        ]

    def _after(self) -> list[ev.StreamEvent]:
        return [
            ev.ToolCallResult(tool_call_id="t1", content="done"),
            ev.StepEnd(step_name="plan", step_index=0),
            *call("answer", self.second, 20, **self.call_kw),
        ]

    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        with claim_observer() as report:
            for event in self._before():
                report(event)
            with report.scope("tool", "t1"):
                await self.inner()
            for event in self._after():
                report(event)
        return AgentReplyText(text="ok", prompt="hi")

    async def stream(self, agent: Any, session: Any, requests: Any) -> AsyncIterator[Any]:
        report = stream_observer()
        for event in self._before():
            report(event)
            yield event
        with report.scope("tool", "t1"):
            await self.inner()
        for event in self._after():
            report(event)
            yield event


async def drive(runner: Any, mode: str, agent: Any = None) -> None:
    agent = agent or ForeignAgent("outer")
    if mode == "run":
        await runner.run(agent, ForeignSession(), [])
    else:
        async for _ in runner.stream(agent, ForeignSession(), []):
            pass


def inner_traced_runner(mode: str, tokens: int = 500, settings: Any = None) -> Callable[[], Any]:
    """The inner agent as a runner of ours, called inside the tool (the tracing layer
    nests it); ``settings``: its trace config (the default one when not given)."""

    async def inner() -> None:
        runner = traced(ForeignRunner(call("inner", tokens)), settings)
        await drive(runner, mode, ForeignAgent("inner"))

    return inner


def inner_opened(
    tokens: int = 500, *, fail: bool = False, cancel: bool = False
) -> Callable[[], Any]:
    """The inner agent run by the framework itself: reported to ``open_nested_run``."""

    async def inner() -> None:
        nested = open_nested_run("inner", mode="run")
        assert nested is not None
        events = call("inner", tokens)
        if fail or cancel:
            events = events[:2]  # the model call is still open
        for event in events:
            nested(event)
        if cancel:
            nested.finish(error=asyncio.CancelledError(), cancelled=True)
        elif fail:
            nested.finish(error=RuntimeError("inner broke"))
        else:
            nested.finish(reply=AgentReplyText(text="inner ok", prompt="x"))

    return inner
