"""Foreign spans in the dashboard's vocabulary: OpenInference, OpenLLMetry, Pydantic AI, Logfire.

Why at ingest: every view (the runs table's tokens, the model-call chat, the
tool view, sessions) reads the GenAI semconv keys and ``runnertrace.span.type``
that our own spans carry. A span that arrives over OTLP in another dialect
gets those keys added once, when it is stored, so no view needs to know
about dialects. The span's own keys are kept unchanged beside them (the raw
attributes tab shows what the app sent), and a key the span already has is
never overwritten: our own spans sent back in come out as they went.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from runnertrace.tracing import attributes as attr

__all__ = ["framework_of", "normalise"]

# What a span stands for, from each dialect's own "kind" key.
_TYPES_BY_OPERATION = {
    "chat": "message",
    "text_completion": "message",
    "generate_content": "message",
    "completion": "message",
    "execute_tool": "tool",
    "invoke_agent": "run",
    "create_agent": "run",
    "invoke_workflow": "run",
}
_TYPES_BY_OPENINFERENCE = {"LLM": "message", "TOOL": "tool", "AGENT": "run", "CHAIN": "step"}
_TYPES_BY_TRACELOOP = {"workflow": "run", "agent": "run", "task": "step", "tool": "tool"}
_TYPES_BY_LLM_REQUEST = {"chat": "message", "completion": "message"}
_TYPE_KEYS: tuple[tuple[str, Mapping[str, str]], ...] = (
    (attr.OPERATION, _TYPES_BY_OPERATION),
    (attr.OPENINFERENCE_KIND, _TYPES_BY_OPENINFERENCE),
    ("traceloop.span.kind", _TYPES_BY_TRACELOOP),
    ("llm.request.type", _TYPES_BY_LLM_REQUEST),
)

# semconv key <- the other dialects' spellings of the same fact, first found wins.
_ALIASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (attr.REQUEST_MODEL, ("llm.model_name", "model_name", "gen_ai.response.model")),
    (attr.PROVIDER, ("gen_ai.system", "llm.provider", "llm.system")),
    (attr.INPUT_TOKENS, ("llm.token_count.prompt", "gen_ai.usage.prompt_tokens")),
    (attr.OUTPUT_TOKENS, ("llm.token_count.completion", "gen_ai.usage.completion_tokens")),
    (attr.COST, ("llm.cost.total", "operation.cost")),
    (attr.AGENT_NAME, ("agent_name", "agent.name", "traceloop.workflow.name")),
    (attr.CONVERSATION_ID, (attr.SESSION_ID, "traceloop.association.properties.session_id")),
    (attr.USER_ID, ("traceloop.association.properties.user_id",)),
    (attr.TOOL_NAME, (attr.LEGACY_TOOL_NAME,)),
    (attr.TTFC, (attr.TTFC_LOGFIRE,)),
)
# Per span type: what its input and output are called elsewhere.
_CONTENT: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "tool": (
        (attr.TOOL_ARGUMENTS, ("tool.parameters", attr.INPUT_VALUE, "traceloop.entity.input")),
        (attr.TOOL_RESULT, (attr.OUTPUT_VALUE, "traceloop.entity.output")),
    ),
    "run": (
        (attr.INPUT_VALUE, ("traceloop.entity.input",)),
        (attr.OUTPUT_VALUE, ("final_result", "traceloop.entity.output")),
    ),
}

_OI_MESSAGE = re.compile(r"llm\.(input|output)_messages\.(\d+)\.message\.(.+)")
_TRACELOOP_MESSAGE = re.compile(r"gen_ai\.(prompt|completion)\.(\d+)\.(.+)")
_OI_TOOL = re.compile(r"llm\.tools\.(\d+)\.tool\.(.+)")


def framework_of(scope: str | None) -> str:
    """A label for the runs list's framework column, from the instrumentation scope."""
    name = scope or ""
    for prefix in ("openinference.instrumentation.", "opentelemetry.instrumentation."):
        if name.startswith(prefix):
            return name[len(prefix) :].replace("_", "-")
    return name or "otlp"


def normalise(attributes: dict[str, Any], name: str, scope: str | None) -> dict[str, Any]:
    """``attributes`` with the semconv keys the views read added (never replaced)."""
    out = dict(attributes)
    for key, aliases in _ALIASES:
        if key not in out:
            found = next((out[a] for a in aliases if a in out), None)
            if found is not None:
                out[key] = found
    span_type = out.get(attr.SPAN_TYPE)
    if not isinstance(span_type, str):
        span_type = _span_type(out, name)
        if span_type is not None:
            out[attr.SPAN_TYPE] = span_type
    if span_type == "tool" and attr.TOOL_NAME not in out and "traceloop.entity.name" in out:
        out[attr.TOOL_NAME] = out["traceloop.entity.name"]
    if span_type == "run" and attr.AGENT_NAME not in out and "traceloop.entity.name" in out:
        out[attr.AGENT_NAME] = out["traceloop.entity.name"]
    for key, aliases in _CONTENT.get(span_type or "", ()):
        if key not in out:
            found = next((out[a] for a in aliases if a in out), None)
            if found is not None:
                out[key] = found
    if span_type == "run" and attr.INPUT_VALUE not in out:
        first = _first_user_text(out.get("pydantic_ai.all_messages"))
        if first is not None:
            out[attr.INPUT_VALUE] = first
    for rebuild in _REBUILDERS:
        rebuild(out)
    if attr.FRAMEWORK not in out and span_type == "run":  # the runs list reads the run span
        out[attr.FRAMEWORK] = framework_of(scope)
    return out


def _span_type(attributes: Mapping[str, Any], name: str) -> str | None:
    for key, table in _TYPE_KEYS:
        value = attributes.get(key)
        if isinstance(value, str) and value in table:
            return table[value]
    # Pydantic AI before the semconv names (Logfire's "agent run", "running tool").
    if name == "agent run" or (name.endswith(" run") and "agent_name" in attributes):
        return "run"
    if name.startswith("running tool"):
        return "tool"
    return None


def _first_user_text(value: object) -> str | None:
    try:
        messages = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            for part in message.get("parts") or []:
                if isinstance(part, dict) and part.get("type") == "text":
                    return str(part.get("content", ""))
    return None


# -- flattened message lists -> gen_ai.input/output.messages ------------------------------------
def _indexed(attributes: Mapping[str, Any], pattern: re.Pattern[str]) -> dict[str, dict[int, Any]]:
    """``prefix.N.rest`` keys grouped: {group: {N: {rest: value}}}."""
    groups: dict[str, dict[int, Any]] = {}
    for key, value in attributes.items():
        match = pattern.fullmatch(key)
        if match is not None:
            group, index, rest = match.groups()
            groups.setdefault(group, {}).setdefault(int(index), {})[rest] = value
    return groups


def _arguments(text: object) -> object:
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _openinference_message(fields: Mapping[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if isinstance(fields.get("content"), str):
        parts.append({"type": "text", "content": fields["content"]})
    contents = _indexed(fields, re.compile(r"(contents)\.(\d+)\.message_content\.(.+)"))
    for _, item in sorted(contents.get("contents", {}).items()):
        if item.get("type", "text") == "text" and "text" in item:
            parts.append({"type": "text", "content": item["text"]})
    calls = _indexed(fields, re.compile(r"(tool_calls)\.(\d+)\.tool_call\.(.+)"))
    for _, call in sorted(calls.get("tool_calls", {}).items()):
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("function.name"),
                "arguments": _arguments(call.get("function.arguments")),
            }
        )
    role = str(fields.get("role", "user"))
    if role == "tool" and "tool_call_id" in fields:
        text = " ".join(str(p.get("content", "")) for p in parts if p["type"] == "text")
        parts = [{"type": "tool_call_response", "id": fields["tool_call_id"], "response": text}]
    return {"role": role, "parts": parts}


def _traceloop_message(fields: Mapping[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if isinstance(fields.get("content"), str):
        parts.append({"type": "text", "content": fields["content"]})
    calls = _indexed(fields, re.compile(r"(tool_calls)\.(\d+)\.(.+)"))
    for _, call in sorted(calls.get("tool_calls", {}).items()):
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": _arguments(call.get("arguments")),
            }
        )
    message: dict[str, Any] = {"role": str(fields.get("role", "user")), "parts": parts}
    if "finish_reason" in fields:
        message["finish_reason"] = fields["finish_reason"]
    return message


def _rebuild(
    pattern: re.Pattern[str],
    names: Mapping[str, str],
    build: Callable[[Mapping[str, Any]], dict[str, Any]],
) -> Callable[[dict[str, Any]], None]:
    def rebuild(out: dict[str, Any]) -> None:
        for group, items in _indexed(out, pattern).items():
            key = names[group]
            if key not in out:
                messages = [build(items[i]) for i in sorted(items)]
                out[key] = json.dumps(messages, ensure_ascii=False)
                reasons = [m["finish_reason"] for m in messages if "finish_reason" in m]
                if reasons and attr.FINISH_REASONS not in out:
                    out[attr.FINISH_REASONS] = reasons

    return rebuild


def _openinference_tools(out: dict[str, Any]) -> None:
    tools: dict[int, dict[str, Any]] = {}
    for key, value in out.items():
        match = _OI_TOOL.fullmatch(key)
        if match is not None:
            tools.setdefault(int(match.group(1)), {})[match.group(2)] = value
    if tools and attr.TOOL_DEFINITIONS not in out:
        definitions = []
        for _, tool in sorted(tools.items()):
            schema = _arguments(tool.get("json_schema"))
            if isinstance(schema, dict) and ("function" in schema or "name" in schema):
                definitions.append(schema)  # a whole definition (OpenAI's instrumentor)
                continue
            definitions.append({"type": "function", "name": tool.get("name"), "parameters": schema})
        out[attr.TOOL_DEFINITIONS] = json.dumps(definitions, ensure_ascii=False)


_INPUT_OUTPUT = {"input": attr.INPUT_MESSAGES, "output": attr.OUTPUT_MESSAGES}
_REBUILDERS: tuple[Callable[[dict[str, Any]], None], ...] = (
    _rebuild(_OI_MESSAGE, _INPUT_OUTPUT, _openinference_message),
    _rebuild(
        _TRACELOOP_MESSAGE,
        {"prompt": attr.INPUT_MESSAGES, "completion": attr.OUTPUT_MESSAGES},
        _traceloop_message,
    ),
    _openinference_tools,
)
