"""The native agent loop and NativeRunner, driven offline by ScriptedLlm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from runnertrace.core import Runtime, Session, observing
from runnertrace.core import events as ev
from runnertrace.core.models import AgentReplyAny, AgentReplyText, AgentRequestText
from runnertrace.runners.native import (
    Agent,
    ExecutionContext,
    LlmResponse,
    Message,
    NativeModule,
    ScriptedLlm,
    ToolCall,
    ToolResult,
    calculator,
    tool,
)
from runnertrace.runners.native.types import ReasoningPart
from runnertrace.tracing.config import Settings

QUESTION = "What is 1234 * 5678, plus 17?"


def new_runtime() -> Runtime:
    return Runtime(settings=Settings(trace={"enabled": False}))


def calls(*names: str) -> LlmResponse:
    return LlmResponse(
        content=[ToolCall(f"call_{i}_{n}", n, {}) for i, n in enumerate(names)],
        finish_reason="tool_calls",
    )


def contents_of(llm: ScriptedLlm, index: int) -> list[Any]:
    return llm.requests[index].contents


# -- the loop ---------------------------------------------------------------------------
async def test_tool_loop_two_steps_to_the_answer() -> None:
    llm = ScriptedLlm()
    agent = Agent(llm, tools=[calculator])
    result = await agent.run(QUESTION)
    assert result.output == "The answer is 7006669."
    assert result.stop_reason == "final"
    assert result.context.current_step == 3
    assert len(llm.requests) == 3
    first, second = (
        [c for c in contents_of(llm, i) if isinstance(c, ToolCall)][-1] for i in (1, 2)
    )
    assert (first.name, first.arguments) == ("calculator", {"expression": "1234 * 5678"})
    assert second.arguments == {"expression": "7006652 + 17"}
    results = [c for c in contents_of(llm, 2) if isinstance(c, ToolResult)]
    assert [(r.status, r.text) for r in results] == [("success", "7006652"), ("success", "7006669")]
    # the model saw the tool definition
    assert [t.name for t in llm.requests[0].tools] == ["calculator"]
    assert llm.requests[0].tool_choice == "auto"


@pytest.mark.parametrize("max_steps", [1, 3])
async def test_max_steps_stops_a_looping_model(max_steps: int) -> None:
    @tool
    def ping() -> str:
        """Always answers pong."""
        return "pong"

    llm = ScriptedLlm(turns=[calls("ping")] * 10)
    result = await Agent(llm, tools=[ping], max_steps=max_steps).run("loop forever")
    assert result.output is None
    assert result.stop_reason == "max_steps"
    assert len(llm.requests) == max_steps
    assert result.context.current_step == max_steps


async def test_max_steps_through_the_runner_and_run_option() -> None:
    llm = ScriptedLlm(turns=[calls("calculator")] * 10)
    runtime = new_runtime()
    native = Agent(llm, tools=[calculator], max_steps=4, name="looper")
    module = NativeModule([native], runtime=runtime)
    reply = await runtime.run(module.get(native), Session("a"), [AgentRequestText(prompt="x")])
    assert str(reply) == "Stopped after 4 steps without a final answer."
    assert len(llm.requests) == 4
    module.run_options(native, max_steps=2)
    reply = await runtime.run(module.get(native), Session("b"), [AgentRequestText(prompt="x")])
    assert str(reply) == "Stopped after 2 steps without a final answer."
    assert len(llm.requests) == 6


async def test_tool_that_raises_becomes_an_error_result_the_model_sees() -> None:
    @tool
    def explode(reason: str) -> str:
        """Fails on purpose."""
        raise ValueError(f"boom: {reason}")

    turns = [
        LlmResponse(content=[ToolCall("c1", "explode", {"reason": "test"})]),
        "I saw the error.",
    ]
    llm = ScriptedLlm(turns=turns)
    agent = Agent(llm, tools=[explode])
    events = [e async for e in agent.stream("go")]
    result = next(e for e in events if isinstance(e, ev.ToolCallResult))
    assert (result.tool_call_id, result.is_error) == ("c1", True)
    assert result.content == "ValueError: boom: test"
    seen = [c for c in contents_of(llm, 1) if isinstance(c, ToolResult)]
    assert [(r.tool_call_id, r.status, r.text) for r in seen] == [
        ("c1", "error", "ValueError: boom: test")
    ]
    assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)).endswith("error.")


async def test_unknown_tool_is_an_error_result_not_a_crash() -> None:
    llm = ScriptedLlm(turns=[calls("teleport", "calculator"), "Recovered."])
    result = await Agent(llm, tools=[calculator]).run("go")
    assert result.output == "Recovered."
    seen = [c for c in contents_of(llm, 1) if isinstance(c, ToolResult)]
    assert seen[0].status == "error"
    assert "'teleport' not found" in seen[0].text and "calculator" in seen[0].text
    # the other call in the same turn still ran (and failed on its own missing argument)
    assert seen[1].name == "calculator" and "invalid arguments" in seen[1].text


class Answer(BaseModel):
    value: int
    explanation: str


async def test_structured_output_is_a_pydantic_model() -> None:
    llm = ScriptedLlm()
    result = await Agent(llm, tools=[calculator], output_type=Answer).run(QUESTION)
    assert isinstance(result.output, Answer)
    assert result.output.value == 7006669
    assert llm.requests[0].output_schema == Answer.model_json_schema()


async def test_structured_output_parse_error_is_fed_back() -> None:
    llm = ScriptedLlm(turns=["not json", '{"value": 3, "explanation": "fixed"}'])
    result = await Agent(llm, output_type=Answer).run("answer")
    assert result.output == Answer(value=3, explanation="fixed")
    feedback = contents_of(llm, 1)[-1]
    assert isinstance(feedback, Message) and "did not match the required output schema" in (
        feedback.content
    )


async def test_structured_output_becomes_agent_reply_any() -> None:
    runtime = new_runtime()
    native = Agent(ScriptedLlm(), tools=[calculator], output_type=Answer, name="structured")
    agent = NativeModule([native], runtime=runtime).get(native)
    reply = await runtime.run(agent, Session("s"), [AgentRequestText(prompt=QUESTION)])
    assert isinstance(reply, AgentReplyAny)
    assert reply.content == {"value": 7006669, "explanation": "The answer is 7006669."}
    assert reply.prompt == QUESTION


# -- stream pairing ---------------------------------------------------------------------
def check_pairing(events: Sequence[ev.StreamEvent]) -> None:
    """Every start has its end, with matching ids, in order; nothing outside its parent."""
    step: tuple[str, int | None] | None = None
    message: str | None = None
    reasoning: str | None = None
    calls_open: dict[str, str] = {}  # call id -> "args" | "ended"
    results: set[str] = set()
    for e in events:
        if isinstance(e, ev.StepStart):
            assert step is None, "nested step"
            step = (e.step_name, e.step_index)
        elif isinstance(e, ev.StepEnd):
            assert step == (e.step_name, e.step_index), "step end does not match its start"
            assert message is None and reasoning is None, "step ended inside a message"
            assert all(c in results for c in calls_open), "step ended before a tool result"
            step, calls_open, results = None, {}, set()
        else:
            assert step is not None, f"{e.type} outside a step"
        if isinstance(e, ev.MessageStart):
            assert message is None
            message = e.message_id
        elif isinstance(e, ev.TextDelta):
            assert e.message_id == message, "text outside its message"
        elif isinstance(e, ev.MessageEnd):
            assert e.message_id == message and reasoning is None
            assert all(s == "ended" for s in calls_open.values()), "tool call not ended"
            message = None
        elif isinstance(e, ev.ReasoningStart):
            assert message is not None and reasoning is None
            reasoning = e.message_id
        elif isinstance(e, ev.ReasoningDelta):
            assert e.message_id == reasoning
        elif isinstance(e, ev.ReasoningEnd):
            assert e.message_id == reasoning
            reasoning = None
        elif isinstance(e, ev.ToolCallStart):
            assert e.parent_message_id == message and e.tool_call_id not in calls_open
            calls_open[e.tool_call_id] = "args"
        elif isinstance(e, ev.ToolCallArgs):
            assert calls_open.get(e.tool_call_id) == "args"
        elif isinstance(e, ev.ToolCallEnd):
            assert calls_open.get(e.tool_call_id) == "args"
            calls_open[e.tool_call_id] = "ended"
        elif isinstance(e, ev.ToolCallResult):
            assert calls_open.get(e.tool_call_id) == "ended" and message is None
            results.add(e.tool_call_id)
    assert step is None and message is None and reasoning is None


def test_pairing_checker_catches_broken_streams() -> None:
    good = [
        ev.StepStart(step_name="a", step_index=0),
        ev.MessageStart(message_id="m"),
        ev.TextDelta(message_id="m", delta="x"),
        ev.ToolCallStart(tool_call_id="c", tool_name="t", parent_message_id="m"),
        ev.ToolCallEnd(tool_call_id="c"),
        ev.MessageEnd(message_id="m"),
        ev.ToolCallResult(tool_call_id="c", content="r"),
        ev.StepEnd(step_name="a", step_index=0),
    ]
    check_pairing(good)
    broken = [
        good[:5] + good[6:],  # no MessageEnd
        good[:4] + good[5:],  # no ToolCallEnd
        [*good[:2], ev.TextDelta(message_id="other", delta="x"), *good[3:]],
        [*good[:-1], ev.StepEnd(step_name="a", step_index=1)],
        good[:6] + good[7:],  # no tool result
    ]
    for events in broken:
        with pytest.raises(AssertionError):
            check_pairing(events)


async def test_stream_pairs_steps_messages_text_and_tool_calls() -> None:
    agent = Agent(ScriptedLlm(), tools=[calculator], name="calc")
    events = [e async for e in agent.stream(QUESTION)]
    check_pairing(events)
    types = [e.type for e in events]
    assert types.count("step_start") == types.count("step_end") == 3
    assert types.count("message_start") == types.count("message_end") == 3
    assert types.count("tool_call_start") == types.count("tool_call_end") == 2
    assert types.count("tool_call_result") == 2
    assert types.count("tool_call_args") >= 4  # ScriptedLlm splits arguments in two
    assert [e.step_index for e in events if isinstance(e, ev.StepStart)] == [0, 1, 2]
    assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)) == (
        "The answer is 7006669."
    )
    assert types.count("text_delta") > 1
    for start in (e for e in events if isinstance(e, ev.ToolCallStart)):
        args = "".join(
            e.delta
            for e in events
            if isinstance(e, ev.ToolCallArgs) and e.tool_call_id == start.tool_call_id
        )
        assert '"expression"' in args
    last_end = [e for e in events if isinstance(e, ev.MessageEnd)][-1]
    assert last_end.finish_reason == "stop" and last_end.input_tokens and last_end.output_tokens


class ReasoningLlm(ScriptedLlm):
    """Streams reasoning before the scripted answer."""

    async def stream(self, request: Any) -> Any:
        yield ReasoningPart("let me ")
        yield ReasoningPart("think")
        async for part in super().stream(request):
            yield part


async def test_stream_pairs_reasoning_blocks() -> None:
    llm = ReasoningLlm(turns=[LlmResponse(content=[ToolCall("c", "calculator", {})]), "ok"])
    events = [e async for e in Agent(llm, tools=[calculator]).stream("go")]
    check_pairing(events)
    types = [e.type for e in events]
    assert types.count("reasoning_start") == types.count("reasoning_end") == 2
    assert types[2:6] == ["reasoning_start", "reasoning_delta", "reasoning_delta", "reasoning_end"]


# -- run mode reports what stream mode yields -----------------------------------------------
def runtime_with(llm: ScriptedLlm, tools: list[Any] | None = None) -> tuple[Runtime, Any]:
    runtime = new_runtime()
    native = Agent(llm, tools=tools if tools is not None else [calculator], name="calc")
    return runtime, NativeModule([native], runtime=runtime).get(native)


DELTAS = ("text_delta", "reasoning_delta", "tool_call_args")


def shape(events: Sequence[ev.StreamEvent]) -> list[tuple[str, Any]]:
    """Event types with their id-free payload, consecutive deltas joined.

    Run mode gets each whole response at once, so its deltas are one chunk per
    message or call; stream mode splits them. Everything else must be identical.
    """
    keep = ("content", "tool_name", "step_index", "finish_reason", "is_error", "input_tokens")
    out: list[tuple[str, Any]] = []
    for e in events:
        if e.type in DELTAS and out and out[-1][0] == e.type:
            out[-1] = (e.type, out[-1][1] + e.delta)  # type: ignore[union-attr]
        elif e.type in DELTAS:
            out.append((e.type, e.delta))  # type: ignore[union-attr]
        else:
            out.append((e.type, tuple(getattr(e, k, None) for k in keep)))
    return out


async def test_run_mode_reports_the_same_events_as_stream_yields() -> None:
    requests = [AgentRequestText(prompt=QUESTION)]
    runtime, agent = runtime_with(ScriptedLlm())
    streamed = [
        c.event async for c in runtime.stream(agent, Session("s"), requests) if c.event is not None
    ]
    runtime, agent = runtime_with(ScriptedLlm())
    reported: list[ev.StreamEvent] = []
    with observing(reported.append):
        reply = await runtime.run(agent, Session("s"), requests)
    assert str(reply) == "The answer is 7006669."
    assert len(streamed) > 20
    assert shape(reported) == shape(streamed)
    check_pairing(reported)


async def test_stream_mode_reports_each_event_it_yields_as_it_makes_it() -> None:
    reported: list[ev.StreamEvent] = []
    runtime, agent = runtime_with(ScriptedLlm())
    streamed = []
    with observing(reported.append):
        async for chunk in runtime.stream(agent, Session("s"), [AgentRequestText(prompt=QUESTION)]):
            # reported before it reaches us: the observer is never behind the consumer
            if chunk.event is not None:
                assert any(e is chunk.event for e in reported)
            streamed.append(chunk.event)
    assert len(reported) > 20
    assert [e for e in streamed if e is not None] == reported


@pytest.mark.parametrize("outer_mode", ["run", "stream"])
async def test_nested_untraced_run_inside_a_tool_does_not_leak(outer_mode: str) -> None:
    inner_runtime, inner_agent = runtime_with(ScriptedLlm(), tools=[calculator])
    inner_replies: list[str] = []

    @tool
    async def ask_helper(question: str) -> str:
        """Ask another agent."""
        reply = await inner_runtime.run(
            inner_agent, Session("inner"), [AgentRequestText(prompt=question)]
        )
        inner_replies.append(str(reply))
        return str(reply)

    turns = [LlmResponse(content=[ToolCall("outer_call", "ask_helper", {"question": QUESTION})])]
    runtime, agent = runtime_with(ScriptedLlm(turns=[*turns, "Helper says 7006669."]), [ask_helper])
    reported: list[ev.StreamEvent] = []
    streamed: list[ev.StreamEvent] = []
    with observing(reported.append):
        if outer_mode == "run":
            await runtime.run(agent, Session("outer"), [AgentRequestText(prompt="delegate")])
        else:
            async for c in runtime.stream(
                agent, Session("outer"), [AgentRequestText(prompt="delegate")]
            ):
                if c.event is not None:
                    streamed.append(c.event)
    assert inner_replies == ["The answer is 7006669."]
    outer = reported if outer_mode == "run" else streamed
    if outer_mode == "stream":
        assert reported == streamed  # reported as made, and nothing of the inner run
    # only the outer agent's two steps: the inner run's three steps and its calculator
    # calls never reach the outer observer or stream
    assert [e.type for e in outer].count("step_start") == 2
    tool_names = [e.tool_name for e in outer if isinstance(e, ev.ToolCallStart)]
    assert tool_names == ["ask_helper"]
    check_pairing(outer)


# -- tools ------------------------------------------------------------------------------
def test_tool_schema_from_type_hints_and_docstring() -> None:
    @tool
    def search(
        query: str, limit: int = 5, tags: list[str] | None = None, *, ctx: ExecutionContext
    ) -> str:
        """Search the catalogue for items.

        Longer explanation that is not part of the description.

        Args:
            query: What to look for.
            limit: How many results
                to return at most.
            tags: Only items with these tags.

        Returns:
            The matches, one per line.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the catalogue for items."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {
                "type": "integer",
                "default": 5,
                "description": "How many results to return at most.",
            },
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
                "description": "Only items with these tags.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert search.definition() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the catalogue for items.",
            "parameters": search.parameters,
        },
    }


async def test_tool_validates_arguments_and_injects_the_context() -> None:
    @tool(name="add_up", description="Adds.")
    def add(a: int, b: int, context: ExecutionContext) -> int:
        context.state["added"] = a + b
        return a + b

    context = ExecutionContext()
    assert add.name == "add_up" and add.description == "Adds."
    assert "context" not in add.parameters["properties"]
    assert await add(context, a=2, b="3") == 5
    assert context.state["added"] == 5
    with pytest.raises(ValueError, match="invalid arguments for tool 'add_up'"):
        await add(context, a=2)


# -- sessions ---------------------------------------------------------------------------
async def test_session_history_persists_across_runs() -> None:
    llm = ScriptedLlm()
    runtime, agent = runtime_with(llm)
    session = Session("conv")
    first = await runtime.run(agent, session, [AgentRequestText(prompt=QUESTION)])
    second = await runtime.run(agent, session, [AgentRequestText(prompt="thanks")])
    assert isinstance(second, AgentReplyText)
    assert str(first) == "The answer is 7006669."
    assert second.text == 'I am a scripted offline model. You said: "thanks"'
    history = llm.requests[-1].contents
    user_turns = [c.content for c in history if isinstance(c, Message) and c.role == "user"]
    assert user_turns == [QUESTION, "thanks"]
    assert any(isinstance(c, Message) and c.content == str(first) for c in history)
    # a different session starts empty
    await runtime.run(agent, Session("fresh"), [AgentRequestText(prompt="hi")])
    assert [type(c) for c in llm.requests[-1].contents] == [Message]
