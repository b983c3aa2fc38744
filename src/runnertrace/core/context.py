"""Context-local "current" values: the session, agent and tool context of a run."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent
    from runnertrace.core.runtime import Runtime
    from runnertrace.core.session import Session

current_session: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "runnertrace_current_session", default=None
)
current_agent: contextvars.ContextVar[Agent | None] = contextvars.ContextVar(
    "runnertrace_current_agent", default=None
)
current_runner_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runnertrace_current_runner_key", default=None
)
_tool_context: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "runnertrace_tool_context", default=None
)


def reset_var(var: contextvars.ContextVar[Any], token: contextvars.Token[Any]) -> None:
    """Reset ``var``, tolerating a token from another context.

    An async generator abandoned by its consumer is closed later by the event
    loop, in a fresh context; the context its token came from is gone, so there
    is nothing left to restore.
    """
    try:
        var.reset(token)
    except ValueError:
        if token.var is not var:
            raise


@dataclass
class ToolContext:
    """What a tool can reach while its agent runs: runtime, agent, session, requests."""

    agent: Agent
    session: Session
    requests: list[Any]
    runtime: Runtime | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def get(cls) -> ToolContext:
        """The tool context of the run in progress; ``RuntimeError`` outside a run."""
        ctx = _tool_context.get()
        if ctx is None:
            raise RuntimeError("ToolContext.get() called outside of an agent run")
        return ctx

    @contextmanager
    def activate(self) -> Iterator[ToolContext]:
        token = _tool_context.set(self)
        try:
            yield self
        finally:
            reset_var(_tool_context, token)


@contextmanager
def ensure_tool_context(agent: Agent, session: Session, requests: list[Any]) -> Iterator[None]:
    """Make ``ToolContext.get()`` resolve in tools when a runner is called directly.

    The Runtime activates a tool context around every run; a bare
    ``runner.run()`` gets one here (without a runtime). Shared by all runners.
    """
    if _tool_context.get() is not None:
        yield
        return
    with ToolContext(agent=agent, session=session, requests=list(requests)).activate():
        yield


@contextmanager
def run_scope(agent: Agent, session: Session) -> Iterator[None]:
    """Make ``agent`` and ``session`` current for hooks, factories and native hooks."""
    tok_s = current_session.set(session)
    tok_a = current_agent.set(agent)
    tok_k = current_runner_key.set(getattr(agent.runner, "framework", None))
    try:
        yield
    finally:
        reset_var(current_runner_key, tok_k)
        reset_var(current_agent, tok_a)
        reset_var(current_session, tok_s)
