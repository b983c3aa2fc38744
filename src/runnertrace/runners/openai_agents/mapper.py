"""The mapper: one SDK run's progress (its hooks and its stream events) made into builder calls.

The adapter (``adapter.py``) hands the SDK's hook calls here, in the SDK's own task;
stream mode also hands each stream event over (``_Run.map``). Run mode takes
everything from the hooks. Stream mode opens each step and message from
``on_llm_start`` too, when the stream's consumer has caught up with the run (else at
the response's first stream event, so no event is ever out of order); the stream
events carry the rest (text, reasoning and argument chunks, usage, tool results).

- **Identity**: after a handoff, steps carry the new agent's name and the agent that
  handed off; the transfer call gets the SDK's transfer message as its result.
- **Ids**: the step's message opens before the response has an id, so message ids
  are made up; the response id travels on ``MessageEnd``. Tool calls keep the
  model's ``call_id``.
- **Retries** the SDK makes itself (``ModelSettings.retry``) are one model call to
  the hooks; the adapter puts a retry policy in front of the agent's own, and when
  the agent's policy retries, :meth:`_Mapper.retried` ends the failed attempt's
  chat span with its error and opens the next attempt's, in the same step.

Every public method of :class:`_Mapper` runs in :data:`_BOUNDARY` (the class is
``@guarded``): a fault costs the telemetry of that call, never the run.
"""

from __future__ import annotations

import json
import time
from asyncio import Task, current_task
from collections.abc import Callable
from typing import Any, ClassVar

from agents.handoffs import Handoff
from agents.models.fake_id import FAKE_RESPONSES_ID

from runnertrace.runners._kit.adapter import ScopeLedger, guarded
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.genai import as_text
from runnertrace.runners._kit.skeleton import MappingBoundary
from runnertrace.runners.openai_agents.convert import field
from runnertrace.runners.openai_agents.mcp import mark_call
from runnertrace.runners.openai_agents.request import model_of, request_fields

_BOUNDARY = MappingBoundary("openai")
"""The runner's one boundary: every file of the package uses this object."""


def _usage(usage: Any) -> dict[str, Any]:
    """Token counts from an SDK ``Usage`` or a Responses ``ResponseUsage``.

    A usage of all zeros is what the SDK reports when the model gave none (fake
    models, some providers); it is reported as unknown rather than as zero.
    """
    if usage is None:
        return {}
    input_tokens = field(usage, "input_tokens") or 0
    output_tokens = field(usage, "output_tokens") or 0
    if not input_tokens and not output_tokens:
        return {}
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": field(field(usage, "input_tokens_details"), "cached_tokens"),
        "reasoning_output_tokens": field(field(usage, "output_tokens_details"), "reasoning_tokens"),
    }


def _finish_reason(output: list[Any], incomplete_reason: str | None = None) -> str:
    if incomplete_reason:
        return incomplete_reason
    if any(field(item, "type") == "function_call" for item in output):
        return "tool_calls"
    return "stop"


def _handoff_tool_names(from_agent: Any, to_agent: Any) -> set[str]:
    """Tool names under which ``from_agent`` can hand off to ``to_agent``."""
    names: set[str] = set()
    for target in getattr(from_agent, "handoffs", None) or []:
        if isinstance(target, Handoff):
            if target.agent_name == to_agent.name:
                names.add(target.tool_name)
        elif target is to_agent:
            names.add(Handoff.default_tool_name(to_agent))
    return names


@guarded(_BOUNDARY)
class _Mapper:
    """One observed run (or an agent tool's run), made into events through an
    :class:`EventBuilder`; see the module."""

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
        # The chat span's scope, by the task that entered it: left only there (its context).
        self._model_scopes: ScopeLedger[Task[Any] | None] = ScopeLedger(_BOUNDARY)
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
        model, provider = model_of(agent, self._run_config)
        fields = _BOUNDARY.detail(request_fields, agent, instructions, items, self._run_config)
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

    def _enter_model_scope(self, message_id: str) -> None:
        self._model_scopes.enter(current_task(), self.builder.model_scope(message_id))

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
        self._model_scopes.leave(current_task())

    # -- output items ----------------------------------------------------------------
    def _complete(self, item: Any, index: Any) -> None:
        """Whatever of a finished output item its stream did not already carry."""
        kind = field(item, "type")
        key = (kind, field(item, "id"), field(item, "call_id"))
        if key in self._done:
            return
        self._done.add(key)
        builder, message_id = self.builder, self._message
        if kind == "reasoning":
            if "reasoning" not in self._streamed:
                for part in [*(field(item, "summary") or []), *(field(item, "content") or [])]:
                    if field(part, "text"):
                        builder.reasoning(field(part, "text"), message_id)
        elif kind == "message":
            if "text" not in self._streamed:
                for part in field(item, "content") or []:
                    text = field(part, "text") or field(part, "refusal")
                    if text:
                        builder.text(text, message_id)
        elif kind == "function_call":
            call_id, name = field(item, "call_id"), field(item, "name")
            known = self._calls.get(index)
            if known is None and call_id not in self._waiting:
                self._announce(call_id, name, index)
            if (known or call_id) and index not in self._streamed:
                builder.tool_call(field(item, "arguments") or "", index=index, tool_call_id=call_id)

    def _announce(self, call_id: str, name: str | None, index: Any) -> None:
        self._calls[index] = call_id
        self._waiting[call_id] = name or "unknown"
        self.builder.tool_call(tool_call_id=call_id, name=name or "unknown", index=index)

    def _tool_result(self, call_id: str | None, output: Any, name: str | None = None) -> None:
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

    # -- the hooks (the adapter's RunHooks hands each call over, in the SDK's task) ------
    def llm_start(self, agent: Any, system_prompt: Any, input_items: Any) -> None:
        """``on_llm_start``: the request is about to be sent; its chat span is current for
        the model's HTTP call (or, with the consumer behind, it waits its turn)."""
        handoff_from, self._handoff_from = self._handoff_from, None
        if self._streaming and (self._message is not None or self._waiting or self._pending):
            self._pending = (agent, system_prompt, input_items, handoff_from)
            return  # the consumer is behind: it opens this request in order
        self._pending = None
        self._enter_model_scope(self._open(agent, system_prompt, input_items, handoff_from))

    def llm_end(self, response: Any) -> None:
        """``on_llm_end``: leave the chat scope; run mode ends the message from the response."""
        self.exit_model_scope()
        if not self._streaming:
            self._end_message(list(response.output), response.usage, response.response_id)

    def tool_start(self, call_id: str | None, agent: Any = None, tool: Any = None) -> None:
        """``on_tool_start``, in the task the SDK made for this tool, which then starts the
        tool's body in a child task: the scope reaches it. The SDK ends the tool in yet
        another task, so the scope is left with its own task, never exited elsewhere;
        an MCP tool's call is marked for that task too (:mod:`.mcp`)."""
        if call_id:
            if self._streaming:  # its result is read off the stream, maybe well after
                self._ran[call_id] = [time.time_ns()]
            self.builder.tool_scope(call_id).__enter__()
            if tool is not None:
                mark_call(agent, tool)

    def tool_end(self, call_id: str | None, name: str, result: Any) -> None:
        """``on_tool_end``: run mode reports the result; stream mode notes when it ended."""
        if not self._streaming:
            self._tool_result(call_id, result, name)
        elif call_id in self._ran:
            self._ran[call_id].append(time.time_ns())

    def handoff(self, from_agent: Any, to_agent: Any) -> None:
        """``on_handoff``: the next step is ``to_agent``'s, handed off by ``from_agent``."""
        self._handoff_from, self._handed_off = from_agent.name, True
        if not self._streaming:
            # The hook has no call id: answer the pending transfer call to this agent.
            names = _handoff_tool_names(from_agent, to_agent)
            for call_id, name in list(self._waiting.items()):
                if name in names:
                    self._tool_result(call_id, json.dumps({"assistant": to_agent.name}))
                    break

    def tool_error(self, args: Any) -> None:
        """``RunConfig.tool_error_formatter``: the exception a tool raised, for its result
        (the SDK hands it over before it tells the model)."""
        if args.kind == "tool_exception" and args.error is not None:
            self.errors[args.call_id] = args.error

    def policy_of(self, agent: Any) -> Any:
        """The retry policy ``agent``'s model calls have without us."""
        declared = getattr(agent, "model_settings", None)
        if declared is not None:
            declared = declared.resolve(field(self._run_config, "model_settings"))
        return field(field(declared, "retry"), "policy")

    def requesting_agent(self) -> Any:
        """The agent whose model call is open (whose policy decides on its retry)."""
        return self._request[0] if self._request is not None else None

    def retried(self, decision: Any, error: BaseException | None) -> None:
        """The agent's policy decided on a failed model call: when it retries, the failed
        attempt ends its chat span with ``error`` and the next attempt gets its own, in
        the same step. (A retry the SDK vetoes after the policy said yes ends that next
        span with the run's error.)"""
        retry = decision if isinstance(decision, bool) else getattr(decision, "retry", False)
        if retry and self._message is not None and self._pending is None and self._request:
            self.exit_model_scope()
            self.builder.message_end(self._message, error=error)
            self._enter_model_scope(self._send(*self._request))

    # -- stream events -----------------------------------------------------------------
    def on_stream_event(self, event: Any) -> None:
        """Stream mode: one event of ``RunResultStreaming.stream_events()``."""
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
        if field(item, "type") == "function_call" and field(item, "call_id"):
            self._announce(field(item, "call_id"), field(item, "name"), data.output_index)

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
            list(field(response, "output") or []),  # items already done are skipped
            field(response, "usage"),
            field(response, "id"),
            response_model=field(response, "model"),
            incomplete_reason=field(field(response, "incomplete_details"), "reason"),
        )

    def _on_tool_output(self, item: Any) -> None:
        self._tool_result(field(item.raw_item, "call_id"), item.output)

    def _on_handoff_output(self, item: Any) -> None:
        raw = item.raw_item
        self._tool_result(field(raw, "call_id"), field(raw, "output"))

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
