"""``PydanticAIRunner``: the runner contract over a ``pydantic_ai.Agent``.

Install with ``pip install 'runnertrace[pydantic-ai]'``; importing this module
without Pydantic AI raises :class:`~runnertrace._internal.imports.MissingExtraError`.

What the runner does, per run:

* **Session state.** The conversation (``result.all_messages()``) is stored under
  the session key ``"pydantic_ai"`` and passed back as ``message_history`` on the
  next run. It is saved only when the run succeeds.
* **Input.** Text requests become the ``user_prompt`` text; images and files
  become ``BinaryContent`` (base64 or ``data:`` URIs) or ``ImageUrl`` /
  ``DocumentUrl`` (``http(s)://`` URLs); structured requests become their JSON.
* **Framework context** (full round trip). The session's framework context is
  loaded as a deep copy and passed as ``deps=``; tools mutate that very dict
  through ``RunContext.deps``, and it is written back (shallow-merged) only
  after the native call succeeded. Without a stored context, tools get a
  throw-away ``{}``.
* **Run options.** The agent's declared and factory options are copied, then the
  keys this runner owns are written last: ``user_prompt``, ``message_history``,
  ``deps`` and ``capabilities`` (the caller's capabilities are kept, ours are
  appended). ``event_stream_handler`` is honoured in run mode and dropped, with
  one warning per runner, in stream mode, where the runner consumes the native
  event stream itself. Unknown keys reach ``agent.run`` (which rejects them).
* **Replies.** ``str`` output gives :class:`AgentReplyText` (or
  :class:`AgentReplyImage` when the final response also carries an image, or
  the output is an image); anything else (a pydantic model, a dict, a
  dataclass, a list, ...) gives :class:`AgentReplyAny` with its JSON form (a
  non-object value sits under ``"output"``).

Events come from one run-time capability (``_Observer``) that the runner adds
to every run. It only wraps hooks (``wrap_node_run``, ``wrap_model_request``,
``wrap_tool_execute`` and, in stream mode, ``wrap_run_event_stream``) and calls
each handler exactly once, so the agent's own capabilities, hooks and
``event_stream_handler`` still fire exactly once, unchanged:

* a step is one model request/response cycle: ``StepStart`` when a
  ``ModelRequestNode`` starts, ``StepEnd`` when the ``CallToolsNode`` after it
  ends (``step_index`` is Pydantic AI's ``run_step``);
* a model call is ``MessageStart`` ... ``MessageEnd`` (model name, provider,
  usage, finish reason and response id on the end event); thinking parts are
  ``Reasoning*`` blocks; tool-call parts are ``ToolCallStart`` /
  ``ToolCallArgs`` / ``ToolCallEnd`` keyed by Pydantic AI's ``tool_call_id``;
* tool results are ``ToolCallResult`` with the text the model is sent (errors,
  retries and unknown tools have ``is_error=True``).

In **stream mode** (``run_stream_events``) the deltas come from the native
stream, seen through ``wrap_run_event_stream`` so they are ordered with the
step and message boundaries reported by the hooks; everything lands in one
queue the ``stream()`` generator drains while it pulls the native stream, so a
``MessageStart`` is yielded when the request starts, not when its first token
arrives. In **run mode** the same events are reported to the observer channel
(``claim_observer``), built from each complete response.

**Pydantic AI's own OpenTelemetry spans (no duplicates).** When Pydantic AI is
instrumented (``agent.instrument = True``, ``Agent.instrument_all()``, an
``Instrumentation`` capability, or Logfire's ``instrument_pydantic_ai``) it
emits ``invoke_agent`` / ``chat`` / ``execute_tool`` spans of its own. Nesting
them under our spans would show every model call and tool call twice (and sum
the tokens twice). So during a *traced* run (``core.observer.in_traced_run()``),
the runner **suppresses** them: when the run would be instrumented, it adds a
run-time ``Instrumentation`` capability with no-op
tracer and meter providers, which replaces the agent's own instrumentation for
that run only (no global state changes; untraced runs keep Pydantic AI's
spans). Suppressing rather than nesting also keeps one attribute vocabulary
(ours, per ``SEMCONV.md``) on every span of a traced run. An ``Instrumentation``
capability the user gave a custom ``id`` is not replaced and still emits.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import aclosing, suppress
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from runnertrace._internal.errors import handle_internal_errors
from runnertrace._internal.imports import require

require("pydantic_ai", "pydantic-ai")

import pydantic_core  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent as PydanticAgent  # noqa: E402
from pydantic_ai.agent import AbstractAgent  # noqa: E402
from pydantic_ai.capabilities.abstract import (  # noqa: E402
    AbstractCapability,
    AgentNode,
    CapabilityOrdering,
    NodeResult,
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapNodeRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.messages import (  # noqa: E402
    ERROR_OUTCOMES,
    AgentStreamEvent,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
)
from pydantic_ai.models import ModelRequestContext  # noqa: E402
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent  # noqa: E402
from pydantic_ai.tools import RunContext  # noqa: E402

from runnertrace.core import events as ev  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.core.context import ensure_tool_context  # noqa: E402
from runnertrace.core.models import (  # noqa: E402
    AgentReply,
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequest,
    prompt_of,
)
from runnertrace.core.module import Module  # noqa: E402
from runnertrace.core.observer import claim_observer, in_traced_run  # noqa: E402
from runnertrace.core.runner import Runner  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402

__all__ = ["STATE_KEY", "PydanticAIModule", "PydanticAIRunner", "user_prompt_of"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "pydantic_ai"

Emit = Callable[[ev.StreamEvent], None]


# -- requests -> user_prompt -------------------------------------------------------------------


def _media(data: str, mime_type: str, name: str | None, url_type: type[Any]) -> UserContent:
    """One image or file: a URL stays a URL, anything else is base64 bytes."""
    if data.startswith(("http://", "https://")):
        return url_type(url=data, media_type=mime_type)  # type: ignore[no-any-return]
    if data.startswith("data:"):
        return BinaryContent.from_data_uri(data)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        label = f"{name!r} " if name else ""
        raise ValueError(
            f"request {label}({mime_type}) is neither base64 data, a data: URI nor an http(s) URL"
        ) from exc
    return BinaryContent(data=raw, media_type=mime_type, identifier=name)


def _any_text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str)


_REQUEST_CONVERTERS: dict[str, Callable[[Any], UserContent]] = {
    "text": lambda r: r.prompt,
    "image": lambda r: _media(r.image_data, r.mime_type, r.name, ImageUrl),
    "file": lambda r: _media(r.file_data, r.mime_type, r.name, DocumentUrl),
    "any": lambda r: _any_text(r.content),
}


def user_prompt_of(requests: Sequence[AgentRequest]) -> str | list[UserContent]:
    """Convert our requests into Pydantic AI's ``user_prompt``.

    A lone text request stays a plain string (what Pydantic AI shows best in its
    own UIs); anything else is a list of user content parts, in request order.
    """
    parts = [_REQUEST_CONVERTERS[request.type](request) for request in requests]
    if not parts:
        raise ValueError("a run needs at least one request")
    if len(parts) == 1 and isinstance(parts[0], str):
        return parts[0]
    return parts


# -- native events -> our events -----------------------------------------------------------------


def _args_text(args: str | dict[str, Any] | None) -> str:
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args)


_RESULT_KINDS = frozenset({"tool-return", "builtin-tool-return", "retry-prompt"})


def _result_text(part: Any) -> tuple[str, bool]:
    """The text a tool result part sends the model, and whether it is an error."""
    if part.part_kind == "retry-prompt":  # deprecated form: always an error to fix
        return part.model_response(), True
    outcome = getattr(part, "outcome", "success")
    return part.model_response_str(wrap_if_error=False), outcome in ERROR_OUTCOMES


class _EventMapper:
    """Turns hook calls and native stream events of one run into our events.

    One instance per run; all calls come from the run's own tasks on one event
    loop, so plain attributes are enough. ``emit`` is the observer sink (run
    mode) or the stream queue (stream mode).
    """

    def __init__(self, emit: Emit, agent_name: str, *, streaming: bool) -> None:
        self._emit = emit
        self._agent_name = agent_name
        self._streaming = streaming
        self._step: int | None = None
        self._messages = 0
        self._message_id: str | None = None
        self._saw_parts = False
        # part index -> (part kind, our id) for parts of the open message still open
        self._parts: dict[int, tuple[str, str]] = {}
        # tool calls asked for in the open step that have no result yet
        self._pending_calls: set[str] = set()
        # a call id a later delta replaced -> the id we announced
        self._aliases: dict[str, str] = {}

    # steps ------------------------------------------------------------------------------
    def step_started(self, ctx: RunContext[Any]) -> None:
        if self._step is not None:  # a request node following a request node
            self._end_step()
        self._step = ctx.run_step
        self._emit(ev.StepStart(step_name=self._agent_name, step_index=ctx.run_step))

    def step_finished(self, ctx: RunContext[Any], result: NodeResult[Any]) -> None:
        """After the ``CallToolsNode``: settle calls without a result, then end the step."""
        if self._pending_calls:
            parts = list(getattr(getattr(result, "request", None), "parts", ()))
            if ctx.messages and ctx.messages[-1].kind == "request":
                parts.extend(ctx.messages[-1].parts)
            for part in parts:
                if part.part_kind not in _RESULT_KINDS:
                    continue
                call_id = self._aliases.get(part.tool_call_id, part.tool_call_id)
                if call_id in self._pending_calls:
                    self._result(call_id, *_result_text(part))
        self._end_step()

    def _end_step(self) -> None:
        if self._step is None:
            return
        step, self._step = self._step, None
        self._pending_calls.clear()
        self._aliases.clear()
        self._emit(ev.StepEnd(step_name=self._agent_name, step_index=step))

    # messages ---------------------------------------------------------------------------
    def message_started(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> None:
        self._messages += 1
        self._message_id = f"{ctx.run_id or 'run'}-m{self._messages}"
        self._saw_parts = False
        self._parts.clear()
        model = request_context.model
        self._emit(
            ev.MessageStart(
                message_id=self._message_id,
                model=model.model_name,
                provider=getattr(model, "system", None),
            )
        )

    def message_finished(self, response: ModelResponse | None) -> None:
        """End the open message; ``None`` means the request failed."""
        message_id = self._message_id
        if message_id is None:
            return
        if response is not None and not self._saw_parts:
            # Run mode, or a wrapper that answered without streaming: the parts
            # are only known now, complete.
            for index, part in enumerate(response.parts):
                self.part_started(index, part)
                self.part_ended(index, part)
        for index in list(self._parts):
            self._close_part(index)
        self._message_id = None
        if response is None:
            self._emit(ev.MessageEnd(message_id=message_id, finish_reason="error"))
            return
        usage = response.usage
        self._emit(
            ev.MessageEnd(
                message_id=message_id,
                finish_reason=response.finish_reason,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_input_tokens=usage.cache_read_tokens or None,
                reasoning_output_tokens=usage.output_reasoning_tokens or None,
                response_model=response.model_name,
                response_id=response.provider_response_id,
            )
        )

    # response parts (whole parts in run mode, part events in stream mode) ---------------
    def part_started(self, index: int, part: Any) -> None:
        message_id = self._message_id
        if message_id is None:
            return
        self._saw_parts = True
        if index in self._parts:  # a new start for an index replaces the old part
            self._close_part(index)
        start = self._PART_STARTS.get(part.part_kind)
        if start is not None:
            start(self, message_id, index, part)

    def _start_text(self, message_id: str, index: int, part: Any) -> None:
        if part.content:
            self._emit(ev.TextDelta(message_id=message_id, delta=part.content))

    def _start_thinking(self, message_id: str, index: int, part: Any) -> None:
        reasoning_id = f"{message_id}-r{index}"
        self._parts[index] = ("thinking", reasoning_id)
        self._emit(ev.ReasoningStart(message_id=reasoning_id))
        if part.content:
            self._emit(ev.ReasoningDelta(message_id=reasoning_id, delta=part.content))

    def _start_call(self, message_id: str, index: int, part: Any) -> None:
        call_id = part.tool_call_id
        self._parts[index] = ("call", call_id)
        self._pending_calls.add(call_id)
        self._emit(
            ev.ToolCallStart(
                tool_call_id=call_id,
                tool_name=part.tool_name or "unknown",
                parent_message_id=message_id,
            )
        )
        args = _args_text(part.args)
        if args:
            self._emit(ev.ToolCallArgs(tool_call_id=call_id, delta=args))

    def _start_native_return(self, message_id: str, index: int, part: Any) -> None:
        # A provider-run tool's result arrives inside the response itself.
        call_id = self._aliases.get(part.tool_call_id, part.tool_call_id)
        if call_id in self._pending_calls:
            self._result(call_id, *_result_text(part))

    _PART_STARTS: ClassVar[dict[str, Callable[[_EventMapper, str, int, Any], None]]] = {
        "text": _start_text,
        "thinking": _start_thinking,
        "tool-call": _start_call,
        "builtin-tool-call": _start_call,
        "builtin-tool-return": _start_native_return,
    }

    def part_delta(self, index: int, delta: Any) -> None:
        message_id = self._message_id
        if message_id is None:
            return
        kind = delta.part_delta_kind
        if kind == "text":
            if delta.content_delta:
                self._emit(ev.TextDelta(message_id=message_id, delta=delta.content_delta))
            return
        opened = self._parts.get(index)
        if opened is None:
            return
        if kind == "thinking" and delta.content_delta:
            self._emit(ev.ReasoningDelta(message_id=opened[1], delta=delta.content_delta))
        elif kind == "tool_call":
            args = _args_text(delta.args_delta)
            if args:
                self._emit(ev.ToolCallArgs(tool_call_id=opened[1], delta=args))

    def part_ended(self, index: int, part: Any) -> None:
        opened = self._parts.get(index)
        if opened is None:
            return
        final_id = getattr(part, "tool_call_id", None)
        if final_id is not None and final_id != opened[1]:
            self._aliases[final_id] = opened[1]
        self._close_part(index)

    def _close_part(self, index: int) -> None:
        kind, our_id = self._parts.pop(index)
        if kind == "thinking":
            self._emit(ev.ReasoningEnd(message_id=our_id))
        else:
            self._emit(ev.ToolCallEnd(tool_call_id=our_id))

    # tool results -------------------------------------------------------------------------
    def tool_returned(self, call: ToolCallPart, result: Any) -> None:
        """Run mode: a function tool returned normally (errors are settled at step end)."""
        if self._streaming:
            return
        part = ToolReturnPart(
            tool_name=call.tool_name, content=result, tool_call_id=call.tool_call_id
        )
        call_id = self._aliases.get(call.tool_call_id, call.tool_call_id)
        if call_id in self._pending_calls:
            self._result(call_id, part.model_response_str(), False)

    def _result(self, call_id: str, content: str, is_error: bool) -> None:
        self._pending_calls.discard(call_id)
        self._emit(ev.ToolCallResult(tool_call_id=call_id, content=content, is_error=is_error))

    # the native stream (stream mode) ------------------------------------------------------
    def native(self, event: AgentStreamEvent) -> None:
        handler = self._NATIVE.get(event.event_kind)
        if handler is not None:
            handler(self, event)

    def _on_part_start(self, event: Any) -> None:
        self.part_started(event.index, event.part)

    def _on_part_delta(self, event: Any) -> None:
        self.part_delta(event.index, event.delta)

    def _on_part_end(self, event: Any) -> None:
        self.part_ended(event.index, event.part)

    def _on_tool_result(self, event: Any) -> None:
        call_id = self._aliases.get(event.tool_call_id, event.tool_call_id)
        if call_id in self._pending_calls:
            self._result(call_id, *_result_text(event.part))

    _NATIVE: ClassVar[dict[str, Callable[[_EventMapper, Any], None]]] = {
        "part_start": _on_part_start,
        "part_delta": _on_part_delta,
        "part_end": _on_part_end,
        "function_tool_result": _on_tool_result,
        "output_tool_result": _on_tool_result,
    }


@dataclass
class _Observer(AbstractCapability[Any]):
    """The run-time capability that reports a run's events without displacing anything.

    Outermost, so it sees what the agent's own capabilities produce; every hook
    calls its handler exactly once and returns what the handler returned.
    Mapping faults are telemetry faults: logged once, never fatal to the run.
    """

    mapper: _EventMapper = field(repr=False, kw_only=False)

    # It adds no tools, toolsets or model wrappers, so a durable agent may take it per run.
    _safe_at_runtime: ClassVar[bool] = True

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="outermost")

    async def wrap_node_run(
        self,
        ctx: RunContext[Any],
        *,
        node: AgentNode[Any],
        handler: WrapNodeRunHandler[Any],
    ) -> NodeResult[Any]:
        is_request = PydanticAgent.is_model_request_node(node)
        if is_request:
            with handle_internal_errors("pydantic_ai step start"):
                self.mapper.step_started(ctx)
        result = await handler(node)
        if PydanticAgent.is_call_tools_node(node):
            with handle_internal_errors("pydantic_ai step end"):
                self.mapper.step_finished(ctx, result)
        return result

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        with handle_internal_errors("pydantic_ai message start"):
            self.mapper.message_started(ctx, request_context)
        try:
            response = await handler(request_context)
        except Exception:
            # Close the message so pairing holds even when the node recovers
            # (a retry, a fallback model); the exception itself goes on unchanged.
            with handle_internal_errors("pydantic_ai message end"):
                self.mapper.message_finished(None)
            raise
        with handle_internal_errors("pydantic_ai message end"):
            self.mapper.message_finished(response)
        return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        result = await handler(args)
        with handle_internal_errors("pydantic_ai tool result"):
            self.mapper.tool_returned(call, result)
        return result


@dataclass
class _StreamObserver(_Observer):
    """Stream mode: also maps the native event stream, in order with the hooks.

    Overriding ``wrap_run_event_stream`` makes Pydantic AI stream a node even
    without an ``event_stream_handler``, which is why run mode uses the plain
    :class:`_Observer`: a run-mode call keeps its non-streaming model path.
    """

    async def wrap_run_event_stream(
        self,
        ctx: RunContext[Any],
        *,
        stream: AsyncIterable[AgentStreamEvent],
    ) -> AsyncIterable[AgentStreamEvent]:
        try:
            async for event in stream:
                with handle_internal_errors("pydantic_ai stream event"):
                    self.mapper.native(event)
                yield event
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()


class _Queue:
    """Our events of a streamed run, in the order the run produced them."""

    def __init__(self) -> None:
        self.items: deque[ev.StreamEvent] = deque()
        self.ready = asyncio.Event()

    def push(self, event: ev.StreamEvent) -> None:
        self.items.append(event)
        self.ready.set()


# -- instrumentation suppression ---------------------------------------------------------------


def _would_instrument(native: AbstractAgent[Any, Any], options: Mapping[str, Any]) -> bool:
    """Whether Pydantic AI would emit spans of its own for this run.

    Checked so that the silencer is added only when there is something to
    silence: even with no-op providers the ``Instrumentation`` capability
    serialises every message, which costs about a fifth of a fake-model run.
    """
    from pydantic_ai.capabilities.abstract import leaf_capabilities
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentedModel

    if not isinstance(native, PydanticAgent):
        return True  # a wrapper agent hides its configuration: silence to be sure
    if isinstance(options.get("model") or native.model, InstrumentedModel):
        return True
    setting = native.instrument
    if setting is None:
        # What Agent.instrument_all() set; if that attribute ever moves, assume on.
        setting = getattr(PydanticAgent, "_instrument_default", True)
    if setting:
        return True
    capabilities: list[Any] = leaf_capabilities(native.root_capability)
    for declared in options.get("capabilities") or ():
        if isinstance(declared, AbstractCapability):
            capabilities.extend(leaf_capabilities(declared))
    return any(isinstance(capability, Instrumentation) for capability in capabilities)


@cache
def _silenced_instrumentation() -> AbstractCapability[Any]:
    """An ``Instrumentation`` that records nothing; it replaces the agent's for one run.

    One shared instance is enough: Pydantic AI copies it per run (``for_run``).
    """
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentationSettings

    settings = InstrumentationSettings(
        tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
    )
    return Instrumentation(settings=settings)


# -- the runner ---------------------------------------------------------------------------------


class PydanticAIRunner(Runner):
    """Runs a ``pydantic_ai.Agent`` (any ``AbstractAgent``) in run or stream mode."""

    framework: ClassVar[str] = "pydantic_ai"
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "user_prompt": "the runner builds the prompt from the requests",
        "message_history": (
            f"the runner restores the conversation from the session (key {STATE_KEY!r})"
        ),
        "deps": (
            "the runner passes the session's framework context as deps; "
            "set it with session.set_framework_context()"
        ),
        "conversation": (
            "the runner passes the session's history as message_history, and Pydantic AI "
            "rejects conversation= alongside it"
        ),
    }

    def __init__(self) -> None:
        self._warned_stream_handler = False

    def _native(self, agent: Agent) -> AbstractAgent[Any, Any]:
        native = agent.native
        if not isinstance(native, AbstractAgent):
            raise TypeError(
                f"agent {agent.name!r} is not a pydantic_ai agent (got {type(native).__name__})"
            )
        return native

    async def _call_options(
        self,
        agent: Agent,
        session: Session,
        requests: list[AgentRequest],
        observer: _Observer,
        *,
        streaming: bool,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The native call's keyword arguments, and the loaded framework context."""
        options = await agent.resolve_run_options(session, requests)
        dropped = streaming and options.pop("event_stream_handler", None) is not None
        if dropped and not self._warned_stream_handler:
            self._warned_stream_handler = True
            logger.warning(
                "runnertrace: run option 'event_stream_handler' of agent %r is ignored in "
                "stream mode (the runner consumes the event stream itself); "
                "use a capability to observe events in both modes",
                agent.name,
            )
        capabilities = list(options.get("capabilities") or [])
        if in_traced_run() and _would_instrument(self._native(agent), options):
            capabilities.append(_silenced_instrumentation())
        capabilities.append(observer)
        loaded = session.load_framework_context()
        # Owned keys last, so no declared option can displace them.
        options["user_prompt"] = user_prompt_of(requests)
        options["message_history"] = list(session.get(STATE_KEY) or [])
        options["deps"] = loaded if loaded is not None else {}
        options["capabilities"] = capabilities
        return options, loaded

    def _save(
        self,
        session: Session,
        result: AgentRunResult[Any],
        loaded: dict[str, Any] | None,
        deps: dict[str, Any],
    ) -> None:
        session.set(STATE_KEY, result.all_messages())
        if loaded is not None:
            session.write_back_framework_context(loaded, deps)

    @staticmethod
    def _reply(result: AgentRunResult[Any], prompt: str) -> AgentReply:
        output = result.output
        response = result.response
        if isinstance(output, BinaryContent) and output.is_image:
            text = response.text or ""
            return AgentReplyImage(text=text, image_data=output.base64, prompt=prompt)
        if isinstance(output, str):
            images = response.images
            if images:
                return AgentReplyImage(text=output, image_data=images[0].base64, prompt=prompt)
            return AgentReplyText(text=output, prompt=prompt)
        if isinstance(output, BaseModel):
            content: Any = output.model_dump(mode="json")
        else:
            content = pydantic_core.to_jsonable_python(output)
        if not isinstance(content, dict):
            content = {"output": content}
        return AgentReplyAny(content=content, prompt=prompt)

    async def run(self, agent: Agent, session: Session, requests: list[AgentRequest]) -> AgentReply:
        native = self._native(agent)
        with claim_observer() as report:
            observer = _Observer(_EventMapper(report, agent.name, streaming=False))
            options, loaded = await self._call_options(
                agent, session, requests, observer, streaming=False
            )
            with ensure_tool_context(agent, session, requests):
                result = await native.run(**options)
        self._save(session, result, loaded, options["deps"])
        return self._reply(result, prompt_of(requests))

    async def stream(
        self, agent: Agent, session: Session, requests: list[AgentRequest]
    ) -> AsyncIterator[ev.StreamEvent]:
        native = self._native(agent)
        queue = _Queue()
        observer = _StreamObserver(_EventMapper(queue.push, agent.name, streaming=True))
        # In stream mode the events are yielded, not reported: hide any run-mode
        # observer from nested runs.
        with claim_observer(), ensure_tool_context(agent, session, requests):
            options, loaded = await self._call_options(
                agent, session, requests, observer, streaming=True
            )
            result: AgentRunResult[Any] | None = None
            async with (
                native.run_stream_events(**options) as native_events,
                aclosing(_drain(native_events, queue)) as drained,
            ):
                async for item in drained:
                    if isinstance(item, AgentRunResultEvent):
                        result = item.result
                    else:
                        yield item
        if result is None:
            raise RuntimeError("the Pydantic AI event stream ended without a run result")
        self._save(session, result, loaded, options["deps"])


async def _drain(
    native_events: AsyncIterator[Any], queue: _Queue
) -> AsyncGenerator[ev.StreamEvent | AgentRunResultEvent[Any], None]:
    """Yield queued events as soon as they exist while pulling the native stream.

    The native stream must be pulled for the run to advance (it hands over one
    event at a time), but our events can appear while a pull waits, e.g. the
    ``MessageStart`` of a request whose first token is seconds away. So each
    pull runs as a task and we wake on whichever comes first. The run result
    is yielded last; a run failure is raised after the events before it.
    """
    pull: asyncio.Future[Any] | None = None
    failure: BaseException | None = None
    finished = False
    try:
        while True:
            while queue.items:
                yield queue.items.popleft()
            if failure is not None:
                raise failure
            if finished:
                return
            if pull is None:
                pull = asyncio.ensure_future(native_events.__anext__())
            if not pull.done():
                queue.ready.clear()
                waiter = asyncio.ensure_future(queue.ready.wait())
                try:
                    await asyncio.wait((pull, waiter), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if not pull.done():
                    continue
            done, pull = pull, None
            try:
                native = done.result()
            except StopAsyncIteration:
                finished = True
            except BaseException as exc:  # noqa: BLE001 - re-raised once queued events are out
                failure = exc
            else:
                if isinstance(native, AgentRunResultEvent):
                    while queue.items:
                        yield queue.items.popleft()
                    yield native
    finally:
        if pull is not None:
            pull.cancel()
            with suppress(asyncio.CancelledError):
                await asyncio.wait((pull,))
            if not pull.cancelled():
                pull.exception()  # retrieved, so asyncio does not log it


class PydanticAIModule(Module):
    """Registers ``pydantic_ai.Agent`` objects with the runtime, each paired with a
    :class:`PydanticAIRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``usage_limits``, ``model_settings``, ``capabilities``, ...).
    """

    runner_class = PydanticAIRunner

    def agent_name(self, native: Any) -> str:
        name = getattr(native, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"cannot register {native!r}: give the pydantic_ai agent a name "
                "(Agent(..., name='assistant'))"
            )
        return name
