"""Which agent execution is a coworker's: an agent run CrewAI starts inside a traced run's tool.

CrewAI's delegation tools (``Delegate work to coworker``, ``Ask question to
coworker``; a hierarchical crew's manager has them, and so does any agent with
``allow_delegation=True``) run the coworker's ``execute_task`` inside the tool call,
in the delegating agent's thread and context. So an agent execution that starts
while an agent of the same line of work is still working is a coworker's
(:func:`coworker_of`): a **nested run**, opened in the delegation's tool scope (under
its ``execute_tool`` span), whose events are traced, not yielded (the stream is the
crew's). The rest of its life is the kit's (:mod:`runnertrace.runners._kit.nesting`):
the mapper keeps it by CrewAI's (agent id, task id) of the execution and ends it with
the execution (its output the reply, or its error), or cancelled when the run ends
first. A retried coworker is a run per attempt.

A crew's own agents taking their turns over its tasks, and an ``async_execution``
task's agent (a branch of the run), are steps of the run, not nested runs; a crew
kicked off inside a tool is its own run, not ours (the mapper tells it apart by
CrewAI's agent and task ids).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from crewai.events.types.agent_events import AgentExecutionStartedEvent

from runnertrace.core.models import AgentRequestText

__all__ = ["Coworker", "coworker_of"]


class Coworker(NamedTuple):
    """A coworker delegated to: its role (the nested run's agent name) and its task."""

    role: str
    task: str
    requests: list[Any]


def coworker_of(event: AgentExecutionStartedEvent, *, working: bool) -> Coworker | None:
    """The coworker an agent execution starting now is, or ``None`` when it is not one.

    ``working``: whether an agent of the line the execution starts in is working
    already; then this one runs inside that agent's tool call (CrewAI's delegation).
    What it was asked is the task CrewAI gives it (the delegation's task and context).
    """
    if not working:
        return None
    task = str(getattr(event.task, "description", None) or event.task_prompt)
    return Coworker(str(event.agent.role), task, [AgentRequestText(prompt=task)])
