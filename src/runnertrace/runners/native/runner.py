"""``NativeRunner``: the runner contract over the from-scratch agent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from pydantic import BaseModel

from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.events import StreamEvent
from runnertrace.core.models import (
    AgentReply,
    AgentReplyAny,
    AgentReplyText,
    AgentRequest,
    prompt_of,
)
from runnertrace.core.module import Module
from runnertrace.core.observer import claim_observer, stream_observer
from runnertrace.core.runner import Runner
from runnertrace.core.session import Session
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners.native.agent import Agent as NativeAgent
from runnertrace.runners.native.types import AgentResult, Event, ExecutionContext

__all__ = ["NativeModule", "NativeRunner"]

STATE_KEY = "native"


def native_input(requests: list[AgentRequest]) -> str:
    """Flatten requests into the text the native agent reads.

    The native loop is text-only, so images and files become a one-line note
    (never their bytes) and structured input becomes its JSON.
    """
    parts: list[str] = []
    for request in requests:
        if request.type == "text":
            parts.append(request.prompt)
        elif request.type == "image":
            parts.append(f"[image {request.name or ''} ({request.mime_type})]".replace("  ", " "))
        elif request.type == "file":
            parts.append(f"[file {request.name or ''} ({request.mime_type})]".replace("  ", " "))
        else:
            parts.append(json.dumps(request.content, default=str))
    if not parts:
        raise ValueError("a run needs at least one request")
    return "\n".join(parts)


class NativeRunner(Runner):
    """Runs :class:`runnertrace.runners.native.Agent` in run or stream mode.

    Session state (the execution history) is kept under ``"native"``; the
    framework context is injected as ``ExecutionContext.state`` and written back
    only when the run completes. Run options go to the native ``run`` call;
    ``max_steps`` is the one it understands.
    """

    framework: ClassVar[str] = "native"
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "user_input": "the runner builds the input from the requests",
        "context": "the runner restores the execution context from the session",
        "on_event": "the runner reports events through the observer channel",
    }

    def _native(self, agent: CoreAgent) -> NativeAgent:
        native = agent.native
        if not isinstance(native, NativeAgent):
            raise TypeError(
                f"agent {agent.name!r} is not a native agent (got {type(native).__name__})"
            )
        return native

    def _prepare(self, session: Session) -> tuple[ExecutionContext, dict[str, Any] | None]:
        history: list[Event] = list(session.get(STATE_KEY) or [])
        loaded = session.load_framework_context()
        # The agent edits its own top-level dict, so keys it deletes survive the
        # write-back, which merges what it produced over ``loaded``.
        state = dict(loaded) if loaded is not None else {}
        context = ExecutionContext(events=history, state=state)
        return context, loaded

    def _save(
        self, session: Session, context: ExecutionContext, loaded: dict[str, Any] | None
    ) -> None:
        session.set(STATE_KEY, context.events)
        if loaded is not None:
            session.write_back_framework_context(loaded, context.state)

    def _reply(self, result: AgentResult, prompt: str, max_steps: int) -> AgentReply:
        output = result.output
        if isinstance(output, BaseModel):
            return AgentReplyAny(content=output.model_dump(mode="json"), prompt=prompt)
        if output is None:
            text = f"Stopped after {max_steps} steps without a final answer."
            return AgentReplyText(text=text, prompt=prompt)
        return AgentReplyText(text=str(output), prompt=prompt)

    async def _options(
        self, agent: CoreAgent, session: Session, requests: list[AgentRequest]
    ) -> dict[str, Any]:
        options = await agent.resolve_run_options(session, requests)
        unknown = set(options) - {"max_steps"}
        if unknown:
            raise TypeError(f"NativeRunner got unexpected run options: {sorted(unknown)}")
        return options

    async def run(
        self, agent: CoreAgent, session: Session, requests: list[AgentRequest]
    ) -> AgentReply:
        native = self._native(agent)
        user_input = native_input(requests)
        options = await self._options(agent, session, requests)
        max_steps = options.get("max_steps", native.max_steps)
        context, loaded = self._prepare(session)
        with claim_observer() as report:
            builder = EventBuilder(report, queue=True)
            async for _ in native.execute(
                user_input, context, streaming=False, max_steps=max_steps, builder=builder
            ):
                pass  # each event was reported as the builder made it
        self._save(session, context, loaded)
        return self._reply(native.result_of(context), prompt_of(requests), max_steps)

    async def stream(
        self, agent: CoreAgent, session: Session, requests: list[AgentRequest]
    ) -> AsyncIterator[StreamEvent]:
        native = self._native(agent)
        user_input = native_input(requests)
        options = await self._options(agent, session, requests)
        max_steps = options.get("max_steps", native.max_steps)
        context, loaded = self._prepare(session)
        # Each event is reported as it is made, then yielded: the observer sees a
        # model call start when it is sent, whenever the consumer reads the event.
        builder = EventBuilder(stream_observer(), queue=True)
        async for event in native.execute(
            user_input, context, streaming=True, max_steps=max_steps, builder=builder
        ):
            yield event
        self._save(session, context, loaded)


class NativeModule(Module):
    """Registers native agents with the runtime, paired with a :class:`NativeRunner`."""

    runner_class = NativeRunner
