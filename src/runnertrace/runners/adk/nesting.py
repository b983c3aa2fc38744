"""Which invocation is an agent run that ADK starts inside a traced run's tool.

An ``AgentTool`` runs its agent on a sub-runner of its own invocation, and ADK
passes that sub-runner our plugin: the invocation started while the tool runs
(``before_run_callback``, told apart by :data:`_AGENT_TOOL_CALL`, set in the tool's
own task for the length of the call) is that agent's **nested run**. The rest of its
life is the kit's (:mod:`runnertrace.runners._kit.nesting`): the mapper opens it
under the tool's span, keeps it by the tool call's id, and ends it with the
sub-invocation (its final text the reply, or its error) or, at the latest, with its
tool call (cancelled when the call was).

A sub-agent reached by a transfer, or any agent of a ``SequentialAgent`` /
``ParallelAgent`` / ``LoopAgent``, runs in the same invocation: it is a step (or a
branch) of the run, not a nested run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from google.adk.agents import RunConfig
from google.adk.agents.invocation_context import InvocationContext

# ADK documents this import path; mypy sees it as an implicit re-export.
from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.base_tool import BaseTool

from runnertrace.core.context import reset_var
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.adk.convert import content_text

if TYPE_CHECKING:
    from runnertrace.runners.adk.mapper import _Mapper

__all__ = ["agent_tool_call", "calling_agent_tool", "inner_run", "runs_an_agent"]

# The AgentTool call running in this task, with the mapping that reported it: the
# sub-runner ADK starts there sends its callbacks to our plugin too, and its
# invocation is that agent's nested run. Set and reset in the tool's own task.
_AGENT_TOOL_CALL: ContextVar[tuple[_Mapper, str] | None] = ContextVar(
    "runnertrace_adk_agent_tool", default=None
)


def runs_an_agent(tool: BaseTool) -> bool:
    """Whether ``tool`` runs an agent of its own (an ``AgentTool``: a nested run)."""
    return isinstance(tool, AgentTool)


@contextmanager
def agent_tool_call(owner: _Mapper, call_id: str) -> Iterator[None]:
    """While ``owner``'s ``AgentTool`` call ``call_id`` runs, in its own task."""
    token = _AGENT_TOOL_CALL.set((owner, call_id))
    try:
        yield
    finally:
        reset_var(_AGENT_TOOL_CALL, token)  # left in another context: nothing to undo


def calling_agent_tool() -> tuple[_Mapper, str] | None:
    """The ``AgentTool`` call an invocation starting now runs in, with its mapper."""
    return _AGENT_TOOL_CALL.get()


def inner_run(invocation_context: InvocationContext) -> tuple[str, str, list[Any] | None, str]:
    """The inner agent of a sub-invocation: its name, its mode (``AgentTool`` runs it
    unary unless its run config streams), what it was asked (as requests) and the
    prompt text."""
    agent = invocation_context.agent
    name = getattr(agent, "name", None) or "agent"
    prompt = content_text(invocation_context.user_content)
    config: RunConfig | None = invocation_context.run_config
    streamed = config is not None and config.streaming_mode == StreamingMode.SSE
    requests: list[Any] | None = [AgentRequestText(prompt=prompt)] if prompt else None
    return name, "stream" if streamed else "run", requests, prompt
