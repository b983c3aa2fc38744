"""What a model call is sent, in GenAI shapes: the ``MessageStart`` fields of a chat span.

Read when the SDK calls ``on_llm_start``, right before it sends the request: the
input items as semconv messages, the instructions as the resolved text the model
receives, the sampling parameters resolved the way the SDK resolves them, the
agent's function tools and handoffs, and the requested model and provider. The
mapper builds these under :meth:`MappingBoundary.detail`: a fault here costs the
detail alone, never the message.
"""

from __future__ import annotations

from typing import Any

from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
from agents.handoffs import Handoff
from agents.models import get_default_model
from agents.tool import FunctionTool

from runnertrace.runners._kit.genai import (
    Message,
    Part,
    blob_part,
    message,
    reasoning_part,
    request_parameters,
    text_part,
    tool_call_part,
    tool_definition,
    tool_response_part,
)
from runnertrace.runners.openai_agents.convert import field


def model_of(agent: Any, run_config: Any) -> tuple[str | None, str | None]:
    """The requested model name and provider of ``agent``'s next model call."""
    model = field(run_config, "model") if run_config is not None else None
    if model is None:
        model = getattr(agent, "model", None)
    if model is None:
        model = get_default_model()
    if isinstance(model, str):
        prefix, sep, _ = model.partition("/")
        return model, prefix if sep else "openai"
    name = getattr(model, "model", None)
    provider = (
        "openai" if isinstance(model, OpenAIResponsesModel | OpenAIChatCompletionsModel) else None
    )
    return (name if isinstance(name, str) else None), provider


def _part(part: Any) -> Part:
    """One content part of an SDK input item as a semconv part (never image/file bytes)."""
    text = field(part, "text") or field(part, "refusal")
    if isinstance(text, str):
        return text_part(text)
    return blob_part("image" if field(part, "type") == "input_image" else "file")


def _semconv_messages(items: Any) -> list[Message]:
    """The SDK's input items (Responses format) as GenAI semconv input messages.

    A function call output carries the name of the call it answers, found earlier
    in the same input; reasoning items become reasoning parts.
    """
    if isinstance(items, str):
        return [message("user", [text_part(items)])]
    names: dict[str, str] = {}
    messages: list[Message] = []
    for item in items or []:
        kind = field(item, "type")
        role = field(item, "role")
        call_id = field(item, "call_id")
        if kind == "function_call":
            names[call_id] = field(item, "name")
            call = tool_call_part(call_id, names[call_id], field(item, "arguments"))
            messages.append(message("assistant", [call]))
        elif kind == "function_call_output":
            response = tool_response_part(call_id, names.get(call_id), field(item, "output"))
            messages.append(message("tool", [response]))
        elif kind == "reasoning":
            summary = "".join(field(p, "text") or "" for p in field(item, "summary") or [])
            messages.append(message("assistant", [reasoning_part(summary)]))
        elif role is not None:
            content = field(item, "content")
            parts = (
                [text_part(content)]
                if isinstance(content, str)
                else [_part(p) for p in content or []]
            )
            messages.append(message(role, parts))
        else:
            messages.append(message("assistant", [{"type": str(kind)}]))
    return messages


def _request_parameters(agent: Any, run_config: Any) -> dict[str, Any] | None:
    """The sampling parameters of ``agent``'s next call, resolved as the SDK resolves them."""
    settings = agent.model_settings.resolve(field(run_config, "model_settings"))
    return request_parameters(settings.extra_args or {}, vars(settings))


def _input_schema(tool: Any) -> Any:
    """An MCP tool's input schema: ``input_schema`` in mcp 2.x, ``inputSchema`` in 1.x."""
    schema = getattr(tool, "input_schema", None)
    return schema if schema is not None else getattr(tool, "inputSchema", None)


def _mcp_tool_definitions(agent: Any) -> list[dict[str, Any]]:
    """The MCP tools ``agent``'s servers offered this turn, first, as the SDK orders them.

    The SDK lists each server's tools right before the model call, and every listing
    leaves its result in the server's public ``cached_tools`` (whether or not the list
    is cached between runs): that is read, so no server is asked again. A static
    ``tool_filter`` is applied as the SDK applies it. A server whose tools the model
    sees under other names or through a filter we cannot evaluate without calling it
    (``include_server_in_tool_names``, a callable ``tool_filter``) lists nothing
    rather than wrong names.
    """
    if agent.mcp_config.get("include_server_in_tool_names", False):
        return []
    definitions: list[dict[str, Any]] = []
    for server in agent.mcp_servers:
        listed = getattr(server, "cached_tools", None)
        chosen = getattr(server, "tool_filter", None)
        if not listed or not (chosen is None or isinstance(chosen, dict)):
            continue
        allowed = (chosen or {}).get("allowed_tool_names")
        blocked = (chosen or {}).get("blocked_tool_names") or ()
        definitions.extend(
            tool_definition(tool.name, tool.description, _input_schema(tool))
            for tool in listed
            if (allowed is None or tool.name in allowed) and tool.name not in blocked
        )
    return definitions


def _tool_definitions(agent: Any) -> list[dict[str, Any]] | None:
    """The tools (MCP servers', then function tools) and handoffs ``agent`` offers.

    Read without calling anything: a callable ``is_enabled`` is not evaluated (the
    tool is listed), and MCP servers are not asked for their tools again.
    """
    definitions = _mcp_tool_definitions(agent)
    for tool in agent.tools:
        if getattr(tool, "is_enabled", True) is False:
            continue
        if isinstance(tool, FunctionTool):
            definitions.append(
                tool_definition(tool.name, tool.description, tool.params_json_schema)
            )
        else:
            definitions.append({"type": str(getattr(tool, "type", "tool")), "name": tool.name})
    for target in agent.handoffs:
        if isinstance(target, Handoff):
            name, description = target.tool_name, target.tool_description
            parameters = target.input_json_schema
        else:
            name = Handoff.default_tool_name(target)
            description, parameters = Handoff.default_tool_description(target), {}
        definitions.append(tool_definition(name, description, parameters))
    return definitions or None


def request_fields(agent: Any, instructions: Any, items: Any, run_config: Any) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: what the model call is sent."""
    return {
        "input_messages": _semconv_messages(items) if items is not None else None,
        "system_instructions": instructions if isinstance(instructions, str) else None,
        "request_parameters": _request_parameters(agent, run_config) if items else None,
        "tool_definitions": _tool_definitions(agent) if items else None,
    }
