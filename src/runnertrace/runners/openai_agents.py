"""``OpenAIRunner``: the runner contract over the OpenAI Agents SDK (``openai-agents``).

Importing this module needs the extra: ``pip install 'runnertrace[openai-agents]'``.

How the SDK maps onto the contract, and why:

- **Session state** lives under ``"openai"`` as the SDK's own input-item list
  (``RunResult.to_input_list(mode="normalized")``). The next run replays it
  before the new user message. We keep the history ourselves instead of passing
  an SDK ``Session`` so that a failed run saves nothing: the stored history and
  the framework context only ever move forward together, after success.
- **Input**: all requests of a run become one user message. Text is
  ``input_text``; images are ``input_image`` data URLs; files are ``input_file``
  data URLs with their name; structured input is its JSON as ``input_text``.
- **Framework context** (full round trip): the loaded copy is passed as
  ``context=``; tools mutate it through ``RunContextWrapper.context`` and that
  very object is written back, only when the run succeeded. Without a stored
  context the run gets ``context=None``, so a tool that writes to it fails
  loudly rather than losing the write.
- **Run options** go to ``Runner.run`` / ``Runner.run_streamed`` unchanged;
  unknown keys reach the SDK (which raises ``TypeError``). The keys the runner
  owns are reserved, see :attr:`OpenAIRunner.RESERVED_RUN_OPTIONS`.
- **Observation** (only when a run is observed; an untraced run is the SDK's
  own call with nothing added): a ``RunHooks`` object composed with the user's
  declared ``hooks=`` (each of the user's callbacks fires exactly once). Our
  callbacks do their work when the SDK *calls* them, in the SDK's own task:
  ``on_llm_start`` right before the request is sent opens the step (the SDK's
  turn) and the chat span, with what the model is sent (input items as semconv
  messages, the instructions as the resolved text the model receives, sampling
  parameters resolved like the SDK resolves them, the agent's function tools
  and handoffs), and makes it current for the model's HTTP call;
  ``on_tool_start``, in the task that then runs the tool, makes the tool's span
  current for its body. Run mode takes the rest from the hooks too; stream
  mode from the stream events (text, reasoning and argument chunks, usage,
  tool results). When the stream's consumer lags behind the run, a step opens
  at its response's first stream event instead, so events never reorder.
- **Tool errors**: a function tool that raised and whose exception the SDK
  turned into a message for the model (the default ``failure_error_function``)
  reaches the SDK's ``RunConfig.tool_error_formatter``; ours records the
  exception for the call's result and hands over to the user's formatter.
- **Identity**: after a handoff, steps carry the new agent's name and the agent
  that handed off; the transfer call gets the SDK's transfer message as result.
- **An agent run as a tool** (``Agent.as_tool()``) is a run of its own, an
  ``invoke_agent`` span under the tool's ``execute_tool`` span with its own steps,
  chat and tool spans. The SDK starts it with the outer run's config and no hooks;
  the SDK's default agent runner, wrapped at the first traced run, recognises that
  config and observes the inner run (see :class:`_NestingAgentRunner`).
- **Ids**: the step's message opens before the response has an id, so message
  ids are made up; the response id travels on ``MessageEnd``. Tool calls keep
  the model's ``call_id``.
- **Not mapped**: hosted tools that run inside the model call (web search,
  file search, image generation, code interpreter) get no tool events; their
  time is in the model call. A tool with its own ``failure_error_function``
  reports its error text as an ordinary result: the SDK hands that exception
  to the tool's function only. MCP server tools are not listed in the tool
  definitions (listing them would ask the servers again).
- **Retries** the SDK makes itself (``ModelSettings.retry``) are one model call
  to the hooks; an observed run puts a retry policy in front of the agent's
  own (the agent's still decides), so each failed attempt ends its chat span
  with its error and the next attempt gets its own span in the same step.
- **The SDK's own tracing is switched off for a traced run, by default.** With
  it on, every trace processor registered with the SDK sees the run too, and
  those that export to OpenTelemetry (OpenInference's instrumentor, Logfire's)
  would show each model and tool call a second time, tokens counted twice. So
  a traced run gets a copy of its ``RunConfig`` with ``tracing_disabled=True``
  (the user's object is never changed; untraced runs are left alone). This
  also skips the upload to the OpenAI traces dashboard for that run;
  ``OpenAIRunner(keep_sdk_tracing=True)`` keeps it, and then each call does
  appear in both trees, by choice.
- Exceptions from the SDK (``MaxTurnsExceeded``, guardrail tripwires, model
  errors) propagate unchanged. Events already reported stay as they are; the
  tracing layer closes what was left open.
"""

from __future__ import annotations

import copy
import inspect
import json
import time
from asyncio import CancelledError, current_task
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
)
from contextlib import AbstractContextManager, aclosing, asynccontextmanager
from typing import Any, ClassVar, cast

from runnertrace._internal.imports import missing_extra
from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText
from runnertrace.core.module import Module
from runnertrace.core.observer import claim_observer, in_traced_run, open_nested_run
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import (
    Message,
    Part,
    as_text,
    blob_part,
    message,
    reasoning_part,
    request_parameters,
    text_part,
    tool_call_part,
    tool_definition,
    tool_response_part,
)
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    reply_of,
    save,
)

try:
    from agents import (
        Agent,
        ModelRetrySettings,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        RunHooks,
    )
    from agents import Runner as SdkRunner
    from agents.lifecycle import RunHooksBase
    from agents.models import get_default_model
    from agents.models.fake_id import FAKE_RESPONSES_ID
    from agents.result import RunResultBase, RunResultStreaming
    from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
except ImportError as exc:
    raise missing_extra(exc, "openai-agents") from exc

__all__ = ["OpenAIModule", "OpenAIRunner", "native_input"]

STATE_KEY = "openai"
_boundary = MappingBoundary("openai")


# -- requests -> native input ----------------------------------------------------------------------
def _data_url(mime_type: str, data: str) -> str:
    """A base64 payload as a data URL; a payload that already is one is kept."""
    return data if data.startswith("data:") else f"data:{mime_type};base64,{data}"


def _content_part(request: AgentRequest) -> dict[str, Any]:
    if request.type == "text":
        return {"type": "input_text", "text": request.prompt}
    if request.type == "image":
        return {
            "type": "input_image",
            "image_url": _data_url(request.mime_type, request.image_data),
            "detail": "auto",
        }
    if request.type == "file":
        return {
            "type": "input_file",
            "file_data": _data_url(request.mime_type, request.file_data),
            "filename": request.name or "file",
        }
    return {"type": "input_text", "text": json.dumps(request.content, default=str)}


def native_input(requests: list[AgentRequest]) -> list[dict[str, Any]]:
    """The run's requests as one SDK user message (a one-item input list)."""
    if not requests:
        raise ValueError("a run needs at least one request")
    return [{"role": "user", "content": [_content_part(r) for r in requests]}]


# -- helpers shared by both modes ---------------------------------------------------------
def _field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``: SDK items are pydantic models or TypedDicts."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _usage(usage: Any) -> dict[str, Any]:
    """Token counts from an SDK ``Usage`` or a Responses ``ResponseUsage``.

    A usage of all zeros is what the SDK reports when the model gave none (fake
    models, some providers); it is reported as unknown rather than as zero.
    """
    if usage is None:
        return {}
    input_tokens = _field(usage, "input_tokens") or 0
    output_tokens = _field(usage, "output_tokens") or 0
    if not input_tokens and not output_tokens:
        return {}
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": _field(_field(usage, "input_tokens_details"), "cached_tokens"),
        "reasoning_output_tokens": _field(
            _field(usage, "output_tokens_details"), "reasoning_tokens"
        ),
    }


def _finish_reason(output: list[Any], incomplete_reason: str | None = None) -> str:
    if incomplete_reason:
        return incomplete_reason
    if any(_field(item, "type") == "function_call" for item in output):
        return "tool_calls"
    return "stop"


def _model_of(agent: Any, run_config: Any) -> tuple[str | None, str | None]:
    """The requested model name and provider of ``agent``'s next model call."""
    model = _field(run_config, "model") if run_config is not None else None
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


# -- what a model call is sent ---------------------------------------------------------------------
def _part(part: Any) -> Part:
    """One content part of an SDK input item as a semconv part (never image/file bytes)."""
    text = _field(part, "text") or _field(part, "refusal")
    if isinstance(text, str):
        return text_part(text)
    return blob_part("image" if _field(part, "type") == "input_image" else "file")


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
        kind = _field(item, "type")
        role = _field(item, "role")
        call_id = _field(item, "call_id")
        if kind == "function_call":
            names[call_id] = _field(item, "name")
            call = tool_call_part(call_id, names[call_id], _field(item, "arguments"))
            messages.append(message("assistant", [call]))
        elif kind == "function_call_output":
            response = tool_response_part(call_id, names.get(call_id), _field(item, "output"))
            messages.append(message("tool", [response]))
        elif kind == "reasoning":
            summary = "".join(_field(p, "text") or "" for p in _field(item, "summary") or [])
            messages.append(message("assistant", [reasoning_part(summary)]))
        elif role is not None:
            content = _field(item, "content")
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
    settings = agent.model_settings.resolve(_field(run_config, "model_settings"))
    return request_parameters(settings.extra_args or {}, vars(settings))


def _tool_definitions(agent: Any) -> list[dict[str, Any]] | None:
    """The function tools and handoffs ``agent`` offers, read from its declaration.

    Read without calling anything: a callable ``is_enabled`` is not evaluated (the
    tool is listed), and MCP servers are not asked for their tools again.
    """
    from agents.handoffs import Handoff
    from agents.tool import FunctionTool

    definitions: list[dict[str, Any]] = []
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


def _request_fields(agent: Any, instructions: Any, items: Any, run_config: Any) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: what the model call is sent."""
    return {
        "input_messages": _semconv_messages(items) if items is not None else None,
        "system_instructions": instructions if isinstance(instructions, str) else None,
        "request_parameters": _request_parameters(agent, run_config) if items else None,
        "tool_definitions": _tool_definitions(agent) if items else None,
    }


def _handoff_tool_names(from_agent: Any, to_agent: Any) -> set[str]:
    """Tool names under which ``from_agent`` can hand off to ``to_agent``."""
    from agents.handoffs import Handoff

    names: set[str] = set()
    for target in getattr(from_agent, "handoffs", None) or []:
        if isinstance(target, Handoff):
            if target.agent_name == to_agent.name:
                names.add(target.tool_name)
        elif target is to_agent:
            names.add(Handoff.default_tool_name(to_agent))
    return names


async def _done() -> None:
    return None


class _Mapper(RunHooks[Any]):
    """One observed run, made into events through an :class:`EventBuilder`.

    It is the run's ``RunHooks``. Each callback does its work when the SDK *calls*
    it, in the SDK's own task, and returns an already-finished coroutine: the SDK
    calls ``on_llm_start`` right before it sends the request and ``on_tool_start``
    in the task that then runs the tool, so the scopes entered there are current
    for the model's HTTP call and the tool's body (an ``async def`` callback would
    run in a task of its own, where a scope reaches nothing).

    Run mode takes everything from the hooks. Stream mode opens each step and
    message from ``on_llm_start`` too, when the stream's consumer has caught up
    with the run (else at the response's first stream event, so no event is ever
    out of order); the stream events carry the rest.
    """

    def __init__(self, builder: EventBuilder, run_config: Any, agent: Any, *, streaming: bool):
        self.builder = builder
        self._run_config = run_config
        self._streaming = streaming
        self.starting_agent = agent
        self._agent = agent  # the agent the stream last announced
        self._stream_handoff_from: str | None = None
        self._handoff_from: str | None = None
        self._handed_off = False
        self._step: tuple[str, int] | None = None
        self._steps = 0
        self._message: str | None = None
        self._request: tuple[Any, Any, Any] | None = None  # what the open step's call sends
        self._pending: tuple[Any, Any, Any, str | None] | None = None  # a request not yet opened
        self._model_scope: tuple[AbstractContextManager[None], Any] | None = None
        self._waiting: dict[str, str] = {}  # call id -> tool name, announced without a result
        self._ran: dict[str, list[int]] = {}  # stream mode: call id -> when its tool ran
        self.errors: dict[str, BaseException] = {}  # call id -> what a handled tool raised
        # Per streamed response.
        self._calls: dict[Any, str] = {}  # output index -> call id
        self._streamed: set[Any] = set()  # output indices (or kinds) whose content streamed
        self._done: set[tuple[Any, ...]] = set()  # items completed (each is seen twice)

    # -- steps and messages --------------------------------------------------------------
    def _open(self, agent: Any, instructions: Any, items: Any, handoff_from: str | None) -> str:
        """A model request is sent: a new step (the SDK's turn) and its message."""
        builder = self.builder
        if self._step is not None:
            builder.step_end(*self._step)
        name = getattr(agent, "name", None) or "agent"
        self._step = (name, self._steps)
        self._steps += 1
        builder.step_start(
            name,
            self._step[1],
            agent_name=name if self._handed_off else None,
            handoff_from=handoff_from,
        )
        return self._send(agent, instructions, items)

    def _send(self, agent: Any, instructions: Any, items: Any) -> str:
        """The step's (next) request is sent: its message opens."""
        self._request = (agent, instructions, items)
        model, provider = _model_of(agent, self._run_config)
        fields = _boundary.detail(_request_fields, agent, instructions, items, self._run_config)
        self._message = self.builder.message_start(model=model, provider=provider, **fields)
        self._calls.clear()
        self._streamed.clear()
        self._done.clear()
        return self._message

    def _end_message(
        self,
        output: list[Any],
        usage: Any,
        response_id: str | None,
        response_model: str | None = None,
        incomplete_reason: str | None = None,
    ) -> None:
        message_id = self._message or self._open_pending()
        for index, item in enumerate(output):
            self._complete(item, ("final", index))
        self.builder.message_end(
            message_id,
            finish_reason=_finish_reason(output, incomplete_reason),
            response_model=response_model,
            response_id=None if response_id == FAKE_RESPONSES_ID else response_id,
            **_usage(usage),
        )
        self._message = None

    def _open_pending(self) -> str:
        """Stream mode: open the request the hook could not open yet (or a bare one)."""
        pending, self._pending = self._pending, None
        if pending is None:  # unobserved: no hooks, the stream's own view of the agent
            source, self._stream_handoff_from = self._stream_handoff_from, None
            return self._open(self._agent, None, None, source)
        return self._open(*pending)

    def finish(self) -> None:
        """The run succeeded: close the last step."""
        if self._step is not None:
            self.builder.step_end(*self._step)
            self._step = None

    def fail(self, error: BaseException) -> None:
        """The run failed: the call that was running ends with ``error`` in its own step."""
        if self._pending is not None:
            self._open_pending()
        self.builder.fail(error)
        self.exit_model_scope()

    def exit_model_scope(self) -> None:
        """Leave the model scope, only in the task that entered it (its context)."""
        if self._model_scope is not None and self._model_scope[1] is current_task():
            self._model_scope[0].__exit__(None, None, None)
            self._model_scope = None

    # -- output items ----------------------------------------------------------------
    def _complete(self, item: Any, index: Any) -> None:
        """Whatever of a finished output item its stream did not already carry."""
        kind = _field(item, "type")
        key = (kind, _field(item, "id"), _field(item, "call_id"))
        if key in self._done:
            return
        self._done.add(key)
        builder, message_id = self.builder, self._message
        if kind == "reasoning":
            if "reasoning" not in self._streamed:
                for part in [*(_field(item, "summary") or []), *(_field(item, "content") or [])]:
                    if _field(part, "text"):
                        builder.reasoning(_field(part, "text"), message_id)
        elif kind == "message":
            if "text" not in self._streamed:
                for part in _field(item, "content") or []:
                    text = _field(part, "text") or _field(part, "refusal")
                    if text:
                        builder.text(text, message_id)
        elif kind == "function_call":
            call_id, name = _field(item, "call_id"), _field(item, "name")
            known = self._calls.get(index)
            if known is None and call_id not in self._waiting:
                self._announce(call_id, name, index)
            if (known or call_id) and index not in self._streamed:
                builder.tool_call(
                    _field(item, "arguments") or "", index=index, tool_call_id=call_id
                )

    def _announce(self, call_id: str, name: str | None, index: Any) -> None:
        self._calls[index] = call_id
        self._waiting[call_id] = name or "unknown"
        self.builder.tool_call(tool_call_id=call_id, name=name or "unknown", index=index)

    def tool_result(self, call_id: str | None, output: Any, name: str | None = None) -> None:
        if not call_id:
            return
        name = self._waiting.pop(call_id, name)
        error = self.errors.pop(call_id, None)
        ran = self._ran.pop(call_id, None)
        self.builder.tool_result(
            call_id,
            as_text(output),
            name=name,
            error=error,
            started_at=ran[0] if ran else None,
            ended_at=ran[1] if ran and len(ran) > 1 else None,
        )

    # -- hooks (work done when called; see the class docstring) -------------------------
    def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> Coroutine[Any, Any, None]:
        with _boundary:
            handoff_from, self._handoff_from = self._handoff_from, None
            if self._streaming and (self._message is not None or self._waiting or self._pending):
                self._pending = (agent, system_prompt, input_items, handoff_from)
                return _done()  # the consumer is behind: it opens this request in order
            self._pending = None
            self._enter_model_scope(self._open(agent, system_prompt, input_items, handoff_from))
        return _done()

    def policy_of(self, agent: Any) -> Any:
        """The retry policy ``agent``'s model calls have without us."""
        declared = getattr(agent, "model_settings", None)
        if declared is not None:
            declared = declared.resolve(_field(self._run_config, "model_settings"))
        return _field(_field(declared, "retry"), "policy")

    def _enter_model_scope(self, message_id: str) -> None:
        scope = self.builder.model_scope(message_id)
        scope.__enter__()
        self._model_scope = (scope, current_task())

    async def retry_policy(self, context: Any) -> Any:
        """The SDK's retry policy for model calls, in front of the agent's own.

        The agent's policy decides; when it retries, the failed attempt ends its
        chat span with the error and the next attempt gets a span of its own, in
        the same step. (A retry the SDK vetoes after the policy said yes ends that
        next span with the run's error.)
        """
        policy = None
        with _boundary:
            policy = self.policy_of(self._request[0] if self._request is not None else None)
        if policy is None:
            return False
        decision = policy(context)
        if inspect.isawaitable(decision):
            decision = await decision
        retry = decision if isinstance(decision, bool) else getattr(decision, "retry", False)
        if retry and self._message is not None and self._pending is None and self._request:
            with _boundary:
                self.exit_model_scope()
                self.builder.message_end(self._message, error=context.error)
                self._enter_model_scope(self._send(*self._request))
        return decision

    def on_llm_end(self, context: Any, agent: Any, response: Any) -> Coroutine[Any, Any, None]:
        with _boundary:
            self.exit_model_scope()
            if not self._streaming:
                self._end_message(list(response.output), response.usage, response.response_id)
        return _done()

    def on_tool_start(self, context: Any, agent: Any, tool: Any) -> Coroutine[Any, Any, None]:
        # Entered in the task the SDK made for this tool, which then starts the
        # tool's body in a child task: the scope reaches it. The SDK ends the tool
        # in yet another task, so the scope is left with its own task, never exited
        # elsewhere.
        with _boundary:
            call_id = getattr(context, "tool_call_id", None)
            if call_id:
                if self._streaming:  # its result is read off the stream, maybe well after
                    self._ran[call_id] = [time.time_ns()]
                self.builder.tool_scope(call_id).__enter__()
        return _done()

    def on_tool_end(
        self, context: Any, agent: Any, tool: Any, result: Any
    ) -> Coroutine[Any, Any, None]:
        call_id = getattr(context, "tool_call_id", None)
        if not self._streaming:
            with _boundary:
                self.tool_result(call_id, result, tool.name)
        elif call_id in self._ran:
            self._ran[call_id].append(time.time_ns())
        return _done()

    def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> Coroutine[Any, Any, None]:
        with _boundary:
            self._handoff_from, self._handed_off = from_agent.name, True
            if not self._streaming:
                # The hook has no call id: answer the pending transfer call to this agent.
                names = _handoff_tool_names(from_agent, to_agent)
                for call_id, name in list(self._waiting.items()):
                    if name in names:
                        self.tool_result(call_id, json.dumps({"assistant": to_agent.name}))
                        break
        return _done()

    def format_tool_error(self, args: Any) -> Any:
        """``RunConfig.tool_error_formatter``: the SDK hands over a tool's exception here
        before it tells the model; the user's own formatter, if any, still decides the text."""
        with _boundary:
            if args.kind == "tool_exception" and args.error is not None:
                self.errors[args.call_id] = args.error
        return None

    # -- stream events -----------------------------------------------------------------
    def on_stream_event(self, event: Any) -> None:
        kind = event.type
        if kind == "raw_response_event":
            handler = self._RAW.get(event.data.type)
            if handler is not None:
                handler(self, event.data)
        elif kind == "run_item_stream_event":
            item_handler = self._ITEMS.get(event.name)
            if item_handler is not None:
                item_handler(self, event.item)
        elif kind == "agent_updated_stream_event" and event.new_agent is not self._agent:
            self._stream_handoff_from, self._handed_off = self._agent.name, True
            self._agent = event.new_agent

    def _ensure_message(self) -> str:
        return self._message or self._open_pending()

    def _on_created(self, data: Any) -> None:
        self._ensure_message()

    def _on_item_added(self, data: Any) -> None:
        self._ensure_message()
        item = data.item
        if _field(item, "type") == "function_call" and _field(item, "call_id"):
            self._announce(_field(item, "call_id"), _field(item, "name"), data.output_index)

    def _on_text_delta(self, data: Any) -> None:
        self._streamed.add("text")
        self.builder.text(data.delta, self._ensure_message())

    def _on_reasoning_delta(self, data: Any) -> None:
        self._streamed.add("reasoning")
        self.builder.reasoning(data.delta, self._ensure_message())

    def _on_args_delta(self, data: Any) -> None:
        if data.output_index in self._calls:
            self._streamed.add(data.output_index)
            self.builder.tool_call(data.delta, index=data.output_index, message_id=self._message)

    def _on_item_done(self, data: Any) -> None:
        self._ensure_message()
        self._complete(data.item, data.output_index)

    def _on_completed(self, data: Any) -> None:
        response = data.response
        self._end_message(
            list(_field(response, "output") or []),  # items already done are skipped
            _field(response, "usage"),
            _field(response, "id"),
            response_model=_field(response, "model"),
            incomplete_reason=_field(_field(response, "incomplete_details"), "reason"),
        )

    def _on_tool_output(self, item: Any) -> None:
        self.tool_result(_field(item.raw_item, "call_id"), item.output)

    def _on_handoff_output(self, item: Any) -> None:
        raw = item.raw_item
        self.tool_result(_field(raw, "call_id"), _field(raw, "output"))

    _RAW: ClassVar[dict[str, Callable[[_Mapper, Any], None]]] = {
        "response.created": _on_created,
        "response.output_item.added": _on_item_added,
        "response.output_text.delta": _on_text_delta,
        "response.refusal.delta": _on_text_delta,
        "response.reasoning_summary_text.delta": _on_reasoning_delta,
        "response.reasoning_text.delta": _on_reasoning_delta,
        "response.function_call_arguments.delta": _on_args_delta,
        "response.output_item.done": _on_item_done,
        "response.completed": _on_completed,
        "response.incomplete": _on_completed,
    }
    _ITEMS: ClassVar[dict[str, Callable[[_Mapper, Any], None]]] = {
        "tool_output": _on_tool_output,
        "handoff_occured": _on_handoff_output,
    }


def _fan_out(name: str) -> Callable[..., Any]:
    def call_each(self: _ComposedHooks, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
        # Called now, in order (ours does its work here); the user's run when awaited.
        return _await_all([getattr(hooks, name)(*args, **kwargs) for hooks in self.hooks])

    call_each.__name__ = name
    return call_each


async def _await_all(awaitables: list[Awaitable[Any]]) -> None:
    for awaitable in awaitables:
        await awaitable


class _ComposedHooks(RunHooks[Any]):
    """Ours, then the user's: the SDK takes one ``hooks=`` object, so we pass both.

    Every ``on_*`` callback of the installed SDK is forwarded (built from
    ``RunHooksBase`` at import), so callbacks added by later SDK versions still
    reach the user's hooks.
    """

    def __init__(self, *hooks: RunHooksBase[Any, Any]) -> None:
        self.hooks = hooks


for _name, _ in inspect.getmembers(RunHooksBase, inspect.iscoroutinefunction):
    if _name.startswith("on_"):
        setattr(_ComposedHooks, _name, _fan_out(_name))
del _name


def _compose(ours: RunHooksBase[Any, Any], declared: Any) -> Any:
    if declared is None:
        return ours
    if not isinstance(declared, RunHooksBase):
        return declared  # let the SDK reject it with its own message
    return _ComposedHooks(ours, declared)


def _observed_options(
    options: dict[str, Any],
    observation: _Mapper,
    keep_sdk_tracing: bool,
    *,
    traced: bool | None = None,
) -> dict[str, Any]:
    """The run options of an observed run: our hooks composed with the user's, our
    tool error formatter in front of theirs, the SDK's own tracing off in a traced
    run (see the module docstring). The user's ``RunConfig`` is copied, never changed."""
    declared = options.get("run_config")
    config = declared if isinstance(declared, RunConfig) else RunConfig(**(declared or {}))
    theirs = config.tool_error_formatter

    def formatter(args: Any) -> Any:
        observation.format_tool_error(args)
        return theirs(args) if theirs is not None else None

    def policy(context: Any) -> Any:
        # a plain function: the SDK deep-copies model settings, and copies functions as is
        return observation.retry_policy(context)

    # What the SDK reads off a policy itself (e.g. which errors it retries) is the
    # starting agent's policy's: copied over, so transports decide as they would.
    starting = observation.policy_of(observation.starting_agent)
    policy.__dict__.update(getattr(starting, "__dict__", {}))
    retry = ModelSettings(retry=ModelRetrySettings(policy=policy))
    changes: dict[str, Any] = {
        "tool_error_formatter": formatter,
        "model_settings": (config.model_settings or ModelSettings()).resolve(retry),
    }
    traced = in_traced_run() if traced is None else traced
    if traced and not keep_sdk_tracing:
        changes["tracing_disabled"] = True
        _install_nesting_runner()
    # A shallow copy: ``dataclasses.replace`` would rebuild every field's default
    # and costs more than the rest of the observation together.
    observed = copy.copy(config)
    for key, value in changes.items():
        setattr(observed, key, value)
    if traced:
        _origins[id(observed)] = (observed, declared, keep_sdk_tracing, observation)
    return {**options, "hooks": _compose(observation, options.get("hooks")), "run_config": observed}


# -- agents run as tools ---------------------------------------------------------------
# Observed configs of traced runs (id -> the config, what the user declared, whether the
# SDK's tracing is kept), so that an agent run as a tool (which is handed this run's
# config, but no hooks) is told apart. Entries go when the run ends (see _Run.close).
_origins: dict[int, tuple[Any, Any, bool, _Mapper]] = {}


class _NestingAgentRunner(AgentRunner):
    """The SDK's default runner, with one addition: a run started inside a tool of a
    traced run, with that run's config and no hooks (what ``Agent.as_tool()`` does), is
    traced as a run of its own nested under the tool's ``execute_tool`` span.

    ``Agent.as_tool()`` calls ``Runner.run`` without hooks, and nothing else of ours
    reaches the inner run but the config; the SDK's ``set_default_agent_runner`` is the
    one place a run can be observed from. It is installed at the first traced run and
    delegates everything else to the runner it replaced, so untraced runs are the
    SDK's own. A runner the user sets later replaces it (the agent tool then shows as
    its tool span only).
    """

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        nested = self._nested(starting_agent, input, kwargs)
        if nested is None:
            return await self.inner.run(starting_agent, input, **kwargs)
        run, mapper, options = nested
        try:
            result = await self.inner.run(starting_agent, input, **options)
        except CancelledError:
            with _boundary:
                mapper.exit_model_scope()
                run.finish(cancelled=True)
            raise
        except BaseException as error:
            with _boundary:
                mapper.fail(error)
                run.finish(error=error)
            raise
        finally:
            _origins.pop(id(options["run_config"]), None)
        with _boundary:
            mapper.finish()
            run.finish(reply=_reply(result, input if isinstance(input, str) else ""))
        return result

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        nested = self._nested(starting_agent, input, kwargs)
        if nested is None:
            return self.inner.run_streamed(starting_agent, input, **kwargs)
        run, mapper, options = nested
        result = self.inner.run_streamed(starting_agent, input, **options)
        prompt = input if isinstance(input, str) else ""

        def ended(task: Any) -> None:
            # The hooks carried the inner run; its loop task's end is the run's end.
            _origins.pop(id(options["run_config"]), None)
            with _boundary:
                error = None if task.cancelled() else task.exception()
                error = error or getattr(result, "_stored_exception", None)
                if task.cancelled():
                    run.finish(cancelled=True)
                elif error is not None:
                    mapper.fail(error)
                    run.finish(error=error)
                else:
                    mapper.finish()
                    run.finish(reply=_reply(result, prompt))

        if result.run_loop_task is None:  # no loop to wait for: nothing more will come
            with _boundary:
                mapper.finish()
                run.finish()
        else:
            result.run_loop_task.add_done_callback(ended)
        return result

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **kwargs)

    @staticmethod
    def _nested(starting_agent: Any, input: Any, kwargs: dict[str, Any]) -> Any:
        """The nested run, its mapper and the observed options for a run started by an
        agent tool of a traced run; ``None`` for any other run."""
        config = kwargs.get("run_config")
        origin = _origins.get(id(config))
        if origin is None or origin[0] is not config:
            return None
        hooks = kwargs.get("hooks")
        if hooks is origin[3] or (isinstance(hooks, _ComposedHooks) and origin[3] in hooks.hooks):
            return None  # the traced run itself
        with _boundary:
            _, declared, keep_sdk_tracing, _ = origin
            name = getattr(starting_agent, "name", None) or "agent"
            requests = [AgentRequestText(prompt=input)] if isinstance(input, str) else None
            run = open_nested_run(name, mode="run", requests=requests)
            if run is None:
                return None
            mapper = _Mapper(EventBuilder(run), declared, starting_agent, streaming=False)
            options = _observed_options(
                {**kwargs, "run_config": declared}, mapper, keep_sdk_tracing, traced=True
            )
            return run, mapper, options
        return None


def _install_nesting_runner() -> None:
    current = get_default_agent_runner()
    if not isinstance(current, _NestingAgentRunner):
        set_default_agent_runner(_NestingAgentRunner(current))


# -- replies --------------------------------------------------------------------------------
def _generated_image(result: RunResultBase) -> str | None:
    """The last image the run's hosted image-generation tool produced, base64."""
    image: str | None = None
    for item in result.new_items:
        raw = getattr(item, "raw_item", None)
        if _field(raw, "type") == "image_generation_call" and _field(raw, "result"):
            image = _field(raw, "result")
    return image


def _reply(result: RunResultBase, prompt: str) -> AgentReply:
    final = result.final_output
    image = _generated_image(result) if final is None or isinstance(final, str) else None
    # A non-object output type travels as {"response": ...} in the SDK's own schema.
    return reply_of(final, prompt, image=image, wrap_key="response")


# -- the run and the runner ------------------------------------------------------------------------
class _Run(FrameworkRun[RunResultBase]):
    """One SDK run: ``Runner.run`` (run mode) or ``Runner.run_streamed`` (stream mode)."""

    def __init__(
        self,
        setup: RunSetup[Agent[Any]],
        sdk_input: list[Any],
        options: dict[str, Any],
        mapper: _Mapper | None,
    ) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.sdk_input = sdk_input
        self.options = options
        self.mapper = mapper
        self.result: RunResultStreaming | None = None
        self.completed = False

    async def call(self) -> RunResultBase:
        context = self.setup.prepared.context
        return await SdkRunner.run(self.native, self.sdk_input, context=context, **self.options)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        # The SDK runs the loop in a task created right here; claiming the
        # observer around its creation hides any run-mode sink from the tools,
        # so a nested untraced run never reports into an outer run's trace.
        context = self.setup.prepared.context
        with claim_observer():
            self.result = SdkRunner.run_streamed(
                self.native, self.sdk_input, context=context, **self.options
            )
        # stream_events() is an async generator; typed as an iterator by the SDK.
        events = cast("AsyncGenerator[Any, None]", self.result.stream_events())
        async with aclosing(events):
            yield events

    def map(self, item: Any) -> None:
        if self.mapper is not None:
            self.mapper.on_stream_event(item)

    def fail(self, error: BaseException) -> None:
        if self.mapper is not None:
            self.mapper.fail(error)

    def complete(self) -> None:
        self.completed = True
        if self.mapper is not None:
            self.mapper.finish()

    def close(self) -> None:
        _origins.pop(id(self.options.get("run_config")), None)
        if self.mapper is not None:  # cancelled too: the caller's context never keeps the chat span
            self.mapper.exit_model_scope()
        if self.result is not None and not self.completed:
            # The consumer stopped or the run failed: stop the SDK's background
            # loop instead of letting it run on unobserved.
            self.result.cancel()

    async def outcome(self) -> RunResultBase:
        assert self.result is not None  # set when the stream opened
        return self.result

    async def save(self, result: RunResultBase) -> None:
        # The context is the very object the tools mutated, in full (the fidelity table).
        setup = self.setup
        save(setup.session, STATE_KEY, result.to_input_list(mode="normalized"), setup.prepared)

    def reply(self, result: RunResultBase, prompt: str) -> AgentReply:
        return _reply(result, prompt)


class OpenAIRunner(FrameworkRunner[Agent[Any]]):
    """Runs an ``agents.Agent`` in run or stream mode.

    See the module docstring for session state, framework context, run options,
    observation and the SDK's own tracing.
    """

    framework: ClassVar[str] = "openai"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = Agent
    native_what: ClassVar[str] = "an agents.Agent"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "starting_agent": "the runner starts the registered agent",
        "input": "the runner builds the input from the session history and the requests",
        "session": (
            "the runner keeps the conversation in the runnertrace Session under 'openai'; "
            "an SDK session would replay the history twice"
        ),
        "context": (
            "the runner injects the session's framework context; "
            "set it with Session.set_framework_context()"
        ),
        "conversation_id": (
            "server-side conversation state would duplicate the history the runner replays"
        ),
        "previous_response_id": (
            "server-side response chaining would duplicate the history the runner replays"
        ),
        "auto_previous_response_id": (
            "server-side response chaining would duplicate the history the runner replays"
        ),
    }

    def __init__(self, *, keep_sdk_tracing: bool = False) -> None:
        self.keep_sdk_tracing = keep_sdk_tracing

    async def start(self, setup: RunSetup[Agent[Any]]) -> _Run:
        prepared = setup.prepared
        sdk_input = [*copy.deepcopy(prepared.state or []), *native_input(setup.requests)]
        # Untraced run mode installs nothing: the SDK's own call, nothing added. Stream
        # mode always maps (the events are the stream), observed or not.
        mapper: _Mapper | None = None
        options = prepared.options
        if setup.streaming or setup.observed:
            run_config = options.get("run_config")
            mapper = _Mapper(setup.builder, run_config, setup.native, streaming=setup.streaming)
            if setup.observed:
                options = _observed_options(options, mapper, self.keep_sdk_tracing)
        return _Run(setup, sdk_input, options, mapper)


class OpenAIModule(Module):
    """Registers ``agents.Agent`` objects with the runtime, paired with an :class:`OpenAIRunner`."""

    runner_class = OpenAIRunner
