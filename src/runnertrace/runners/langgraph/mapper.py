"""One graph run's LangChain callbacks as builder calls: steps, lanes, model calls, tools.

The adapter (:mod:`.adapter`) is what LangChain calls; it hands each callback, in
LangChain's order, on the task (or tool worker thread) that raised it, to the
run's :class:`_Mapper`, which makes the events:

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
  was sent (messages, system instructions, parameters, bound tools: traced only),
  in the lane of its task.
- A tool run answers the call whose id LangChain passes at its start.
- A graph that a tool runs is another agent's run (:mod:`.nesting` finds it): a
  nested run under the tool's span, mapped by a mapper of its own that its
  callbacks are routed to. Untraced, its events are not this run's stream's.

Traced, each model or tool call's span is current while it runs, so spans opened
inside it (HTTP, database, the user's) nest under it. LangChain has no callback
*around* a call, so a scope is entered in the start callback, inline in the
coroutine that runs the call (``BaseTool.arun``, ``BaseChatModel.agenerate``),
which starts the tool's body or the provider request in a copy of its context
taken after the callback: the span is current there, on a tool's worker thread
too. The scopes are kept in a :class:`~runnertrace.runners._kit.adapter.ScopeLedger`
by run id, left only in the context that entered them: tool callbacks end there;
LangChain's async model callbacks end in a task of their own (shielded from
cancellation), so the entering context keeps the chat span current until it ends,
and spans a graph node opens *after* a model call, in the same node, nest under it.

Every public method runs inside the runner's one boundary (:data:`_BOUNDARY`): a
fault is logged once and the run goes on; under pytest it raises. Calls from tool
worker threads are serialised by a lock.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from uuid import UUID

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult

from runnertrace.runners._kit.adapter import ScopeLedger, guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.nesting import NestedRuns
from runnertrace.runners._kit.skeleton import MappingBoundary
from runnertrace.runners.langgraph.convert import (
    content_parts,
    graph_reply,
    stringify,
    tool_message,
)
from runnertrace.runners.langgraph.nesting import graph_in_tool, inner_namespace, requests_of
from runnertrace.runners.langgraph.request import request_fields, response_fields

_BOUNDARY = MappingBoundary("langgraph")
"""The runner's one boundary: the mapper, the adapter and the template use it."""

_STEP_TAG = re.compile(r"^graph:step:(\d+)$")

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


@guarded(_BOUNDARY)
class _Mapper:
    """One graph run's callbacks as events, through an :class:`EventBuilder`; see the module.

    ``traced``: the request fields are made (for the observer) and each call's span
    is current while it runs. Untraced, a stream gets the events alone. ``root`` and
    ``prefix`` are set for a graph run inside a tool: its own run id, and the
    namespace its tasks sit in (cut off them).
    """

    def __init__(
        self,
        builder: EventBuilder,
        agent_name: str,
        *,
        traced: bool,
        root: UUID | None = None,
        prefix: str = "",
        prompt: str = "",
    ) -> None:
        self.builder = builder
        self.traced = traced
        self.root = root
        self.output: Any = None  # the root graph's output: the final state
        self.prompt = prompt  # what a graph run inside a tool was asked (its reply's prompt)
        self._agent_name = agent_name
        self._agent: str | None = None  # the agent of the last step (None: the run's)
        self._prefix = prefix
        self._lock = threading.Lock()
        self._chains: dict[UUID, str] = {}  # every open chain run -> its name
        self._steps: dict[UUID, _StepKey] = {}
        self._open_steps: dict[_StepKey, int] = {}
        self._tasks: dict[str, _Task] = {}  # open task (checkpoint namespace) -> its lane
        self._task_nodes: dict[UUID, str] = {}  # a node's run -> its task
        self._models: dict[UUID, _Model] = {}
        self._tools: dict[UUID, tuple[str, str]] = {}  # tool run -> (call id, tool name)
        self._scopes: ScopeLedger[UUID] = ScopeLedger(_BOUNDARY, same_context=True)
        self._in_tools: dict[UUID, Any] = {}  # a chain a tool runs (maybe a graph) -> inputs
        self._nested: NestedRuns[UUID] = NestedRuns(_BOUNDARY)  # graphs run inside tools
        self._children: dict[UUID, _Mapper] = {}  # such a graph's run -> its mapper
        self._routes: dict[UUID, _Mapper] = {}  # a run inside such a graph -> its mapper

    # -- graphs run inside a tool: nested runs --------------------------------------------
    def _route(self, run_id: UUID, parent_run_id: UUID | None) -> _Mapper | None:
        """The mapper of the graph run inside a tool that this run belongs to, if any."""
        child = self._routes.get(run_id)
        if child is None and parent_run_id is not None:
            child = self._routes.get(parent_run_id)
            if child is not None:
                self._routes[run_id] = child
        return child

    def _open_nested(self, root: UUID, metadata: Mapping[str, Any]) -> _Mapper:
        """A graph that a tool runs has reached its first step: its run is a nested run
        (traced only), mapped by a mapper of its own."""
        name = self._chains.pop(root, None) or "LangGraph"
        requests = requests_of(self._in_tools.pop(root, None))
        nested = self._nested.open(root, name, requests=requests) if self.traced else None
        child = _Mapper(
            EventBuilder() if nested is None else nested.builder,  # untraced: nobody's events
            name,
            traced=nested is not None,
            root=root,
            prefix=inner_namespace(metadata),
            prompt=requests[0].prompt if requests else "",
        )
        child._chains[root] = name
        self._children[root] = child
        self._routes[root] = child
        return child

    def _end_nested(
        self, root: UUID, outputs: Any = None, error: BaseException | None = None
    ) -> None:
        """A graph run inside a tool ended (with ``error``: failed, or cancelled)."""
        child = self._children.pop(root, None)
        if child is None:
            return
        self._routes.pop(root, None)
        if error is not None:
            child.fail(error)
        child.close()
        if self._nested.get(root) is not None:
            self._nested.end(root, None if error else graph_reply(outputs, child.prompt), error)

    # -- steps --------------------------------------------------------------------------
    def chain_start(
        self,
        name: str,
        inputs: Any,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        child = self._route(run_id, parent_run_id) if self._routes else None
        if child is None:
            child = self._chain_start(name, inputs, run_id, parent_run_id, tags, metadata)
        if child is not None:
            self._routes[run_id] = child
            child.chain_start(name, inputs, run_id, parent_run_id, tags, metadata)

    def _chain_start(
        self,
        name: str,
        inputs: Any,
        run_id: UUID,
        parent_run_id: UUID | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> _Mapper | None:
        """A chain of this run starts; returns the mapper of a graph run inside a tool
        when this is that graph's first step (the caller hands the step to it)."""
        index = next((int(m.group(1)) for t in tags or () if (m := _STEP_TAG.match(t))), None)
        metadata = metadata or {}
        with self._lock:
            if self.root is None:
                self.root = run_id
            self._chains[run_id] = name
            root = graph_in_tool(run_id, parent_run_id, index, inputs, self._tools, self._in_tools)
            if root is not None:
                self._chains.pop(run_id, None)
                return self._open_nested(root, metadata)
            if index is None:
                return None
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

    def chain_end(self, outputs: Any, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.chain_end(outputs, run_id)
                if run_id == child.root:
                    self._end_nested(run_id, outputs=outputs)
                return
        if run_id == self.root:
            self.output = outputs
        self._in_tools.pop(run_id, None)
        self._end_chain(run_id)

    def chain_error(self, error: BaseException, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.chain_error(error, run_id)
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
            with self._lock:
                for model_run, model in list(self._models.items()):
                    if model.lane == lane:
                        self.builder.message_end(model.message_id, error=error)
                        del self._models[model_run]
        self._end_chain(run_id)

    def _end_chain(self, run_id: UUID) -> None:
        with self._lock:
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
    def model_start(
        self,
        messages: list[list[BaseMessage]],
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: dict[str, Any] | None,
        invocation_params: dict[str, Any] | None,
    ) -> None:
        if self._routes:
            child = self._route(run_id, parent_run_id)
            if child is not None:
                child.model_start(messages, run_id, parent_run_id, metadata, invocation_params)
                return
        metadata = metadata or {}
        model, provider = metadata.get("ls_model_name"), metadata.get("ls_provider")
        request = (
            _BOUNDARY.detail(
                request_fields, messages[0] if messages else [], invocation_params or {}, metadata
            )
            if self.traced
            else {}
        )
        with self._lock:
            lane = self._lane_of(self._task(metadata))
            message_id = self.builder.message_start(
                str(run_id),
                model=str(model) if model else None,
                provider=str(provider) if provider else None,
                branch=lane,
                **request,
            )
            self._models[run_id] = _Model(message_id, lane)
            if self.traced:
                self._scopes.enter(run_id, self.builder.model_scope(message_id))

    def model_token(self, chunk: Any, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.get(run_id)
            if child is not None:
                child.model_token(chunk, run_id)
                return
        model = self._models.get(run_id)
        if model is None or not isinstance(chunk, ChatGenerationChunk):
            return
        with self._lock:
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
        for kind, text in content_parts(message):
            if kind == "reasoning":
                self.builder.reasoning(text, model.message_id)
            else:
                self.builder.text(text, model.message_id)

    def model_end(self, response: LLMResult, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.model_end(response, run_id)
                return
        generations = response.generations[0] if response.generations else []
        first = generations[0] if generations else None
        final = first.message if isinstance(first, ChatGeneration) else None
        with self._lock:
            self._scopes.leave(run_id)
            model = self._models.pop(run_id, None)
            if model is None:
                return
            if final is not None and not model.streamed:
                self._content(model, final)
            # A streamed call is announced already; one that did not stream is whole here.
            for position, call in enumerate(getattr(final, "tool_calls", None) or ()):
                if call.get("id") not in model.call_ids:
                    self.builder.tool_call(
                        "" if model.streamed else stringify(call.get("args") or {}),
                        tool_call_id=call.get("id") or f"{model.message_id}:{position}",
                        name=call.get("name") or "unknown",
                        index=("final", position),
                        message_id=model.message_id,
                    )
            self.builder.message_end(model.message_id, **response_fields(final))

    def model_error(self, error: BaseException, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.model_error(error, run_id)
                return
        with self._lock:
            self._scopes.leave(run_id)
            model = self._models.pop(run_id, None)
            if model is not None:
                self.builder.message_end(model.message_id, error=error)

    # -- tools --------------------------------------------------------------------------
    def tool_start(self, name: str, call_id: str, run_id: UUID, parent_run_id: UUID | None) -> None:
        if self._routes:
            child = self._route(run_id, parent_run_id)
            if child is not None:
                child.tool_start(name, call_id, run_id, parent_run_id)
                return
        with self._lock:
            self._tools[run_id] = (call_id, name)
            if self.traced:
                self._scopes.enter(run_id, self.builder.tool_scope(call_id))

    def tool_end(self, output: Any, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.tool_end(output, run_id)
                return
        message = tool_message(output)
        content = stringify(output if message is None else message.content)
        failed = message is not None and getattr(message, "status", None) == "error"
        with self._lock:
            self._scopes.leave(run_id)
            call = self._tools.pop(run_id, None)
            if call is not None:
                self.builder.tool_result(call[0], content, name=call[1], is_error=failed)

    def tool_error(self, error: BaseException, run_id: UUID) -> None:
        if self._routes:
            child = self._routes.pop(run_id, None)
            if child is not None:
                child.tool_error(error, run_id)
                return
        with self._lock:
            self._scopes.leave(run_id)
            call = self._tools.pop(run_id, None)
            if call is not None:
                text = f"{type(error).__name__}: {error}"
                self.builder.tool_result(call[0], text, name=call[1], error=error)

    # -- the run's ends -----------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        """The run failed: end what LangChain left open (innermost first), graphs run
        inside its tools first."""
        for root in list(self._children):
            self._end_nested(root, error=error)
        with self._lock:
            self.builder.fail(error)
            for name, index, lane in reversed(list(self._open_steps)):
                self.builder.step_end(name, index, branch=lane)
            self._open_steps.clear()
            self._tasks.clear()
            self._task_nodes.clear()
            self._steps.clear()

    def close(self) -> None:
        """After the run: a graph run inside a tool that is still open ends cancelled, and
        what is still entered in this context is left (the rest is dropped)."""
        for root in list(self._children):
            self._end_nested(root, error=asyncio.CancelledError())
        with self._lock:
            self._scopes.leave_all()
