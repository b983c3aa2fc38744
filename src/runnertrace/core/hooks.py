"""Pre- and post-hooks that the Runtime applies around every run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from runnertrace.core.events import StreamEvent
from runnertrace.core.models import AgentReply, AgentRequest

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent
    from runnertrace.core.session import Session

__all__ = ["PostHook", "PreHook"]


class PreHook:
    """Runs before the runner. Return new requests, or a reply to short-circuit."""

    async def on_run(
        self, session: Session, agent: Agent, requests: list[AgentRequest]
    ) -> list[AgentRequest] | AgentReply:
        return requests


class PostHook:
    """Runs after the runner (run mode) and on every event (stream mode)."""

    async def on_run(
        self, session: Session, agent: Agent, requests: list[AgentRequest], reply: AgentReply
    ) -> AgentReply:
        return reply

    async def on_stream_event(
        self, session: Session, agent: Agent, event: StreamEvent
    ) -> StreamEvent | Sequence[StreamEvent] | None:
        """Return the event, a replacement, several events (expand), or ``None`` (drop)."""
        return event
