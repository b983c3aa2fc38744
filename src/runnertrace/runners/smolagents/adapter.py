"""The stand-ins the runner puts on a smolagents agent for a run, which smolagents calls.

smolagents has no hooks for a model call or a tool execution, so for one run the
runner replaces, on the agent object, what it calls (and puts each back after):

- ``agent.model``: :class:`_ModelTap` (:class:`_StreamingModelTap` for a model that
  streams), which reports each call and runs it in the model scope;
- ``agent.step_callbacks``: :class:`_Callbacks`, the runner's step callback first,
  then the agent's own registry;
- a ``ToolCallingAgent``'s ``execute_tool_call``: :class:`_ToolRunner`, each tool
  in its call's tool scope;
- each managed agent's ``run``: :class:`_MemberRun`, the member's run nested under
  the manager's call (see ``nesting``);
- a ``CodeAgent``'s executor tools, for the run's items (:class:`_Steps`):
  :class:`_InScope`, in the ``python_interpreter`` call's context.

Every class is guarded (:func:`~runnertrace.runners._kit.adapter.guarded`); what
calls into smolagents (the model, the user's callbacks, the tool, the member's own
run, the next stream item) passes through, with our parts around it in a
:func:`~runnertrace.runners._kit.adapter.bracket_sync` or as guarded mapper
methods, so smolagents' own exceptions reach the agent unchanged and a fault of
ours costs its report only. :func:`install_stand_ins` itself runs in the kit's
install step (or, for a member, in a guarded method): a fault while putting the
stand-ins on leaves the agent as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack, closing
from functools import cache
from typing import Any

from smolagents import MultiStepAgent, Tool, ToolCallingAgent
from smolagents.memory import CallbackRegistry, FinalAnswerStep, MemoryStep
from smolagents.models import ChatMessage, ChatMessageStreamDelta
from smolagents.monitoring import AgentLogger, LogLevel

from runnertrace.runners._kit.adapter import bracket_sync, guarded, passes_through
from runnertrace.runners.smolagents.mapper import BOUNDARY, FINAL_ANSWER, _Mapper
from runnertrace.runners.smolagents.nesting import members_of, open_member_run

__all__ = ["install_stand_ins", "silent_console"]

_END = object()  # what ``next`` gives at the end of an agent's items


def _swap(owner: Any, name: str, value: Any, undo: ExitStack) -> None:
    """``owner.name = value`` until ``undo`` unwinds."""
    undo.callback(setattr, owner, name, getattr(owner, name))
    setattr(owner, name, value)


def _on_instance(owner: Any, name: str, value: Any, undo: ExitStack) -> None:
    """``value`` as ``owner``'s own ``name`` (over its class's method) until ``undo``
    unwinds; an attribute the instance had of its own is put back."""
    own = vars(owner).get(name)

    def put_back() -> None:
        if own is not None:
            setattr(owner, name, own)
        else:
            vars(owner).pop(name, None)

    undo.callback(put_back)
    setattr(owner, name, value)


def install_stand_ins(
    native: MultiStepAgent, mapper: _Mapper, streaming: bool, undo: ExitStack
) -> None:
    """Put one run's stand-ins on ``native`` (its managed agents' ``run`` too, for
    when they are called), each undone by ``undo``."""
    model = native.model
    streams = hasattr(model, "generate_stream")
    _swap(native, "model", (_StreamingModelTap if streams else _ModelTap)(model, mapper), undo)
    _swap(native, "step_callbacks", _Callbacks(native.step_callbacks, mapper), undo)
    _swap(native, "stream_outputs", streaming and streams, undo)
    if isinstance(native, ToolCallingAgent):
        runner = _ToolRunner(native.execute_tool_call, mapper)
        _on_instance(native, "execute_tool_call", runner, undo)
    for member in members_of(native):
        _on_instance(member, "run", _MemberRun(member, mapper, streaming), undo)


@cache
def _quiet_logger() -> AgentLogger:
    """A logger at verbosity OFF whose console prints nothing: smolagents draws its rich
    Live display (``stream_outputs``) on the logger's console whatever the verbosity.
    One is enough (it holds no state); building a console per run would cost more than
    the rest of the runner."""
    from rich.console import Console  # a smolagents dependency

    return AgentLogger(level=LogLevel.OFF, console=Console(quiet=True))


def silent_console(native: MultiStepAgent, undo: ExitStack) -> None:
    """An agent at verbosity OFF prints nothing, its Live display included, until
    ``undo`` unwinds (every run, traced or not: it is the agent's own setting)."""
    if native.logger.level == LogLevel.OFF:
        _swap(native, "logger", _quiet_logger(), undo)


# -- model calls -----------------------------------------------------------------------------


@guarded(BOUNDARY)
class _ModelTap:
    """Stands for the agent's model during a run: reports each call, runs it in the
    model scope, and delegates everything else to the model."""

    def __init__(self, model: Any, mapper: _Mapper) -> None:
        self._model = model
        self._mapper = mapper

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    @passes_through
    def __call__(self, *args: Any, **kwargs: Any) -> ChatMessage:
        return self.generate(*args, **kwargs)

    @passes_through
    def generate(
        self,
        messages: list[Any],
        stop_sequences: list[str] | None = None,
        response_format: Any = None,
        tools_to_call_from: list[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        mapper = self._mapper

        def call() -> ChatMessage:
            reply: ChatMessage = self._model.generate(
                messages,
                stop_sequences=stop_sequences,
                response_format=response_format,
                tools_to_call_from=tools_to_call_from,
                **kwargs,
            )
            return reply

        return bracket_sync(
            BOUNDARY,
            call,
            start=lambda: mapper.model_started(messages, stop_sequences, tools_to_call_from),
            scope=mapper.model_scope,
            done=mapper.model_done,
            failed=mapper.model_failed,
        )


@guarded(BOUNDARY)
class _StreamingModelTap(_ModelTap):
    """The stand-in for a model that streams: ``generate_stream`` is reported chunk by
    chunk, each chunk pulled in the model scope (never held across a ``yield``)."""

    @passes_through
    def generate_stream(
        self,
        messages: list[Any],
        stop_sequences: list[str] | None = None,
        response_format: Any = None,
        tools_to_call_from: list[Tool] | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatMessageStreamDelta]:
        # A generator: no bracket fits it whole, so each part is one (the model's
        # stream opened, each chunk pulled, in the scope) or a guarded mapper method.
        mapper = self._mapper
        message_id = mapper.model_started(messages, stop_sequences, tools_to_call_from)

        def in_scope(_: None) -> Any:
            return mapper.model_scope(message_id)

        def opened() -> Iterator[ChatMessageStreamDelta]:
            return iter(
                self._model.generate_stream(
                    messages,
                    stop_sequences=stop_sequences,
                    response_format=response_format,
                    tools_to_call_from=tools_to_call_from,
                    **kwargs,
                )
            )

        try:
            stream = bracket_sync(BOUNDARY, opened, scope=in_scope)
            while True:
                delta = bracket_sync(BOUNDARY, lambda: next(stream, None), scope=in_scope)
                if delta is None:
                    break
                mapper.delta(message_id, delta)
                yield delta
        except Exception as exc:
            mapper.model_failed(message_id, exc)
            raise
        mapper.stream_done(message_id)


# -- steps and tools -------------------------------------------------------------------------


@guarded(BOUNDARY)
class _Callbacks(CallbackRegistry):  # type: ignore[misc]
    """Takes ``agent.step_callbacks``' place for a run: the runner's callback first,
    then everything the agent's own registry holds (each exactly once). A callback
    registered during the run goes to the agent's registry, where it stays."""

    def __init__(self, theirs: CallbackRegistry, mapper: _Mapper) -> None:
        super().__init__()
        self._theirs = theirs
        self._mapper = mapper

    @passes_through
    def register(self, step_cls: type[MemoryStep], callback: Callable[..., Any]) -> None:
        self._theirs.register(step_cls, callback)

    @passes_through
    def callback(self, memory_step: MemoryStep, **kwargs: Any) -> None:
        self._mapper.step_ended(memory_step)
        self._theirs.callback(memory_step, **kwargs)


@guarded(BOUNDARY)
class _ToolRunner:
    """A ``ToolCallingAgent``'s ``execute_tool_call`` for a run: each tool runs in its
    call's tool scope (parallel calls each in their own), its result or exception
    reported. ``final_answer`` is the answer's text (on the message), not a tool."""

    def __init__(self, execute: Callable[[str, Any], Any], mapper: _Mapper) -> None:
        self._execute = execute
        self._mapper = mapper

    @passes_through
    def __call__(self, tool_name: str, arguments: Any) -> Any:
        if tool_name == FINAL_ANSWER:
            return self._execute(tool_name, arguments)
        mapper = self._mapper
        return bracket_sync(
            BOUNDARY,
            lambda: self._execute(tool_name, arguments),
            start=lambda: mapper.tool_started(tool_name, arguments),
            scope=mapper.tool_scope,
            done=lambda call_id, result: mapper.tool_done(call_id, tool_name, result),
            failed=lambda call_id, error: mapper.tool_failed(call_id, tool_name, error),
        )


@guarded(BOUNDARY)
class _InScope:
    """A ``CodeAgent`` tool as its executor calls it during a run: in the context of
    the ``python_interpreter`` call's scope, so what it opens nests under that call.
    The local executor runs the code in a thread of its own, which starts without
    our context."""

    def __init__(self, tool: Callable[..., Any], mapper: _Mapper) -> None:
        self._tool = tool
        self._mapper = mapper

    @passes_through
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        context = self._mapper.code_context
        if context is None:
            return self._tool(*args, **kwargs)
        return context.copy().run(self._tool, *args, **kwargs)


def _tools_in_scope(native: MultiStepAgent, mapper: _Mapper, undo: ExitStack) -> None:
    """A ``CodeAgent``'s local executor calls the agent's tools (and managed agents)
    as :class:`_InScope` until ``undo`` unwinds. Called once ``run`` has sent the
    executor its tools; a remote executor (no ``static_tools``) runs nothing of ours."""
    executor: Any = getattr(native, "python_executor", None)
    tools = getattr(executor, "static_tools", None)
    if not isinstance(tools, dict):
        return
    names = {*native.tools, *native.managed_agents}
    in_scope = {
        name: _InScope(value, mapper) if name in names else value for name, value in tools.items()
    }
    _swap(executor, "static_tools", in_scope, undo)


# -- one agent's items, and a managed agent's run --------------------------------------------


@guarded(BOUNDARY)
class _Steps:
    """One agent's ``run(stream=True)`` items, as the runner drives them: each item
    reported, and a ``CodeAgent``'s code run in its ``python_interpreter`` call's
    tool scope (entered and left around each ``next``, never across a ``yield``),
    with its tools called in that scope."""

    def __init__(self, native: MultiStepAgent, mapper: _Mapper) -> None:
        self._native = native
        self._mapper = mapper
        self._undo = ExitStack()

    def scope_code_tools(self) -> None:
        _tools_in_scope(self._native, self._mapper, self._undo)

    def unscope_code_tools(self) -> None:
        self._undo.close()

    @passes_through
    def drive(self, items: Iterator[Any]) -> Generator[Any, None, None]:
        mapper = self._mapper
        self.scope_code_tools()  # the executor has the tools now: run() sent them
        try:
            while True:
                item = self._next(items, mapper.take_code_call())
                if item is _END:
                    return
                mapper.item(item)
                yield item
        finally:
            self.unscope_code_tools()

    def _next(self, items: Iterator[Any], code_call: str | None) -> Any:
        """The next item; with a ``python_interpreter`` call to run, in its scope."""
        if not code_call:
            return next(items, _END)
        return bracket_sync(
            BOUNDARY,
            lambda: next(items, _END),
            scope=lambda _: self._mapper.code_scope(code_call),
        )


def _final_output(items: Generator[Any, None, None]) -> Any:
    output: Any = None
    with closing(items) as steps:
        for item in steps:
            if isinstance(item, FinalAnswerStep):
                output = item.output
    return output


@guarded(BOUNDARY)
class _MemberRun:
    """A managed agent's ``run`` for its manager's run. Called (by ``member(task)``) in
    the manager's tool scope, it is a nested run: an ``invoke_agent`` span of its own
    under the manager's ``execute_tool``, with the member's steps, model calls and
    tools (its own managed agents nest the same way); it returns the final answer,
    as ``run`` would. Where nothing traces, it is the member's own ``run``."""

    def __init__(self, member: MultiStepAgent, manager: _Mapper, streaming: bool) -> None:
        self._member = member
        self._manager = manager
        self._streaming = streaming
        self._own = member.run

    def open(self, task: str) -> _Mapper | None:
        return open_member_run(self._manager, self._member, task)

    def instrument(self, child: _Mapper, undo: ExitStack) -> None:
        """Put the member's stand-ins on for its run: all of them, or none (a fault
        leaves the member as it was; its run is still nested, with its answer)."""
        with ExitStack() as mine:
            install_stand_ins(self._member, child, self._streaming, mine)
            silent_console(self._member, mine)
            undo.push(mine.pop_all())

    @passes_through
    def __call__(self, task: str, **kwargs: Any) -> Any:
        child = self.open(task)
        if child is None:  # untraced, or the manager's run was cancelled
            return self._own(task, **kwargs)
        return bracket_sync(
            BOUNDARY,
            lambda: self._traced(child, task, kwargs),
            done=lambda _, output: child.run_ended(task, output),
            failed=lambda _, error: child.run_failed(error),
        )

    def _traced(self, child: _Mapper, task: str, kwargs: dict[str, Any]) -> Any:
        with ExitStack() as undo:
            self.instrument(child, undo)
            items = self._own(task, **{**kwargs, "stream": True, "return_full_result": False})
            return _final_output(_Steps(self._member, child).drive(items))
