"""``LangGraphRunner``: the runner contract over a compiled LangGraph graph.

The native agent is any compiled graph (``StateGraph(...).compile()``,
``langgraph.prebuilt.create_react_agent(...)``) whose state carries a
``messages`` channel. Importing this module needs the ``langgraph`` extra.

How the contract maps onto LangGraph:

- **Session state.** The graph's checkpointer keeps the thread keyed by
  ``configurable.thread_id``, which is always the session id. The runner also
  keeps the thread's messages under the session key ``"langgraph"`` (per
  agent), so a session loaded from a durable store into a process whose
  checkpointer has never seen the thread, or a graph compiled without a
  checkpointer, still continues the conversation: the saved messages are
  replayed into the input (``add_messages`` deduplicates them by id).
- **Run options** go to ``ainvoke`` / ``astream_events`` as keywords. Their
  ``config`` is deep-merged with the config the runner builds; see
  :func:`merge_config`.
- **Framework context** is spread into the graph input (``messages`` is written
  last, so a context key cannot replace it). Only keys the graph declares as
  state channels come back, and only after the run succeeded.
- **Events.** One mapper (:class:`EventMapper`) turns LangChain callback
  traffic into our events. Stream mode feeds it ``astream_events(version="v2")``;
  run mode feeds it from a callback handler appended to ``config["callbacks"]``
  and reports through the observer channel. Both modes therefore produce the
  same event sequence, with ids taken from LangChain: a model call's run id is
  its ``message_id``, tool-call ids come from the model's tool calls.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, cast

from pydantic import BaseModel, Field, PrivateAttr

from runnertrace._internal.errors import handle_internal_errors, should_raise
from runnertrace._internal.imports import require
from runnertrace.core.agent import Agent
from runnertrace.core.context import ensure_tool_context
from runnertrace.core.events import (
    MessageEnd,
    MessageStart,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    StepEnd,
    StepStart,
    StreamEvent,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)
from runnertrace.core.models import (
    AgentReply,
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequest,
    prompt_of,
)
from runnertrace.core.module import Module
from runnertrace.core.observer import EventSink, claim_observer
from runnertrace.core.runner import Runner
from runnertrace.core.session import Session

if TYPE_CHECKING:
    from runnertrace.core.runtime import Runtime

try:
    from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult, LLMResult
    from langchain_core.runnables.config import RunnableConfig
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.pregel import Pregel
except ImportError as exc:
    require(exc.name or "langgraph", "langgraph")  # raises, naming the extra to install
    raise

__all__ = [
    "EventMapper",
    "LangGraphModule",
    "LangGraphRunner",
    "ScriptedChatModel",
    "merge_config",
]

# Any compiled graph, whatever its state, context, input and output types.
Graph: TypeAlias = "Pregel[Any, Any, Any, Any]"

STATE_KEY = "langgraph"
MESSAGES = "messages"

# Every key a RunnableConfig may hold. Declared at the top level of the run
# options they would be dropped silently by ``ainvoke``; they belong in config.
RUNNABLE_CONFIG_KEYS: frozenset[str] = frozenset(
    RunnableConfig.__required_keys__ | RunnableConfig.__optional_keys__
)

# State keys the runner owns: the conversation is session state, not context,
# and a structured response belongs to one run's reply.
_RUNNER_OWNED_CHANNELS = frozenset({MESSAGES, "structured_response"})

_STEP_TAG = re.compile(r"^graph:step:(\d+)$")


# --------------------------------------------------------------------------------------
# config merge
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# native -> our events
# --------------------------------------------------------------------------------------
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


def _content_parts(message: BaseMessage) -> list[tuple[str, str]]:
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


def _stringify(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseMessage):
        return str(value.text)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # circular structure
        return repr(value)


def _tool_message(output: Any) -> Any:
    """The ToolMessage a tool produced: returned directly, or inside a ``Command``."""
    if getattr(output, "type", None) == "tool":
        return output
    update = getattr(output, "update", None)
    if isinstance(update, Mapping):
        for message in update.get(MESSAGES) or []:
            if getattr(message, "type", None) == "tool":
                return message
    return None


@dataclass
class _Call:
    key: int | str
    id: str | None
    name: str | None
    started: bool = False
    buffered: list[str] = field(default_factory=list)


@dataclass
class _Message:
    message_id: str
    content_seen: bool = False
    reasoning_open: bool = False
    calls: dict[int | str, _Call] = field(default_factory=dict)

    @property
    def reasoning_id(self) -> str:
        return f"{self.message_id}:reasoning"


@dataclass
class _ToolRun:
    name: str
    inputs: Any
    tool_call_id: str | None
    standalone_id: str | None = None


class EventMapper:
    """Translates LangChain/LangGraph callback traffic into our stream events.

    Each method takes one native callback and returns the events it implies, so
    the same mapping serves both feeds: ``astream_events`` dicts in stream mode,
    callback-handler calls in run mode. Pairing is kept by construction:

    - a node run tagged ``graph:step:N`` opens a step (concurrent runs of one
      node in one superstep, e.g. LangGraph's per-call ``tools`` tasks, share a
      single step that closes with the last of them);
    - a chat-model run is a message whose id is the run id; tool calls it asks
      for open inside it (from streamed ``tool_call_chunks``, or from the final
      message's ``tool_calls`` when it did not stream) and end with it;
    - a tool run resolves to its tool call through the ToolMessage it returns; a
      tool run nobody asked for gets a start/args/end of its own;
    - :meth:`close` ends whatever is still open, for runs that fail midway.
    """

    def __init__(self) -> None:
        self._step_runs: dict[str, tuple[str, int]] = {}
        self._open_steps: dict[tuple[str, int], int] = {}
        self._messages: dict[str, _Message] = {}
        self._tools: dict[str, _ToolRun] = {}
        self._awaiting: dict[str, str] = {}  # tool_call_id -> tool name, asked but not answered

    # -- steps ------------------------------------------------------------------------
    def chain_start(
        self, run_id: str, name: str, tags: Sequence[str], metadata: Mapping[str, Any]
    ) -> list[StreamEvent]:
        index = next((int(m.group(1)) for t in tags if (m := _STEP_TAG.match(t))), None)
        if index is None:
            return []
        key = (self._step_name(name, metadata), index)
        self._step_runs[run_id] = key
        count = self._open_steps.get(key, 0)
        self._open_steps[key] = count + 1
        return [] if count else [StepStart(step_name=key[0], step_index=index)]

    @staticmethod
    def _step_name(name: str, metadata: Mapping[str, Any]) -> str:
        """The node name, prefixed by the enclosing nodes when inside a subgraph."""
        namespace = str(metadata.get("langgraph_checkpoint_ns") or "")
        path = [segment.split(":", 1)[0] for segment in namespace.split("|") if segment]
        if len(path) > 1:
            return "/".join(path)
        return str(metadata.get("langgraph_node") or name)

    def chain_end(self, run_id: str) -> list[StreamEvent]:
        key = self._step_runs.pop(run_id, None)
        if key is None:
            return []
        count = self._open_steps.pop(key) - 1
        if count:
            self._open_steps[key] = count
            return []
        return [StepEnd(step_name=key[0], step_index=key[1])]

    # -- model calls --------------------------------------------------------------------
    def model_start(self, run_id: str, metadata: Mapping[str, Any]) -> list[StreamEvent]:
        self._messages[run_id] = _Message(message_id=run_id)
        model = metadata.get("ls_model_name")
        provider = metadata.get("ls_provider")
        return [
            MessageStart(
                message_id=run_id,
                model=str(model) if model else None,
                provider=str(provider) if provider else None,
            )
        ]

    def model_chunk(self, run_id: str, chunk: Any) -> list[StreamEvent]:
        state = self._messages.get(run_id)
        if state is None or not isinstance(chunk, BaseMessage):
            return []
        events = self._content_events(state, _content_parts(chunk))
        for tool_chunk in getattr(chunk, "tool_call_chunks", None) or []:
            events.extend(self._close_reasoning(state))
            events.extend(self._tool_chunk(state, tool_chunk))
        return events

    def model_end(
        self, run_id: str, message: Any, *, finish_reason: str | None = None
    ) -> list[StreamEvent]:
        state = self._messages.pop(run_id, None)
        if state is None:
            return []
        final = message if isinstance(message, BaseMessage) else None
        events: list[StreamEvent] = []
        if final is not None and not state.content_seen:
            events.extend(self._content_events(state, _content_parts(final)))
        events.extend(self._close_reasoning(state))
        final_calls: list[Mapping[str, Any]] = list(getattr(final, "tool_calls", None) or [])
        for position, call in enumerate(state.calls.values()):
            if not call.started:
                fallback = final_calls[position] if position < len(final_calls) else {}
                call.id = call.id or fallback.get("id") or f"{state.message_id}:{call.key}"
                call.name = call.name or fallback.get("name") or "unknown"
                events.extend(self._start_call(state, call))
        streamed = {call.id for call in state.calls.values()}
        for position, tool_call in enumerate(final_calls):
            if tool_call.get("id") in streamed:
                continue
            call_id = tool_call.get("id") or f"{state.message_id}:{position}"
            events.extend(
                self._whole_call(call_id, str(tool_call.get("name")), tool_call.get("args"), state)
            )
        events.extend(ToolCallEnd(tool_call_id=str(call.id)) for call in state.calls.values())
        events.append(self._message_end(state, final, finish_reason))
        return events

    def _content_events(self, state: _Message, parts: list[tuple[str, str]]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for kind, text in parts:
            state.content_seen = True
            if kind == "reasoning":
                if not state.reasoning_open:
                    state.reasoning_open = True
                    events.append(ReasoningStart(message_id=state.reasoning_id))
                events.append(ReasoningDelta(message_id=state.reasoning_id, delta=text))
            else:
                events.extend(self._close_reasoning(state))
                events.append(TextDelta(message_id=state.message_id, delta=text))
        return events

    @staticmethod
    def _close_reasoning(state: _Message) -> list[StreamEvent]:
        if not state.reasoning_open:
            return []
        state.reasoning_open = False
        return [ReasoningEnd(message_id=state.reasoning_id)]

    def _tool_chunk(self, state: _Message, chunk: Mapping[str, Any]) -> list[StreamEvent]:
        key = chunk.get("index")
        if key is None:
            key = chunk.get("id") or len(state.calls)
        call = state.calls.get(key)
        if call is None:
            call = state.calls[key] = _Call(key=key, id=None, name=None)
        call.id = call.id or chunk.get("id")
        call.name = call.name or chunk.get("name")
        args = chunk.get("args") or ""
        if call.started:
            return [ToolCallArgs(tool_call_id=str(call.id), delta=args)] if args else []
        if args:
            call.buffered.append(args)
        # Start only once both id and name are known; args seen so far are replayed.
        return self._start_call(state, call) if call.id and call.name else []

    def _start_call(self, state: _Message, call: _Call) -> list[StreamEvent]:
        call.started = True
        call_id, name = str(call.id), str(call.name)
        self._awaiting[call_id] = name
        events: list[StreamEvent] = [
            ToolCallStart(tool_call_id=call_id, tool_name=name, parent_message_id=state.message_id)
        ]
        if call.buffered:
            events.append(ToolCallArgs(tool_call_id=call_id, delta="".join(call.buffered)))
            call.buffered.clear()
        return events

    def _whole_call(
        self, call_id: str, name: str, args: Any, state: _Message | None = None
    ) -> list[StreamEvent]:
        """Start, arguments and end of a call that did not stream."""
        self._awaiting[call_id] = name
        events: list[StreamEvent] = [
            ToolCallStart(
                tool_call_id=call_id,
                tool_name=name,
                parent_message_id=state.message_id if state else None,
            )
        ]
        if args not in (None, {}, ""):
            events.append(ToolCallArgs(tool_call_id=call_id, delta=_stringify(args)))
        events.append(ToolCallEnd(tool_call_id=call_id))
        return events

    @staticmethod
    def _message_end(
        state: _Message, final: BaseMessage | None, finish_reason: str | None
    ) -> MessageEnd:
        usage: Mapping[str, Any] = getattr(final, "usage_metadata", None) or {}
        metadata: Mapping[str, Any] = getattr(final, "response_metadata", None) or {}
        input_details = usage.get("input_token_details") or {}
        output_details = usage.get("output_token_details") or {}
        response_id = metadata.get("id") or getattr(final, "id", None)
        if isinstance(response_id, str) and response_id.startswith("lc_"):
            response_id = None  # LangChain's own placeholder, not a provider id
        reason = finish_reason or metadata.get("finish_reason") or metadata.get("stop_reason")
        model = metadata.get("model_name") or metadata.get("model")
        return MessageEnd(
            message_id=state.message_id,
            finish_reason=str(reason) if reason else None,
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cache_read_input_tokens=input_details.get("cache_read"),
            reasoning_output_tokens=output_details.get("reasoning"),
            response_model=str(model) if model else None,
            response_id=str(response_id) if response_id else None,
        )

    # -- tools -------------------------------------------------------------------------
    def tool_start(
        self, run_id: str, name: str, inputs: Any, tool_call_id: str | None
    ) -> list[StreamEvent]:
        run = self._tools[run_id] = _ToolRun(name=name, inputs=inputs, tool_call_id=tool_call_id)
        if tool_call_id in self._awaiting:
            return []
        if tool_call_id is None and name in self._awaiting.values():
            # Stream mode does not carry the call id at start; the ToolMessage
            # returned at the end names the call.
            return []
        run.standalone_id = tool_call_id or run_id
        return self._whole_call(run.standalone_id, name, inputs)

    def tool_end(self, run_id: str, output: Any) -> list[StreamEvent]:
        message = _tool_message(output)
        if message is None:
            return self._tool_result(run_id, None, _stringify(output), is_error=False)
        return self._tool_result(
            run_id,
            getattr(message, "tool_call_id", None),
            _stringify(message.content),
            is_error=getattr(message, "status", None) == "error",
        )

    def tool_error(
        self, run_id: str, error: BaseException | None, tool_call_id: str | None
    ) -> list[StreamEvent]:
        text = f"{type(error).__name__}: {error}" if error is not None else "tool failed"
        return self._tool_result(run_id, tool_call_id, text, is_error=True)

    def _tool_result(
        self, run_id: str, call_id: str | None, content: str, *, is_error: bool
    ) -> list[StreamEvent]:
        run = self._tools.pop(run_id, None)
        if run is None:
            return []
        events: list[StreamEvent] = []
        resolved = run.standalone_id or call_id or run.tool_call_id
        if resolved is None or resolved not in self._awaiting:
            resolved = resolved or run_id
            events.extend(self._whole_call(resolved, run.name, run.inputs))
        self._awaiting.pop(resolved, None)
        events.append(ToolCallResult(tool_call_id=resolved, content=content, is_error=is_error))
        return events

    # -- failure -----------------------------------------------------------------------
    def close(self) -> list[StreamEvent]:
        """End every open message and step (innermost first) after a failed run."""
        events: list[StreamEvent] = []
        for run_id in list(self._messages):
            events.extend(self.model_end(run_id, None, finish_reason="error"))
        for run_id in reversed(list(self._step_runs)):
            events.extend(self.chain_end(run_id))
        self._tools.clear()
        return events


def _data(event: Mapping[str, Any]) -> Mapping[str, Any]:
    data = event.get("data")
    return data if isinstance(data, Mapping) else {}


# astream_events(version="v2") event name -> the mapper call it implies.
_STREAM_FEED: dict[str, Callable[[EventMapper, Mapping[str, Any]], list[StreamEvent]]] = {
    "on_chain_start": lambda m, e: m.chain_start(
        str(e["run_id"]), str(e.get("name") or ""), e.get("tags") or [], e.get("metadata") or {}
    ),
    "on_chain_end": lambda m, e: m.chain_end(str(e["run_id"])),
    "on_chat_model_start": lambda m, e: m.model_start(str(e["run_id"]), e.get("metadata") or {}),
    "on_chat_model_stream": lambda m, e: m.model_chunk(str(e["run_id"]), _data(e).get("chunk")),
    "on_chat_model_end": lambda m, e: m.model_end(str(e["run_id"]), _data(e).get("output")),
    "on_tool_start": lambda m, e: m.tool_start(
        str(e["run_id"]), str(e.get("name") or ""), _data(e).get("input"), None
    ),
    "on_tool_end": lambda m, e: m.tool_end(str(e["run_id"]), _data(e).get("output")),
    "on_tool_error": lambda m, e: m.tool_error(
        str(e["run_id"]), _data(e).get("error"), _data(e).get("tool_call_id")
    ),
}


def _map_stream_event(mapper: EventMapper, event: Mapping[str, Any]) -> list[StreamEvent]:
    feed = _STREAM_FEED.get(str(event.get("event")))
    if feed is None:
        return []
    with handle_internal_errors("langgraph stream mapping"):
        return feed(mapper, event)
    return []


class ObserverCallback(BaseCallbackHandler):
    """Run-mode observation: reports our events as LangChain callbacks arrive.

    Appended to ``config["callbacks"]`` (it never displaces a caller's handler).
    Deliberately a *sync* handler that runs inline: LangChain calls it directly
    on whichever thread raised the callback, in order. An async handler would be
    driven from sync code (sync tools, sync branch functions) through a worker
    thread running a fresh event loop per callback, which measured several
    milliseconds per event. Calls may come from tool worker threads, so they are
    serialised by a lock. A fault in the mapping is logged once and the run goes
    on; under pytest it raises.
    """

    run_inline = True

    def __init__(self, report: EventSink) -> None:
        super().__init__()
        self.raise_error = should_raise()
        self.mapper = EventMapper()
        self._report = report
        self._lock = threading.Lock()

    def _feed(self, method: Callable[..., list[StreamEvent]], *args: Any) -> None:
        with self._lock, handle_internal_errors("langgraph run-mode observer"):
            for event in method(*args):
                self._report(event)

    def close(self) -> None:
        self._feed(self.mapper.close)

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: Any,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or ""
        self._feed(self.mapper.chain_start, str(run_id), str(name), tags or [], metadata or {})

    def on_chain_end(self, outputs: Any, *, run_id: Any, **kwargs: Any) -> None:
        self._feed(self.mapper.chain_end, str(run_id))

    def on_chain_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        self._feed(self.mapper.chain_end, str(run_id))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: Any,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._feed(self.mapper.model_start, str(run_id), metadata or {})

    def on_llm_new_token(
        self, token: Any, *, chunk: Any = None, run_id: Any, **kwargs: Any
    ) -> None:
        if isinstance(chunk, ChatGenerationChunk):
            self._feed(self.mapper.model_chunk, str(run_id), chunk.message)

    def on_llm_end(self, response: LLMResult, *, run_id: Any, **kwargs: Any) -> None:
        generations = response.generations[0] if response.generations else []
        first = generations[0] if generations else None
        message = first.message if isinstance(first, ChatGeneration) else None
        self._feed(self.mapper.model_end, str(run_id), message)

    def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        self._feed(lambda: self.mapper.model_end(str(run_id), None, finish_reason="error"))

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: Any,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or "unknown"
        call_id = kwargs.get("tool_call_id")
        self._feed(
            self.mapper.tool_start,
            str(run_id),
            str(name),
            inputs if inputs is not None else input_str,
            str(call_id) if call_id else None,
        )

    def on_tool_end(self, output: Any, *, run_id: Any, **kwargs: Any) -> None:
        self._feed(self.mapper.tool_end, str(run_id), output)

    def on_tool_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        self._feed(self.mapper.tool_error, str(run_id), error, kwargs.get("tool_call_id"))


# --------------------------------------------------------------------------------------
# requests -> input, output -> reply
# --------------------------------------------------------------------------------------
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
    "any": lambda r: {"type": "text", "text": _stringify(r.content)},
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


def _image_data(message: BaseMessage) -> str | None:
    if isinstance(message.content, str):
        return None
    for block in message.content:
        if isinstance(block, Mapping) and block.get("type") == "image":
            data = block.get("base64") or block.get("data")
            if isinstance(data, str) and data:
                return data
    return None


def _reply(result: Any, prompt: str) -> AgentReply:
    if not isinstance(result, Mapping):
        return AgentReplyText(text=_stringify(result), prompt=prompt)
    structured = result.get("structured_response")
    if isinstance(structured, BaseModel):
        return AgentReplyAny(content=structured.model_dump(mode="json"), prompt=prompt)
    if isinstance(structured, Mapping):
        return AgentReplyAny(content=dict(structured), prompt=prompt)
    last = next((m for m in reversed(result.get(MESSAGES) or []) if isinstance(m, AIMessage)), None)
    if last is None:
        return AgentReplyText(text="", prompt=prompt)
    text = str(last.text)
    image = _image_data(last)
    if image is not None:
        return AgentReplyImage(text=text, image_data=image, prompt=prompt)
    return AgentReplyText(text=text, prompt=prompt)


def _declared_channels(graph: Graph) -> frozenset[str]:
    """The state keys a graph declares (excluding LangGraph's internal channels)."""
    builder_channels = getattr(getattr(graph, "builder", None), "channels", None)
    if isinstance(builder_channels, Mapping):
        return frozenset(builder_channels)
    return frozenset(k for k in graph.channels if not k.startswith("__") and ":" not in k)


@dataclass
class _Prepared:
    graph: Graph
    input: dict[str, Any]
    config: dict[str, Any]
    options: dict[str, Any]
    loaded_context: dict[str, Any] | None


# --------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------
class LangGraphRunner(Runner):
    """Runs compiled LangGraph graphs in run (``ainvoke``) or stream (``astream_events``) mode."""

    framework: ClassVar[str] = "langgraph"
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "input": "the runner builds the graph input from the requests",
        "version": "the runner picks the astream_events/ainvoke output version it maps",
        "stream_mode": "the runner reads the final state and maps the event stream itself",
        "output_keys": "the runner needs the full final state to build the reply",
        "print_mode": "printing stream output would interleave with the mapped events",
    }

    @classmethod
    def validate_run_options(cls, options: Mapping[str, Any]) -> None:
        """Reserved keys, RunnableConfig keys at the top level, and ``thread_id``."""
        super().validate_run_options(options)
        for key in options:
            if key in RUNNABLE_CONFIG_KEYS and key != "config":
                raise ValueError(
                    f"run option {key!r} is a RunnableConfig key and ainvoke would silently "
                    f"ignore it at the top level; declare it inside config={{{key!r}: ...}}"
                )
        config = options.get("config")
        if config is None:
            return
        if not isinstance(config, Mapping):
            raise ValueError(
                f"run option 'config' must be a mapping (a RunnableConfig), "
                f"got {type(config).__name__}"
            )
        configurable = config.get("configurable")
        if isinstance(configurable, Mapping) and "thread_id" in configurable:
            raise ValueError(
                "run option config['configurable']['thread_id'] is reserved by "
                f"{cls.__name__}: the thread id is always the session id"
            )

    # -- helpers ---------------------------------------------------------------------
    @staticmethod
    def _graph(agent: Agent) -> Graph:
        native = agent.native
        if not isinstance(native, Pregel):
            raise TypeError(
                f"agent {agent.name!r} is not a compiled LangGraph graph "
                f"(got {type(native).__name__})"
            )
        return native

    @staticmethod
    async def _thread_exists(graph: Graph, thread_id: str) -> bool:
        checkpointer = graph.checkpointer
        if not isinstance(checkpointer, BaseCheckpointSaver):
            return False
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        return await checkpointer.aget_tuple(config) is not None

    async def _prepare(
        self,
        agent: Agent,
        session: Session,
        requests: list[AgentRequest],
        callbacks: list[Any],
    ) -> _Prepared:
        graph = self._graph(agent)
        message, request_state = graph_input(requests)
        options = await agent.resolve_run_options(session, requests)
        caller_config = options.pop("config", None)
        ours: dict[str, Any] = {"configurable": {"thread_id": session.id}}
        if callbacks:
            ours["callbacks"] = callbacks
        config = merge_config(ours, caller_config)

        saved = (session.get(STATE_KEY) or {}).get(agent.name) or {}
        messages: list[BaseMessage] = [message]
        if saved.get(MESSAGES) and not await self._thread_exists(graph, session.id):
            messages = [*saved[MESSAGES], message]
        loaded = session.load_framework_context()
        # The framework context first, so neither it nor a request can replace
        # the messages the runner writes last.
        native_input = {**(loaded or {}), **request_state, MESSAGES: messages}
        return _Prepared(graph, native_input, config, options, loaded)

    def _save(self, agent: Agent, session: Session, prepared: _Prepared, final: Any) -> None:
        if not isinstance(final, Mapping):
            return
        state = dict(session.get(STATE_KEY) or {})
        state[agent.name] = {"thread_id": session.id, MESSAGES: list(final.get(MESSAGES) or [])}
        session.set(STATE_KEY, state)
        loaded = prepared.loaded_context
        if loaded is not None:
            declared = _declared_channels(prepared.graph) - _RUNNER_OWNED_CHANNELS
            produced = {k: v for k, v in final.items() if k in declared}
            session.write_back_framework_context(loaded, produced)

    # -- run / stream ------------------------------------------------------------------
    async def run(self, agent: Agent, session: Session, requests: list[AgentRequest]) -> AgentReply:
        with claim_observer() as report, ensure_tool_context(agent, session, requests):
            observer = ObserverCallback(report)
            prepared = await self._prepare(agent, session, requests, [observer])
            try:
                # Through a plain callable: the overloads cannot type **options.
                invoke: Callable[..., Awaitable[Any]] = prepared.graph.ainvoke
                final = await invoke(prepared.input, prepared.config, **prepared.options)
            finally:
                observer.close()
        self._save(agent, session, prepared, final)
        return _reply(final, prompt_of(requests))

    async def stream(
        self, agent: Agent, session: Session, requests: list[AgentRequest]
    ) -> AsyncIterator[StreamEvent]:
        # Hide any run-mode observer from nested runs: in stream mode the events
        # are yielded, not reported.
        with claim_observer(), ensure_tool_context(agent, session, requests):
            prepared = await self._prepare(agent, session, requests, [])
            mapper = EventMapper()
            root: str | None = None
            final: Any = None
            # Through a plain callable: the overloads cannot type **options.
            astream_events = cast(
                Callable[..., AsyncGenerator[Mapping[str, Any], None]],
                prepared.graph.astream_events,
            )
            native_events = astream_events(
                prepared.input, prepared.config, version="v2", **prepared.options
            )
            async with aclosing(native_events):
                try:
                    async for native in native_events:
                        kind = native.get("event")
                        if root is None and kind == "on_chain_start":
                            root = str(native["run_id"])
                        elif kind == "on_chain_end" and str(native["run_id"]) == root:
                            final = _data(native).get("output")
                        for event in _map_stream_event(mapper, native):
                            yield event
                except Exception:
                    for event in mapper.close():
                        yield event
                    raise
            for event in mapper.close():
                yield event
        self._save(agent, session, prepared, final)


class LangGraphModule(Module):
    """Registers compiled graphs with the runtime, paired with a :class:`LangGraphRunner`.

    An agent's name is the graph's ``name`` (``create_react_agent(..., name=...)``);
    pass ``(name, graph)`` pairs, or ``add(graph, name=...)``, to override it.
    """

    runner_class = LangGraphRunner

    def __init__(self, agents: Iterable[Any], runtime: Runtime | None = None) -> None:
        self._names: dict[int, str] = {}
        super().__init__(agents, runtime)

    def add(self, native: Any, name: str | None = None) -> Agent:
        if isinstance(native, tuple):
            name, native = native
        if name is not None:
            self._names[id(native)] = name
        return super().add(native)

    def agent_name(self, native: Any) -> str:
        return self._names.get(id(native)) or super().agent_name(native)


# --------------------------------------------------------------------------------------
# an offline chat model
# --------------------------------------------------------------------------------------
class ScriptedChatModel(BaseChatModel):
    """A deterministic offline chat model that replays scripted ``AIMessage`` replies.

    LangChain's own fakes cannot drive a tool-calling agent (their
    ``bind_tools`` is not implemented, and streaming a tool-call-only message
    fails), so examples and tests use this one. Each call returns the next
    scripted message; streamed, it yields the tool-call chunks (arguments split
    in two, as providers do) and then the text word by word, with usage on the
    last chunk. ``calls`` records the messages each call received.
    """

    # Out of repr: LangChain serialises the model (via repr) for every callback
    # handler's on_chat_model_start, and a long script would dominate that cost.
    responses: list[AIMessage] = Field(repr=False)
    model_name: str = "scripted"

    _position: int = PrivateAttr(default=0)
    _calls: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        return self._calls

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "scripted"
        params["ls_model_name"] = self.model_name
        return params

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any
    ) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        if self._position >= len(self.responses):
            raise RuntimeError(
                f"ScriptedChatModel ran out of responses after {len(self.responses)} calls"
            )
        scripted = self.responses[self._position]
        self._position += 1
        self._calls.append(list(messages))
        metadata = {
            "finish_reason": "tool_calls" if scripted.tool_calls else "stop",
            "model_name": self.model_name,
            **scripted.response_metadata,
        }
        # A copy: the agent stamps its name on the message it receives. A fresh id
        # unless scripted: add_messages replaces a message whose id it has seen.
        return scripted.model_copy(
            update={
                "id": scripted.id or f"scripted-{uuid.uuid4().hex}",
                "response_metadata": metadata,
            }
        )

    @staticmethod
    def _chunks(message: AIMessage) -> Iterator[ChatGenerationChunk]:
        for index, call in enumerate(message.tool_calls):
            args = json.dumps(call["args"])
            half = len(args) // 2
            for part, first in ((args[:half], True), (args[half:], False)):
                tool_chunk = {
                    "name": call["name"] if first else None,
                    "args": part,
                    "id": call["id"] if first else None,
                    "index": index,
                    "type": "tool_call_chunk",
                }
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content="", id=message.id, tool_call_chunks=[tool_chunk])
                )
        if isinstance(message.content, str):
            pieces: list[Any] = re.findall(r"\s*\S+", message.content)
        else:
            pieces = [[block] for block in message.content]
        for piece in pieces:
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                id=message.id,
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
                chunk_position="last",
            )
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from self._chunks(self._next(messages))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(self._next(messages)):
            yield chunk
