"""MAFRunner through Agent Framework's real OpenAI clients, against a loopback server.

``OpenAIChatCompletionClient`` speaks Chat Completions; ``OpenAIChatClient`` speaks
the Responses API, which streams every text, reasoning and argument value twice:
as deltas, then whole again in a ``.done`` event (Agent Framework passes the
second on as a content with ``merge_mode="replace"``). Both clients run the same
script (reasoning and a tool call, then reasoning and the answer) against
``FakeOpenAIServer`` on 127.0.0.1, traced and untraced, in run and stream mode:
the streamed deltas must join to what run mode returns, and the spans must show
every value once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("agent_framework")
# ``agent_framework.openai`` always imports (it re-exports lazily); the clients
# live in the separate ``agent-framework-openai`` distribution.
pytest.importorskip("agent_framework_openai")

from agent_framework import Agent, Content, tool
from agent_framework.exceptions import ChatClientException
from agent_framework.openai import OpenAIChatClient, OpenAIChatCompletionClient
from openai import AsyncOpenAI, InternalServerError
from tests.fake_openai_server import FakeOpenAIServer, FakeToolCall, Reply

from runnertrace.core import Runtime, observing
from runnertrace.core import events as ev
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import MAFModule
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import Settings, TraceConfig

QUESTION = [AgentRequestText(prompt="What is the weather in Paris?")]
ARGUMENTS = {"city": "Paris"}
ANSWER = "Paris is sunny, 21C. Enjoy the walk along the Seine."
FIRST_THOUGHT = "The user wants the weather; ask the tool."
SECOND_THOUGHT = "The tool answered; say it plainly."


@tool
def weather(city: str) -> str:
    """The current weather in a city."""
    return f"{city}: sunny, 21C"


def script() -> list[Reply]:
    return [
        Reply(reasoning=FIRST_THOUGHT, tool_calls=[FakeToolCall("call_1", "weather", ARGUMENTS)]),
        Reply(reasoning=SECOND_THOUGHT, text=ANSWER, prompt_tokens=20, completion_tokens=9),
    ]


def reasoning_content(delta: Any, contents: list[Content]) -> list[Content]:
    """Agent Framework's parser hook for Chat Completions: the server's
    ``reasoning_content`` field (a common OpenAI-compatible extension) as reasoning."""
    thought = getattr(delta, "reasoning_content", None) or (delta.model_extra or {}).get(
        "reasoning_content"
    )
    return [Content.from_text_reasoning(text=thought), *contents] if thought else contents


def chat_completions(server: FakeOpenAIServer) -> Any:
    openai = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    return OpenAIChatCompletionClient(
        model=server.model, async_client=openai, response_parser=reasoning_content
    )


def responses(server: FakeOpenAIServer) -> Any:
    openai = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    return OpenAIChatClient(model=server.model, async_client=openai)


CLIENTS: dict[str, tuple[Callable[[FakeOpenAIServer], Any], str]] = {
    "chat_completions": (chat_completions, "/v1/chat/completions"),
    "responses": (responses, "/v1/responses"),
}


class Setup:
    """A runtime with a weather agent over one of the OpenAI clients, on a fresh server."""

    def __init__(self, client: str, *, traced: bool, replies: list[Reply] | None = None) -> None:
        make_client, self.path = CLIENTS[client]
        self.server = FakeOpenAIServer(script() if replies is None else replies)
        native = Agent(
            make_client(self.server), "Answer briefly.", name="forecaster", tools=[weather]
        )
        self.runtime = Runtime(
            settings=Settings(trace=TraceConfig(enabled=traced, capture_content=True))
        )
        MAFModule([native], runtime=self.runtime)
        self.agent = self.runtime.agents().get("forecaster")

    async def run(self) -> tuple[str, list[ev.StreamEvent]]:
        seen: list[ev.StreamEvent] = []
        with self.server, observing(seen.append):
            reply = await self.runtime.run(self.agent, self.runtime.sessions().new("s1"), QUESTION)
        return str(reply), seen

    async def stream(self) -> list[ev.StreamEvent]:
        with self.server:
            chunks = self.runtime.stream(self.agent, self.runtime.sessions().new("s1"), QUESTION)
            return [c.event async for c in chunks if c.event is not None]


def joined(events: list[ev.StreamEvent], kind: type[Any]) -> str:
    return "".join(e.delta for e in events if isinstance(e, kind))


def arguments_by_call(events: list[ev.StreamEvent]) -> dict[str, str]:
    calls: dict[str, str] = {}
    for e in events:
        if isinstance(e, ev.ToolCallArgs):
            calls[e.tool_call_id] = calls.get(e.tool_call_id, "") + e.delta
    return calls


def attribute(span: Any, key: str) -> Any:
    return (span.attributes or {}).get(key)


def output_messages(span: Any) -> Any:
    return json.loads(attribute(span, "gen_ai.output.messages"))


def text_of(messages: Any) -> str:
    return "".join(p["content"] for m in messages for p in m["parts"] if p["type"] == "text")


@pytest.fixture(params=sorted(CLIENTS))
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- events ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
async def test_the_streamed_deltas_join_to_the_run_reply_and_each_value_comes_once(
    client: str,
    traced: bool,
    captured_spans: CapturedSpans,  # keeps traced runs in memory
) -> None:
    run = Setup(client, traced=traced)
    reply, run_events = await run.run()
    stream = Setup(client, traced=traced)
    stream_events = await stream.stream()

    assert reply == ANSWER
    assert joined(stream_events, ev.TextDelta) == reply
    assert joined(stream_events, ev.ReasoningDelta) == FIRST_THOUGHT + SECOND_THOUGHT
    assert arguments_by_call(stream_events) == {"call_1": json.dumps(ARGUMENTS)}
    if traced:  # the tracer takes a traced run's events: the spans test covers them
        assert run_events == []
    else:  # run mode reports the same values, once
        assert joined(run_events, ev.TextDelta) == reply
        assert joined(run_events, ev.ReasoningDelta) == FIRST_THOUGHT + SECOND_THOUGHT
        assert arguments_by_call(run_events) == arguments_by_call(stream_events)
    # the server really was spoken to in the client's own API, streaming only when asked
    assert stream.server.paths == run.server.paths == [run.path] * 2
    assert [bool(r.get("stream")) for r in run.server.requests] == [False, False]
    assert [bool(r.get("stream")) for r in stream.server.requests] == [True, True]


async def test_a_stream_reports_its_usage_and_response_once_per_model_call(client: str) -> None:
    events = await Setup(client, traced=False).stream()
    ends = [e for e in events if isinstance(e, ev.MessageEnd)]
    assert [(e.input_tokens, e.output_tokens) for e in ends] == [(11, 7), (20, 9)]
    assert [e.finish_reason for e in ends] == ["tool_calls", "stop"]
    results = [e for e in events if isinstance(e, ev.ToolCallResult)]
    assert [(r.tool_call_id, r.content) for r in results] == [("call_1", "Paris: sunny, 21C")]


# -- spans ----------------------------------------------------------------------------------------
def spans_of(captured: CapturedSpans) -> tuple[Any, list[Any], Any]:
    (run_span,) = captured.by_name("invoke_agent forecaster")
    chats = sorted(
        captured.by_name(f"chat {FakeOpenAIServer.model}"), key=lambda s: s.start_time or 0
    )
    (tool_span,) = captured.by_name("execute_tool weather")
    return run_span, chats, tool_span


async def traced_spans(client: str, mode: str, captured: CapturedSpans) -> tuple[Any, ...]:
    captured.clear()
    s = Setup(client, traced=True)
    if mode == "run":
        await s.run()
    else:
        await s.stream()
    return spans_of(captured)


async def test_the_spans_show_each_value_once_and_match_across_modes(
    client: str, captured_spans: CapturedSpans
) -> None:
    run_spans = await traced_spans(client, "run", captured_spans)
    stream_spans = await traced_spans(client, "stream", captured_spans)
    for run_span, chats, tool_span in (run_spans, stream_spans):
        assert attribute(tool_span, "gen_ai.tool.call.arguments") == json.dumps(ARGUMENTS)
        assert text_of(output_messages(run_span)) == ANSWER
        assert [text_of(output_messages(chat)) for chat in chats] == ["", ANSWER]
        (call_part,) = [
            p for p in output_messages(chats[0])[0]["parts"] if p["type"] != "reasoning"
        ]
        assert call_part["arguments"] == ARGUMENTS
    (run_span, run_chats, _), (stream_span, stream_chats, _) = run_spans, stream_spans
    assert output_messages(stream_span) == output_messages(run_span)
    assert [output_messages(c) for c in stream_chats] == [output_messages(c) for c in run_chats]


# -- failures -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_an_http_500_fails_the_run_with_the_clients_error_and_ends_the_chat_span(
    client: str, mode: str, captured_spans: CapturedSpans
) -> None:
    s = Setup(client, traced=True, replies=[Reply(status=500, text="the model is down")])
    with pytest.raises(ChatClientException, match="Error code: 500") as raised:
        await (s.run() if mode == "run" else s.stream())
    # Agent Framework's own error, unchanged: the SDK's error stays its cause
    assert isinstance(raised.value.__cause__, InternalServerError)
    (chat,) = captured_spans.by_name(f"chat {FakeOpenAIServer.model}")
    assert chat.status.status_code.name == "ERROR"
    assert "the model is down" in (chat.status.description or "")
    assert s.server.paths == [s.path]
