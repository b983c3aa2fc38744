"""Google ADK's multi-agent compositions, traced: who did what, under whom, counted once.

Each composition runs on ADK's own offline model base (``ScriptedAdkLlm``), one
fake model per agent, every call with a latency (so a ``ParallelAgent``'s branches
really overlap) and its own log of when it ran and what usage it reported. The
assertions are on spans only: each agent's chat, tool and step spans under the
right parent with the right ``gen_ai.agent.name``; every model call exactly once;
the input tokens over the chat spans equal to what the fake models reported; no
span left incomplete and no malformed-stream anomaly.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole.
import pytest

pytest.importorskip("google.adk", reason="needs the adk extra: pip install -e '.[dev,adk]'")

import logging
from collections.abc import Sequence
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent, ParallelAgent
from opentelemetry.sdk.trace import ReadableSpan
from tests.fidelity_helpers import MODES, in_start_order, one, parent_of, run

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.runners.adk_testing import ScriptedAdkLlm, Turn, answer, call
from runnertrace.testing import CapturedSpans

# ADK deprecates its workflow agents in favour of Workflow, which cannot yet be a sub-agent.
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated in favor of Workflow")

DELAY = 0.05  # each model call's latency, seconds


def model(name: str, script: Sequence[Turn]) -> ScriptedAdkLlm:
    return ScriptedAdkLlm(model=f"{name}-llm", script=list(script), delay=DELAY)


def core(native: BaseAgent) -> CoreAgent:
    return CoreAgent(native.name, TracingRunner(GoogleADKRunner(), capture_content=True), native)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def agent_of(span: ReadableSpan) -> Any:
    return attrs(span).get("gen_ai.agent.name")


def chat_spans(spans: CapturedSpans) -> list[ReadableSpan]:
    return [s for s in spans.spans if attrs(s).get("gen_ai.operation.name") == "chat"]


def fakes_of(*agents: LlmAgent) -> list[ScriptedAdkLlm]:
    models = [a.model for a in agents]
    assert all(isinstance(m, ScriptedAdkLlm) for m in models)
    return models  # type: ignore[return-value]


def assert_counted_once(spans: CapturedSpans, fakes: Sequence[ScriptedAdkLlm]) -> None:
    """Every call a fake answered is one chat span of its model, its tokens once."""
    chats = chat_spans(spans)
    for fake in fakes:
        mine = [s for s in chats if attrs(s).get("gen_ai.request.model") == fake.model]
        assert len(mine) == len(fake.calls) > 0, fake.model
    reported = sum(c.input_tokens for fake in fakes for c in fake.calls)
    assert sum(attrs(s)["gen_ai.usage.input_tokens"] for s in chats) == reported
    assert len(chats) == sum(len(fake.calls) for fake in fakes)


def assert_clean(spans: CapturedSpans, caplog: pytest.LogCaptureFixture) -> None:
    """No span ended incomplete, no anomaly counted or logged."""
    assert not [s.name for s in spans.spans if attrs(s).get("runnertrace.incomplete")]
    assert not [s.name for s in spans.spans if "runnertrace.stream.anomalies" in attrs(s)]
    assert "malformed event stream" not in caplog.text


def in_step_of(spans: CapturedSpans, span: ReadableSpan, agent: str) -> ReadableSpan:
    """``span`` carries ``agent`` and nests directly in an ``agent_step`` of ``agent``."""
    assert agent_of(span) == agent, span.name
    step = parent_of(spans, span)
    assert step.name == f"agent_step {agent}", (span.name, step.name)
    assert agent_of(step) == agent
    return step


def overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def times(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None and span.end_time is not None
    return span.start_time, span.end_time


@pytest.fixture(autouse=True)
def _warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")


# -- ParallelAgent ----------------------------------------------------------------------------


def weather_left(city: str) -> str:
    """The left branch's tool."""
    return f"sunny in {city}"


def weather_right(city: str) -> str:
    """The right branch's tool."""
    return f"rainy in {city}"


def branch(name: str, tool: Any, tokens: tuple[int, int]) -> LlmAgent:
    script = [
        call(tool.__name__, {"city": name}, f"{name}-c1", input_tokens=tokens[0]),
        answer(f"{name} done", input_tokens=tokens[1]),
    ]
    return LlmAgent(name=name, model=model(name, script), tools=[tool])


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_branches_keep_their_own_steps_calls_and_tools(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    left = branch("left", weather_left, (11, 13))
    right = branch("right", weather_right, (17, 19))
    await run(core(ParallelAgent(name="both", sub_agents=[left, right])), mode)

    fakes = fakes_of(left, right)
    # The fakes' own clocks: the two branches' first calls ran at the same time.
    left_call, right_call = (fake.calls[0] for fake in fakes)
    assert overlap(
        (left_call.started_ns, left_call.ended_ns), (right_call.started_ns, right_call.ended_ns)
    )
    assert_counted_once(captured_spans, fakes)
    run_span = one(captured_spans, "invoke_agent both")
    for name, tool in (("left", "weather_left"), ("right", "weather_right")):
        chats = in_start_order(captured_spans, f"chat {name}-llm")
        steps = [in_step_of(captured_spans, chat, name) for chat in chats]
        assert len({s.context.span_id for s in steps}) == 2  # one step per call
        for step in steps:
            assert parent_of(captured_spans, step) is run_span
            assert "runnertrace.handoff.source" not in attrs(step)
        tool_span = one(captured_spans, f"execute_tool {tool}")
        assert in_step_of(captured_spans, tool_span, name) is steps[0]
        assert attrs(chats[0])["gen_ai.usage.output_tokens"] == 5
    # The branches' first steps overlap, each with its own children.
    (left_first, right_first) = (
        parent_of(captured_spans, in_start_order(captured_spans, f"chat {n}-llm")[0])
        for n in ("left", "right")
    )
    assert overlap(times(left_first), times(right_first))
    assert attrs(run_span)["gen_ai.aggregated_usage.input_tokens"] == 11 + 13 + 17 + 19
    assert_clean(captured_spans, caplog)
