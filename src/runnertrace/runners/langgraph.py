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
- **Run options** go to ``ainvoke`` / ``astream`` as keywords. Their
  ``config`` is deep-merged with the config the runner builds; see
  :func:`merge_config`.
- **Framework context** is spread into the graph input (``messages`` is written
  last, so a context key cannot replace it). Only keys the graph declares as
  state channels come back, and only after the run succeeded.
- **Events.** One LangChain callback handler, first in ``config["callbacks"]``,
  turns the run's callbacks into events through the core
  :class:`~runnertrace.runners._kit.builder.EventBuilder`, in both modes, with ids taken
  from LangChain (a model call's run id is its ``message_id``; tool-call ids come
  from the model's tool calls). A chat span starts at ``on_chat_model_start``
  with what was sent: the messages (system messages become the system
  instructions), the invocation parameters and the bound tools. Failed model
  calls and tools end their own spans with the exception (``on_llm_error``,
  ``on_tool_error``), so each ``RetryPolicy`` attempt is a span of its own.
- **Compositions.** A subgraph's nodes are steps inside its node's step, named
  ``<node>/<inner node>`` and carrying the subgraph's name as their agent (a
  supervisor routing between agent subgraphs is a row of such node steps on the
  run's line). Root-graph tasks that run at once (``Send`` branches, parallel
  edges) are builder branches keyed by their task in LangGraph's checkpoint
  namespace: each keeps its own steps and calls while they overlap. Concurrent
  tasks *inside* a subgraph stay on their root task's lane.
- **Run mode** untraced is a plain ``ainvoke``: no handler is installed. Traced,
  the handler reports to the observer and makes each tool's and model call's
  span current while it runs (see :class:`_TracedMapper`).
- **Stream mode** drives ``astream(stream_mode=["messages", "updates"],
  subgraphs=True)``: the "messages" mode makes chat models stream, and each item
  it yields is a moment to hand over the events the handler has made since.
  The final state is the root graph's output, as the handler saw it end.
  Untraced, the stream's events leave the request fields out (nobody records
  them), and no call's span is made current.
- **Other LangChain tracers.** OpenInference's LangChain instrumentor (and any
  that works the same way) adds its tracer to every callback manager; next to
  ours, each model and tool call would be a span twice and its tokens counted
  twice. The default keeps it out of *traced* runs only (see :class:`_StandIn`):
  ours is the one tree, while HTTP instrumentation inside a call still nests
  under its span (OTel's suppression key would have silenced that too).
  Untraced runs are its to trace, as before.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
from abc import ABCMeta
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager, aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, cast
from uuid import UUID

from pydantic import BaseModel, JsonValue

from runnertrace._internal.errors import should_raise
from runnertrace._internal.imports import missing_extra
from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText
from runnertrace.core.module import Module
from runnertrace.core.observer import NestedRun, open_nested_run
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import (
    Message,
    Part,
    as_text,
    blob_part,
    reasoning_part,
    request_parameters,
    text_part,
    tool_call_part,
    tool_definition,
    tool_response_part,
)
from runnertrace.runners._kit.genai import message as semconv_message
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    reply_of,
    save,
)

if TYPE_CHECKING:
    from runnertrace.core.runtime import Runtime

try:
    from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, convert_to_messages
    from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
    from langchain_core.runnables.config import RunnableConfig
    from langchain_core.tracers.base import BaseTracer
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.pregel import Pregel
except ImportError as exc:
    raise missing_extra(exc, "langgraph") from exc

__all__ = ["LangGraphModule", "LangGraphRunner", "merge_config"]

# Any compiled graph, whatever its state, context, input and output types.
Graph: TypeAlias = "Pregel[Any, Any, Any, Any]"

STATE_KEY = "langgraph"
_boundary = MappingBoundary("langgraph")
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


# -- requests -> native input (and the reply) ------------------------------------------------------
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
        return reply_of(_stringify(result), prompt)
    structured = result.get("structured_response")
    if isinstance(structured, BaseModel | Mapping):
        return reply_of(structured, prompt)
    last = next((m for m in reversed(result.get(MESSAGES) or []) if isinstance(m, AIMessage)), None)
    if last is None:
        return reply_of("", prompt)
    return reply_of(str(last.text), prompt, image=_image_data(last))


def _declared_channels(graph: Graph) -> frozenset[str]:
    """The state keys a graph declares (excluding LangGraph's internal channels)."""
    builder_channels = getattr(getattr(graph, "builder", None), "channels", None)
    if isinstance(builder_channels, Mapping):
        return frozenset(builder_channels)
    return frozenset(k for k in graph.channels if not k.startswith("__") and ":" not in k)


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
    return str(value.text) if isinstance(value, BaseMessage) else as_text(value)


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


# -- what a model call is sent ---------------------------------------------------------------------
def _parts(message: BaseMessage) -> list[Part]:
    parts = [
        reasoning_part(text) if kind == "reasoning" else text_part(text)
        for kind, text in _content_parts(message)
    ]
    if not isinstance(message.content, str):
        for block in message.content:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind in ("image", "file", "audio", "video", "image_url"):
                parts.append(blob_part(str(kind)))  # the bytes are never copied into a span
    return parts


def _ai_parts(message: BaseMessage) -> list[Part]:
    calls = [
        tool_call_part(c.get("id"), c["name"], c["args"])
        for c in getattr(message, "tool_calls", None) or []
    ]
    return [*_parts(message), *calls]


def _tool_parts(message: BaseMessage) -> list[Part]:
    call_id = getattr(message, "tool_call_id", None)
    return [tool_response_part(call_id, message.name, str(message.text))]


# LangChain message type -> (semconv role, parts reader). System messages are not
# here: they are the request's system instructions.
_ROLES: dict[str, tuple[str, Callable[[BaseMessage], list[dict[str, JsonValue]]]]] = {
    "human": ("user", _parts),
    "ai": ("assistant", _ai_parts),
    "AIMessageChunk": ("assistant", _ai_parts),
    "tool": ("tool", _tool_parts),
    "function": ("tool", _tool_parts),
    "chat": ("user", _parts),
}

# LangChain's standard tracing metadata names, for models that keep their parameters
# elsewhere; an invocation parameter of the same meaning wins (it is read later).
_LS_PARAMETERS = {
    "ls_temperature": "temperature",
    "ls_max_tokens": "max_tokens",
    "ls_stop": "stop_sequences",
}


def _request(
    messages: Sequence[BaseMessage], params: Mapping[str, Any], metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """The request fields of a MessageStart, from what LangChain says it sends."""
    sent: list[Message] = []
    system: list[str] = []
    for message in messages:
        if message.type == "system":
            system.append(str(message.text))
            continue
        role, reader = _ROLES.get(message.type, ("user", _parts))
        sent.append(semconv_message(role, reader(message)))
    tools = [_tool_definition(t) for t in params.get("tools") or () if isinstance(t, Mapping)]
    return {
        "input_messages": sent or None,
        "system_instructions": "\n\n".join(system) or None,
        "request_parameters": request_parameters(
            {_LS_PARAMETERS[k]: v for k, v in metadata.items() if k in _LS_PARAMETERS}, params
        ),
        "tool_definitions": tools or None,
    }


def _tool_definition(tool: Mapping[str, Any]) -> Part:
    """One bound tool (OpenAI ``{"function": ...}`` or Anthropic ``input_schema`` shape)."""
    function = tool.get("function")
    spec: Mapping[str, Any] = function if isinstance(function, Mapping) else tool
    parameters = spec.get("parameters") or spec.get("input_schema")
    return tool_definition(spec.get("name"), spec.get("description"), parameters)


def _usage(message: BaseMessage | None) -> dict[str, Any]:
    """The usage and response fields of a MessageEnd, from the final message."""
    usage: Mapping[str, Any] = getattr(message, "usage_metadata", None) or {}
    metadata: Mapping[str, Any] = getattr(message, "response_metadata", None) or {}
    response_id = metadata.get("id") or getattr(message, "id", None)
    if isinstance(response_id, str) and response_id.startswith("lc_"):
        response_id = None  # LangChain's own placeholder, not a provider id
    reason = metadata.get("finish_reason") or metadata.get("stop_reason")
    model = metadata.get("model_name") or metadata.get("model")
    return {
        "finish_reason": str(reason) if reason else None,
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cache_read_input_tokens": (usage.get("input_token_details") or {}).get("cache_read"),
        "reasoning_output_tokens": (usage.get("output_token_details") or {}).get("reasoning"),
        "response_model": str(model) if model else None,
        "response_id": str(response_id) if response_id else None,
    }


def _parent_task(task: str) -> str:
    """The task whose node runs the subgraph ``task`` belongs to (``""``: the root graph)."""
    return task.rpartition("|")[0]


def _is_tool_call_task(inputs: Any) -> bool:
    """A per-call task of a prebuilt agent's ``tools`` node (one ``Send`` per tool call)."""
    return isinstance(inputs, Mapping) and inputs.get("__type") == "tool_call_with_context"


def _step_name(name: str, task: str, metadata: Mapping[str, Any]) -> str:
    """The node name, prefixed by the enclosing nodes when inside a subgraph."""
    path = [segment.split(":", 1)[0] for segment in task.split("|") if segment]
    if len(path) > 1:
        return "/".join(path)
    return str(metadata.get("langgraph_node") or name)


def _requests(inputs: Any) -> list[AgentRequestText] | None:
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


# -- native progress -> builder calls (the mapping) ------------------------------------------------
# Set where a call's scope is entered: resetting it succeeds only in that same
# context, which is where the scope may be left (see _TracedMapper).
_entered: contextvars.ContextVar[UUID | None] = contextvars.ContextVar(
    "runnertrace_langgraph_call", default=None
)


# An open step: (step name, step index, builder branch or None for the run's line).
_StepKey: TypeAlias = tuple[str, int, str | None]


@dataclass
class _Model:
    message_id: str
    lane: str | None = None  # the builder branch of the call's task
    streamed: bool = False
    call_ids: set[str] = field(default_factory=set)


@dataclass
class _Task:
    """An open task of the graph: its lane, the task whose subgraph it runs in
    (``""``: the root graph) and its step."""

    lane: str | None
    parent: str
    step: tuple[str, int]


@dataclass
class _Nested:
    """A graph run inside one of the run's tools: its mapper and its nested run."""

    mapper: _Mapper
    run: NestedRun | None
    prompt: str


class _Mapper(BaseCallbackHandler):
    """Turns one run's LangChain callbacks into events, through an :class:`EventBuilder`.

    - A node run tagged ``graph:step:N`` is a step; concurrent runs of one node in
      one superstep (LangGraph's per-call ``tools`` tasks) share a single step.
      A step's agent is the graph that runs the node: a subgraph's name inside
      it, the run's agent at the top; a change of agent between steps is a
      handoff from the previous one.
    - Tasks running at once (``Send`` branches, parallel edges), in the root graph or
      in a subgraph, are lanes: the first holds the lane of the task that runs their
      graph (the run's own line at the top), each other one is a builder branch keyed
      by its task (its LangGraph checkpoint namespace), so its steps, nested subgraph
      steps and model calls stay its own while they overlap. Per-call ``tools`` tasks
      share their node's step (and lane) instead.
    - A chat-model run is a message whose id is the run id, started with what it
      was sent (messages, system instructions, parameters, bound tools), in the lane
      of its task.
    - A tool run answers the call whose id LangChain passes at its start.
    - A graph that a tool runs (an agent used as a tool: ``await agent.ainvoke(...)``
      in a ``@tool``, ``graph.as_tool()``) is another agent's run, not this one's: a
      nested run (:func:`~runnertrace.core.observer.open_nested_run`) under the
      tool's span, mapped by a mapper of its own that its callbacks are routed to.
      Untraced, its events are not this run's stream's.

    Deliberately a *sync* handler that runs inline: LangChain calls it directly,
    in order, on the task (or tool worker thread) that raised the callback. An
    async handler would be driven from sync code through a worker thread running
    a fresh event loop per callback. Calls from worker threads are serialised by
    a lock. A fault here is logged once and the run goes on; under pytest it raises.
    """

    run_inline = True
    # Traced (the subclass): the request fields are made for the observer, and each
    # call's span is current while it runs. Untraced, a stream gets the events alone.
    traced = False

    def __init__(self, builder: EventBuilder, agent_name: str) -> None:
        super().__init__()
        self.raise_error = should_raise()
        self.builder = builder
        self.root: UUID | None = None
        self.output: Any = None  # the root graph's output: the final state
        self._agent_name = agent_name
        self._agent: str | None = None  # the agent of the last step (None: the run's)
        self._lock = threading.Lock()
        self._chains: dict[UUID, str] = {}  # every open chain run -> its name
        self._steps: dict[UUID, _StepKey] = {}
        self._open_steps: dict[_StepKey, int] = {}
        self._tasks: dict[str, _Task] = {}  # open task (checkpoint namespace) -> its lane
        self._task_nodes: dict[UUID, str] = {}  # a node's run -> its task
        self._models: dict[UUID, _Model] = {}
        self._tools: dict[UUID, tuple[str, str]] = {}  # tool run -> (call id, tool name)
        # The namespace this mapper's graph runs in, cut off its tasks' namespaces
        # (a graph run inside a tool is a subgraph of the tool's task for LangGraph).
        self._prefix = ""
        self._in_tools: dict[UUID, Any] = {}  # a chain a tool runs (maybe a graph) -> inputs
        self._nested: dict[UUID, _Nested] = {}  # a graph's run inside a tool -> its run
        self._routes: dict[UUID, _Mapper] = {}  # a run inside such a graph -> its mapper

    # -- scopes (entered only by the traced subclass) -------------------------------------
    def _enter(self, run_id: UUID, scope: AbstractContextManager[None]) -> None:
        return None

    def _leave(self, run_id: UUID) -> None:
        return None

    def close(self) -> None:
        """After the run: a graph run inside a tool that is still open ends as cancelled
        (the traced subclass also leaves what is still entered)."""
        for root in list(self._nested):
            self._end_nested(root, cancelled=True)

    # -- graphs run inside a tool: nested runs --------------------------------------------
    def _route(self, run_id: UUID, parent_run_id: UUID | None) -> _Mapper | None:
        """The mapper of the graph run inside a tool that this run belongs to, if any."""
        child = self._routes.get(run_id)
        if child is None and parent_run_id is not None:
            child = self._routes.get(parent_run_id)
            if child is not None:
                self._routes[run_id] = child
        return child

    def _open_nested(self, root: UUID, task: str) -> _Mapper:
        """A graph that a tool runs has reached its first step (``task``, its namespace
        as LangGraph writes it): its run is a nested run, mapped by a mapper of its own."""
        name = self._chains.pop(root, None) or "LangGraph"
        requests = _requests(self._in_tools.pop(root, None))
        run = open_nested_run(name, mode="run", requests=requests) if self.traced else None
        child: _Mapper
        if run is not None:
            child = _TracedMapper(EventBuilder(run), name)
        else:  # nothing traces it: its events are nobody's
            child = _Mapper(EventBuilder(), name)
        child.root = root
        child._chains[root] = name
        parent = task.rpartition("|")[0]
        child._prefix = f"{parent}|" if parent else ""
        self._nested[root] = _Nested(child, run, requests[0].prompt if requests else "")
        self._routes[root] = child
        return child

    def _end_nested(
        self,
        root: UUID,
        outputs: Any = None,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        nested = self._nested.pop(root, None)
        if nested is None:
            return
        self._routes.pop(root, None)
        child = nested.mapper
        with _boundary:
            if error is not None or cancelled:
                child.fail(error or asyncio.CancelledError())
            child.close()
            if nested.run is None:
                return
            if error is None and not cancelled:
                nested.run.finish(reply=_reply(outputs, nested.prompt))
                return
            cancelled = cancelled or isinstance(error, asyncio.CancelledError)
            nested.run.finish(error=error, cancelled=cancelled)

    # -- steps --------------------------------------------------------------------------
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        child = self._route(run_id, parent_run_id) if self._routes else None
        if child is None:
            child = self._chain_start(
                serialized, inputs, run_id, parent_run_id, tags, metadata, kwargs
            )
        if child is not None:
            self._routes[run_id] = child
            child.on_chain_start(
                serialized,
                inputs,
                run_id=run_id,
                parent_run_id=parent_run_id,
                tags=tags,
                metadata=metadata,
                **kwargs,
            )

    def _chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
        kwargs: dict[str, Any],
    ) -> _Mapper | None:
        """A chain of this run starts; returns the mapper of a graph run inside a tool
        when this is that graph's first step (the caller hands the step to it)."""
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "")
        index = next((int(m.group(1)) for t in tags or () if (m := _STEP_TAG.match(t))), None)
        with self._lock, _boundary:
            if self.root is None:
                self.root = run_id
            self._chains[run_id] = name
            if parent_run_id is not None and (
                parent_run_id in self._tools or parent_run_id in self._in_tools
            ):
                if index is not None and parent_run_id in self._in_tools:
                    # a graph's first step, inside a tool: that graph is another agent's run
                    self._chains.pop(run_id, None)
                    raw = str((metadata or {}).get("langgraph_checkpoint_ns") or "")
                    return self._open_nested(parent_run_id, raw)
                self._in_tools[run_id] = inputs
            if index is None:
                return None
            metadata = metadata or {}
            task = self._task(metadata)
            step = (_step_name(name, task, metadata), index)
            lane = self._lane(task, step, inputs)
            if task:
                self._task_nodes[run_id] = task
            key = (*step, lane)
            self._steps[run_id] = key
            count = self._open_steps.get(key, 0)
            self._open_steps[key] = count + 1
            if count:
                return None
            # the graph running this node: None for the run's own (root) graph
            agent = None
            if parent_run_id is not None and parent_run_id != self.root:
                agent = self._chains.get(parent_run_id)
            if lane is not None:  # a branch: no handoff, its agent is its own
                # A branch forked inside a subgraph's node starts in that node's step.
                parent = self._tasks.get(_parent_task(task)) if lane == task else None
                self.builder.step_start(
                    step[0],
                    index,
                    agent_name=agent or self._agent_name,
                    branch=lane,
                    parent_step=(*parent.step, parent.lane) if parent is not None else None,
                )
                return None
            handoff = agent != self._agent
            self.builder.step_start(
                step[0],
                index,
                agent_name=agent or (self._agent_name if handoff else None),
                handoff_from=(self._agent or self._agent_name) if handoff else None,
            )
            self._agent = agent
        return None

    def _task(self, metadata: Mapping[str, Any]) -> str:
        """The task a callback belongs to: its checkpoint namespace (``"<node>:<task id>"``,
        ``|``-joined inside subgraphs) within this mapper's graph; ``""`` outside any task."""
        task = str(metadata.get("langgraph_checkpoint_ns") or "")
        prefix = self._prefix
        return task[len(prefix) :] if prefix and task.startswith(prefix) else task

    def _lane_of(self, task: str) -> str | None:
        """The lane of ``task``, else of the nearest open task it runs inside."""
        while task:
            found = self._tasks.get(task)
            if found is not None:
                return found.lane
            task = _parent_task(task)
        return None

    def _lane(self, task: str, step: tuple[str, int], inputs: Any) -> str | None:
        """The builder branch of the step of task ``task`` (None: the run's line).

        The lane it inherits is its parent task's (the run's line for the root
        graph's tasks). A per-call tool task joins its node's open step; otherwise
        the task holds the inherited lane if no other task of its graph does, else
        it is a branch of its own."""
        if not task:
            return None
        known = self._tasks.get(task)
        if known is not None:
            return known.lane
        parent = _parent_task(task)
        inherited = self._lane_of(parent)
        siblings = [t for t in self._tasks.values() if t.parent == parent]
        shared = None
        if _is_tool_call_task(inputs):
            shared = next((t for t in siblings if t.step == step), None)
        if shared is not None:
            lane = shared.lane
        elif any(t.lane == inherited for t in siblings):
            lane = task
        else:
            lane = inherited
        self._tasks[task] = _Task(lane, parent, step)
        return lane

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.on_chain_end(outputs, run_id=run_id, **kwargs)
                if run_id == child.root:
                    self._end_nested(run_id, outputs=outputs)
                return
        if run_id == self.root:
            self.output = outputs
        self._in_tools.pop(run_id, None)
        self._end_chain(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.on_chain_error(error, run_id=run_id, **kwargs)
                if run_id == child.root:
                    self._end_nested(run_id, error=error)
                return
        self._in_tools.pop(run_id, None)
        key = self._steps.get(run_id)
        if key is not None:
            # A failed or cancelled step: LangChain may report its model call's error
            # only later (from a shielded task), so the call ends here, inside its step.
            # Only its own lane's: another branch's call ends when that branch does.
            lane = key[2]
            with self._lock, _boundary:
                for model_run, model in list(self._models.items()):
                    if model.lane == lane:
                        self.builder.message_end(model.message_id, error=error)
                        del self._models[model_run]
        self._end_chain(run_id)

    def _end_chain(self, run_id: UUID) -> None:
        with self._lock, _boundary:
            self._chains.pop(run_id, None)
            key = self._steps.pop(run_id, None)
            if key is None:
                return
            task = self._task_nodes.pop(run_id, None)
            if task is not None:  # the task's node ended: its lane is gone
                self._tasks.pop(task, None)
            count = self._open_steps.pop(key) - 1
            if count:
                self._open_steps[key] = count
                return
            name, index, lane = key
            self.builder.step_end(name, index, branch=lane)

    # -- model calls --------------------------------------------------------------------
    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._routes:
            child = self._route(run_id, kwargs.get("parent_run_id"))
            if child is not None:
                child.on_chat_model_start(
                    serialized,
                    messages,
                    run_id=run_id,
                    metadata=metadata,
                    invocation_params=invocation_params,
                    **kwargs,
                )
                return
        metadata = metadata or {}
        model, provider = metadata.get("ls_model_name"), metadata.get("ls_provider")
        request = (
            _boundary.detail(
                _request, messages[0] if messages else [], invocation_params or {}, metadata
            )
            if self.traced
            else {}
        )
        with self._lock, _boundary:
            lane = self._lane_of(self._task(metadata))
            message_id = self.builder.message_start(
                str(run_id),
                model=str(model) if model else None,
                provider=str(provider) if provider else None,
                branch=lane,
                **request,
            )
            self._models[run_id] = _Model(message_id, lane)
            self._enter(run_id, self.builder.model_scope(message_id))

    def on_llm_new_token(
        self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any
    ) -> None:
        if self._routes:
            child = self._routes.get(run_id)
            if child is not None:
                child.on_llm_new_token(token, chunk=chunk, run_id=run_id, **kwargs)
                return
        model = self._models.get(run_id)
        if model is None or not isinstance(chunk, ChatGenerationChunk):
            return
        with self._lock, _boundary:
            model.streamed = True
            self._content(model, chunk.message)
            for piece in getattr(chunk.message, "tool_call_chunks", None) or ():
                call_id = piece.get("id")
                if call_id:
                    model.call_ids.add(call_id)
                self.builder.tool_call(
                    piece.get("args") or "",
                    tool_call_id=call_id,
                    name=piece.get("name"),
                    index=piece.get("index", call_id),
                    message_id=model.message_id,
                )

    def _content(self, model: _Model, message: BaseMessage) -> None:
        for kind, text in _content_parts(message):
            if kind == "reasoning":
                self.builder.reasoning(text, model.message_id)
            else:
                self.builder.text(text, model.message_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.on_llm_end(response, run_id=run_id, **kwargs)
                return
        self._leave(run_id)
        generations = response.generations[0] if response.generations else []
        first = generations[0] if generations else None
        final = first.message if isinstance(first, ChatGeneration) else None
        with self._lock, _boundary:
            model = self._models.pop(run_id, None)
            if model is None:
                return
            if final is not None and not model.streamed:
                self._content(model, final)
            # A streamed call is announced already; one that did not stream is whole here.
            for position, call in enumerate(getattr(final, "tool_calls", None) or ()):
                if call.get("id") not in model.call_ids:
                    self.builder.tool_call(
                        "" if model.streamed else _stringify(call.get("args") or {}),
                        tool_call_id=call.get("id") or f"{model.message_id}:{position}",
                        name=call.get("name") or "unknown",
                        index=("final", position),
                        message_id=model.message_id,
                    )
            self.builder.message_end(model.message_id, **_usage(final))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.on_llm_error(error, run_id=run_id, **kwargs)
                return
        self._leave(run_id)
        with self._lock, _boundary:
            model = self._models.pop(run_id, None)
            if model is not None:
                self.builder.message_end(model.message_id, error=error)

    # -- tools --------------------------------------------------------------------------
    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        if self._routes:
            child = self._route(run_id, kwargs.get("parent_run_id"))
            if child is not None:
                child.on_tool_start(serialized, input_str, run_id=run_id, **kwargs)
                return
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "unknown")
        call_id = str(kwargs.get("tool_call_id") or run_id)
        with self._lock, _boundary:
            self._tools[run_id] = (call_id, name)
            self._enter(run_id, self.builder.tool_scope(call_id))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.on_tool_end(output, run_id=run_id, **kwargs)
                return
        self._leave(run_id)
        message = _tool_message(output)
        content = _stringify(output if message is None else message.content)
        failed = message is not None and getattr(message, "status", None) == "error"
        with self._lock, _boundary:
            call = self._tools.pop(run_id, None)
            if call is not None:
                self.builder.tool_result(call[0], content, name=call[1], is_error=failed)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.on_tool_error(error, run_id=run_id, **kwargs)
                return
        self._leave(run_id)
        with self._lock, _boundary:
            call = self._tools.pop(run_id, None)
            if call is not None:
                text = f"{type(error).__name__}: {error}"
                self.builder.tool_result(call[0], text, name=call[1], error=error)

    # -- failure ------------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        """The run failed: end what LangChain left open (innermost first), graphs run
        inside its tools first."""
        for root in list(self._nested):
            self._end_nested(root, error=error)
        with self._lock, _boundary:
            self.builder.fail(error)
            for name, index, lane in reversed(list(self._open_steps)):
                self.builder.step_end(name, index, branch=lane)
            self._open_steps.clear()
            self._tasks.clear()
            self._task_nodes.clear()
            self._steps.clear()


class _TracedMapper(_Mapper):
    """The handler of a traced run: each model or tool call's span is current while
    it runs, so spans opened inside it (HTTP, database, the user's) nest under it.

    LangChain has no callback *around* a call, so a scope is entered in
    ``on_*_start``, inline in the coroutine that runs the call (``BaseTool.arun``,
    ``BaseChatModel.agenerate``). That coroutine starts the tool's body or the
    provider request in a copy of its context taken after the callback, so the
    span is current there, on a tool's worker thread too. The scope is left in
    ``on_*_end``/``on_*_error`` only when they run in the context that entered it
    (``_entered.reset`` succeeds only there), so no token is ever detached in
    another context. Tool callbacks do; LangChain's async model callbacks end in
    a task of their own (they are shielded from cancellation), so the entering
    context keeps the chat span current until it ends: spans a graph node opens
    *after* a model call, in the same node, nest under that chat span.
    """

    traced = True

    def __init__(self, builder: EventBuilder, agent_name: str) -> None:
        super().__init__(builder, agent_name)
        self._scopes: dict[UUID, tuple[AbstractContextManager[None], Any]] = {}

    def _enter(self, run_id: UUID, scope: AbstractContextManager[None]) -> None:
        scope.__enter__()
        self._scopes[run_id] = (scope, _entered.set(run_id))

    def _leave(self, run_id: UUID) -> None:
        with self._lock:
            entry = self._scopes.pop(run_id, None)
        if entry is None:
            return
        try:
            _entered.reset(entry[1])
        except ValueError:  # another context: the entering one keeps it until it ends
            return
        entry[0].__exit__(None, None, None)

    def close(self) -> None:
        """After the run: leave what is still entered in this context, drop the rest."""
        super().close()
        for run_id in reversed(list(self._scopes)):
            self._leave(run_id)


def _injected_handler_types() -> set[type]:
    """Handlers an instrumentation adds to every new LangChain callback manager.

    OpenInference's LangChain instrumentor wraps ``BaseCallbackManager.__init__``
    and adds its tracer to each manager that does not hold a handler of the
    tracer's class yet; a probe manager shows what is added that way.
    """
    probe = BaseCallbackManager(handlers=[])
    return {type(h) for h in probe.handlers if isinstance(h, BaseTracer)}


class _StandIn(BaseCallbackHandler):
    """Stands for an instrumentor's tracer in a traced run's callback managers.

    Those instrumentors add their tracer to a callback manager unless it already
    holds an instance of the tracer's class. The tracers are ABCs: registered as
    a virtual subclass of each, this handler, which ignores every callback, counts
    as one, so the managers of a traced run never get theirs. Untraced runs carry
    no stand-in and are traced by them as usual. (Our own handler is not the one
    registered: LangGraph hands tracers a node's recorded payload, not the real one.)
    """

    run_inline = True
    ignore_llm = ignore_chain = ignore_agent = ignore_retriever = True
    ignore_chat_model = ignore_custom_event = ignore_retry = True


_STAND_IN = _StandIn()


def _stand_ins() -> list[BaseCallbackHandler]:
    """The stand-in, registered for each injected tracer class, when there is one."""
    injected = _injected_handler_types()
    for kind in injected:
        if isinstance(kind, ABCMeta) and not issubclass(_StandIn, kind):
            kind.register(_StandIn)
    return [_STAND_IN] if any(isinstance(_STAND_IN, kind) for kind in injected) else []


# -- the run and the runner ------------------------------------------------------------------------
class _Run(FrameworkRun[Any]):
    """One graph call: ``ainvoke`` (run mode) or ``astream`` (stream mode), whose
    result is the final state."""

    def __init__(
        self,
        setup: RunSetup[Graph],
        native_input: dict[str, Any],
        config: dict[str, Any],
        mapper: _Mapper | None,
    ) -> None:
        super().__init__(setup)
        self.graph = setup.native
        self.input = native_input
        self.config = config
        self.mapper = mapper

    async def call(self) -> Any:
        # Through a plain callable: the overloads cannot type **options.
        ainvoke: Callable[..., Awaitable[Any]] = self.graph.ainvoke
        return await ainvoke(self.input, self.config, **self.setup.prepared.options)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        # Through a plain callable: the overloads cannot type **options.
        astream = cast(Callable[..., AsyncGenerator[Any, None]], self.graph.astream)
        native = astream(
            self.input,
            self.config,
            stream_mode=["messages", "updates"],
            subgraphs=True,
            **self.setup.prepared.options,
        )
        async with aclosing(native):
            yield native

    def fail(self, error: BaseException) -> None:
        if self.mapper is not None:
            self.mapper.fail(error)

    def close(self) -> None:
        if self.mapper is not None:
            self.mapper.close()

    async def outcome(self) -> Any:
        assert self.mapper is not None  # stream mode always maps
        return self.mapper.output

    async def save(self, result: Any) -> None:
        if not isinstance(result, Mapping):
            return
        setup = self.setup
        state = dict(setup.prepared.state or {})
        messages = list(result.get(MESSAGES) or [])
        state[setup.agent.name] = {"thread_id": setup.session.id, MESSAGES: messages}
        declared = _declared_channels(self.graph) - _RUNNER_OWNED_CHANNELS
        produced = {k: v for k, v in result.items() if k in declared}
        save(setup.session, STATE_KEY, state, setup.prepared, produced)

    def reply(self, result: Any, prompt: str) -> AgentReply:
        return _reply(result, prompt)


class LangGraphRunner(FrameworkRunner[Graph]):
    """Runs compiled LangGraph graphs in run (``ainvoke``) or stream (``astream_events``) mode."""

    framework: ClassVar[str] = "langgraph"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = Pregel
    native_what: ClassVar[str] = "a compiled LangGraph graph"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "input": "the runner builds the graph input from the requests",
        "version": "the runner picks the astream_events/ainvoke output version it maps",
        "stream_mode": "the runner reads the final state and maps the event stream itself",
        "output_keys": "the runner needs the full final state to build the reply",
        "print_mode": "printing stream output would interleave with the mapped events",
        "subgraphs": "the runner streams subgraphs itself to hand events over as they happen",
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
    async def _thread_exists(graph: Graph, thread_id: str) -> bool:
        checkpointer = graph.checkpointer
        if not isinstance(checkpointer, BaseCheckpointSaver):
            return False
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        return await checkpointer.aget_tuple(config) is not None

    async def start(self, setup: RunSetup[Graph]) -> _Run:
        # Untraced run mode installs nothing: a plain ainvoke with no handler of ours.
        # Stream mode always maps (the events are the stream).
        mapper: _Mapper | None = None
        callbacks: list[BaseCallbackHandler] = []
        if setup.observed:
            mapper = _TracedMapper(setup.builder, setup.agent.name)
            callbacks = [mapper, *_stand_ins()]
        elif setup.streaming:
            mapper = _Mapper(setup.builder, setup.agent.name)
            callbacks = [mapper]
        graph, session, prepared = setup.native, setup.session, setup.prepared
        message, request_state = graph_input(setup.requests)
        caller_config = prepared.options.pop("config", None)
        ours: dict[str, Any] = {"configurable": {"thread_id": session.id}}
        if callbacks:
            ours["callbacks"] = callbacks
        saved = (prepared.state or {}).get(setup.agent.name) or {}
        messages: list[BaseMessage] = [message]
        if saved.get(MESSAGES) and not await self._thread_exists(graph, session.id):
            messages = [*saved[MESSAGES], message]
        # The framework context first, so neither it nor a request can replace
        # the messages the runner writes last.
        native_input = {**(prepared.context or {}), **request_state, MESSAGES: messages}
        return _Run(setup, native_input, merge_config(ours, caller_config), mapper)


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
