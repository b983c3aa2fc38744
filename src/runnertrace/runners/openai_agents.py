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
- **Run mode observation** uses a ``RunHooks`` object composed with the user's
  declared ``hooks=`` (each of the user's callbacks fires exactly once), never
  the SDK's trace processors: ``set_trace_processors`` would displace the user's
  processors, and a global ``add_trace_processor`` would see every run in the
  process rather than this one.
- **Stream mode** maps ``Runner.run_streamed`` events; ids come from the
  framework: the response id for a message, the item id for a reasoning block,
  the ``call_id`` for a tool call. A message id the model repeats within one
  run (fake models often do) gets a ``#n`` suffix so pairing stays unambiguous.
  Run mode learns the response id only at the end of a model call, so its
  message ids are generated and the response id travels on ``MessageEnd``.
- **Steps** are the SDK's turns: one model call plus the tools it asked for.
  After a handoff the next step carries the new agent's name; the transfer
  call gets the SDK's transfer message as its result.
- **Not mapped**: hosted tools that run inside the model call (web search,
  file search, image generation, code interpreter) get no tool events; their
  time is in the model call. A function tool that raised and was turned into
  a message for the model by the SDK's ``failure_error_function`` is reported
  as an ordinary result (``is_error`` stays false): the SDK does not expose
  that the call failed.
- **The SDK's own tracing is left alone.** The runner never sets
  ``tracing_disabled``: doing so would also silence the trace processors a user
  registered (Logfire, Langfuse and others hook in there) and the OpenAI traces
  dashboard they may rely on. The SDK uploads only when an OpenAI key is
  configured; to switch it off, declare
  ``run_options(agent, run_config=RunConfig(tracing_disabled=True))`` or set
  ``OPENAI_AGENTS_DISABLE_TRACING=1``. If both the SDK's exporter and a
  runnertrace backend are on, each receives its own copy of the run, by choice.
- Exceptions from the SDK (``MaxTurnsExceeded``, guardrail tripwires, model
  errors) propagate unchanged. Events already reported stay as they are; the
  tracing layer closes what was left open.
"""

from __future__ import annotations

import copy
import inspect
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from pydantic import BaseModel, TypeAdapter

from runnertrace._internal.imports import require
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.context import ensure_tool_context
from runnertrace.core.events import StreamEvent
from runnertrace.core.models import (
    AgentReply,
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequest,
    prompt_of,
)
from runnertrace.core.module import Module
from runnertrace.core.observer import claim_observer
from runnertrace.core.runner import Runner
from runnertrace.core.session import Session

require("agents", "openai-agents")

from agents import (  # noqa: E402 - after the missing-extra check above
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunHooks,
)
from agents import Runner as SdkRunner  # noqa: E402
from agents.lifecycle import RunHooksBase  # noqa: E402
from agents.models import get_default_model  # noqa: E402
from agents.models.fake_id import FAKE_RESPONSES_ID  # noqa: E402
from agents.result import RunResultBase  # noqa: E402

__all__ = ["OpenAIModule", "OpenAIRunner", "native_input"]

STATE_KEY = "openai"


# -- requests -> native input -----------------------------------------------------------
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
def _render(output: Any) -> str:
    """A tool's output as the text the trace records."""
    if isinstance(output, str):
        return output
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    try:
        return json.dumps(output, default=str)
    except (TypeError, ValueError):
        return str(output)


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``: SDK items are pydantic models or TypedDicts."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _usage(usage: Any) -> dict[str, int | None]:
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


class _EventMapper:
    """Turns one run's native progress into paired runnertrace events.

    Both modes feed it: stream mode with ``run_streamed`` events, run mode with
    hook callbacks and whole model responses. It owns the pairing: every start
    it emits gets its end (or the run fails first), and a tool result for a call
    it never announced gets a synthesized start/end so spans stay well formed.
    """

    def __init__(self, emit: Callable[[StreamEvent], None], run_config: Any) -> None:
        self._emit = emit
        self._run_config = run_config
        self._agent: Any = None
        self._step_index = -1
        self._step_name: str | None = None
        self._message_id: str | None = None
        self._last_message_id: str | None = None  # parent for calls announced after the message
        self._used_ids: set[str] = set()
        # Per model call (reset when a message opens).
        self._reasoning: dict[str, str] = {}  # native item id -> our reasoning id
        self._reasoning_streamed: set[str] = set()
        # (item id, output index) -> call_id; providers without ids share one
        # placeholder item id, so the output index tells parallel calls apart.
        self._calls_by_item: dict[tuple[Any, Any], str] = {}
        self._open_calls: dict[str, bool] = {}  # call_id -> any args emitted
        self._text_streamed: set[str] = set()  # message item ids with text deltas
        self._items_done: set[tuple[Any, ...]] = set()  # items already completed
        # Per run.
        self._announced: set[str] = set()  # call_ids that got a ToolCallStart
        self._pending: dict[str, str] = {}  # call_id -> tool name, awaiting a result

    # -- identity ----------------------------------------------------------------------
    def _unique(self, native_id: str | None, prefix: str) -> str:
        if native_id == FAKE_RESPONSES_ID:
            native_id = None  # the SDK's placeholder for providers without ids
        base = native_id or f"{prefix}_{uuid.uuid4().hex[:16]}"
        candidate, n = base, 1
        while candidate in self._used_ids:
            n += 1
            candidate = f"{base}#{n}"
        self._used_ids.add(candidate)
        return candidate

    def agent_changed(self, agent: Any) -> None:
        self._agent = agent

    # -- steps and messages ------------------------------------------------------------
    def _end_step(self) -> None:
        if self._step_name is not None:
            self._emit(ev.StepEnd(step_name=self._step_name, step_index=self._step_index))
            self._step_name = None

    def begin_model_call(self, response_id: str | None) -> None:
        """A model call starts: it opens a new step (a turn) and its message."""
        if self._message_id is not None:
            self.end_model_call([], None)
        self._end_step()
        self._step_index += 1
        self._step_name = getattr(self._agent, "name", None) or "agent"
        self._emit(ev.StepStart(step_name=self._step_name, step_index=self._step_index))
        model, provider = _model_of(self._agent, self._run_config)
        self._message_id = self._last_message_id = self._unique(response_id, "msg")
        self._reasoning.clear()
        self._reasoning_streamed.clear()
        self._calls_by_item.clear()
        self._open_calls.clear()
        self._text_streamed.clear()
        self._items_done.clear()
        self._emit(ev.MessageStart(message_id=self._message_id, model=model, provider=provider))

    def _ensure_message(self) -> str:
        if self._message_id is None:
            self.begin_model_call(None)
        assert self._message_id is not None
        return self._message_id

    def end_model_call(
        self,
        output: list[Any],
        usage: Any,
        *,
        response_id: str | None = None,
        response_model: str | None = None,
        incomplete_reason: str | None = None,
    ) -> None:
        """The model call is done: fill in what was not streamed, close, report usage."""
        message_id = self._ensure_message()
        for item in output:
            self._complete_item(item)
        self._end_all_reasoning()
        for call_id in list(self._open_calls):
            self._end_call(call_id, None)
        self._emit(
            ev.MessageEnd(
                message_id=message_id,
                finish_reason=_finish_reason(output, incomplete_reason),
                response_model=response_model,
                response_id=None if response_id == FAKE_RESPONSES_ID else response_id,
                **_usage(usage),
            )
        )
        self._message_id = None

    def finish(self) -> None:
        """The run succeeded: close the last message and step."""
        if self._message_id is not None:
            self.end_model_call([], None)
        self._end_step()

    # -- output items --------------------------------------------------------------------
    def _complete_item(self, item: Any) -> None:
        """Emit whatever of a finished output item its stream did not already carry."""
        kind = _field(item, "type")
        item_id = _field(item, "id")
        # Stream mode sees each item twice (item done, then response completed).
        # Providers without ids share one placeholder id, hence the kind and call id.
        key = (kind, item_id, _field(item, "call_id"))
        if item_id is not None:
            if key in self._items_done:
                return
            self._items_done.add(key)
        if kind == "reasoning":
            if item_id not in self._reasoning_streamed:
                for part in [*(_field(item, "summary") or []), *(_field(item, "content") or [])]:
                    text = _field(part, "text")
                    if text:
                        self._reasoning_delta(item_id, text)
            self._end_reasoning(item_id)
        elif kind == "message":
            if item_id not in self._text_streamed:
                for part in _field(item, "content") or []:
                    text = _field(part, "text") or _field(part, "refusal")
                    if text:
                        self._end_all_reasoning()
                        self._emit(ev.TextDelta(message_id=self._ensure_message(), delta=text))
        elif kind == "function_call":
            call_id = _field(item, "call_id")
            if call_id not in self._announced:
                self._start_call(call_id, _field(item, "name"), None)
            if call_id in self._open_calls:
                self._end_call(call_id, _field(item, "arguments"))

    def _start_call(self, call_id: str, name: str | None, item_key: tuple[Any, Any] | None) -> None:
        self._end_all_reasoning()
        self._emit(
            ev.ToolCallStart(
                tool_call_id=call_id,
                tool_name=name or "unknown",
                parent_message_id=self._message_id or self._last_message_id,
            )
        )
        self._announced.add(call_id)
        self._pending[call_id] = name or "unknown"
        self._open_calls[call_id] = False
        if item_key is not None:
            self._calls_by_item[item_key] = call_id

    def _call_args(self, call_id: str, delta: str) -> None:
        if delta and call_id in self._open_calls:
            self._open_calls[call_id] = True
            self._emit(ev.ToolCallArgs(tool_call_id=call_id, delta=delta))

    def _end_call(self, call_id: str, arguments: str | None) -> None:
        if call_id not in self._open_calls:
            return
        if not self._open_calls[call_id] and arguments:
            self._call_args(call_id, arguments)
        del self._open_calls[call_id]
        self._emit(ev.ToolCallEnd(tool_call_id=call_id))

    def _reasoning_delta(self, native_id: str, delta: str) -> None:
        reasoning_id = self._reasoning.get(native_id)
        if reasoning_id is None:
            self._ensure_message()
            reasoning_id = self._reasoning[native_id] = self._unique(native_id, "rs")
            self._emit(ev.ReasoningStart(message_id=reasoning_id))
        self._emit(ev.ReasoningDelta(message_id=reasoning_id, delta=delta))

    def _end_all_reasoning(self) -> None:
        """Reasoning precedes the answer: once text or a tool call begins, it is over.

        Chat Completions streams report the reasoning item done only at the
        end of the response; without this its block would span the answer.
        """
        for native_id in list(self._reasoning):
            self._end_reasoning(native_id)

    def _end_reasoning(self, native_id: str) -> None:
        reasoning_id = self._reasoning.pop(native_id, None)
        if reasoning_id is not None:
            self._emit(ev.ReasoningEnd(message_id=reasoning_id))

    # -- tool results ----------------------------------------------------------------------
    def tool_result(self, call_id: str | None, output: Any, name: str | None = None) -> None:
        if not call_id:
            return
        if call_id not in self._announced:
            # A tool the model stream did not show as a function call (hosted or
            # computer/shell tools): give its result a well-formed call span.
            self._start_call(call_id, name, None)
            self._end_call(call_id, None)
        self._pending.pop(call_id, None)
        self._emit(ev.ToolCallResult(tool_call_id=call_id, content=_render(output)))

    def handoff(self, from_agent: Any, to_agent: Any) -> None:
        """Run mode: hooks report a handoff without its call id; find the pending call."""
        names = _handoff_tool_names(from_agent, to_agent)
        for call_id, name in list(self._pending.items()):
            if name in names:
                self.tool_result(call_id, json.dumps({"assistant": to_agent.name}))
                break
        self.agent_changed(to_agent)

    # -- run mode: whole model responses ----------------------------------------------
    def model_response(self, response: Any) -> None:
        self.end_model_call(list(response.output), response.usage, response_id=response.response_id)

    # -- stream mode -------------------------------------------------------------------
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
        elif kind == "agent_updated_stream_event":
            self.agent_changed(event.new_agent)

    def _on_created(self, data: Any) -> None:
        self.begin_model_call(_field(data.response, "id"))

    def _on_item_added(self, data: Any) -> None:
        self._ensure_message()
        item = data.item
        if _field(item, "type") == "function_call":
            call_id = _field(item, "call_id")
            if call_id and call_id not in self._announced:
                key = (_field(item, "id"), data.output_index)
                self._start_call(call_id, _field(item, "name"), key)

    def _on_text_delta(self, data: Any) -> None:
        message_id = self._ensure_message()
        if data.delta:
            self._end_all_reasoning()
            self._text_streamed.add(data.item_id)
            self._emit(ev.TextDelta(message_id=message_id, delta=data.delta))

    def _on_reasoning_delta(self, data: Any) -> None:
        if data.delta:
            self._reasoning_streamed.add(data.item_id)
            self._reasoning_delta(data.item_id, data.delta)

    def _on_args_delta(self, data: Any) -> None:
        call_id = self._calls_by_item.get((data.item_id, data.output_index))
        if call_id is not None:
            self._call_args(call_id, data.delta)

    def _on_item_done(self, data: Any) -> None:
        self._complete_item(data.item)

    def _on_completed(self, data: Any) -> None:
        response = data.response
        details = _field(response, "incomplete_details")
        self.end_model_call(
            list(_field(response, "output") or []),
            _field(response, "usage"),
            response_id=_field(response, "id"),
            response_model=_field(response, "model"),
            incomplete_reason=_field(details, "reason"),
        )

    def _on_tool_called(self, item: Any) -> None:
        raw = item.raw_item
        call_id = _field(raw, "call_id")
        if call_id and call_id not in self._announced:
            self._start_call(call_id, _field(raw, "name") or _field(raw, "type"), None)
            self._end_call(call_id, _field(raw, "arguments"))

    def _on_tool_output(self, item: Any) -> None:
        self.tool_result(_field(item.raw_item, "call_id"), item.output)

    def _on_handoff_output(self, item: Any) -> None:
        raw = item.raw_item
        self.tool_result(_field(raw, "call_id"), _field(raw, "output"))

    _RAW: ClassVar[dict[str, Callable[[_EventMapper, Any], None]]] = {
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
    _ITEMS: ClassVar[dict[str, Callable[[_EventMapper, Any], None]]] = {
        "tool_called": _on_tool_called,
        "tool_output": _on_tool_output,
        "handoff_occured": _on_handoff_output,
    }


# -- run mode: hooks ----------------------------------------------------------------------
class _ObserverHooks(RunHooks[Any]):
    """Feeds the SDK's lifecycle callbacks of one run to an :class:`_EventMapper`."""

    def __init__(self, mapper: _EventMapper) -> None:
        self._mapper = mapper

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self._mapper.agent_changed(agent)

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        self._mapper.agent_changed(agent)
        self._mapper.begin_model_call(None)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self._mapper.model_response(response)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        self._mapper.tool_result(call_id, result, getattr(tool, "name", None))

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        self._mapper.handoff(from_agent, to_agent)


def _fan_out(name: str) -> Callable[..., Any]:
    async def call_each(self: _ComposedHooks, *args: Any, **kwargs: Any) -> None:
        for hooks in self.hooks:
            await getattr(hooks, name)(*args, **kwargs)

    call_each.__name__ = name
    return call_each


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


# -- replies --------------------------------------------------------------------------------
def _structured(value: Any) -> dict[str, Any]:
    """A structured final output as a JSON dict; non-objects are wrapped like the SDK does."""
    if isinstance(value, BaseModel):
        dumped: Any = value.model_dump(mode="json")
    else:
        dumped = TypeAdapter(type(value)).dump_python(value, mode="json")
    return dumped if isinstance(dumped, dict) else {"response": dumped}


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
    if final is None or isinstance(final, str):
        text = final or ""
        image = _generated_image(result)
        if image is not None:
            return AgentReplyImage(text=text, image_data=image, prompt=prompt)
        return AgentReplyText(text=text, prompt=prompt)
    return AgentReplyAny(content=_structured(final), prompt=prompt)


# -- the runner -----------------------------------------------------------------------------
@dataclass
class _Prepared:
    input: list[Any]
    context: dict[str, Any] | None
    options: dict[str, Any]


class OpenAIRunner(Runner):
    """Runs an ``agents.Agent`` in run or stream mode.

    See the module docstring for session state, framework context, run options,
    observation and the SDK's own tracing.
    """

    framework: ClassVar[str] = "openai"
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

    def _native(self, agent: CoreAgent) -> Agent[Any]:
        native = agent.native
        if not isinstance(native, Agent):
            raise TypeError(
                f"agent {agent.name!r} is not an agents.Agent (got {type(native).__name__})"
            )
        return native

    async def _prepare(
        self, agent: CoreAgent, session: Session, requests: list[AgentRequest]
    ) -> _Prepared:
        new_input = native_input(requests)
        options = await agent.resolve_run_options(session, requests)
        history = copy.deepcopy(session.get(STATE_KEY) or [])
        return _Prepared(
            input=[*history, *new_input],
            context=session.load_framework_context(),
            options=options,
        )

    def _save(self, session: Session, prepared: _Prepared, result: RunResultBase) -> None:
        session.set(STATE_KEY, result.to_input_list(mode="normalized"))
        if prepared.context is not None:
            # The very object the tools mutated, in full (the fidelity table's "OpenAI" row).
            session.write_back_framework_context(prepared.context, prepared.context)

    async def run(
        self, agent: CoreAgent, session: Session, requests: list[AgentRequest]
    ) -> AgentReply:
        native = self._native(agent)
        prepared = await self._prepare(agent, session, requests)
        options = prepared.options
        with claim_observer() as report:
            mapper = _EventMapper(report, options.get("run_config"))
            options["hooks"] = _compose(_ObserverHooks(mapper), options.get("hooks"))
            with ensure_tool_context(agent, session, requests):
                result = await SdkRunner.run(
                    native, prepared.input, context=prepared.context, **options
                )
            mapper.finish()
        self._save(session, prepared, result)
        return _reply(result, prompt_of(requests))

    async def stream(
        self, agent: CoreAgent, session: Session, requests: list[AgentRequest]
    ) -> AsyncIterator[StreamEvent]:
        native = self._native(agent)
        prepared = await self._prepare(agent, session, requests)
        buffer: list[StreamEvent] = []
        mapper = _EventMapper(buffer.append, prepared.options.get("run_config"))
        # The SDK runs the loop in a task created right here; claiming the
        # observer around its creation hides any run-mode sink from the tools,
        # so a nested untraced run never reports into an outer run's trace.
        with claim_observer(), ensure_tool_context(agent, session, requests):
            result = SdkRunner.run_streamed(
                native, prepared.input, context=prepared.context, **prepared.options
            )
        # stream_events() is an async generator; typed as an iterator by the SDK.
        native_events = cast("AsyncGenerator[Any, None]", result.stream_events())
        completed = False
        try:
            async for native_event in native_events:
                mapper.on_stream_event(native_event)
                for event in buffer:
                    yield event
                buffer.clear()
            mapper.finish()
            for event in buffer:
                yield event
            completed = True
        finally:
            if not completed:
                # The consumer stopped or the run failed: stop the SDK's
                # background loop instead of letting it run on unobserved.
                result.cancel()
            await native_events.aclose()
        self._save(session, prepared, result)


class OpenAIModule(Module):
    """Registers ``agents.Agent`` objects with the runtime, paired with an :class:`OpenAIRunner`."""

    runner_class = OpenAIRunner
