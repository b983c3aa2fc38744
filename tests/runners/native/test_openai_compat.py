"""OpenAICompatibleLlm against a real HTTP server on 127.0.0.1 speaking the OpenAI protocol."""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("openai", reason="needs the openai extra: pip install -e '.[dev,openai]'")

import json
import sys
from typing import Any

import openai
from pydantic import BaseModel
from tests.fake_openai_server import FakeOpenAIServer, FakeToolCall, Reply

from runnertrace._internal.imports import MissingExtraError
from runnertrace.core import Runtime, Session
from runnertrace.core import events as ev
from runnertrace.core.models import AgentReplyAny, AgentRequestText
from runnertrace.runners.native import (
    Agent,
    LlmRequest,
    LlmResponse,
    Message,
    NativeModule,
    calculator,
)
from runnertrace.runners.native.openai_compat import OpenAICompatibleLlm
from runnertrace.runners.native.types import ReasoningPart, TextPart, ToolCallPart
from runnertrace.tracing.config import Settings

QUESTION = "What is 1234 * 5678, plus 17?"


def two_step_script() -> list[Reply]:
    return [
        Reply(tool_calls=[FakeToolCall("call_1", "calculator", {"expression": "1234 * 5678"})]),
        Reply(
            tool_calls=[FakeToolCall("call_2", "calculator", {"expression": "7006652 + 17"})],
            prompt_tokens=40,
            completion_tokens=9,
        ),
        Reply(text="The answer is 7006669.", prompt_tokens=60, completion_tokens=6),
    ]


def llm_for(server: FakeOpenAIServer, **kwargs: Any) -> OpenAICompatibleLlm:
    return OpenAICompatibleLlm(server.model, base_url=server.base_url, api_key="sk-test", **kwargs)


def make_runtime(llm: OpenAICompatibleLlm, **agent_kwargs: Any) -> tuple[Runtime, Any]:
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    native = Agent(llm, tools=[calculator], instructions="Use the calculator.", name="calc")
    for key, value in agent_kwargs.items():
        setattr(native, key, value)
    module = NativeModule([native], runtime=runtime)
    return runtime, module.get(native)


def assert_tool_history(server: FakeOpenAIServer) -> None:
    """The second and third requests carry the assistant tool calls and the tool results."""
    first, second, third = server.requests
    assert first["tools"] == [calculator.definition()]
    assert first["tool_choice"] == "auto"
    assert first["messages"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": QUESTION},
    ]
    assistant, tool = second["messages"][2:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "1234 * 5678"}'},
        }
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "7006652"}
    assert third["messages"][-1] == {"role": "tool", "tool_call_id": "call_2", "content": "7006669"}
    assert [m["role"] for m in third["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]


async def test_run_mode_two_step_tool_use() -> None:
    with FakeOpenAIServer(two_step_script()) as server:
        runtime, agent = make_runtime(llm_for(server))
        reply = await runtime.run(agent, Session("s1"), [AgentRequestText(prompt=QUESTION)])
    assert str(reply) == "The answer is 7006669."
    assert server.paths == ["/v1/chat/completions"] * 3
    assert all(not r.get("stream") for r in server.requests)
    assert all(r["model"] == "fake-model-1" for r in server.requests)
    assert_tool_history(server)


async def test_stream_mode_two_step_tool_use() -> None:
    with FakeOpenAIServer(two_step_script()) as server:
        runtime, agent = make_runtime(llm_for(server))
        chunks = [
            c
            async for c in runtime.stream(agent, Session("s1"), [AgentRequestText(prompt=QUESTION)])
        ]
    events = [c.event for c in chunks if c.event is not None]
    assert chunks[-1].done
    assert all(r["stream"] is True for r in server.requests)
    assert all(r["stream_options"] == {"include_usage": True} for r in server.requests)
    assert_tool_history(server)

    starts = [e for e in events if isinstance(e, ev.ToolCallStart)]
    assert [(s.tool_call_id, s.tool_name) for s in starts] == [
        ("call_1", "calculator"),
        ("call_2", "calculator"),
    ]
    for call_id, expression in (("call_1", "1234 * 5678"), ("call_2", "7006652 + 17")):
        pieces = [
            e.delta for e in events if isinstance(e, ev.ToolCallArgs) and e.tool_call_id == call_id
        ]
        assert len(pieces) > 1  # the server split the arguments; they arrive as deltas
        assert json.loads("".join(pieces)) == {"expression": expression}
    results = [e for e in events if isinstance(e, ev.ToolCallResult)]
    assert [(r.tool_call_id, r.content, r.is_error) for r in results] == [
        ("call_1", "7006652", False),
        ("call_2", "7006669", False),
    ]
    text = "".join(c.delta for c in chunks if c.delta)
    assert text == "The answer is 7006669."
    assert len([c for c in chunks if c.delta]) > 1
    ends = [e for e in events if isinstance(e, ev.MessageEnd)]
    assert [(e.input_tokens, e.output_tokens) for e in ends] == [(11, 7), (40, 9), (60, 6)]
    assert [e.finish_reason for e in ends] == ["tool_calls", "tool_calls", "stop"]
    assert [e.response_id for e in ends] == ["chatcmpl-1", "chatcmpl-2", "chatcmpl-3"]
    assert all(e.response_model == "fake-model-1" for e in ends)


def request_for(text: str) -> LlmRequest:
    return LlmRequest(instructions=[], contents=[Message("user", text)], tools=[calculator])


async def test_stream_parts_accumulate_arguments_reasoning_and_usage() -> None:
    calls = [
        FakeToolCall("call_a", "calculator", {"expression": "2 + 2"}),
        FakeToolCall("call_b", "calculator", {"expression": "3 * 3"}),
    ]
    script = [Reply(text="Let me", reasoning="thinking hard", tool_calls=calls, chunk_size=2)]
    with FakeOpenAIServer(script) as server:
        parts = [p async for p in llm_for(server).stream(request_for("go"))]
    response = parts[-1]
    assert isinstance(response, LlmResponse)
    assert "".join(p.delta for p in parts if isinstance(p, ReasoningPart)) == "thinking hard"
    assert "".join(p.delta for p in parts if isinstance(p, TextPart)) == "Let me"
    call_parts = [p for p in parts if isinstance(p, ToolCallPart)]
    for index, call in enumerate(calls):
        mine = [p for p in call_parts if p.index == index]
        assert (mine[0].id, mine[0].name) == (call.id, call.name)
        assert all(p.id is None and p.name is None for p in mine[1:])
        assert json.loads("".join(p.args_delta for p in mine)) == call.arguments
    assert [(c.tool_call_id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "calculator", {"expression": "2 + 2"}),
        ("call_b", "calculator", {"expression": "3 * 3"}),
    ]
    assert response.text == "Let me"
    assert response.reasoning == "thinking hard"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (11, 7)
    assert response.finish_reason == "tool_calls"
    assert response.response_id == "chatcmpl-1"


async def test_generate_reads_reasoning_usage_and_ids() -> None:
    script = [Reply(text="Hello.", reasoning="be polite", prompt_tokens=5, completion_tokens=2)]
    with FakeOpenAIServer(script) as server:
        response = await llm_for(server).generate(request_for("hi"))
    assert response.text == "Hello."
    assert response.reasoning == "be polite"
    assert response.tool_calls == []
    assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 2)
    assert (response.finish_reason, response.model, response.response_id) == (
        "stop",
        "fake-model-1",
        "chatcmpl-1",
    )


async def test_reasoning_reaches_the_event_stream() -> None:
    script = [Reply(text="Done.", reasoning="step by step")]
    with FakeOpenAIServer(script) as server:
        native = Agent(llm_for(server), name="thinker")
        events = [e async for e in native.stream("hi")]
    types = [e.type for e in events]
    assert types.index("reasoning_start") < types.index("reasoning_end") < types.index("text_delta")
    thought = "".join(e.delta for e in events if isinstance(e, ev.ReasoningDelta))
    assert thought == "step by step"
    assert "tools" not in server.requests[0]


class Answer(BaseModel):
    value: int
    explanation: str


async def test_structured_output_sends_json_schema_and_parses_reply() -> None:
    answer = {"value": 42, "explanation": "six times seven"}
    with FakeOpenAIServer([Reply(text=json.dumps(answer))]) as server:
        runtime = Runtime(settings=Settings(trace={"enabled": False}))
        native = Agent(llm_for(server), output_type=Answer, name="structured")
        agent = NativeModule([native], runtime=runtime).get(native)
        reply = await runtime.run(agent, Session("s"), [AgentRequestText(prompt="6*7?")])
    assert isinstance(reply, AgentReplyAny)
    assert reply.content == answer
    response_format = server.requests[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "Answer"
    assert response_format["json_schema"]["schema"] == Answer.model_json_schema()


async def test_request_kwargs_reach_the_server_and_owned_keys_are_rejected() -> None:
    with FakeOpenAIServer([Reply(text="ok")]) as server:
        await llm_for(server, temperature=0.25, tool_choice="required").generate(request_for("x"))
    assert server.requests[0]["temperature"] == 0.25
    assert server.requests[0]["tool_choice"] == "required"
    with pytest.raises(ValueError, match="messages"):
        OpenAICompatibleLlm("m", messages=[])


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("arguments", "quoted"),
    [({"expr": "1 + 1"}, "expr"), ('{"expression": "1 +', '{"expression": "1 +')],
    ids=["wrong-name", "malformed-json"],
)
async def test_bad_tool_arguments_become_an_error_result(
    streaming: bool, arguments: dict[str, Any] | str, quoted: str
) -> None:
    script = [
        Reply(tool_calls=[FakeToolCall("call_x", "calculator", arguments)]),
        Reply(text="Sorry, my arguments were wrong."),
    ]
    with FakeOpenAIServer(script) as server:
        native = Agent(llm_for(server), tools=[calculator])
        if streaming:
            events = [e async for e in native.stream("1 + 1")]
            result = next(e for e in events if isinstance(e, ev.ToolCallResult))
            assert result.is_error
        else:
            output = (await native.run("1 + 1")).output
            assert output == "Sorry, my arguments were wrong."
    tool_message = server.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "call_x"
    assert "invalid arguments for tool 'calculator'" in tool_message["content"]
    assert quoted in tool_message["content"]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_http_500_propagates(mode: str) -> None:
    with FakeOpenAIServer([Reply(status=500, text="model exploded")]) as server:
        runtime, agent = make_runtime(llm_for(server))
        session = Session("boom")
        with pytest.raises(openai.InternalServerError, match="model exploded"):
            if mode == "run":
                await runtime.run(agent, session, [AgentRequestText(prompt=QUESTION)])
            else:
                async for _ in runtime.stream(agent, session, [AgentRequestText(prompt=QUESTION)]):
                    pass
    assert len(server.requests) == 1
    assert session.get("native") is None  # a failed run stores no history


def test_missing_openai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    llm = OpenAICompatibleLlm("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(MissingExtraError, match=r"runnertrace\[openai\]"):
        _ = llm.client
