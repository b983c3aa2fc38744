"""Which graph a tool of the run runs, and when: the discovery of nested agent runs.

A graph that a tool runs (an agent used as a tool: ``await agent.ainvoke(...)`` in
a ``@tool``, ``graph.as_tool()``) is another agent's run, not this one's. No runner
of ours is called for it: LangChain reports its callbacks to the outer run's
handler (a tool's callbacks are inherited by what it runs), as runs under the
tool's run. The mapper tells it apart here, and runs the rest of its life with
the kit (:class:`~runnertrace.runners._kit.nesting.NestedRuns`):

- every chain that starts under one of the run's tools, or under such a chain,
  is *inside a tool* (:func:`graph_in_tool` keeps them, with their inputs);
- the first graph step (a run tagged ``graph:step:N``) whose parent is such a
  chain makes that chain a graph's run: a nested run, whose agent is the chain's
  name and whose request is its input's last human message (:func:`requests_of`);
- its tasks' checkpoint namespaces sit under the tool's task; the mapper of the
  inner graph cuts that prefix off (:func:`inner_namespace`).

A graph a *node* runs is not here: LangGraph runs it as a subgraph of the node's
task, and the mapper maps it as steps of the run (``<node>/<inner node>``).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any
from uuid import UUID

from langchain_core.messages import convert_to_messages

from runnertrace.core.models import AgentRequestText
from runnertrace.runners.langgraph.convert import MESSAGES


def graph_in_tool(
    run_id: UUID,
    parent_run_id: UUID | None,
    step_index: int | None,
    inputs: Any,
    tools: Container[UUID],
    in_tools: dict[UUID, Any],
) -> UUID | None:
    """The run id of a graph a tool runs, when the chain ``run_id`` is its first step.

    ``tools`` are the run's open tool runs, ``in_tools`` the chains started inside
    them (by run id, with their inputs): a chain started inside a tool that is not
    such a first step is added to it.
    """
    if parent_run_id is None or (parent_run_id not in tools and parent_run_id not in in_tools):
        return None
    if step_index is not None and parent_run_id in in_tools:
        return parent_run_id  # a graph's first step, inside a tool: another agent's run
    in_tools[run_id] = inputs
    return None


def requests_of(inputs: Any) -> list[AgentRequestText] | None:
    """What a graph run inside a tool was asked: its input's last human message (or text)."""
    if isinstance(inputs, str):
        return [AgentRequestText(prompt=inputs)]
    messages = inputs.get(MESSAGES) if isinstance(inputs, Mapping) else None
    if not isinstance(messages, list | tuple):
        messages = [messages] if messages else []
    for message in reversed(convert_to_messages(messages)):
        if message.type == "human":
            return [AgentRequestText(prompt=str(message.text))]
    return None


def inner_namespace(first_step_metadata: Mapping[str, Any]) -> str:
    """The namespace prefix of a graph run inside a tool, from its first step's metadata:
    LangGraph nests its tasks under the tool's task (``<tool task>|<its node>:<id>``)."""
    task = str(first_step_metadata.get("langgraph_checkpoint_ns") or "")
    parent = task.rpartition("|")[0]
    return f"{parent}|" if parent else ""
