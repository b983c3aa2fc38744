"""OpenAIRunner against the real OpenAI Agents SDK, driven offline by its ScriptedModel.

The SDK is imported at module top on purpose: if ``openai-agents`` is missing,
this file fails to collect instead of passing silently.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip(
    "agents", reason="needs the openai-agents extra: pip install -e '.[dev,openai-agents]'"
)

import base64
import gc
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    Usage,
    function_tool,
)
from agents.testing import ModelStep, assistant_message, function_call
from openai import AsyncOpenAI
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_output_item import ImageGenerationCall
from openai.types.responses.response_reasoning_item import Summary
from pydantic import BaseModel
from tests.fake_openai_server import FakeOpenAIServer, FakeToolCall, Reply

from runnertrace.core import Runtime, SqliteSessionStore, ToolContext, observing
from runnertrace.core import events as ev
from runnertrace.core.models import (
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequestFile,
    AgentRequestImage,
    AgentRequestText,
)
from runnertrace.core.session import Session
from runnertrace.runners.openai_agents import OpenAIModule, OpenAIRunner
from runnertrace.runners.openai_agents.testing import FakeModel
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import Settings, TraceConfig

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _no_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # Offline by construction: without a key the SDK can neither call a model
    # nor upload its own traces.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def tool_run(tag: str, usage: Usage | None = None) -> list[Any]:
    """Two model calls: ask for multiply(6, 7), then answer. Ids are unique per tag."""
    return [
        ModelStep(
            output=[function_call("multiply", {"a": 6, "b": 7}, call_id=f"call_{tag}")],
            response_id=f"resp_{tag}1",
            usage=usage or Usage(),
        ),
        ModelStep(
            output=[assistant_message("6 x 7 = 42", item_id=f"msg_{tag}")],
            response_id=f"resp_{tag}2",
        ),
    ]


class ToolLog:
    """What the multiply tool saw: our ToolContext's session and the native context."""

    def __init__(self) -> None:
        self.sessions: list[str] = []
        self.contexts: list[Any] = []


def make_multiply(log: ToolLog) -> Any:
    @function_tool
    def multiply(ctx: RunContextWrapper[Any], a: int, b: int) -> int:
        """Multiply two numbers."""
        log.sessions.append(ToolContext.get().session.id)
        log.contexts.append(ctx.context)
        if isinstance(ctx.context, dict):
            ctx.context["calls"] = ctx.context.get("calls", 0) + 1
            ctx.context["last_product"] = a * b
        return a * b

    return multiply


class Setup:
    """One OpenAI agent registered through OpenAIModule on its own Runtime."""

    def __init__(
        self,
        steps: list[Any],
        *,
        runtime: Runtime | None = None,
        output_type: Any = None,
        handoffs: list[Any] | None = None,
        name: str = "calc",
    ) -> None:
        self.runtime = runtime or Runtime(settings=Settings())
        self.model = FakeModel(steps)
        self.log = ToolLog()
        self.native = Agent(
            name=name,
            model=self.model,
            tools=[make_multiply(self.log)],
            output_type=output_type,
            handoffs=handoffs or [],
        )
        self.module = OpenAIModule([self.native], runtime=self.runtime)
        self.agent = self.module.get(self.native)

    def session(self, session_id: str = "s1") -> Session:
        return self.runtime.sessions().get_or_new(session_id)

    async def run(self, prompt: str = "What is 6 times 7?", session: Session | None = None) -> Any:
        return await self.runtime.run(
            self.agent, session or self.session(), [AgentRequestText(prompt=prompt)]
        )

    async def observed_run(
        self, prompt: str = "What is 6 times 7?", session: Session | None = None
    ) -> tuple[Any, list[ev.StreamEvent]]:
        seen: list[ev.StreamEvent] = []
        with observing(seen.append):
            reply = await self.run(prompt, session)
        return reply, seen

    async def stream(
        self, prompt: str = "What is 6 times 7?", session: Session | None = None
    ) -> list[ev.StreamEvent]:
        chunks = self.runtime.stream(
            self.agent, session or self.session(), [AgentRequestText(prompt=prompt)]
        )
        return [c.event async for c in chunks if c.event is not None]


def expected_tool_run(
    tag: str, message_ids: tuple[str, str], response_model: str | None
) -> list[ev.StreamEvent]:
    m1, m2 = message_ids
    call = f"call_{tag}"
    return [
        ev.StepStart(step_name="calc", step_index=0),
        ev.MessageStart(message_id=m1, model="fake-model"),
        ev.ToolCallStart(tool_call_id=call, tool_name="multiply", parent_message_id=m1),
        ev.ToolCallArgs(tool_call_id=call, delta='{"a":6,"b":7}'),
        ev.ToolCallEnd(tool_call_id=call),
        ev.MessageEnd(
            message_id=m1,
            finish_reason="tool_calls",
            input_tokens=11,
            output_tokens=3,
            cache_read_input_tokens=0,
            reasoning_output_tokens=0,
            response_model=response_model,
            response_id=f"resp_{tag}1",
        ),
        ev.ToolCallResult(tool_call_id=call, content="42"),
        ev.StepEnd(step_name="calc", step_index=0),
        ev.StepStart(step_name="calc", step_index=1),
        ev.MessageStart(message_id=m2, model="fake-model"),
        ev.TextDelta(message_id=m2, delta="6 x 7 = 42"),
        ev.MessageEnd(
            message_id=m2,
            finish_reason="stop",
            response_model=response_model,
            response_id=f"resp_{tag}2",
        ),
        ev.StepEnd(step_name="calc", step_index=1),
    ]


USAGE = Usage(requests=1, input_tokens=11, output_tokens=3, total_tokens=14)


def assert_paired(events: list[ev.StreamEvent]) -> None:
    """Every start has one end, deltas sit inside their pair, results follow their call."""
    open_messages: set[str] = set()
    open_calls: set[str] = set()
    ended_calls: set[str] = set()
    results: set[str] = set()
    step: tuple[str, int | None] | None = None
    seen_ids: set[str] = set()
    for event in events:
        match event:
            case ev.StepStart():
                assert step is None, f"step opened inside another: {event}"
                step = (event.step_name, event.step_index)
            case ev.StepEnd():
                assert step == (event.step_name, event.step_index), event
                step = None
            case ev.MessageStart() | ev.ReasoningStart():
                assert step is not None, f"{event} outside a step"
                assert event.message_id not in seen_ids, f"id reused: {event.message_id}"
                seen_ids.add(event.message_id)
                open_messages.add(event.message_id)
            case ev.TextDelta() | ev.ReasoningDelta():
                assert event.message_id in open_messages, event
            case ev.MessageEnd() | ev.ReasoningEnd():
                open_messages.remove(event.message_id)
            case ev.ToolCallStart():
                assert event.tool_call_id not in open_calls | ended_calls, event
                assert event.parent_message_id in open_messages | seen_ids, event
                open_calls.add(event.tool_call_id)
            case ev.ToolCallArgs():
                assert event.tool_call_id in open_calls, event
            case ev.ToolCallEnd():
                open_calls.remove(event.tool_call_id)
                ended_calls.add(event.tool_call_id)
            case ev.ToolCallResult():
                assert event.tool_call_id in ended_calls - results, event
                results.add(event.tool_call_id)
    assert step is None and not open_messages and not open_calls


REQUEST_FIELDS = ("input_messages", "system_instructions", "request_parameters", "tool_definitions")


def bare(events: list[ev.StreamEvent]) -> list[ev.StreamEvent]:
    """The events without what each model call was sent (checked in test_fidelity_openai_agents)."""
    return [
        e.model_copy(update=dict.fromkeys(REQUEST_FIELDS)) if isinstance(e, ev.MessageStart) else e
        for e in events
    ]


def message_ids(events: list[ev.StreamEvent]) -> tuple[str, str]:
    ids = [e.message_id for e in events if isinstance(e, ev.MessageStart)]
    assert len(ids) == 2 and ids[0] != ids[1]
    return ids[0], ids[1]


# -- replies and events ------------------------------------------------------------------
async def test_run_returns_text_and_reports_the_run_through_the_observer() -> None:
    s = Setup(tool_run("a", USAGE))
    reply, seen = await s.observed_run()
    assert reply == AgentReplyText(text="6 x 7 = 42", prompt="What is 6 times 7?")
    assert bare(seen) == expected_tool_run("a", message_ids(seen), response_model=None)
    assert_paired(seen)
    s.model.assert_complete()


async def test_stream_yields_the_exact_paired_sequence_with_the_response_ids_at_the_end() -> None:
    # The message starts when the request is sent, before the response has an id,
    # so message ids are made up and the framework's response id ends the message.
    s = Setup(tool_run("a", USAGE))
    events = await s.stream()
    assert bare(events) == expected_tool_run("a", message_ids(events), "scripted-model")
    assert_paired(events)


async def test_run_mode_reports_the_same_event_types_as_stream_mode() -> None:
    s = Setup(tool_run("a", USAGE) + tool_run("b", USAGE))
    _, seen = await s.observed_run()
    streamed = await s.stream()
    assert [e.type for e in seen] == [e.type for e in streamed]


async def test_each_observed_run_reports_only_its_own_events() -> None:
    s = Setup(tool_run("a", USAGE) + tool_run("b", USAGE))
    await s.run()  # unobserved: its events go nowhere, and nowhere later
    _, seen = await s.observed_run()
    assert bare(seen) == expected_tool_run("b", message_ids(seen), response_model=None)


async def test_repeated_response_ids_do_not_merge_messages() -> None:
    steps = [
        ModelStep(output=[function_call("multiply", {"a": 1, "b": 2}, call_id="c1")]),
        ModelStep(output=[assistant_message("2")]),
    ]  # both steps use the scripted model's default response id
    events = await Setup(steps).stream()
    message_ids(events)  # two distinct messages
    assert [e.response_id for e in events if isinstance(e, ev.MessageEnd)] == ["resp-789"] * 2
    assert_paired(events)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_reasoning_is_reported_as_a_paired_block(mode: str) -> None:
    reasoning = ResponseReasoningItem(
        id="rs_1", type="reasoning", summary=[Summary(text="6 times 7", type="summary_text")]
    )
    steps = [ModelStep(output=[reasoning, assistant_message("42")], response_id="r1")]
    s = Setup(steps)
    events = (await s.observed_run())[1] if mode == "run" else await s.stream()
    assert_paired(events)
    block = [e for e in events if e.type.startswith("reasoning")]
    rid = block[0].message_id
    assert block == [
        ev.ReasoningStart(message_id=rid),
        ev.ReasoningDelta(message_id=rid, delta="6 times 7"),
        ev.ReasoningEnd(message_id=rid),
    ]
    assert [e.type for e in events][2:6] == [
        "reasoning_start",
        "reasoning_delta",
        "reasoning_end",
        "text_delta",
    ]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_handoff_closes_its_tool_call_and_starts_a_step_for_the_new_agent(
    mode: str,
) -> None:
    helper = Agent(name="helper", model=FakeModel([[assistant_message("helped")]]))
    steps = [[function_call("transfer_to_helper", {}, call_id="h1")]]
    s = Setup(steps, handoffs=[helper])
    events = (await s.observed_run())[1] if mode == "run" else await s.stream()
    assert_paired(events)
    result = next(e for e in events if isinstance(e, ev.ToolCallResult))
    assert result == ev.ToolCallResult(tool_call_id="h1", content='{"assistant": "helper"}')
    assert [(e.step_name, e.step_index) for e in events if isinstance(e, ev.StepStart)] == [
        ("calc", 0),
        ("helper", 1),
    ]


async def test_structured_output_becomes_agent_reply_any() -> None:
    class Product(BaseModel):
        product: int
        explanation: str

    steps = [[assistant_message('{"product": 42, "explanation": "6 x 7"}')]]
    reply = await Setup(steps, output_type=Product).run()
    assert reply == AgentReplyAny(
        content={"product": 42, "explanation": "6 x 7"}, prompt="What is 6 times 7?"
    )
    assert str(reply) == '{"product": 42, "explanation": "6 x 7"}'


async def test_a_non_object_structured_output_is_wrapped_like_the_sdk_wraps_it() -> None:
    reply = await Setup([[assistant_message('{"response": 42}')]], output_type=int).run()
    assert reply == AgentReplyAny(content={"response": 42}, prompt="What is 6 times 7?")


async def test_a_generated_image_becomes_agent_reply_image() -> None:
    image = ImageGenerationCall(
        id="ig_1", result="aGVsbG8=", status="completed", type="image_generation_call"
    )
    reply = await Setup([[image, assistant_message("Here it is.")]]).run("Draw a cat")
    assert reply == AgentReplyImage(text="Here it is.", image_data="aGVsbG8=", prompt="Draw a cat")


async def test_images_and_files_reach_the_model_as_data_urls() -> None:
    s = Setup([[assistant_message("seen")]])
    png = base64.b64encode(b"\x89PNG fake").decode()
    pdf = base64.b64encode(b"%PDF fake").decode()
    requests = [
        AgentRequestText(prompt="Describe these"),
        AgentRequestImage(image_data=png, mime_type="image/png", name="cat.png"),
        AgentRequestFile(file_data=pdf, mime_type="application/pdf", name="doc.pdf"),
    ]
    reply = await s.runtime.run(s.agent, s.session(), requests)
    assert reply.prompt == "Describe these"
    call = s.model.first_call
    assert call is not None
    assert call.input == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Describe these"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{png}",
                    "detail": "auto",
                },
                {
                    "type": "input_file",
                    "file_data": f"data:application/pdf;base64,{pdf}",
                    "filename": "doc.pdf",
                },
            ],
        }
    ]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_real_openai_client_over_http_maps_onto_the_same_events(mode: str) -> None:
    """The SDK's Chat Completions model against a scripted server on 127.0.0.1.

    This is the path a real model takes: the SDK's own stream handler, provider
    placeholder ids, arguments and text in many small deltas, usage from the wire.
    """
    replies = [
        Reply(
            reasoning="six sevens",
            tool_calls=[FakeToolCall("call_h", "multiply", {"a": 6, "b": 7})],
        ),
        Reply(text="The product is 42."),
    ]
    with FakeOpenAIServer(replies) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        s = Setup([])
        s.native.model = OpenAIChatCompletionsModel(model="fake-model-1", openai_client=client)
        s.native.model_settings = ModelSettings(include_usage=True)  # usage in streams too
        if mode == "run":
            reply, events = await s.observed_run()
            assert reply.text == "The product is 42."
        else:
            events = await s.stream()
    assert_paired(events)
    assert [e.type for e in events if not e.type.endswith(("_delta", "_args"))] == [
        "step_start",
        "message_start",
        "reasoning_start",
        "reasoning_end",
        "tool_call_start",
        "tool_call_end",
        "message_end",
        "tool_call_result",
        "step_end",
        "step_start",
        "message_start",
        "message_end",
        "step_end",
    ]
    starts = [e for e in events if isinstance(e, ev.MessageStart)]
    assert {(e.model, e.provider) for e in starts} == {("fake-model-1", "openai")}
    assert all("__fake_id__" not in e.message_id for e in starts)
    args = "".join(e.delta for e in events if isinstance(e, ev.ToolCallArgs))
    assert args == '{"a": 6, "b": 7}'
    text = "".join(e.delta for e in events if isinstance(e, ev.TextDelta))
    assert text == "The product is 42."
    ends = [e for e in events if isinstance(e, ev.MessageEnd)]
    assert [(e.input_tokens, e.output_tokens, e.response_id) for e in ends] == [(11, 7, None)] * 2
    if mode == "stream":  # the wire really was streamed in pieces
        assert sum(isinstance(e, ev.ToolCallArgs) for e in events) > 1
    assert ev.ToolCallResult(tool_call_id="call_h", content="42") in events


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_parallel_tool_calls_keep_their_own_arguments_and_results(mode: str) -> None:
    calls = [
        FakeToolCall("call_p", "multiply", {"a": 2, "b": 3}),
        FakeToolCall("call_q", "multiply", {"a": 4, "b": 5}),
    ]
    with FakeOpenAIServer(
        [Reply(tool_calls=calls, chunk_size=2), Reply(text="6 and 20")]
    ) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        s = Setup([])
        s.native.model = OpenAIChatCompletionsModel(model="fake-model-1", openai_client=client)
        events = (await s.observed_run())[1] if mode == "run" else await s.stream()
    assert_paired(events)
    for call_id, arguments, result in (
        ("call_p", '{"a": 2, "b": 3}', "6"),
        ("call_q", '{"a": 4, "b": 5}', "20"),
    ):
        args = [
            e.delta for e in events if isinstance(e, ev.ToolCallArgs) and e.tool_call_id == call_id
        ]
        assert "".join(args) == arguments
        assert ev.ToolCallResult(tool_call_id=call_id, content=result) in events


# -- session state -----------------------------------------------------------------------
async def test_history_persists_across_runs_and_modes_through_a_pickling_store(
    tmp_path: Path,
) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    s = Setup(
        tool_run("a") + tool_run("b"), runtime=Runtime(settings=Settings(), session_store=store)
    )
    await s.run("What is 6 times 7?", s.runtime.sessions().new("conv"))
    reloaded = s.runtime.sessions().get("conv")  # a fresh object, unpickled from SQLite
    assert reloaded is not None
    await s.stream("And again?", reloaded)

    second_run_first_call = s.model.calls[2].input
    assert second_run_first_call == [
        {"role": "user", "content": [{"type": "input_text", "text": "What is 6 times 7?"}]},
        {
            "arguments": '{"a":6,"b":7}',
            "call_id": "call_a",
            "name": "multiply",
            "type": "function_call",
            "id": "call_a",
        },
        {"call_id": "call_a", "output": "42", "type": "function_call_output"},
        {
            "id": "msg_a",
            "content": [
                {"annotations": [], "text": "6 x 7 = 42", "type": "output_text", "logprobs": []}
            ],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
        {"role": "user", "content": [{"type": "input_text", "text": "And again?"}]},
    ]
    final = s.runtime.sessions().get("conv")
    assert final is not None
    assert len(final.get("openai")) == 8  # two full exchanges
    assert s.log.sessions == ["conv", "conv"]  # ToolContext.get() resolved inside the tool


# -- framework context -------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_framework_context_round_trips_the_object_tools_mutated(mode: str) -> None:
    s = Setup(tool_run("a"))
    session = s.session()
    stored = {"calls": 1, "keep": "me"}
    session.set_framework_context(stored)
    if mode == "run":
        await s.run(session=session)
    else:
        await s.stream(session=session)
    assert session.get_framework_context() == {"calls": 2, "keep": "me", "last_product": 42}
    assert s.log.contexts[0] == session.get_framework_context()  # what the tool left, in full
    assert s.log.contexts[0] is not stored  # the tool worked on a copy ...
    assert stored == {"calls": 1, "keep": "me"}  # ... so the stored dict only moves on success


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_failed_run_leaves_the_stored_context_and_history_intact(mode: str) -> None:
    steps = [*tool_run("a"), tool_run("b")[0], RuntimeError("model is down")]
    s = Setup(steps)
    session = s.session()
    session.set_framework_context({"calls": 0})
    await s.run(session=session)
    stored_context = session.get_framework_context()
    stored_history = list(session.get("openai"))
    assert stored_context == {"calls": 1, "last_product": 42}

    with pytest.raises(RuntimeError, match="model is down"):
        if mode == "run":
            await s.run("Once more?", session)
        else:
            await s.stream("Once more?", session)
    assert s.log.contexts[-1] == {"calls": 2, "last_product": 42}  # the tool did run
    assert session.get_framework_context() == {"calls": 1, "last_product": 42}
    assert session.get("openai") == stored_history


async def test_without_a_stored_context_tools_get_none() -> None:
    s = Setup(tool_run("a"))
    await s.run()
    assert s.log.contexts == [None]
    assert s.session().get_framework_context() is None


# -- run options -------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(OpenAIRunner.RESERVED_RUN_OPTIONS))
def test_reserved_run_options_are_rejected_at_declaration(key: str) -> None:
    s = Setup([])
    with pytest.raises(ValueError, match=rf"'{key}' is reserved by OpenAIRunner: .+"):
        s.module.run_options(s.native, **{key: None})
    assert s.agent.run_options == {}


def test_the_reserved_keys_are_the_seed_table() -> None:
    assert set(OpenAIRunner.RESERVED_RUN_OPTIONS) == {
        "starting_agent",
        "input",
        "session",
        "context",
        "conversation_id",
        "previous_response_id",
        "auto_previous_response_id",
    }


async def test_a_factory_naming_a_reserved_key_fails_the_run() -> None:
    s = Setup(tool_run("a"))
    s.module.run_options(s.native, lambda agent, session, requests: {"input": "sneaky"})
    with pytest.raises(ValueError, match="'input' is reserved"):
        await s.run()
    assert s.model.calls == ()


async def test_a_factorys_options_reach_the_native_call_over_static_ones() -> None:
    s = Setup(tool_run("a"))
    seen: list[tuple[str, str]] = []

    async def options_for(agent: Any, session: Session, requests: list[Any]) -> dict[str, Any]:
        seen.append((agent.name, session.id))
        return {"max_turns": 1}

    s.module.run_options(s.native, options_for, max_turns=10)
    with pytest.raises(MaxTurnsExceeded):
        await s.run()
    assert seen == [("calc", "s1")]
    assert len(s.model.calls) == 1  # the one turn max_turns=1 allows


async def test_static_options_reach_the_native_call() -> None:
    s = Setup(tool_run("a"))
    s.module.run_options(
        s.native,
        run_config=RunConfig(
            tracing_disabled=True,
            model=FakeModel([[assistant_message("from the run config's model")]]),
        ),
    )
    reply = await s.run()
    assert reply.text == "from the run config's model"
    assert s.model.calls == ()


async def test_unknown_options_reach_the_sdk_which_rejects_them() -> None:
    s = Setup(tool_run("a"))
    s.module.run_options(s.native, max_turnz=3)
    with pytest.raises(TypeError, match="max_turnz"):
        await s.run()


class CountingHooks(RunHooks[Any]):
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self._count("agent_start")

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        self._count("agent_end")

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        self._count("llm_start")

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self._count("llm_end")

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self._count("tool_start")

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self._count("tool_end")


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_declared_native_hook_fires_exactly_once_per_event(mode: str) -> None:
    hooks = CountingHooks()
    s = Setup(tool_run("a"))
    s.module.run_options(s.native, hooks=hooks)
    if mode == "run":
        _, seen = await s.observed_run()  # observed, so our hooks are composed with the user's
        assert len(seen) == 13
    else:
        await s.stream()
    assert hooks.calls == {
        "agent_start": 1,
        "llm_start": 2,
        "llm_end": 2,
        "tool_start": 1,
        "tool_end": 1,
        "agent_end": 1,
    }


async def test_hooks_that_are_not_run_hooks_are_rejected_by_the_sdk() -> None:
    s = Setup(tool_run("a"))
    s.module.run_options(s.native, hooks=object())
    with pytest.raises(TypeError, match="Run hooks must be instances of RunHooks"):
        await s.run()


# -- observer isolation and cancellation --------------------------------------------------
async def test_a_nested_untraced_run_inside_a_tool_does_not_report_into_the_outer_run() -> None:
    runtime = Runtime(settings=Settings())
    inner = Setup([[assistant_message("inner answer")]], runtime=runtime, name="inner")

    @function_tool
    async def ask_inner(question: str) -> str:
        """Ask the inner agent."""
        reply = await runtime.run(
            inner.agent, runtime.sessions().get_or_new("inner"), [AgentRequestText(prompt=question)]
        )
        return str(reply)

    outer_model = FakeModel(
        [[function_call("ask_inner", {"question": "hi"}, call_id="c1")], [assistant_message("ok")]]
    )
    outer = Agent(name="outer", model=outer_model, tools=[ask_inner])
    agent = OpenAIModule([outer], runtime=runtime).get(outer)
    seen: list[ev.StreamEvent] = []
    with observing(seen.append):
        await runtime.run(agent, runtime.sessions().new("outer"), [AgentRequestText(prompt="go")])
    assert_paired(seen)
    assert {e.step_name for e in seen if isinstance(e, ev.StepStart)} == {"outer"}
    assert ev.ToolCallResult(tool_call_id="c1", content="inner answer") in seen


async def test_a_consumer_that_stops_early_cancels_the_sdk_run_and_saves_nothing() -> None:
    s = Setup(tool_run("a"))
    session = s.session()
    session.set_framework_context({"calls": 0})
    chunks: AsyncIterator[Any] = s.runtime.stream(
        s.agent, session, [AgentRequestText(prompt="What is 6 times 7?")]
    )
    async with aclosing(chunks) as stream:
        async for chunk in stream:
            assert chunk.event == ev.StepStart(step_name="calc", step_index=0)
            break
    # Without the cancel, closing would wait for the SDK loop to run both turns.
    assert s.model.remaining_steps == 1
    assert session.get("openai") is None
    assert session.get_framework_context() == {"calls": 0}


async def test_a_runner_called_without_the_runtime_still_gives_tools_a_tool_context() -> None:
    s = Setup(tool_run("a"))
    reply = await OpenAIRunner().run(
        s.agent, Session("direct"), [AgentRequestText(prompt="What is 6 times 7?")]
    )
    assert reply.text == "6 x 7 = 42"
    assert s.log.sessions == ["direct"]


async def test_a_non_openai_agent_is_refused() -> None:
    runtime = Runtime(settings=Settings())
    from runnertrace.core.agent import Agent as CoreAgent

    agent = CoreAgent("odd", OpenAIRunner(), native=object())
    with pytest.raises(TypeError, match=r"not an agents\.Agent"):
        await runtime.run(agent, runtime.sessions().new("x"), [AgentRequestText(prompt="hi")])


# -- tracing -------------------------------------------------------------------------------
def traced_setup(steps: list[Any]) -> Setup:
    return Setup(steps, runtime=Runtime(settings=Settings(trace=TraceConfig(enabled=True))))


TOOL_RUN_TREE = [
    (
        "invoke_agent calc",
        [
            ("agent_step calc", [("chat fake-model", []), ("execute_tool multiply", [])]),
            ("agent_step calc", [("chat fake-model", [])]),
        ],
    )
]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_runs_produce_the_span_tree_in_both_modes(
    mode: str, captured_spans: CapturedSpans
) -> None:
    s = traced_setup(tool_run("a", USAGE))
    assert getattr(s.agent.runner, "is_tracing_runner", False)
    if mode == "run":
        reply = await s.run()
        assert reply.text == "6 x 7 = 42"
    else:
        await s.stream()
    assert captured_spans.tree() == TOOL_RUN_TREE
    chat = captured_spans.by_name("chat fake-model")[0]
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.usage.input_tokens"] == 11
    tool = captured_spans.by_name("execute_tool multiply")[0]
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "call_a"


async def test_a_traced_run_keeps_the_users_hooks_and_options(
    captured_spans: CapturedSpans,
) -> None:
    hooks = CountingHooks()
    s = traced_setup(tool_run("a"))
    s.module.run_options(s.native, hooks=hooks, max_turns=5)
    await s.run()
    assert hooks.calls["llm_start"] == 2 and hooks.calls["tool_end"] == 1
    assert captured_spans.tree() == TOOL_RUN_TREE


def _live(cls: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is cls)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_model_settings_the_sdk_keeps_do_not_keep_a_finished_runs_mapping(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """The scripted model keeps every call's model settings, our retry policy among them
    (as a user's model, or a result the user keeps, would): the run's mapper, builder and
    hooks must still go when the run ends, and the kept policy defers to the agent's."""
    from runnertrace.runners._kit.builder import EventBuilder
    from runnertrace.runners.openai_agents.mapper import _Mapper

    before = (_live(_Mapper), _live(EventBuilder))
    s = traced_setup(tool_run("a", USAGE))
    await (s.run() if mode == "run" else s.stream())
    kept = [call.model_settings for call in s.model.calls]
    assert len(kept) == 2 and all(k.retry is not None for k in kept)
    assert (_live(_Mapper), _live(EventBuilder)) == before
    policy = kept[0].retry.policy  # type: ignore[union-attr]
    assert policy is not None and policy(None) is False  # the agent has no policy of its own


@pytest.mark.parametrize("declared", [True, False], ids=["run-config-settings", "none"])
async def test_a_traced_run_sends_the_run_configs_model_settings_with_our_retry_policy(
    declared: bool, captured_spans: CapturedSpans
) -> None:
    """The observed run config carries our retry policy; it is merged onto the model
    settings the user's ``RunConfig`` declares, so the model gets both (and with none
    declared, only the policy)."""
    s = traced_setup(tool_run("a", USAGE))
    user_settings = ModelSettings(temperature=0.3, max_tokens=64) if declared else None
    user_config = RunConfig(model_settings=user_settings)
    s.module.run_options(s.native, run_config=user_config)
    await s.run()
    sent = [call.model_settings for call in s.model.calls]
    assert len(sent) == 2 and all(settings.retry is not None for settings in sent)
    expected = (0.3, 64) if declared else (None, None)
    assert {(settings.temperature, settings.max_tokens) for settings in sent} == {expected}
    assert user_config.model_settings is user_settings  # the user's config is not changed
    assert user_settings is None or user_settings.retry is None
    chat = captured_spans.by_name("chat fake-model")[0]
    assert chat.attributes.get("gen_ai.request.temperature") == expected[0]


# -- the example -------------------------------------------------------------
def test_the_example_runs_offline(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OPENAI_", "PYTEST_"))
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "openai_agents_agent.py"), "What is 6 times 7?"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "run:    The product is 42.",
        "stream: [tool -> 42] The product is 42.",
    ]
