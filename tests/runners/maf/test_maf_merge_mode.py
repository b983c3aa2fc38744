"""MAFRunner honours Agent Framework's replace mode when it maps a model stream.

Agent Framework clients may send a value whole after its deltas
(``Content.merge_mode="replace"``; the Responses client does it for every text,
reasoning and argument value) or send a whole message as one update
(``ChatResponseUpdate.merge_mode="replace"``). Agent Framework merges both in
``ChatResponse.from_updates``, which is what run mode returns here
(``ScriptedChatClient`` builds its non-streamed response with it), so each
scripted stream is checked against Agent Framework's own merge of the same
updates. The real OpenAI clients are driven in ``test_maf_openai_clients.py``.
"""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("agent_framework")

from agent_framework import Agent, ChatResponseUpdate, Content, tool

from runnertrace.core import Runtime, observing
from runnertrace.core import events as ev
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.maf import MAFModule
from runnertrace.runners.maf.testing import ScriptedChatClient, Turn, say
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import Settings, TraceConfig

QUESTION = [AgentRequestText(prompt="Weather in Paris?")]
ARGUMENTS = json.dumps({"city": "Paris"})


@tool
def weather(city: str) -> str:
    """The current weather in a city."""
    return f"{city}: sunny"


def update(*contents: Content, replace: bool = False) -> ChatResponseUpdate:
    return ChatResponseUpdate(
        role="assistant", contents=list(contents), merge_mode="replace" if replace else None
    )


def text(value: str, *, replace: bool = False) -> ChatResponseUpdate:
    return update(Content.from_text(value, merge_mode="replace" if replace else "append"))


def thought(value: str, *, replace: bool = False) -> ChatResponseUpdate:
    mode = "replace" if replace else "append"
    return update(Content.from_text_reasoning(id="rs_1", text=value, merge_mode=mode))


def arguments(value: str, *, replace: bool = False) -> ChatResponseUpdate:
    mode = "replace" if replace else "append"
    return update(
        Content.from_function_call(
            call_id="call_1", name="weather", arguments=value, merge_mode=mode
        )
    )


def responses_style_call() -> list[ChatResponseUpdate]:
    """As the Responses client streams a tool call: reasoning, then arguments, each
    in deltas followed by the whole value."""
    return [
        thought("Ask the "),
        thought("tool."),
        thought("Ask the tool.", replace=True),
        arguments(ARGUMENTS[:7]),
        arguments(ARGUMENTS[7:]),
        arguments(ARGUMENTS, replace=True),
    ]


def answer(*updates: ChatResponseUpdate) -> list[Turn]:
    return [responses_style_call(), list(updates)]


class Setup:
    def __init__(self, turns: list[Turn], *, traced: bool = False) -> None:
        native = Agent(ScriptedChatClient(turns), name="forecaster", tools=[weather])
        settings = Settings(trace=TraceConfig(enabled=traced, capture_content=True))
        self.runtime = Runtime(settings=settings)
        MAFModule([native], runtime=self.runtime)
        self.agent = self.runtime.agents().get("forecaster")

    async def run(self) -> tuple[str, list[ev.StreamEvent]]:
        seen: list[ev.StreamEvent] = []
        with observing(seen.append):
            reply = await self.runtime.run(self.agent, self.runtime.sessions().new("r"), QUESTION)
        return str(reply), seen

    async def stream(self) -> list[ev.StreamEvent]:
        chunks = self.runtime.stream(self.agent, self.runtime.sessions().new("s"), QUESTION)
        return [c.event async for c in chunks if c.event is not None]


def joined(events: list[ev.StreamEvent], kind: type[ev.TextDelta | ev.ReasoningDelta]) -> str:
    return "".join(e.delta for e in events if isinstance(e, kind))


def call_arguments(events: list[ev.StreamEvent]) -> str:
    return "".join(e.delta for e in events if isinstance(e, ev.ToolCallArgs))


AFTER_REASONING = [
    text("Checking. "),
    update(Content.from_text_reasoning(id="rs_2", text="Now answer.")),
    text("It is "),
    text("sunny."),
    text("It is sunny.", replace=True),
]

STREAMS: dict[str, tuple[list[Turn], str]] = {
    "deltas then the whole value": (
        answer(text("Paris is "), text("sunny."), text("Paris is sunny.", replace=True), *say("")),
        "Paris is sunny.",
    ),
    "the whole value extends the deltas": (
        answer(text("Paris is "), text("Paris is sunny.", replace=True)),
        "Paris is sunny.",
    ),
    "only the whole value": (answer(text("Paris is sunny.", replace=True)), "Paris is sunny."),
    "a snapshot update replaces the message": (
        answer(
            thought("Say it."),
            text("Paris "),
            text("is"),
            update(
                Content.from_text_reasoning(id="rs_1", text="Say it."),
                Content.from_text("Paris is sunny."),
                replace=True,
            ),
        ),
        "Paris is sunny.",
    ),
    "a new text run after reasoning": (answer(*AFTER_REASONING), "Checking. It is sunny."),
    "a new text run after a tool call": (
        [
            [
                *responses_style_call()[:3],  # the reasoning
                text("Checking. "),
                text("Checking. ", replace=True),
                *responses_style_call()[3:],  # the call's arguments, right after the text
                text("One "),
                text("moment."),
                text("One moment.", replace=True),
            ],
            [text("Sunny.")],
        ],
        "Checking. One moment.Sunny.",
    ),
}


@pytest.mark.parametrize("name", list(STREAMS))
async def test_the_stream_shows_each_value_once_as_agent_framework_merges_it(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The streamed text and reasoning are what run mode reports from Agent Framework's
    own merge of the same updates, and the tool-call arguments arrive once."""
    caplog.set_level(logging.WARNING, logger="runnertrace")
    turns, expected = STREAMS[name]
    reply, run_events = await Setup(turns).run()
    stream_events = await Setup(turns).stream()
    assert reply.split() == expected.split()  # Agent Framework joins text runs with a space
    assert joined(run_events, ev.TextDelta) == expected
    assert joined(stream_events, ev.TextDelta) == expected
    assert joined(stream_events, ev.ReasoningDelta) == joined(run_events, ev.ReasoningDelta)
    assert joined(stream_events, ev.ReasoningDelta).startswith("Ask the tool.")
    assert call_arguments(stream_events) == call_arguments(run_events) == ARGUMENTS
    blocks = [
        [e for e in events if isinstance(e, ev.ReasoningStart)]
        for events in (run_events, stream_events)
    ]
    assert len(blocks[1]) == len(blocks[0])
    assert [r.getMessage() for r in caplog.records] == []  # every whole value matched its run


async def test_the_spans_show_a_replaced_value_once(captured_spans: CapturedSpans) -> None:
    await Setup(STREAMS["deltas then the whole value"][0], traced=True).stream()
    (tool_span,) = captured_spans.by_name("execute_tool weather")
    assert (tool_span.attributes or {})["gen_ai.tool.call.arguments"] == ARGUMENTS
    (run_span,) = captured_spans.by_name("invoke_agent forecaster")
    (message,) = json.loads((run_span.attributes or {})["gen_ai.output.messages"])
    assert [p["content"] for p in message["parts"] if p["type"] == "text"] == ["Paris is sunny."]


async def test_a_whole_value_that_contradicts_the_stream_keeps_what_was_sent_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    turns = answer(text("Paris is rainy."), text("Paris is sunny.", replace=True))
    events = await Setup(turns).stream()
    assert joined(events, ev.TextDelta) == "Paris is rainy."
    warnings = [r.getMessage() for r in caplog.records if "replaced the streamed" in r.getMessage()]
    assert warnings == [
        "Agent Framework replaced the streamed text with a different value; the stream "
        "keeps what it already sent (15 characters, the replacement has 15)"
    ]
