"""What a CrewAI model call is sent, in GenAI shapes.

The chat span starts at CrewAI's ``LLMCallStartedEvent``, with what CrewAI says it
sends: its messages (a system message is the instructions, the rest the input
messages), the request parameters the event carries, and the working agent's tools
as definitions (CrewAI lists them in the ReAct prompt; they are read once per agent
execution, from its ``AgentExecutionStartedEvent``: the event's tools, the agent's
own, and the MCP tools CrewAI resolved from the agent's ``mcps`` for this execution,
which only its executor holds, :func:`offered_tools`). The mapper builds these fields
only in a traced run, through the boundary's ``detail`` (a fault costs the fields,
never the message).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from crewai.events.types.agent_events import AgentExecutionStartedEvent
from crewai.events.types.llm_events import LLMCallStartedEvent
from crewai.tools.mcp_native_tool import MCPNativeTool
from crewai.tools.mcp_tool_wrapper import MCPToolWrapper
from pydantic import JsonValue

from runnertrace.runners._kit import genai

__all__ = ["offered_tools", "request_fields", "tool_definitions"]

MCP_TOOLS = (MCPNativeTool, MCPToolWrapper)
"""The tools CrewAI makes of an agent's ``mcps`` (native configs, and server URLs)."""


def _text_of(content: Any) -> str:
    """A message's content as text (CrewAI's content is text or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return "" if content is None else str(content)


def request_fields(
    event: LLMCallStartedEvent, tools: list[dict[str, JsonValue]] | None
) -> dict[str, Any]:
    """The request fields of a MessageStart, from what CrewAI says it sends."""
    sent: list[genai.Message] = []
    system: list[str] = []
    messages = event.messages
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    for entry in messages or ():
        role = str(entry.get("role") or "user")
        text = _text_of(entry.get("content"))
        if role == "system":
            system.append(text)
        else:
            sent.append(genai.message(role, [genai.text_part(text)]))
    fields = {name: getattr(event, name, None) for name in genai.REQUEST_PARAMETER_NAMES}
    return {
        "input_messages": sent or None,
        "system_instructions": "\n\n".join(system) or None,
        "request_parameters": genai.request_parameters(fields),
        "tool_definitions": tools,
    }


def tool_definitions(tools: Iterable[Any] | None) -> list[dict[str, JsonValue]] | None:
    """An agent's tools as GenAI tool definitions (CrewAI lists them in the prompt)."""
    definitions: list[dict[str, JsonValue]] = []
    for tool in tools or ():
        schema = getattr(getattr(tool, "args_schema", None), "model_json_schema", None)
        definitions.append(
            genai.tool_definition(
                str(getattr(tool, "name", "")),
                getattr(tool, "description", None),
                schema() if callable(schema) else None,
            )
        )
    return genai.or_none(definitions)


def offered_tools(event: AgentExecutionStartedEvent) -> list[Any]:
    """The tools an agent execution offers its model: the event's (the agent's own
    ``tools``), then the MCP tools its executor was given for this execution (CrewAI
    resolves an agent's ``mcps`` per execution and passes them to the executor only)."""
    offered = list(event.tools or ())
    executor = getattr(event.agent, "agent_executor", None)
    for tool in getattr(executor, "original_tools", None) or ():
        if isinstance(tool, MCP_TOOLS) and all(tool is not known for known in offered):
            offered.append(tool)
    return offered
