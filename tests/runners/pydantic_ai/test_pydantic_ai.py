"""PydanticAIRunner against the real Pydantic AI, driven offline by ``FunctionModel``.

The fake model runs the usual two-step tool run: it asks for ``multiply(6, 7)``
(optionally after a thinking part), then states the tool's result. It records
every message list and model settings it was sent, so tests can check what
reached the native call.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip(
    "pydantic_ai", reason="needs the pydantic-ai extra: pip install -e '.[dev,pydantic-ai]'"
)

import asyncio
import base64
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import Hooks
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage, UsageLimits

from runnertrace.core import Runtime, SqliteSessionStore, ToolContext, observing
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import (
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequest,
    AgentRequestAny,
    AgentRequestFile,
    AgentRequestImage,
    AgentRequestText,
)
from runnertrace.core.session import Session
from runnertrace.runners.pydantic_ai import (
    STATE_KEY,
    PydanticAIModule,
    PydanticAIRunner,
    user_prompt_of,
)
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import Settings, TraceConfig

REPO = Path(__file__).resolve().parents[3]
QUESTION = [AgentRequestText(prompt="What is 6 times 7?")]


# -- the fake model --------------------------------------------------------------------------
class FakeLLM:
    """Asks for ``multiply(6, 7)``, then answers with the tool's result.

    With ``think`` the first response starts with a thinking part. With an
    output tool on offer (structured output) the answer goes through it. With
    ``fail_answer`` the second call raises, after the tool has run.
    """

    def __init__(
        self,
        *,
        think: bool = False,
        fail_answer: bool = False,
        output_args: Callable[[Any], dict[str, Any]] = lambda value: {"product": value},
    ) -> None:
        self.think = think
        self.fail_answer = fail_answer
        self.output_args = output_args
        self.seen: list[list[ModelMessage]] = []
        self.settings: list[ModelSettings | None] = []
        self.before_stream: Callable[[], Awaitable[None]] | None = None

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, stream_function=self.stream, model_name="fake-llm")

    def _parts(self, messages: list[ModelMessage], info: AgentInfo) -> list[Any]:
        self.seen.append(list(messages))
        self.settings.append(info.model_settings)
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        call_id = f"call_{len(self.seen)}"
        if not returns:
            parts: list[Any] = [ThinkingPart("6 times 7")] if self.think else []
            return [*parts, ToolCallPart("multiply", {"a": 6, "b": 7}, tool_call_id=call_id)]
        if self.fail_answer:
            raise RuntimeError("the model is down")
        if info.output_tools:
            name = info.output_tools[0].name
            args = self.output_args(returns[0].content)
            return [ToolCallPart(name, args, tool_call_id=call_id)]
        return [TextPart(f"6 x 7 = {returns[0].content}")]

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = self._parts(messages, info)
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=11, output_tokens=3))

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if self.before_stream is not None:
            before, self.before_stream = self.before_stream, None
            await before()
        for index, part in enumerate(self._parts(messages, info)):
            if isinstance(part, ThinkingPart):
                yield {index: DeltaThinkingPart(content="6 times ")}
                yield {index: DeltaThinkingPart(content="7")}
            elif isinstance(part, ToolCallPart):
                args = part.args_as_json_str()
                cut = args.index(",") + 1 if "," in args else len(args)
                yield {
                    index: DeltaToolCall(part.tool_name, args[:cut], tool_call_id=part.tool_call_id)
                }
                if args[cut:]:
                    yield {index: DeltaToolCall(json_args=args[cut:])}
            else:
                yield "6 x 7 "
                yield part.content.removeprefix("6 x 7 ")


def calculator(llm: FakeLLM, **kwargs: Any) -> Agent[dict[str, Any], Any]:
    agent: Agent[dict[str, Any], Any] = Agent(llm.model(), name="calc", deps_type=dict, **kwargs)

    @agent.tool
    def multiply(ctx: RunContext[dict[str, Any]], a: int, b: int) -> int:
        ctx.deps["calls"] = ctx.deps.get("calls", 0) + 1
        ctx.deps["session"] = ToolContext.get().session.id
        return a * b

    return agent


class Setup:
    """A runtime with the calculator registered through ``PydanticAIModule``."""

    def __init__(self, llm: FakeLLM | None = None, *, runtime: Runtime | None = None, **kw: Any):
        self.llm = llm or FakeLLM()
        self.runtime = runtime or Runtime(settings=Settings())
        self.native = calculator(self.llm, **kw)
        self.module = PydanticAIModule([self.native], runtime=self.runtime)
        self.agent = self.runtime.agents().get("calc")

    def session(self, session_id: str = "s1") -> Session:
        return self.runtime.sessions().get_or_new(session_id)

    async def run(
        self, session: Session | None = None, requests: list[AgentRequest] | None = None
    ) -> Any:
        return await self.runtime.run(self.agent, session or self.session(), requests or QUESTION)

    async def stream(
        self, session: Session | None = None, requests: list[AgentRequest] | None = None
    ) -> list[ev.StreamEvent]:
        chunks = self.runtime.stream(self.agent, session or self.session(), requests or QUESTION)
        return [c.event async for c in chunks if c.event is not None]

    async def observed_run(
        self, session: Session | None = None
    ) -> tuple[Any, list[ev.StreamEvent]]:
        seen: list[ev.StreamEvent] = []
        with observing(seen.append):
            reply = await self.run(session)
        return reply, seen

    async def go(self, mode: str, session: Session | None = None) -> list[ev.StreamEvent]:
        if mode == "run":
            return (await self.observed_run(session))[1]
        return await self.stream(session)


# -- event checks -----------------------------------------------------------------------------
def assert_paired(events: list[ev.StreamEvent]) -> None:
    """Steps hold messages and tool results; every start has its end, in order."""
    step: tuple[str, int | None] | None = None
    message: str | None = None
    reasoning: str | None = None
    calls: dict[str, str] = {}  # id -> "open" | "ended" | "done"
    for e in events:
        if isinstance(e, ev.StepStart):
            assert step is None, f"nested step at {e}"
            step = (e.step_name, e.step_index)
        elif isinstance(e, ev.StepEnd):
            assert step == (e.step_name, e.step_index) and message is None, e
            assert all(state == "done" for state in calls.values()), calls
            step, calls = None, {}
        elif isinstance(e, ev.MessageStart):
            assert step is not None and message is None, e
            message = e.message_id
        elif isinstance(e, ev.TextDelta):
            assert e.message_id == message and reasoning is None, e
        elif isinstance(e, ev.MessageEnd):
            assert e.message_id == message and reasoning is None, e
            assert all(state != "open" for state in calls.values()), calls
            message = None
        elif isinstance(e, ev.ReasoningStart):
            assert message is not None and reasoning is None, e
            reasoning = e.message_id
        elif isinstance(e, ev.ReasoningDelta):
            assert e.message_id == reasoning, e
        elif isinstance(e, ev.ReasoningEnd):
            assert e.message_id == reasoning, e
            reasoning = None
        elif isinstance(e, ev.ToolCallStart):
            assert message is not None and e.parent_message_id == message, e
            assert e.tool_call_id not in calls, e
            calls[e.tool_call_id] = "open"
        elif isinstance(e, ev.ToolCallArgs):
            assert calls.get(e.tool_call_id) == "open", e
        elif isinstance(e, ev.ToolCallEnd):
            assert calls.get(e.tool_call_id) == "open", e
            calls[e.tool_call_id] = "ended"
        elif isinstance(e, ev.ToolCallResult):
            assert calls.get(e.tool_call_id) == "ended", e
            calls[e.tool_call_id] = "done"
    assert step is None and message is None and reasoning is None


def skeleton(events: list[ev.StreamEvent]) -> list[str]:
    """Event types with runs of the same delta type collapsed (deltas are chunking)."""
    out: list[str] = []
    for e in events:
        if not (e.type.endswith(("_delta", "_args")) and out and out[-1] == e.type):
            out.append(e.type)
    return out


TOOL_RUN_SKELETON = [
    "step_start",
    "message_start",
    "reasoning_start",
    "reasoning_delta",
    "reasoning_end",
    "tool_call_start",
    "tool_call_args",
    "tool_call_end",
    "message_end",
    "tool_call_result",
    "step_end",
    "step_start",
    "message_start",
    "text_delta",
    "message_end",
    "step_end",
]


# -- run() -----------------------------------------------------------------------------------
async def test_run_returns_the_text_and_reports_the_paired_run_to_the_observer() -> None:
    s = Setup(FakeLLM(think=True))
    reply, seen = await s.observed_run()
    assert isinstance(reply, AgentReplyText)
    assert reply.text == "6 x 7 = 42"
    assert reply.prompt == "What is 6 times 7?"
    assert skeleton(seen) == TOOL_RUN_SKELETON
    assert_paired(seen)
    starts = [e for e in seen if isinstance(e, ev.MessageStart)]
    assert [(m.model, m.provider) for m in starts] == [("fake-llm", "function")] * 2
    ends = [e for e in seen if isinstance(e, ev.MessageEnd)]
    assert [(m.input_tokens, m.output_tokens, m.response_model) for m in ends] == [
        (11, 3, "fake-llm")
    ] * 2
    assert ev.ToolCallResult(tool_call_id="call_1", content="42") in seen
    assert [e.delta for e in seen if isinstance(e, ev.ReasoningDelta)] == ["6 times 7"]
    assert [(e.step_name, e.step_index) for e in seen if isinstance(e, ev.StepStart)] == [
        ("calc", 0),
        ("calc", 1),
    ]


# -- stream() ----------------------------------------------------------------------------------
async def test_stream_yields_the_exact_paired_sequence_with_framework_ids() -> None:
    s = Setup(FakeLLM(think=True))
    events = await s.stream()
    assert_paired(events)
    m1, m2 = (e.message_id for e in events if isinstance(e, ev.MessageStart))
    run_id = m1.rsplit("-m", 1)[0]
    assert (m1, m2) == (f"{run_id}-m1", f"{run_id}-m2")
    (r1,) = (e.message_id for e in events if isinstance(e, ev.ReasoningStart))
    assert r1.startswith(m1)  # the builder names a reasoning block after its message
    ends = [e for e in events if isinstance(e, ev.MessageEnd)]
    assert all(e.input_tokens and e.output_tokens for e in ends)
    assert events == [
        ev.StepStart(step_name="calc", step_index=0),
        ev.MessageStart(message_id=m1, model="fake-llm", provider="function"),
        ev.ReasoningStart(message_id=r1),
        ev.ReasoningDelta(message_id=r1, delta="6 times "),
        ev.ReasoningDelta(message_id=r1, delta="7"),
        ev.ReasoningEnd(message_id=r1),
        ev.ToolCallStart(tool_call_id="call_1", tool_name="multiply", parent_message_id=m1),
        ev.ToolCallArgs(tool_call_id="call_1", delta='{"a":6,'),
        ev.ToolCallArgs(tool_call_id="call_1", delta='"b":7}'),
        ev.ToolCallEnd(tool_call_id="call_1"),
        ends[0],
        ev.ToolCallResult(tool_call_id="call_1", content="42"),
        ev.StepEnd(step_name="calc", step_index=0),
        ev.StepStart(step_name="calc", step_index=1),
        ev.MessageStart(message_id=m2, model="fake-llm", provider="function"),
        ev.TextDelta(message_id=m2, delta="6 x 7 "),
        ev.TextDelta(message_id=m2, delta="= 42"),
        ends[1],
        ev.StepEnd(step_name="calc", step_index=1),
    ]
    assert ends[0].message_id == m1 and ends[0].response_model == "fake-llm"


async def test_run_mode_reports_the_same_events_as_stream_mode_yields() -> None:
    s = Setup(FakeLLM(think=True))
    _, observed = await s.observed_run(s.session("a"))
    streamed = await s.stream(s.session("b"))
    assert skeleton(observed) == skeleton(streamed) == TOOL_RUN_SKELETON


async def test_message_start_is_reported_before_the_model_sends_anything() -> None:
    # The observer (the tracer) must see the request start when it is sent, not at the
    # first token; the consumer gets the queued events with the next native event
    # (no task per event, issue 11 item 7).
    observed: list[ev.StreamEvent] = []
    yielded: list[ev.StreamEvent] = []
    before_first_chunk: list[str] = []

    async def slow_first_token() -> None:
        for _ in range(50):  # as a model's network wait would
            await asyncio.sleep(0)
        before_first_chunk.extend(e.type for e in observed)

    llm = FakeLLM()
    llm.before_stream = slow_first_token
    s = Setup(llm)
    with observing(observed.append):
        async for chunk in s.runtime.stream(s.agent, s.session(), QUESTION):
            if chunk.event is not None:
                yielded.append(chunk.event)
    assert before_first_chunk == ["step_start", "message_start"]
    assert observed == yielded
    assert_paired(yielded)


async def test_a_consumer_that_stops_early_cancels_the_run_and_saves_nothing() -> None:
    s = Setup()
    session = s.session()
    session.set_framework_context({"calls": 0})
    async with aclosing(s.runtime.stream(s.agent, session, QUESTION)) as chunks:
        async for chunk in chunks:
            assert chunk.event == ev.StepStart(step_name="calc", step_index=0)
            break
    assert len(s.llm.seen) <= 1  # the second model call never happened
    assert session.get(STATE_KEY) is None
    assert session.get_framework_context() == {"calls": 0}
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_cancelled_consumer_ends_the_run_without_leftover_tasks() -> None:
    llm = FakeLLM()
    started = asyncio.Event()

    async def never_answer() -> None:
        started.set()
        await asyncio.Event().wait()  # a model that hangs until cancelled

    llm.before_stream = never_answer
    s = Setup(llm)
    session = s.session()
    got: list[ev.StreamEvent] = []
    observed: list[ev.StreamEvent] = []

    async def consume() -> None:
        with observing(observed.append):
            async for chunk in s.runtime.stream(s.agent, session, QUESTION):
                if chunk.event is not None:
                    got.append(chunk.event)

    task = asyncio.create_task(consume())
    await started.wait()
    for _ in range(50):  # let the consumer take what was already produced
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e.type for e in observed] == ["step_start", "message_start"]
    assert got == []  # queued until the next native event, which never came
    assert session.get(STATE_KEY) is None
    assert asyncio.all_tasks() == {asyncio.current_task()}


# -- tool errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_failed_retried_and_unknown_tool_calls_get_error_results(mode: str) -> None:
    calls = iter(
        [
            [
                ToolCallPart("flaky", {"x": 1}, tool_call_id="c1"),
                ToolCallPart("nope", {}, tool_call_id="c2"),
                ToolCallPart("flaky", {"x": "not a number"}, tool_call_id="c3"),
            ],
            [TextPart("gave up")],
        ]
    )

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=next(calls))

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for index, part in enumerate(next(calls)):
            if isinstance(part, TextPart):
                yield part.content
            else:
                yield {
                    index: DeltaToolCall(
                        part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }

    native = Agent(FunctionModel(respond, stream_function=stream), name="calc", retries=3)

    @native.tool_plain
    def flaky(x: int) -> int:
        raise ModelRetry("try again later")

    runtime = Runtime(settings=Settings())
    PydanticAIModule([native], runtime=runtime)
    agent = runtime.agents().get("calc")
    session = runtime.sessions().new("e")
    if mode == "run":
        seen: list[ev.StreamEvent] = []
        with observing(seen.append):
            await runtime.run(agent, session, QUESTION)
    else:
        seen = [c.event async for c in runtime.stream(agent, session, QUESTION) if c.event]
    assert_paired(seen)
    results = {e.tool_call_id: e for e in seen if isinstance(e, ev.ToolCallResult)}
    assert set(results) == {"c1", "c2", "c3"}
    assert all(r.is_error for r in results.values())
    assert results["c1"].content == "try again later"
    assert "Unknown tool name: 'nope'" in results["c2"].content
    assert "int_parsing" in results["c3"].content
    if mode == "run":  # observed: each failure names what the tool or validator raised
        errors = {key: r.error.type if r.error else None for key, r in results.items()}
        assert errors == {"c1": "ModelRetry", "c2": None, "c3": "ValidationError"}


# -- replies -----------------------------------------------------------------------------------
class Product(BaseModel):
    product: int


async def test_structured_output_becomes_agent_reply_any() -> None:
    s = Setup(output_type=Product)
    reply, seen = await s.observed_run()
    assert isinstance(reply, AgentReplyAny)
    assert reply.content == {"product": 42}
    assert str(reply) == '{"product": 42}'
    assert_paired(seen)
    # The output tool is the answer, not a tool call (issue 11 item 5): it is the
    # last message's text, and only the real tool is a call.
    assert [e.tool_name for e in seen if isinstance(e, ev.ToolCallStart)] == ["multiply"]
    assert [e.tool_call_id for e in seen if isinstance(e, ev.ToolCallResult)] == ["call_1"]
    last = [e for e in seen if isinstance(e, ev.MessageStart)][-1].message_id
    text = "".join(e.delta for e in seen if isinstance(e, ev.TextDelta) and e.message_id == last)
    assert Product.model_validate_json(text) == Product(product=42)


async def test_streamed_structured_output_arrives_as_the_messages_text() -> None:
    s = Setup(output_type=Product)
    events = await s.stream()
    assert_paired(events)
    assert [e.tool_name for e in events if isinstance(e, ev.ToolCallStart)] == ["multiply"]
    last = [e for e in events if isinstance(e, ev.MessageStart)][-1].message_id
    chunks = [e.delta for e in events if isinstance(e, ev.TextDelta) and e.message_id == last]
    assert Product.model_validate_json("".join(chunks)) == Product(product=42)


@pytest.mark.parametrize(
    ("output_type", "output_args", "expected"),
    [
        (dict[str, int], lambda v: {"response": {"product": v}}, {"product": 42}),
        (int, lambda v: {"response": v}, {"output": 42}),
    ],
)
async def test_dict_and_non_object_outputs_become_agent_reply_any(
    output_type: Any, output_args: Callable[[Any], dict[str, Any]], expected: dict[str, Any]
) -> None:
    s = Setup(FakeLLM(output_args=output_args), output_type=output_type)
    reply = await s.run()
    assert isinstance(reply, AgentReplyAny)
    assert reply.content == expected


async def test_an_image_output_becomes_agent_reply_image() -> None:
    png = b"\x89PNG fake image"

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        from pydantic_ai.messages import BinaryImage, FilePart

        return ModelResponse(
            parts=[TextPart("Here it is."), FilePart(BinaryImage(data=png, media_type="image/png"))]
        )

    native = Agent(FunctionModel(respond), name="painter")
    runner = PydanticAIRunner()
    reply = await runner.run(CoreAgent("painter", runner, native), Session("p"), QUESTION)
    assert isinstance(reply, AgentReplyImage)
    assert reply.text == "Here it is."
    assert base64.b64decode(reply.image_data) == png


# -- input conversion --------------------------------------------------------------------------
async def test_images_and_files_reach_the_model_as_binary_content_and_urls() -> None:
    s = Setup()
    png, pdf = b"\x89PNG...", b"%PDF-1.7"
    requests: list[AgentRequest] = [
        AgentRequestText(prompt="What is 6 times 7?"),
        AgentRequestImage(image_data=base64.b64encode(png).decode(), mime_type="image/png"),
        AgentRequestFile(
            file_data=base64.b64encode(pdf).decode(), mime_type="application/pdf", name="a.pdf"
        ),
        AgentRequestImage(image_data="https://example.com/cat.jpg", mime_type="image/jpeg"),
        AgentRequestAny(content={"unit": "cm"}),
    ]
    reply = await s.run(requests=requests)
    assert reply.prompt == "What is 6 times 7?"
    first = s.llm.seen[0][0]
    assert isinstance(first, ModelRequest)
    prompt = next(p for p in first.parts if isinstance(p, UserPromptPart))
    assert isinstance(prompt.content, list)
    text, image, document, url, structured = prompt.content
    assert text == "What is 6 times 7?"
    assert isinstance(image, BinaryContent) and (image.data, image.media_type) == (png, "image/png")
    assert isinstance(document, BinaryContent) and document.data == pdf
    assert document.identifier == "a.pdf"
    assert isinstance(url, ImageUrl) and url.url == "https://example.com/cat.jpg"
    assert structured == '{"unit": "cm"}'


def test_a_lone_text_request_stays_a_string_and_bad_data_is_refused() -> None:
    assert user_prompt_of([AgentRequestText(prompt="hi")]) == "hi"
    with pytest.raises(ValueError, match="neither base64"):
        user_prompt_of([AgentRequestImage(image_data="not base64!", mime_type="image/png")])
    with pytest.raises(ValueError, match="at least one request"):
        user_prompt_of([])


# -- session state and framework context ----------------------------------------------------------
@pytest.mark.parametrize("second", ["run", "stream"])
async def test_history_persists_across_runs_through_a_pickling_store(
    second: str, tmp_path: Path
) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    s = Setup(runtime=Runtime(settings=Settings(), session_store=store))
    await s.run(s.session("h"))
    stored = store.load("h")
    assert stored is not None
    first_run = stored.get(STATE_KEY)
    assert [m.kind for m in first_run] == ["request", "response", "request", "response"]
    await s.go(second, store.load("h"))
    # The second run's first model call sees the whole first run, then the new prompt.
    second_run_input = s.llm.seen[2]
    assert second_run_input[:4] == first_run
    assert [m.kind for m in second_run_input[4:]] == ["request"]
    reloaded = store.load("h")
    assert reloaded is not None and len(reloaded.get(STATE_KEY)) == 8


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_framework_context_round_trips_the_dict_tools_mutated(mode: str) -> None:
    s = Setup()
    session = s.session()
    session.set_framework_context({"calls": 1, "user": "ada"})
    await s.go(mode, session)
    assert session.get_framework_context() == {"calls": 2, "user": "ada", "session": "s1"}


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_a_failed_run_leaves_the_stored_context_and_history_intact(mode: str) -> None:
    s = Setup(FakeLLM(fail_answer=True))
    session = s.session()
    session.set_framework_context({"calls": 0})
    with pytest.raises(RuntimeError, match="the model is down"):
        await s.go(mode, session)
    assert s.llm.seen and session.get_framework_context() == {"calls": 0}
    assert session.get(STATE_KEY) is None


async def test_without_a_stored_context_tools_get_a_throw_away_dict() -> None:
    s = Setup()
    session = s.session()
    await s.run(session)
    assert session.get_framework_context() is None


# -- run options -----------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["user_prompt", "message_history", "deps", "conversation"])
def test_reserved_run_options_are_rejected_at_declaration(key: str) -> None:
    s = Setup()
    with pytest.raises(ValueError, match=f"run option '{key}' is reserved by PydanticAIRunner"):
        s.module.run_options(s.native, **{key: None})


def test_the_reserved_keys_cover_the_seed_table() -> None:
    assert {"user_prompt", "message_history", "deps"} <= set(PydanticAIRunner.RESERVED_RUN_OPTIONS)


async def test_a_factory_naming_a_reserved_key_fails_the_run() -> None:
    s = Setup()
    s.module.run_options(s.native, lambda agent, session, requests: {"deps": {}})
    with pytest.raises(ValueError, match="'deps' is reserved"):
        await s.run()


async def test_a_factorys_options_reach_the_native_call_over_static_ones() -> None:
    s = Setup()

    async def per_run(agent: CoreAgent, session: Session, requests: list[AgentRequest]) -> Any:
        return {"model_settings": {"temperature": 0.7, "max_tokens": len(session.id)}}

    s.module.run_options(s.native, per_run, model_settings={"temperature": 0.1}).run_options(
        s.native, metadata={"tenant": "t1"}
    )
    await s.run(s.session("four"))
    assert s.llm.settings[0] is not None
    assert s.llm.settings[0]["temperature"] == 0.7
    assert s.llm.settings[0]["max_tokens"] == 4


async def test_static_usage_limits_reach_the_native_call() -> None:
    s = Setup()
    s.module.run_options(s.native, usage_limits=UsageLimits(request_limit=1))
    with pytest.raises(UsageLimitExceeded):
        await s.run()


async def test_unknown_options_reach_the_sdk_which_rejects_them() -> None:
    s = Setup()
    s.module.run_options(s.native, max_turns=3)
    with pytest.raises(TypeError, match="max_turns"):
        await s.run()


# -- native hooks ---------------------------------------------------------------------------------
def counting_hooks(counts: dict[str, int]) -> Hooks[Any]:
    hooks: Hooks[Any] = Hooks()

    @hooks.on.before_model_request
    async def before_model(ctx: Any, request_context: Any) -> Any:
        counts["model"] = counts.get("model", 0) + 1
        return request_context

    @hooks.on.after_tool_execute
    async def after_tool(ctx: Any, *, call: Any, tool_def: Any, args: Any, result: Any) -> Any:
        counts["tool"] = counts.get("tool", 0) + 1
        return result

    return hooks


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_declared_and_agent_capabilities_fire_exactly_once(mode: str) -> None:
    declared: dict[str, int] = {}
    own: dict[str, int] = {}
    s = Setup(capabilities=[counting_hooks(own)])
    s.module.run_options(s.native, capabilities=[counting_hooks(declared)])
    events = await s.go(mode)
    assert declared == own == {"model": 2, "tool": 1}
    assert skeleton(events)[:2] == ["step_start", "message_start"]


async def test_a_declared_event_stream_handler_fires_once_in_run_mode() -> None:
    kinds: list[str] = []

    async def handler(ctx: RunContext[Any], stream: Any) -> None:
        async for event in stream:
            kinds.append(event.event_kind)

    s = Setup(FakeLLM(think=True))
    s.module.run_options(s.native, event_stream_handler=handler)
    reply, seen = await s.observed_run()
    assert reply.text == "6 x 7 = 42"
    assert kinds.count("function_tool_call") == 1
    assert kinds.count("function_tool_result") == 1
    assert skeleton(seen) == TOOL_RUN_SKELETON


async def test_stream_mode_drops_a_declared_event_stream_handler_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    called: list[Any] = []

    async def handler(ctx: RunContext[Any], stream: Any) -> None:
        called.append(ctx)

    s = Setup()
    s.module.run_options(s.native, event_stream_handler=handler)
    with caplog.at_level(logging.WARNING, logger="runnertrace"):
        await s.stream(s.session("a"))
        await s.stream(s.session("b"))
    warnings = [r for r in caplog.records if "event_stream_handler" in r.getMessage()]
    assert len(warnings) == 1
    assert called == []


async def test_a_nested_untraced_run_inside_a_tool_does_not_report_into_the_outer_run() -> None:
    inner_llm = FakeLLM()
    inner = calculator(inner_llm)
    inner_runner = PydanticAIRunner()

    outer_model = FunctionModel(
        lambda messages, info: ModelResponse(
            parts=[TextPart("done")]
            if isinstance(messages[-1].parts[-1], ToolReturnPart)
            else [ToolCallPart("ask_inner", {}, tool_call_id="outer_1")]
        )
    )
    outer = Agent(outer_model, name="outer")

    @outer.tool_plain
    async def ask_inner() -> str:
        reply = await inner_runner.run(
            CoreAgent("calc", inner_runner, inner), Session("i"), QUESTION
        )
        return str(reply)

    runner = PydanticAIRunner()
    seen: list[ev.StreamEvent] = []
    with observing(seen.append):
        await runner.run(CoreAgent("outer", runner, outer), Session("o"), QUESTION)
    assert_paired(seen)
    assert {e.step_name for e in seen if isinstance(e, ev.StepStart)} == {"outer"}
    assert ev.ToolCallResult(tool_call_id="outer_1", content="6 x 7 = 42") in seen


async def test_a_non_pydantic_ai_agent_is_refused() -> None:
    runner = PydanticAIRunner()
    with pytest.raises(TypeError, match="not a pydantic_ai agent"):
        await runner.run(CoreAgent("odd", runner, native=object()), Session("x"), QUESTION)


def test_an_unnamed_agent_cannot_be_registered() -> None:
    with pytest.raises(ValueError, match="give the pydantic_ai agent a name"):
        PydanticAIModule([Agent(FakeLLM().model())], runtime=Runtime(settings=Settings()))


# -- tracing ---------------------------------------------------------------------------------------
TOOL_RUN_TREE = [
    (
        "invoke_agent calc",
        [
            ("agent_step calc", [("chat fake-llm", []), ("execute_tool multiply", [])]),
            ("agent_step calc", [("chat fake-llm", [])]),
        ],
    )
]


def traced_setup(**kw: Any) -> Setup:
    return Setup(runtime=Runtime(settings=Settings(trace=TraceConfig(enabled=True))), **kw)


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_runs_produce_the_span_tree_in_both_modes(
    mode: str, captured_spans: CapturedSpans
) -> None:
    s = traced_setup()
    assert getattr(s.agent.runner, "is_tracing_runner", False)
    await s.go(mode)
    assert captured_spans.tree() == TOOL_RUN_TREE
    chat = captured_spans.by_name("chat fake-llm")[0]
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.request.model"] == "fake-llm"
    tool = captured_spans.by_name("execute_tool multiply")[0]
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"


@pytest.fixture
def pydantic_ai_spans() -> Iterator[tuple[InMemorySpanExporter, InstrumentationSettings]]:
    """Where Pydantic AI's own instrumentation goes (the global provider stays untouched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, InstrumentationSettings(tracer_provider=provider)
    Agent.instrument_all(False)
    provider.shutdown()


@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("how", ["agent.instrument", "Agent.instrument_all", "capability"])
async def test_pydantic_ais_own_spans_are_suppressed_in_traced_runs_only(
    mode: str,
    how: str,
    captured_spans: CapturedSpans,
    pydantic_ai_spans: tuple[InMemorySpanExporter, InstrumentationSettings],
) -> None:
    exporter, settings = pydantic_ai_spans
    kw: dict[str, Any] = {}
    if how == "capability":
        kw["capabilities"] = [Instrumentation(settings=settings)]
    untraced, traced = Setup(**kw), traced_setup(**kw)
    if how == "agent.instrument":
        untraced.native.instrument = traced.native.instrument = settings
    elif how == "Agent.instrument_all":
        Agent.instrument_all(settings)

    await untraced.go(mode)
    assert sorted(s.name for s in exporter.get_finished_spans()) == [
        "chat fake-llm",
        "chat fake-llm",
        "execute_tool multiply",
        "invoke_agent calc",
    ]
    exporter.clear()
    await traced.go(mode)
    assert exporter.get_finished_spans() == ()
    # Each model call and tool call appears exactly once: ours.
    assert captured_spans.tree() == TOOL_RUN_TREE


# -- packaging and the example ---------------------------------------------------------------
def test_runnertrace_imports_without_pydantic_ai() -> None:
    code = (
        "import sys, runnertrace, runnertrace.core, runnertrace.runners;"
        "assert 'pydantic_ai' not in sys.modules, 'pydantic_ai was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_without_pydantic_ai_the_runner_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "from runnertrace._internal.imports import MissingExtraError\n"
        "try:\n"
        "    import runnertrace.runners.pydantic_ai\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'runnertrace[pydantic-ai]'" in done.stdout


@pytest.mark.parametrize("traced", [False, True])
def test_the_example_runs_offline(traced: bool, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OPENAI_", "PYTEST_"))
    }
    if traced:
        env["RUNNERTRACE_TRACE__ENABLED"] = "true"
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # the per-user store of this test
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "pydantic_ai_agent.py"), "What is 6 times 7?"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "run:     The product is 42.",
        "stream:  [tool -> 42] The product is 42.",
        "context: {'multiplications': 2}",
    ]
    assert (tmp_path / "data" / "runnertrace" / "traces.db").exists() == traced
