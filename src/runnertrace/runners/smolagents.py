"""``SmolagentsRunner``: the runner contract over smolagents agents (tool-calling and code).

Install with ``pip install 'runnertrace[smolagents]'``; importing this module
without smolagents raises :class:`~runnertrace._internal.imports.MissingExtraError`.

smolagents is synchronous and its agents are stateful objects (memory, state,
step number), so:

* **One run of an agent object at a time.** Runs of the same native agent are
  serialised (a lock per agent object, held by the worker thread); different
  agents run concurrently.
* **A worker thread per run.** The agent runs in a thread (the event loop is never
  blocked); the thread starts in a copy of the caller's context, so the tool
  context and OTel context reach tools and model calls.
* **The agent object is left as it was.** What the runner changes for a run (the
  model it calls, the step-callback registry, ``stream_outputs``, a silent logger
  at verbosity OFF, ``agent.state``; the same on its managed agents, and their
  ``run``) is put back when the run ends.

What a run does:

* **Session state.** The agent's memory steps are stored under the session key
  ``"smolagents"`` and put back into ``agent.memory`` on the next run, which then
  runs with ``reset=False``; a first run resets the memory. Errors in stored steps
  are kept as :class:`StoredAgentError` (smolagents' own errors do not pickle).
* **Framework context** (round trip, filtered). The loaded context is passed as
  ``additional_args`` (smolagents copies it into ``agent.state`` and appends it to
  the task). After a successful run, only the keys the context had before the run
  are written back from ``agent.state``; keys a tool adds are dropped.
* **Run options** reach ``agent.run`` (``max_steps``, ...). The runner owns
  ``task``, ``stream``, ``reset``, ``additional_args``, ``return_full_result`` and
  ``images``.

**Events** (traced runs, and every stream):

* Step callbacks end the steps: a registry that calls the runner's callback and
  then the agent's own registry takes ``agent.step_callbacks``' place for the run
  (smolagents has no way to unregister a callback, so adding one to the user's
  registry would leave it there), so the user's callbacks fire exactly once.
  A step starts at its first model call; for a ``CodeAgent``, the step's code is
  on its ``StepEnd`` (on the step span under content capture).
* Model calls go through a stand-in for ``agent.model`` that reports the request
  (messages, system prompt as text, parameters, tools), runs the call in the
  model scope, and reports the reply, its deltas when streamed, and its usage.
* Tools: a ``ToolCallingAgent``'s ``execute_tool_call`` is wrapped on the instance
  for the run, so each tool runs in its call's tool scope (parallel calls too) and
  its result or exception is reported. A ``CodeAgent``'s code runs as the tool
  call ``python_interpreter`` (smolagents' own name), in its scope.
* **Managed agents** (nested ones too): smolagents calls a member as a tool
  (``member(task)``, which calls ``member.run``) with no runner in between. For a
  traced run, each member's ``run`` is replaced on the instance for the run: called
  in the manager's tool scope, it opens a nested run
  (:func:`~runnertrace.core.observer.open_nested_run`: an ``invoke_agent`` span
  under the manager's ``execute_tool`` for that call, or ``python_interpreter`` for
  a ``CodeAgent``'s code), installs the same stand-ins on the member with a mapper
  of its own reporting there, drives its ``run(stream=True)`` and returns its final
  answer, as ``run`` would. Its events are traced, not yielded: the stream is the
  manager's. A cancelled run ends the members' runs too and interrupts them.
* **Stream mode** sets ``stream_outputs`` (when the model has ``generate_stream``)
  and drives ``run(stream=True)``: deltas, tool calls and a step per action step.

**OpenInference's smolagents instrumentor** (and any other that wraps smolagents'
methods) would add a second span for each run, step, model call and tool call.
When smolagents' entry points are wrapped, a *traced* run runs with OTel's
suppress-instrumentation flag set, which those wrappers honour; untraced runs are
theirs. (The flag also quiets HTTP-client instrumentation inside the run; a user's
own spans are not affected.)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import dataclasses
import io
import json
import threading
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing, asynccontextmanager, closing, nullcontext
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from runnertrace._internal.errors import internal_log, suppressed_instrumentation
from runnertrace._internal.imports import missing_extra

try:
    from smolagents import MultiStepAgent, Tool, ToolCallingAgent
    from smolagents.memory import (
        ActionStep,
        CallbackRegistry,
        FinalAnswerStep,
        MemoryStep,
        PlanningStep,
        ToolCall,
    )
    from smolagents.models import (
        ChatMessage,
        ChatMessageStreamDelta,
        MessageRole,
        get_tool_json_schema,
        tool_role_conversions,
    )
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.utils import AgentError
except ImportError as exc:
    raise missing_extra(exc, "smolagents") from exc

from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText
from runnertrace.core.module import Module
from runnertrace.core.observer import NestedRun, in_traced_run, open_nested_run
from runnertrace.runners._kit import genai
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    Prepared,
    RunSetup,
    reply_of,
    save,
)

__all__ = ["STATE_KEY", "SmolagentsModule", "SmolagentsRunner", "StoredAgentError"]

STATE_KEY = "smolagents"
_boundary = MappingBoundary("smolagents")
CODE_TOOL = "python_interpreter"  # the tool call a CodeAgent's code runs as (smolagents' name)
FINAL_ANSWER = "final_answer"  # the tool a ToolCallingAgent answers with


# -- requests -> native input ----------------------------------------------------------------------


def _image(request: Any) -> Any:
    from PIL import Image  # a smolagents dependency

    try:
        raw = base64.b64decode(request.image_data, validate=True)
        return Image.open(io.BytesIO(raw))
    except (binascii.Error, ValueError, OSError) as exc:
        label = f"{request.name!r} " if request.name else ""
        raise ValueError(
            f"image request {label}({request.mime_type}) is not base64 image data"
        ) from exc


def _no_files(request: Any) -> Any:
    raise ValueError(
        f"request type 'file' ({request.name or request.mime_type}) is not supported by "
        "SmolagentsRunner: smolagents tasks take text and images; pass the file's content "
        "as text or through session.set_framework_context()"
    )


# Request type -> (kind, converter): text parts join into the task, images go to images=.
_REQUESTS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "text": ("text", lambda r: r.prompt),
    "any": ("text", lambda r: r.content if isinstance(r.content, str) else json.dumps(r.content)),
    "image": ("image", _image),
    "file": ("text", _no_files),
}


def task_of(requests: Sequence[AgentRequest]) -> tuple[str, list[Any] | None]:
    """The task text (text requests joined by newlines) and the images, if any."""
    texts: list[str] = []
    images: list[Any] = []
    for request in requests:
        kind, convert = _REQUESTS[request.type]
        (texts if kind == "text" else images).append(convert(request))
    if not texts and not images:
        raise ValueError("a run needs at least one request")
    return "\n".join(texts), images or None


# -- session state ---------------------------------------------------------------------------------


class StoredAgentError(AgentError):  # type: ignore[misc]
    """A smolagents error kept in a stored memory step.

    smolagents' errors need a logger to be built (and log when they are), so they
    cannot be unpickled; this one keeps the class name and message, which is what
    the memory sends the model on the next run.
    """

    def __init__(self, message: str, error_type: str = "AgentError") -> None:
        Exception.__init__(self, message)
        self.message = message
        self.error_type = error_type

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.error_type))

    def dict(self) -> dict[str, str]:
        return {"type": self.error_type, "message": str(self.message)}


def _storable(step: MemoryStep) -> MemoryStep:
    error = getattr(step, "error", None)
    if isinstance(error, AgentError) and not isinstance(error, StoredAgentError):
        return dataclasses.replace(
            step, error=StoredAgentError(str(error.message), type(error).__name__)
        )
    return step


# -- what a model call is sent ---------------------------------------------------------------------

_ROLES: dict[str, str] = {
    **{str(role.value): str(role.value) for role in MessageRole},
    **{str(k.value): str(v.value) for k, v in tool_role_conversions.items()},
}


def _parts(message: ChatMessage) -> list[genai.Part]:
    """A smolagents message's content (text blocks, images) and tool calls as parts."""
    content = message.content
    parts: list[genai.Part] = []
    if isinstance(content, str):
        if content:
            parts.append(genai.text_part(content))
    else:
        for block in content or ():
            kind = block.get("type")
            if kind == "text":
                parts.append(genai.text_part(str(block.get("text") or "")))
            elif kind in ("image", "image_url"):
                parts.append(genai.blob_part("image"))
    parts.extend(
        genai.tool_call_part(call.id, call.function.name, call.function.arguments)
        for call in message.tool_calls or ()
    )
    return parts


# smolagents' model classes (their subclasses too) -> gen_ai.provider.name
_PROVIDERS = {
    "AzureOpenAIModel": "azure.ai.openai",
    "OpenAIModel": "openai",
    "AmazonBedrockModel": "aws.bedrock",
    "InferenceClientModel": "huggingface",
    "TransformersModel": "huggingface",
}


def _provider_of(model: Any) -> str | None:
    """The provider behind a smolagents model: by its class (the nearest known one in
    its MRO), a LiteLLM ``<provider>/<model>`` id's prefix, else a ``provider`` the
    model declares (offline models do, as the native ``ScriptedLlm``)."""
    for cls in type(model).__mro__:
        if cls.__name__ in ("LiteLLMModel", "LiteLLMRouterModel"):
            prefix, slash, _ = str(getattr(model, "model_id", "") or "").partition("/")
            return prefix.lower() if slash and prefix else None
        known = _PROVIDERS.get(cls.__name__)
        if known is not None:
            return known
    declared = getattr(model, "provider", None)
    return declared if isinstance(declared, str) and declared else None


def _request(
    model: Any, messages: Sequence[Any], stop: list[str] | None, tools: Sequence[Tool] | None
) -> dict[str, Any]:
    """The request fields of a MessageStart, from what the agent passes its model: the
    system prompt is the instructions, the model's completion settings and the stop
    sequences the parameters, the tools (managed agents too) their definitions."""
    sent: list[genai.Message] = []
    system: list[str] = []
    for message in messages:
        if isinstance(message, dict):
            message = ChatMessage.from_dict(dict(message))
        role = _ROLES.get(str(getattr(message.role, "value", message.role)), "user")
        parts = _parts(message)
        if role == "system":
            system.extend(str(p["content"]) for p in parts if p["type"] == "text")
        else:
            sent.append(genai.message(role, parts))
    settings: Mapping[str, Any] = getattr(model, "kwargs", None) or {}
    definitions = []
    for tool in tools or ():
        schema = get_tool_json_schema(tool)["function"]
        definitions.append(
            genai.tool_definition(schema["name"], schema["description"], schema["parameters"])
        )
    return {
        "input_messages": genai.or_none(sent),
        "system_instructions": "\n\n".join(system) or None,
        "request_parameters": genai.request_parameters(settings, {"stop_sequences": stop}),
        "tool_definitions": genai.or_none(definitions),
    }


def _answer(arguments: Any) -> str:
    """The text of a ``final_answer`` call: its ``answer`` argument (JSON unless text)."""
    parsed = genai.arguments_of(arguments)
    if isinstance(parsed, dict) and "answer" in parsed:
        return genai.as_text(parsed["answer"])
    return genai.as_text(parsed)


# -- native progress -> builder calls (the mapping) ------------------------------------------------


@dataclass
class _Queued:
    call_id: str
    name: str
    arguments: Any


class _Mapper:
    """Turns one run's model calls, tool calls, step callbacks and stream items into
    builder calls.

    Calls come from the run's worker thread and, for parallel tool calls, from
    smolagents' tool threads, so every builder call holds ``lock``. Once
    ``closed`` (the run was cancelled), nothing more is reported.
    """

    def __init__(
        self,
        builder: EventBuilder,
        agent_name: str,
        native: MultiStepAgent,
        run: NestedRun | None = None,
    ) -> None:
        self.builder = builder
        self.run = run  # a managed agent's: its run span, which this mapper ends
        self.lock = threading.Lock()
        self.closed = False
        self.code_call: str | None = None  # a CodeAgent call to run in its scope next
        self.code_context: contextvars.Context | None = None  # that call's scope, while it runs
        self.native = native
        self.children: list[_Mapper] = []  # the managed agents' runs, nested in this one
        self._agent_name = agent_name
        self._model = native.model
        self._step: int | None = None
        self._queued: list[_Queued] = []
        self._pending: dict[str, str] = {}  # call id -> tool name, no result yet this step
        self._answers: dict[tuple[str, Any], list[str]] = {}  # streamed final_answer arguments
        self._made_up = 0

    def _report(self, what: str, action: Callable[[], None]) -> None:
        with self.lock, _boundary:  # ``what``: the caller's name for the report
            if not self.closed:
                action()

    # steps ------------------------------------------------------------------------------------
    def _open_step(self) -> None:
        if self._step is None:
            self._step = self.native.step_number
            self.builder.step_start(self._agent_name, self._step)

    def step_ended(self, step: MemoryStep) -> None:
        """The step callback: settle what the step left pending, then end it."""

        def end() -> None:
            error = getattr(step, "error", None)
            observations = getattr(step, "observations", None)
            for call_id, name in list(self._pending.items()):
                content = str(error.message) if isinstance(error, AgentError) else ""
                self.builder.tool_result(
                    call_id,
                    content or str(observations or ""),
                    name=name,
                    error=(error.__cause__ or error) if error is not None else None,
                )
            self._pending.clear()
            self._queued.clear()
            if self._step is None:
                return
            code = getattr(step, "code_action", None)
            self.builder.step_end(self._agent_name, self._step, code=code)
            self._step = None

        self._report("step end", end)

    # model calls ----------------------------------------------------------------------------
    def model_started(
        self, messages: Sequence[Any], stop: list[str] | None, tools: Sequence[Tool] | None
    ) -> str:
        message_id = ""

        def start() -> None:
            nonlocal message_id
            self._open_step()
            fields = (
                _boundary.detail(_request, self._model, messages, stop, tools)
                if self.builder.observed
                else {}
            )
            message_id = self.builder.message_start(
                model=getattr(self._model, "model_id", None),
                provider=_provider_of(self._model),
                **fields,
            )

        self._report("message start", start)
        return message_id

    def delta(self, message_id: str, delta: ChatMessageStreamDelta) -> None:
        def put() -> None:
            if delta.content:
                self.builder.text(delta.content, message_id)
            for piece in delta.tool_calls or ():
                function = piece.function
                key = (message_id, piece.index)
                if function is not None and function.name == FINAL_ANSWER:
                    self._answers[key] = []
                if key in self._answers:  # the answer, not a tool call: text at message end
                    self._answers[key].append(function.arguments or "" if function else "")
                    continue
                self.builder.tool_call(
                    function.arguments or "" if function is not None else "",
                    tool_call_id=piece.id,
                    name=(function.name or None) if function is not None else None,
                    index=piece.index,
                    message_id=message_id,
                )

        self._report("delta", put)

    def model_finished(
        self,
        message_id: str,
        reply: ChatMessage | None,
        usage: tuple[int, int] | None,
        error: BaseException | None = None,
    ) -> None:
        def end() -> None:
            for key in [k for k in self._answers if k[0] == message_id]:
                self.builder.text(_answer("".join(self._answers.pop(key))), message_id)
            if reply is not None:
                text = reply.content if isinstance(reply.content, str) else None
                if text:
                    self.builder.text(text, message_id)
                for call in reply.tool_calls or ():
                    if call.function.name == FINAL_ANSWER:
                        self.builder.text(_answer(call.function.arguments), message_id)
                        continue
                    self.builder.tool_call(
                        genai.as_text(call.function.arguments),
                        tool_call_id=call.id,
                        name=call.function.name,
                        message_id=message_id,
                    )
            self.builder.message_end(
                message_id,
                input_tokens=usage[0] if usage else None,
                output_tokens=usage[1] if usage else None,
                response_model=getattr(self._model, "model_id", None),
                error=error,
            )

        self._report("message end", end)

    # tools ----------------------------------------------------------------------------------
    def _claim(self, name: str, arguments: Any) -> str:
        """The announced call a tool execution answers (same name, same arguments)."""
        with self.lock:
            for match in (
                lambda q: q.arguments is arguments,
                lambda q: q.arguments == arguments,
                lambda q: True,
            ):
                for queued in self._queued:
                    if queued.name == name and match(queued):
                        self._queued.remove(queued)
                        return queued.call_id
            self._made_up += 1
            return f"{name}_{self._made_up}"

    def run_tool(self, name: str, arguments: Any, execute: Callable[[], Any]) -> Any:
        if name == FINAL_ANSWER:  # reported as the answer's text, not as a tool
            return execute()
        call_id = self._claim(name, arguments)
        with self.lock:  # taking the scope opens the tool's span: parallel calls, one at a time
            scope = self.builder.tool_scope(call_id)
        try:
            with scope:
                result = execute()
        except Exception as exc:
            cause = exc.__cause__ or exc
            message = str(getattr(exc, "message", exc))
            self._report(
                "tool failure",
                lambda: self._settle(call_id, name, message, error=cause),
            )
            raise
        self._report("tool result", lambda: self._settle(call_id, name, str(result)))
        return result

    def _settle(
        self, call_id: str, name: str, content: str, error: BaseException | None = None
    ) -> None:
        self._pending.pop(call_id, None)
        self.builder.tool_result(call_id, content, name=name, error=error)

    # stream items ---------------------------------------------------------------------------
    def item(self, item: Any) -> None:
        """One item of ``run(stream=True)`` (deltas come through the model stand-in)."""
        if isinstance(item, ToolCall) and item.name != FINAL_ANSWER:
            self._report("tool call", lambda: self._tool_call(item))

    def _tool_call(self, call: ToolCall) -> None:
        # Announced by the model already, unless smolagents parsed it from text or it
        # is a CodeAgent's code; then it starts here, before it runs.
        self.builder.tool_start(call.id, call.name, genai.as_text(call.arguments))
        self._pending[call.id] = call.name
        if call.name == CODE_TOOL:
            self.code_call = call.id
        else:
            self._queued.append(_Queued(call.id, call.name, call.arguments))

    def fail(self, error: BaseException) -> None:
        self._report("failure", lambda: self.builder.fail(error))

    def end_run(self, task: str, output: Any, error: BaseException | None = None) -> None:
        """End a managed agent's run span with its answer or its failure (unless a
        cancellation ended it already)."""
        run = self.run

        def end() -> None:
            if run is not None:
                reply = reply_of(_plain(output), task) if error is None else None
                run.finish(reply=reply, error=error)

        self._report("run end", end)

    def close(self) -> None:
        """The run was cancelled: report nothing more (nor do its managed agents' runs)."""
        with self.lock, _boundary:
            if self.closed:
                return
            self.closed = True
            children = list(self.children)
            if self.run is not None:
                self.run.finish(cancelled=True)
        for child in children:
            child.native.interrupt()  # it stops at its next step, as the manager does
            child.close()

    def member(self, member: MultiStepAgent, task: str) -> _Mapper | None:
        """The mapper of a managed agent's run, called in this run's current tool scope:
        it reports to a run of its own, nested there; ``None`` when this run is not traced
        (or was cancelled). It is closed with this one."""
        with self.lock, _boundary:
            if self.closed:
                return None
            name = str(member.name)
            # The member is driven as a stream (see _member_traced), whatever this run's mode.
            run = open_nested_run(name, mode="stream", requests=[AgentRequestText(prompt=task)])
            if run is None:
                return None
            child = _Mapper(EventBuilder(run), name, member, run)
            self.children.append(child)
            return child
        return None


# -- the stand-ins put on the agent for a run -----------------------------------------------------


class _ModelTap:
    """Stands for the agent's model during a run: reports each call, runs it in the
    model scope, and delegates everything else to the model."""

    def __init__(self, model: Any, mapper: _Mapper) -> None:
        self._model = model
        self._mapper = mapper

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> ChatMessage:
        return self.generate(*args, **kwargs)

    def generate(
        self,
        messages: list[Any],
        stop_sequences: list[str] | None = None,
        response_format: Any = None,
        tools_to_call_from: list[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        mapper = self._mapper
        message_id = mapper.model_started(messages, stop_sequences, tools_to_call_from)
        try:
            with mapper.builder.model_scope(message_id):
                reply: ChatMessage = self._model.generate(
                    messages,
                    stop_sequences=stop_sequences,
                    response_format=response_format,
                    tools_to_call_from=tools_to_call_from,
                    **kwargs,
                )
        except Exception as exc:
            mapper.model_finished(message_id, None, None, exc)
            raise
        usage = reply.token_usage
        tokens = (usage.input_tokens, usage.output_tokens) if usage is not None else None
        mapper.model_finished(message_id, reply, tokens)
        return reply


class _StreamingModelTap(_ModelTap):
    """The stand-in for a model that streams: ``generate_stream`` is reported chunk by
    chunk, each chunk pulled in the model scope (never held across a ``yield``)."""

    def generate_stream(
        self,
        messages: list[Any],
        stop_sequences: list[str] | None = None,
        response_format: Any = None,
        tools_to_call_from: list[Tool] | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatMessageStreamDelta]:
        mapper = self._mapper
        message_id = mapper.model_started(messages, stop_sequences, tools_to_call_from)
        tokens = [0, 0]
        counted = False
        try:
            with mapper.builder.model_scope(message_id):
                stream = iter(
                    self._model.generate_stream(
                        messages,
                        stop_sequences=stop_sequences,
                        response_format=response_format,
                        tools_to_call_from=tools_to_call_from,
                        **kwargs,
                    )
                )
            while True:
                with mapper.builder.model_scope(message_id):
                    delta = next(stream, None)
                if delta is None:
                    break
                if delta.token_usage is not None:
                    counted = True
                    tokens[0] += delta.token_usage.input_tokens
                    tokens[1] += delta.token_usage.output_tokens
                mapper.delta(message_id, delta)
                yield delta
        except Exception as exc:
            mapper.model_finished(message_id, None, None, exc)
            raise
        mapper.model_finished(message_id, None, (tokens[0], tokens[1]) if counted else None)


class _Callbacks(CallbackRegistry):  # type: ignore[misc]
    """Takes ``agent.step_callbacks``' place for a run: the runner's callback first,
    then everything the agent's own registry holds (each exactly once). A callback
    registered during the run goes to the agent's registry, where it stays."""

    def __init__(self, theirs: CallbackRegistry, ours: Callable[[MemoryStep], None]) -> None:
        super().__init__()
        self._theirs = theirs
        self._ours = ours

    def register(self, step_cls: type[MemoryStep], callback: Callable[..., Any]) -> None:
        self._theirs.register(step_cls, callback)

    def callback(self, memory_step: MemoryStep, **kwargs: Any) -> None:
        if isinstance(memory_step, ActionStep | PlanningStep):
            self._ours(memory_step)
        self._theirs.callback(memory_step, **kwargs)


def _tools_in_scope(native: MultiStepAgent, mapper: _Mapper) -> Callable[[], None]:
    """A ``CodeAgent``'s local executor runs the code in a thread of its own, which
    starts without our context: for the run, its tools are called in the context of
    the ``python_interpreter`` call's scope, so what they open nests under it."""
    executor: Any = getattr(native, "python_executor", None)
    tools = getattr(executor, "static_tools", None)
    if not isinstance(tools, dict):
        return lambda: None  # a remote executor: nothing of ours runs there

    def in_scope(tool: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            context = mapper.code_context
            if context is None:
                return tool(*args, **kwargs)
            return context.copy().run(tool, *args, **kwargs)

        return call

    names = {*native.tools, *native.managed_agents}
    executor.static_tools = {
        name: in_scope(value) if name in names else value for name, value in tools.items()
    }

    def restore() -> None:
        executor.static_tools = tools

    return restore


@cache
def _quiet_logger() -> AgentLogger:
    """A logger at verbosity OFF whose console prints nothing: smolagents draws its rich
    Live display (``stream_outputs``) on the logger's console whatever the verbosity.
    One is enough (it holds no state); building a console per run would cost more than
    the rest of the runner."""
    from rich.console import Console  # a smolagents dependency

    return AgentLogger(level=LogLevel.OFF, console=Console(quiet=True))


def _instrumented() -> bool:
    """Whether an instrumentor wraps smolagents' entry points (OpenInference does,
    with ``wrapt``, which exposes the wrapped function as ``__wrapped__``)."""
    return any(hasattr(method, "__wrapped__") for method in (MultiStepAgent.run, Tool.__call__))


# -- installing the stand-ins, and driving the items ----------------------------------------------


def _install(native: MultiStepAgent, mapper: _Mapper | None, streaming: bool) -> Callable[[], None]:
    """Set ``native`` up for one run (its managed agents too, for when they are called)
    and return what puts it back as it was. ``mapper`` ``None``: an untraced run-mode
    call, which changes nothing but the silent logger."""
    saved = {
        "model": native.model,
        "logger": native.logger,
        "step_callbacks": native.step_callbacks,
        "stream_outputs": native.stream_outputs,
    }
    own = vars(native).get("execute_tool_call")
    if native.logger.level == LogLevel.OFF:
        native.logger = _quiet_logger()  # the Live display draws even at OFF
    restore_members: list[Callable[[], None]] = []
    if mapper is not None:
        model = native.model
        streams = hasattr(model, "generate_stream")
        native.model = (_StreamingModelTap if streams else _ModelTap)(model, mapper)
        native.step_callbacks = _Callbacks(native.step_callbacks, mapper.step_ended)
        native.stream_outputs = streaming and streams
        if isinstance(native, ToolCallingAgent):
            original = native.execute_tool_call

            def execute_tool_call(tool_name: str, arguments: Any) -> Any:
                return mapper.run_tool(tool_name, arguments, lambda: original(tool_name, arguments))

            native.execute_tool_call = execute_tool_call
        restore_members = [
            _member_traced(member, mapper, streaming) for member in native.managed_agents.values()
        ]

    def restore() -> None:
        for restore_member in restore_members:
            restore_member()
        for name, value in saved.items():
            setattr(native, name, value)
        if own is not None:
            native.execute_tool_call = own
        else:
            vars(native).pop("execute_tool_call", None)

    return restore


def _member_traced(member: MultiStepAgent, manager: _Mapper, streaming: bool) -> Callable[[], None]:
    """For the manager's run, a managed agent's ``run`` (what ``member(task)`` calls, in
    the manager's tool scope) is a nested run: an ``invoke_agent`` span of its own under
    the manager's ``execute_tool``, with its own steps, model calls and tools (its own
    managed agents nest the same way). Returns what puts ``member`` back."""
    own = vars(member).get("run")
    original = member.run

    def run(task: str, **kwargs: Any) -> Any:
        mapper = manager.member(member, task)
        if mapper is None:  # untraced, or the manager's run was cancelled
            return original(task, **kwargs)
        restore = _install(member, mapper, streaming)
        output: Any = None
        try:
            items = original(task, **{**kwargs, "stream": True, "return_full_result": False})
            with closing(_mapped(items, mapper)) as mapped:
                for item in mapped:
                    if isinstance(item, FinalAnswerStep):
                        output = item.output
        except BaseException as exc:
            mapper.fail(exc)
            mapper.end_run(task, None, exc)
            raise
        finally:
            restore()
        mapper.end_run(task, output)
        return output

    def put_back() -> None:
        if own is not None:
            member.run = own
        else:
            vars(member).pop("run", None)

    member.run = run
    return put_back


def _mapped(items: Iterator[Any], mapper: _Mapper) -> Generator[Any, None, None]:
    """The items of ``run(stream=True)``, each reported; a ``CodeAgent``'s code runs in
    its ``python_interpreter`` call's tool scope (entered and left around each ``next``,
    never across a ``yield``), with its tools called in that scope."""
    restore_tools = _tools_in_scope(mapper.native, mapper)  # sent to the executor by run()
    try:
        while True:
            code_call, mapper.code_call = mapper.code_call, None
            if code_call:
                with mapper.builder.tool_scope(code_call):
                    mapper.code_context = contextvars.copy_context()
                    try:
                        item = next(items, _END)
                    finally:
                        mapper.code_context = None
            else:
                item = next(items, _END)
            if item is _END:
                return
            mapper.item(item)
            yield item
    finally:
        restore_tools()


# -- one run on the agent object ------------------------------------------------------------------


_END = object()


@dataclass
class _Outcome:
    output: Any = None
    steps: list[MemoryStep] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Call:
    """One native run: what to call it with, and how to observe it (``mapper`` is
    ``None`` for an untraced run-mode call, which installs nothing)."""

    native: MultiStepAgent
    task: str
    images: list[Any] | None
    options: dict[str, Any]
    prepared: Prepared
    mapper: _Mapper | None
    streaming: bool
    suppress: bool
    stop: threading.Event = field(default_factory=threading.Event)

    def execute(self, lock: threading.Lock, tick: Callable[[], None] | None) -> _Outcome:
        """In the worker thread: set the agent up, run it, put it back."""
        with lock, suppressed_instrumentation() if self.suppress else nullcontext():
            native = self.native
            saved_state = dict(native.state)
            restore = self._install()
            try:
                return self._run(tick)
            finally:
                restore()
                native.state.clear()
                native.state.update(saved_state)

    def cancel(self) -> None:
        """Stop the run at the next item; nothing more is reported from here on."""
        self.stop.set()
        if self.mapper is not None:
            self.mapper.close()

    def _install(self) -> Callable[[], None]:
        native = self.native
        steps = self.prepared.state
        if steps is not None:
            native.memory.steps = list(steps)
        return _install(native, self.mapper, self.streaming)

    def _arguments(self, stream: bool) -> dict[str, Any]:
        return {
            **self.options,
            "task": self.task,
            "images": self.images,
            "stream": stream,
            "reset": self.prepared.state is None,
            "additional_args": self.prepared.context or None,
            "return_full_result": False,
        }

    def _outcome(self, output: Any) -> _Outcome:
        native = self.native
        context = self.prepared.context or {}
        kept = {key: native.state[key] for key in context if key in native.state}
        return _Outcome(output, [_storable(s) for s in native.memory.steps], kept)

    def _run(self, tick: Callable[[], None] | None) -> _Outcome:
        native, mapper = self.native, self.mapper
        if mapper is None:
            return self._outcome(native.run(**self._arguments(stream=False)))
        return self._drive(native.run(**self._arguments(stream=True)), tick)

    def _drive(self, items: Iterator[Any], tick: Callable[[], None] | None) -> _Outcome:
        mapper = self.mapper
        assert mapper is not None
        output: Any = None
        if self.stop.is_set():
            return self._abandon(items)
        with closing(_mapped(items, mapper)) as mapped:
            for item in mapped:
                if isinstance(item, FinalAnswerStep):
                    output = item.output
                if tick is not None:
                    tick()
                if self.stop.is_set():
                    return self._abandon(items)
        return self._outcome(output)

    def _abandon(self, items: Iterator[Any]) -> _Outcome:
        """The consumer left: smolagents stops at the next step (``interrupt``); the
        rest of the current step runs out here, reporting nothing."""
        self.cancel()
        self.native.interrupt()
        try:
            for _ in items:
                pass
        except AgentError:
            pass  # "Agent interrupted.": the stop we asked for
        return _Outcome()


# -- the run and the runner ------------------------------------------------------------------------


class _Run(FrameworkRun[_Outcome]):
    """One smolagents run, in a worker thread: ``agent.run`` (run mode, or untraced) or
    its ``stream=True`` items (mapped), with a tick per item to wake the stream."""

    def __init__(self, setup: RunSetup[MultiStepAgent], call: _Call, lock: threading.Lock):
        super().__init__(setup)
        self.native_call = call
        self.lock = lock
        self.worker: asyncio.Future[_Outcome] | None = None
        self.completed = False

    async def call(self) -> _Outcome:
        return await asyncio.to_thread(self.native_call.execute, self.lock, None)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        call = self.native_call
        ticks: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        waking = threading.Event()  # a tick is on its way: later items need none

        def tick() -> None:
            # After the item's events are queued; the consumer clears the flag before
            # it drains, so an event queued before a skipped tick is drained anyway.
            if not waking.is_set():
                waking.set()
                loop.call_soon_threadsafe(ticks.put_nowait, None)

        worker = self.worker = asyncio.ensure_future(
            asyncio.to_thread(call.execute, self.lock, tick)
        )
        worker.add_done_callback(lambda _: ticks.put_nowait(_END))

        async def progress() -> AsyncGenerator[None, None]:
            while await ticks.get() is not _END:
                waking.clear()
                yield None
            worker.result()  # the run's failure, if it failed

        try:
            async with aclosing(progress()) as items:
                yield items
        finally:
            if not worker.done():
                call.cancel()  # the thread finishes the current step, reporting nothing
                # nobody waits for it now: its outcome (or failure) is dropped
                worker.add_done_callback(_dropped)

    def fail(self, error: BaseException) -> None:
        if self.native_call.mapper is not None:
            self.native_call.mapper.fail(error)

    def complete(self) -> None:
        self.completed = True

    def close(self) -> None:
        if not self.completed and not self.setup.streaming:
            self.native_call.cancel()  # cancelled: the thread finishes the step, reporting nothing

    async def outcome(self) -> _Outcome:
        assert self.worker is not None  # set when the stream opened
        return self.worker.result()

    async def save(self, result: _Outcome) -> None:
        setup = self.setup
        save(setup.session, STATE_KEY, result.steps, setup.prepared, result.state)

    def reply(self, result: _Outcome, prompt: str) -> AgentReply:
        return reply_of(_plain(result.output), prompt)


class SmolagentsRunner(FrameworkRunner[MultiStepAgent]):
    """Runs a smolagents ``ToolCallingAgent`` or ``CodeAgent`` in run or stream mode."""

    framework: ClassVar[str] = "smolagents"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = MultiStepAgent
    native_what: ClassVar[str] = "a smolagents agent (ToolCallingAgent, CodeAgent)"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "task": "the runner builds the task from the requests",
        "images": "the runner passes the image requests as images",
        "stream": "the runner picks run or stream mode itself",
        "reset": f"the runner restores the agent's memory from the session (key {STATE_KEY!r})",
        "additional_args": (
            "the runner passes the session's framework context as additional_args; "
            "set it with session.set_framework_context()"
        ),
        "return_full_result": "the runner builds the reply from the final answer",
    }

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[MultiStepAgent, threading.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._locks_guard = threading.Lock()

    def _lock(self, native: MultiStepAgent) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(native)
            if lock is None:
                lock = self._locks[native] = threading.Lock()
            return lock

    async def start(self, setup: RunSetup[MultiStepAgent]) -> _Run:
        # Untraced run mode installs nothing: the plain agent.run in a worker thread.
        # Stream mode always maps (the events are the stream).
        native, prepared = setup.native, setup.prepared
        task, images = task_of(setup.requests)
        mapped = setup.streaming or setup.observed
        mapper = _Mapper(setup.builder, setup.agent.name, native) if mapped else None
        suppress = mapped and in_traced_run() and _instrumented()
        call = _Call(
            native, task, images, prepared.options, prepared, mapper, setup.streaming, suppress
        )
        return _Run(setup, call, self._lock(native))


def _dropped(worker: asyncio.Future[Any]) -> None:
    """The outcome of a run the consumer left: a failure there is the framework's, logged
    once as an internal fault rather than as an unretrieved task exception."""
    if not worker.cancelled() and worker.exception() is not None:
        internal_log.warning(
            "smolagents-abandoned-run",
            "runnertrace: a smolagents run stopped after its consumer left failed: %r",
            worker.exception(),
        )


def _plain(output: Any) -> Any:
    """smolagents' ``AgentText`` is a ``str``; its other agent types go by their raw value."""
    if isinstance(output, str):
        return str(output)
    to_raw = getattr(output, "to_raw", None)
    return to_raw() if callable(to_raw) else output


class SmolagentsModule(Module):
    """Registers smolagents agents with the runtime, each paired with a
    :class:`SmolagentsRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``max_steps``, ...). An agent's name is its ``name``
    (``ToolCallingAgent(..., name="assistant")``)."""

    naming = ("the smolagents agent", "ToolCallingAgent(..., name='assistant')")
    runner_class = SmolagentsRunner
