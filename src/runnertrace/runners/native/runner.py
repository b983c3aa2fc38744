"""``NativeRunner``: the runner contract over the from-scratch agent."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, ClassVar, cast

from pydantic import BaseModel

from runnertrace.core.events import StreamEvent
from runnertrace.core.models import AgentReply, AgentReplyAny, AgentReplyText, AgentRequest
from runnertrace.core.module import Module
from runnertrace.runners._kit.skeleton import (
    BoundedBuilder,
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    save,
)
from runnertrace.runners.native.agent import Agent as NativeAgent
from runnertrace.runners.native.agent import boundary
from runnertrace.runners.native.types import AgentResult, ExecutionContext

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


def _reply(result: AgentResult, prompt: str, max_steps: int) -> AgentReply:
    output = result.output
    if isinstance(output, BaseModel):
        return AgentReplyAny(content=output.model_dump(mode="json"), prompt=prompt)
    if output is None:
        text = f"Stopped after {max_steps} steps without a final answer."
        return AgentReplyText(text=text, prompt=prompt)
    return AgentReplyText(text=str(output), prompt=prompt)


class _Run(FrameworkRun[AgentResult]):
    """One run of the native loop. The loop calls the builder itself, so it gets one
    that carries the boundary (:class:`BoundedBuilder`); in stream mode the events it
    drains and yields are the stream."""

    items_are_events: ClassVar[bool] = True

    def __init__(self, setup: RunSetup[NativeAgent], max_steps: int) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.max_steps = max_steps
        self.user_input = native_input(setup.requests)
        loaded = setup.prepared.context
        # The agent edits its own top-level dict, so keys it deletes survive the
        # write-back, which merges what it produced over ``loaded``.
        self.context = ExecutionContext(
            events=list(setup.prepared.state or []),
            state=dict(loaded) if loaded is not None else {},
        )
        self.builder = BoundedBuilder(setup.builder.observer, boundary, queue=True)

    def _events(self, *, streaming: bool) -> AsyncIterator[StreamEvent]:
        return self.native.execute(
            self.user_input,
            self.context,
            streaming=streaming,
            max_steps=self.max_steps,
            builder=self.builder,
        )

    async def call(self) -> AgentResult:
        async for _ in self._events(streaming=False):
            pass  # each event was reported as the builder made it
        return self.native.result_of(self.context)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        events = cast("AsyncGenerator[StreamEvent, None]", self._events(streaming=True))
        async with aclosing(events):
            yield events

    async def outcome(self) -> AgentResult:
        return self.native.result_of(self.context)

    async def save(self, result: AgentResult) -> None:
        setup = self.setup
        save(setup.session, STATE_KEY, self.context.events, setup.prepared, self.context.state)

    def reply(self, result: AgentResult, prompt: str) -> AgentReply:
        return _reply(result, prompt, self.max_steps)


class NativeRunner(FrameworkRunner[NativeAgent]):
    """Runs :class:`runnertrace.runners.native.Agent` in run or stream mode.

    Session state (the execution history) is kept under ``"native"``; the
    framework context is injected as ``ExecutionContext.state`` and written back
    only when the run completes. Run options go to the native ``run`` call;
    ``max_steps`` is the one it understands.
    """

    framework: ClassVar[str] = "native"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = NativeAgent
    native_what: ClassVar[str] = "a native agent"
    boundary: ClassVar[MappingBoundary] = boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "user_input": "the runner builds the input from the requests",
        "context": "the runner restores the execution context from the session",
        "on_event": "the runner reports events through the observer channel",
    }

    async def start(self, setup: RunSetup[NativeAgent]) -> _Run:
        options = setup.prepared.options
        unknown = set(options) - {"max_steps"}
        if unknown:
            raise TypeError(f"NativeRunner got unexpected run options: {sorted(unknown)}")
        return _Run(setup, options.get("max_steps", setup.native.max_steps))


class NativeModule(Module):
    """Registers native agents with the runtime, paired with a :class:`NativeRunner`."""

    runner_class = NativeRunner
