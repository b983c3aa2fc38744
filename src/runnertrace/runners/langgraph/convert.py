"""Requests to a graph's input and config, and a graph's final state to the reply.

Also what LangChain messages hold (text and reasoning pieces, a tool's message),
read the same way by the reply, by what a model call was sent (:mod:`.request`)
and by the mapper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.pregel import Pregel
from pydantic import BaseModel

from runnertrace.core.models import AgentReply, AgentRequest
from runnertrace.runners._kit.genai import as_text
from runnertrace.runners._kit.skeleton import reply_of

# Any compiled graph, whatever its state, context, input and output types.
Graph: TypeAlias = "Pregel[Any, Any, Any, Any]"

MESSAGES = "messages"


# -- requests -> native input ----------------------------------------------------------------------
def _image_block(request: Any) -> dict[str, Any]:
    return {"type": "image", "base64": request.image_data, "mime_type": request.mime_type}


def _file_block(request: Any) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "file",
        "base64": request.file_data,
        "mime_type": request.mime_type,
    }
    if request.name:
        block["extras"] = {"filename": request.name}
    return block


# Request type -> the LangChain content block it becomes in the user message.
_REQUEST_BLOCKS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "text": lambda r: {"type": "text", "text": r.prompt},
    "image": _image_block,
    "file": _file_block,
    "any": lambda r: {"type": "text", "text": stringify(r.content)},
}


def graph_input(requests: Sequence[AgentRequest]) -> tuple[HumanMessage, dict[str, Any]]:
    """One user message from the requests, plus state keys from dict-valued ``any`` requests.

    Text-only requests become a plain string message (what every chat model
    takes); images and files make it a list of standard content blocks.
    """
    blocks: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    for request in requests:
        if request.type == "any" and isinstance(request.content, Mapping):
            state.update(request.content)
            continue
        blocks.append(_REQUEST_BLOCKS[request.type](request))
    if not blocks and not state:
        raise ValueError("a run needs at least one request")
    if all(block["type"] == "text" for block in blocks):
        return HumanMessage(content="\n".join(block["text"] for block in blocks)), state
    return HumanMessage(content=blocks), state  # type: ignore[arg-type]


# -- the run's config ------------------------------------------------------------------------------
def _merge_callbacks(ours: Sequence[Any], theirs: Any) -> Any:
    """Our handlers first, then the caller's list or manager (handlers kept in order)."""
    if theirs is None:
        return list(ours)
    if isinstance(theirs, BaseCallbackManager):
        manager = theirs.copy()
        manager.handlers = [*ours, *manager.handlers]
        manager.inheritable_handlers = [*ours, *manager.inheritable_handlers]
        return manager
    return [*ours, *theirs]


def merge_config(ours: Mapping[str, Any], theirs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge the caller's ``config`` with the one the runner builds.

    Dict-valued keys merge recursively with the runner's entries winning (so
    ``configurable.thread_id`` stays the session id); list-valued keys
    (``callbacks``, ``tags``) concatenate with the runner's entries first, so a
    handler the runner installs always sees events before the caller's;
    everything else is the caller's.
    """
    merged: dict[str, Any] = dict(theirs or {})
    for key, value in ours.items():
        other = merged.get(key)
        if key == "callbacks":
            merged[key] = _merge_callbacks(value, other)
        elif isinstance(value, Mapping) and isinstance(other, Mapping):
            merged[key] = merge_config(value, other)
        elif isinstance(value, list) and isinstance(other, list | tuple):
            merged[key] = [*value, *other]
        else:
            merged[key] = value
    return merged


# -- native output -> the reply --------------------------------------------------------------------
def _image_data(message: BaseMessage) -> str | None:
    if isinstance(message.content, str):
        return None
    for block in message.content:
        if isinstance(block, Mapping) and block.get("type") == "image":
            data = block.get("base64") or block.get("data")
            if isinstance(data, str) and data:
                return data
    return None


def graph_reply(result: Any, prompt: str) -> AgentReply:
    """The reply for a graph's final state: its structured response, else the text (and
    image) of its last AI message."""
    if not isinstance(result, Mapping):
        return reply_of(stringify(result), prompt)
    structured = result.get("structured_response")
    if isinstance(structured, BaseModel | Mapping):
        return reply_of(structured, prompt)
    last = next((m for m in reversed(result.get(MESSAGES) or []) if isinstance(m, AIMessage)), None)
    if last is None:
        return reply_of("", prompt)
    return reply_of(str(last.text), prompt, image=_image_data(last))


def declared_channels(graph: Graph) -> frozenset[str]:
    """The state keys a graph declares (excluding LangGraph's internal channels)."""
    builder_channels = getattr(getattr(graph, "builder", None), "channels", None)
    if isinstance(builder_channels, Mapping):
        return frozenset(builder_channels)
    return frozenset(k for k in graph.channels if not k.startswith("__") and ":" not in k)


# -- what LangChain messages hold ------------------------------------------------------------------
def _summary_text(block: Mapping[str, Any]) -> str:
    summary = block.get("summary") or []
    return "".join(str(s.get("text", "")) for s in summary if isinstance(s, Mapping))


# Content-block readers by block ``type``: each returns (kind, text). The
# "reasoning" shapes cover LangChain's standard blocks and OpenAI Responses
# summaries; "thinking" is Anthropic's.
_BLOCK_READERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, str]]] = {
    "text": lambda b: ("text", str(b.get("text") or "")),
    "reasoning": lambda b: ("reasoning", str(b.get("reasoning") or _summary_text(b))),
    "thinking": lambda b: ("reasoning", str(b.get("thinking") or "")),
}


def content_parts(message: BaseMessage) -> list[tuple[str, str]]:
    """The (kind, text) pieces of a message or chunk, kind being text or reasoning."""
    parts: list[tuple[str, str]] = []
    reasoning = message.additional_kwargs.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(("reasoning", reasoning))
    content = message.content
    if isinstance(content, str):
        if content:
            parts.append(("text", content))
        return parts
    for block in content:
        if isinstance(block, str):
            piece = ("text", block)
        else:
            reader = _BLOCK_READERS.get(str(block.get("type")))
            if reader is None:
                continue
            piece = reader(block)
        if piece[1]:
            parts.append(piece)
    return parts


def stringify(value: Any) -> str:
    """A message's text, or any other value as text (JSON for structures)."""
    return str(value.text) if isinstance(value, BaseMessage) else as_text(value)


def tool_message(output: Any) -> Any:
    """The ToolMessage a tool produced: returned directly, or inside a ``Command``."""
    if getattr(output, "type", None) == "tool":
        return output
    update = getattr(output, "update", None)
    if isinstance(update, Mapping):
        for message in update.get(MESSAGES) or []:
            if getattr(message, "type", None) == "tool":
                return message
    return None
