"""``LangGraphRunner``: the runner contract over a compiled LangGraph graph.

The native agent is any compiled graph (``StateGraph(...).compile()``,
``langgraph.prebuilt.create_react_agent(...)``) whose state carries a
``messages`` channel.

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
  :func:`~.convert.merge_config`.
- **Framework context** is spread into the graph input (``messages`` is written
  last, so a context key cannot replace it). Only keys the graph declares as
  state channels come back, and only after the run succeeded.
- **Events.** One LangChain callback handler (:mod:`.adapter`), first in
  ``config["callbacks"]``, hands the run's callbacks to the mapper
  (:mod:`.mapper`), which turns them into events through the core
  :class:`~runnertrace.runners._kit.builder.EventBuilder`, in both modes, with ids
  taken from LangChain (a model call's run id is its ``message_id``; tool-call ids
  come from the model's tool calls). A chat span starts at ``on_chat_model_start``
  with what was sent (:mod:`.request`). Failed model calls and tools end their own
  spans with the exception (``on_llm_error``, ``on_tool_error``), so each
  ``RetryPolicy`` attempt is a span of its own.
- **Compositions.** A subgraph's nodes are steps inside its node's step, named
  ``<node>/<inner node>`` and carrying the subgraph's name as their agent (a
  supervisor routing between agent subgraphs is a row of such node steps on the
  run's line). Root-graph tasks that run at once (``Send`` branches, parallel
  edges) are builder branches keyed by their task in LangGraph's checkpoint
  namespace: each keeps its own steps and calls while they overlap. Concurrent
  tasks *inside* a subgraph stay on their root task's lane. A graph a tool runs is
  a nested run (:mod:`.nesting`).
- **Run mode** untraced is a plain ``ainvoke``: the template installs nothing.
  Traced, the handler reports to the observer and makes each tool's and model
  call's span current while it runs.
- **Stream mode** drives ``astream(stream_mode=["messages", "updates"],
  subgraphs=True)``: the "messages" mode makes chat models stream, and each item
  it yields is a moment to hand over the events the handler has made since.
  The final state is the root graph's output, as the handler saw it end.
  Untraced, the stream's events leave the request fields out (nobody records
  them), and no call's span is made current.
- **Other LangChain tracers** are kept out of traced runs (:mod:`.quiet`).
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
)
from contextlib import aclosing, asynccontextmanager
from typing import Any, ClassVar, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from runnertrace.core.models import AgentReply
from runnertrace.core.module import Module
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    save,
)
from runnertrace.runners.langgraph.adapter import _Callbacks
from runnertrace.runners.langgraph.convert import (
    MESSAGES,
    Graph,
    declared_channels,
    graph_input,
    graph_reply,
    merge_config,
)
from runnertrace.runners.langgraph.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.langgraph.quiet import quiet_framework_telemetry

STATE_KEY = "langgraph"

# Every key a RunnableConfig may hold. Declared at the top level of the run
# options they would be dropped silently by ``ainvoke``; they belong in config.
RUNNABLE_CONFIG_KEYS: frozenset[str] = frozenset(
    RunnableConfig.__required_keys__ | RunnableConfig.__optional_keys__
)

# State keys the runner owns: the conversation is session state, not context,
# and a structured response belongs to one run's reply.
_RUNNER_OWNED_CHANNELS = frozenset({MESSAGES, "structured_response"})


class _Run(FrameworkRun[Any]):
    """One graph call: ``ainvoke`` (run mode) or ``astream`` (stream mode), whose
    result is the final state. The install and quiet steps add their handlers to
    :attr:`callbacks`; the config the graph gets is made when it is called."""

    def __init__(
        self,
        setup: RunSetup[Graph],
        native_input: dict[str, Any],
        caller_config: Mapping[str, Any] | None,
    ) -> None:
        super().__init__(setup)
        self.graph = setup.native
        self.input = native_input
        self.caller_config = caller_config
        self.callbacks: list[BaseCallbackHandler] = []  # ours, first in the run's callbacks
        self.mapper: _Mapper | None = None

    def config(self) -> dict[str, Any]:
        ours: dict[str, Any] = {"configurable": {"thread_id": self.setup.session.id}}
        if self.callbacks:
            ours["callbacks"] = self.callbacks
        return merge_config(ours, self.caller_config)

    async def call(self) -> Any:
        # Through a plain callable: the overloads cannot type **options.
        ainvoke: Callable[..., Awaitable[Any]] = self.graph.ainvoke
        return await ainvoke(self.input, self.config(), **self.setup.prepared.options)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        # Through a plain callable: the overloads cannot type **options.
        astream = cast(Callable[..., AsyncGenerator[Any, None]], self.graph.astream)
        native = astream(
            self.input,
            self.config(),
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
        declared = declared_channels(self.graph) - _RUNNER_OWNED_CHANNELS
        produced = {k: v for k, v in result.items() if k in declared}
        save(setup.session, STATE_KEY, state, setup.prepared, produced)

    def reply(self, result: Any, prompt: str) -> AgentReply:
        return graph_reply(result, prompt)


class LangGraphRunner(FrameworkRunner[Graph]):
    """Runs compiled LangGraph graphs in run (``ainvoke``) or stream (``astream``) mode."""

    framework: ClassVar[str] = "langgraph"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = Pregel
    native_what: ClassVar[str] = "a compiled LangGraph graph"
    boundary: ClassVar[MappingBoundary] = _BOUNDARY
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

    @staticmethod
    async def _thread_exists(graph: Graph, thread_id: str) -> bool:
        checkpointer = graph.checkpointer
        if not isinstance(checkpointer, BaseCheckpointSaver):
            return False
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        return await checkpointer.aget_tuple(config) is not None

    async def start(self, setup: RunSetup[Graph]) -> _Run:
        graph, session, prepared = setup.native, setup.session, setup.prepared
        message, request_state = graph_input(setup.requests)
        caller_config = prepared.options.pop("config", None)
        saved = (prepared.state or {}).get(setup.agent.name) or {}
        messages: list[BaseMessage] = [message]
        if saved.get(MESSAGES) and not await self._thread_exists(graph, session.id):
            messages = [*saved[MESSAGES], message]
        # The framework context first, so neither it nor a request can replace
        # the messages the runner writes last.
        native_input = {**(prepared.context or {}), **request_state, MESSAGES: messages}
        return _Run(setup, native_input, caller_config)

    def install(self, setup: RunSetup[Graph], run: FrameworkRun[Any]) -> None:
        """Our callback handler, first in the run's callbacks. Traced, the mapper makes
        the request fields and each call's span current; streamed alone, the events."""
        assert isinstance(run, _Run)
        run.mapper = _Mapper(setup.builder, setup.agent.name, traced=setup.observed)
        run.callbacks.append(_Callbacks(run.mapper))

    def quiet(self, setup: RunSetup[Graph], run: FrameworkRun[Any]) -> None:
        """Other LangChain tracers' stand-in, after our handler (see :mod:`.quiet`)."""
        assert isinstance(run, _Run)
        run.callbacks.extend(quiet_framework_telemetry())


class LangGraphModule(Module):
    """Registers compiled graphs with the runtime, paired with a :class:`LangGraphRunner`.

    An agent's name is the graph's ``name`` (``create_react_agent(..., name=...)``);
    pass ``(name, graph)`` pairs, or ``add(graph, name=...)``, to override it.
    """

    runner_class = LangGraphRunner
