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

import asyncio
import itertools
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.agent_tool import AgentTool
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.composition_checks import assert_answered_once, assert_no_anomalies, check_totals, rows
from tests.fidelity_helpers import (
    MODES,
    agent_of,
    attrs,
    in_start_order,
    in_step,
    one,
    overlap,
    parent_of,
    run,
    times,
)

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.runners.adk.testing import ScriptedAdkLlm, Turn, answer, call
from runnertrace.testing import CapturedSpans

# ADK deprecates its workflow agents in favour of Workflow, which cannot yet be a
# sub-agent; its own AgentTool still builds its sub-runner with `plugins=`.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*deprecated in favor of Workflow"),
    pytest.mark.filterwarnings("ignore:The `plugins` argument is deprecated"),
]

REPO = Path(__file__).resolve().parents[3]
DELAY = 0.05  # each model call's latency, seconds


def model(name: str, script: Sequence[Turn]) -> ScriptedAdkLlm:
    return ScriptedAdkLlm(model=f"{name}-llm", script=list(script), delay=DELAY)


def core(native: BaseAgent) -> CoreAgent:
    return CoreAgent(native.name, TracingRunner(GoogleADKRunner(), capture_content=True), native)


def fakes_of(*agents: LlmAgent) -> list[ScriptedAdkLlm]:
    models = [a.model for a in agents]
    assert all(isinstance(m, ScriptedAdkLlm) for m in models)
    return models  # type: ignore[return-value]


def assert_counted_once(spans: CapturedSpans, fakes: Sequence[ScriptedAdkLlm]) -> None:
    """Every call a fake answered is one chat span of its model, its tokens once."""
    assert_answered_once(spans.spans, {f.model: [c.input_tokens for c in f.calls] for f in fakes})


def in_step_of(spans: CapturedSpans, span: ReadableSpan, agent: str) -> ReadableSpan:
    """``span`` carries ``agent`` and nests directly in an ``agent_step`` of ``agent``
    (an ADK step is named for its agent)."""
    return in_step(spans, span, agent, agent)


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
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- AgentTool: a nested run ----------------------------------------------------------------------
#
# The scenarios and their checks are shared with the app-provider cases below, which
# run them in a process of their own (the global provider is set once per process).

USER_TRACER = "user-code"


def lookup(topic: str) -> str:
    """The specialist's own tool (it opens a span of the user's, as a database client would)."""
    with trace.get_tracer(USER_TRACER).start_as_current_span("db.query lookup"):
        return f"notes on {topic}"


class SpanOpeningLlm(ScriptedAdkLlm):
    """A fake model that opens a span of the user's in each call, as an HTTP client would
    (with the global tracer: recorded under an app provider only)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        with trace.get_tracer(USER_TRACER).start_as_current_span(f"http.request {self.model}"):
            await asyncio.sleep(0)
        async for response in super().generate_content_async(llm_request, stream):
            yield response


def user_model_callback(callback_context: Any, llm_request: LlmRequest) -> None:
    """An agent's before-model callback that opens a span of the user's."""
    with trace.get_tracer(USER_TRACER).start_as_current_span("user.before_model"):
        return None


# Priced model ids (genai-prices knows them), so the cost adds up at every level too.
BOSS_MODEL, SPECIALIST_MODEL = "gemini-2.5-pro", "gemini-2.5-flash"


def specialist(**kw: Any) -> LlmAgent:
    script = [call("lookup", {"topic": "Oslo"}, "s1", input_tokens=23), answer("Fly Tuesday.")]
    return LlmAgent(
        name="specialist",
        description="Knows Oslo.",
        model=SpanOpeningLlm(model=kw.pop("model", "specialist-llm"), script=script, delay=DELAY),
        tools=[lookup],
        before_model_callback=user_model_callback,
        **kw,
    )


def agent_tool_scenario() -> tuple[LlmAgent, list[ScriptedAdkLlm]]:
    """``boss`` asks ``specialist`` (an ``AgentTool``) once, then answers: 2 + 2 calls."""
    inner = specialist(model=SPECIALIST_MODEL)
    script = [call("specialist", {"request": "Oslo?"}, "b1", input_tokens=31), answer("Tuesday.")]
    boss = LlmAgent(
        name="boss",
        model=SpanOpeningLlm(model=BOSS_MODEL, script=script, delay=DELAY),
        tools=[AgentTool(agent=inner)],
        before_model_callback=user_model_callback,
    )
    return boss, fakes_of(boss, inner)


def levels_of(
    spans: Sequence[ReadableSpan], model_calls: int | None = None
) -> list[tuple[Any, ...]]:
    """Each run level as (agent, depth, model calls, own model calls, input tokens),
    after ``check_totals`` asserted its aggregates against its subtree."""
    levels = check_totals(spans, model_calls)
    return [
        (lv.agent, lv.depth, lv.model_calls, lv.own_model_calls, lv.input_tokens) for lv in levels
    ]


def check_agent_tool_run(
    spans: CapturedSpans, fakes: Sequence[ScriptedAdkLlm], *, app: bool
) -> str:
    """The ``agent_tool_scenario`` trace: its shape, each call once, the totals at each
    level, and (under an app provider) the user's spans nested under ours. Returns
    the levels as text."""
    assert_counted_once(spans, fakes)
    run_span = one(spans, "invoke_agent boss")
    assert run_span.parent is None or run_span.parent.span_id not in {
        s.context.span_id for s in spans.spans
    }
    asking = in_step_of(spans, in_start_order(spans, f"chat {BOSS_MODEL}")[0], "boss")
    tool = one(spans, "execute_tool specialist")
    assert in_step_of(spans, tool, "boss") is asking
    assert parent_of(spans, asking) is run_span
    # invoke_agent boss > agent_step boss > execute_tool specialist > invoke_agent specialist
    # > agent_step specialist > chat
    agent_run = one(spans, "invoke_agent specialist")
    assert parent_of(spans, agent_run) is tool
    assert agent_of(agent_run) == "specialist"
    assert attrs(agent_run)["runnertrace.mode"] == "run"  # AgentTool runs its agent unary
    chats = in_start_order(spans, f"chat {SPECIALIST_MODEL}")
    steps = [in_step_of(spans, chat, "specialist") for chat in chats]
    assert len({s.context.span_id for s in steps}) == 2
    for step in steps:
        assert parent_of(spans, step) is agent_run
    assert not [s.name for s in spans.spans if "runnertrace.handoff.source" in attrs(s)]
    assert in_step_of(spans, one(spans, "execute_tool lookup"), "specialist") is steps[0]
    # Each span ends inside its parent: steps, agent run, tool, the asking step.
    assert times(agent_run)[1] <= times(tool)[1] <= times(asking)[1]
    assert all(times(step)[1] <= times(agent_run)[1] for step in steps)
    # The totals: the outer run counts all four calls, the inner one its own two.
    levels = levels_of(spans.spans, model_calls=4)
    assert levels == [("boss", 0, 4, 2, 31 + 10 + 23 + 10), ("specialist", 1, 2, 2, 23 + 10)]
    outer, inner = attrs(run_span), attrs(agent_run)
    assert outer["gen_ai.aggregated_usage.input_tokens"] == 31 + 10 + 23 + 10
    assert inner["gen_ai.aggregated_usage.input_tokens"] == 23 + 10
    assert (outer["runnertrace.nested_runs"], outer["runnertrace.own.model_calls"]) == (1, 2)
    assert outer["runnertrace.own.input_tokens"] == 31 + 10
    assert "runnertrace.nested_runs" not in inner
    assert "runnertrace.cancelled" not in inner and inner["runnertrace.reply.type"] == "text"
    assert "runnertrace.usage.unpriced_calls" not in outer  # every call priced: a full sum
    inner_cost = sum(attrs(c)["gen_ai.usage.cost"] for c in chats)
    assert inner["gen_ai.aggregated_usage.cost"] == pytest.approx(inner_cost)
    assert outer["gen_ai.aggregated_usage.cost"] == pytest.approx(
        inner_cost + outer["runnertrace.own.cost"]
    )
    # The user's spans: in a tool under its execute_tool, in a model call (the model's
    # own code and the agent's model callback) under the call's chat span.
    user = [s for s in spans.spans if getattr(s.instrumentation_scope, "name", None) == USER_TRACER]
    if not app:  # the global tracer is OpenTelemetry's no-op one
        assert user == []
    else:
        assert parent_of(spans, one(spans, "db.query lookup")).name == "execute_tool lookup"
        for model_id, n in ((BOSS_MODEL, 2), (SPECIALIST_MODEL, 2)):
            chat_ids = {c.context.span_id for c in spans.by_name(f"chat {model_id}")}
            opened = spans.by_name(f"http.request {model_id}")
            assert len(opened) == n
            assert {s.parent.span_id for s in opened if s.parent} == chat_ids
        callbacks = spans.by_name("user.before_model")
        assert len(callbacks) == 4
        assert all(parent_of(spans, s).name.startswith("chat ") for s in callbacks)
    # Nothing but ours and the user's: ADK's own spans pass the context through.
    assert not [
        s.name for s in spans.spans if s not in user and "runnertrace.span.type" not in attrs(s)
    ]
    return rows(check_totals(spans.spans))


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_tool_is_a_nested_run_under_its_tool_with_its_own_totals(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    boss, fakes = agent_tool_scenario()
    await run(core(boss), mode)

    check_agent_tool_run(captured_spans, fakes, app=False)
    assert_no_anomalies(captured_spans.spans, caplog.text)


class BranchFailed(RuntimeError):
    """What the failing branch's model raises."""


def cancel_scenario() -> tuple[ParallelAgent, list[ScriptedAdkLlm]]:
    """``left`` fails while ``boss``, in the other branch, waits on its ``AgentTool``'s
    agent, whose model call never answers: ADK cancels that branch."""
    asked, never = asyncio.Event(), asyncio.Event()
    inner = LlmAgent(
        name="specialist",
        model=ScriptedAdkLlm(
            model="specialist-llm", script=[answer("never")], called=asked, gate=never
        ),
    )
    script = [call("specialist", {"request": "Oslo?"}, "b1", input_tokens=31), answer("Ok.")]
    boss = LlmAgent(name="boss", model=model("boss", script), tools=[AgentTool(agent=inner)])
    left = LlmAgent(
        name="left",
        model=ScriptedAdkLlm(model="left-llm", script=[BranchFailed("model down")], gate=asked),
    )
    return ParallelAgent(name="both", sub_agents=[left, boss]), fakes_of(left, boss, inner)


def check_cancelled_agent_tool(spans: CapturedSpans) -> str:
    """The ``cancel_scenario`` trace: the nested run of the cancelled branch's tool ends
    cancelled, and so do its step and its unfinished chat span; the totals still add up."""
    tool = one(spans, "execute_tool specialist")
    assert attrs(tool)["error.type"] == "CancelledError"
    agent_run = one(spans, "invoke_agent specialist")
    assert parent_of(spans, agent_run) is tool
    (chat,) = spans.by_name("chat specialist-llm")
    step = in_step_of(spans, chat, "specialist")
    assert parent_of(spans, step) is agent_run
    for span in (agent_run, step, chat):
        assert attrs(span).get("runnertrace.cancelled") is True, span.name
        assert span.status.status_code is not StatusCode.ERROR, span.name  # not a failure
    for span in (step, chat):
        assert attrs(span).get("runnertrace.incomplete") is True, span.name
    assert "gen_ai.usage.input_tokens" not in attrs(chat)  # it never answered
    (failed,) = spans.by_name("chat left-llm")
    assert attrs(failed)["error.type"] == "BranchFailed"
    run_span = one(spans, "invoke_agent both")
    assert run_span.status.status_code is StatusCode.ERROR
    assert "runnertrace.cancelled" not in attrs(run_span)  # it failed; its branch was cut short
    # The cancelled run rolled up: left's failed call, boss's first, the unanswered one.
    levels = levels_of(spans.spans, model_calls=3)
    assert levels == [("both", 0, 3, 2, 31), ("specialist", 1, 1, 1, 0)]
    assert attrs(run_span)["runnertrace.aggregated.errors"] == 2  # left's call, the cut tool
    assert not [s.name for s in spans.spans if "runnertrace.span.type" not in attrs(s)]
    return rows(check_totals(spans.spans))


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_tool_cancelled_with_its_branch_ends_as_cancelled(
    mode: str, captured_spans: CapturedSpans
) -> None:
    native, _ = cancel_scenario()
    with pytest.raises(BranchFailed):
        await run(core(native), mode)

    check_cancelled_agent_tool(captured_spans)


# -- SequentialAgent, LoopAgent, a transfer -----------------------------------------------------


def steps_in_order(spans: CapturedSpans, *models: str) -> list[ReadableSpan]:
    """The step of each chat span of ``models`` (one each), in start order."""
    chats = sorted(
        (s for m in models for s in spans.by_name(f"chat {m}-llm")),
        key=lambda s: s.start_time or 0,
    )
    return [parent_of(spans, chat) for chat in chats]


def assert_one_after_another(spans: CapturedSpans, run_span: ReadableSpan, steps: Any) -> None:
    """Steps of one line: each under the run span, each ending before the next starts."""
    for step in steps:
        assert parent_of(spans, step) is run_span
    for earlier, later in itertools.pairwise(steps):
        assert times(earlier)[1] <= times(later)[0]


@pytest.mark.parametrize("mode", MODES)
async def test_a_sequential_agent_runs_its_agents_in_turn_each_in_its_own_steps(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    writer = LlmAgent(name="writer", model=model("writer", [answer("draft", input_tokens=41)]))
    editor = LlmAgent(name="editor", model=model("editor", [answer("final", input_tokens=43)]))
    await run(core(SequentialAgent(name="pipeline", sub_agents=[writer, editor])), mode)

    assert_counted_once(captured_spans, fakes_of(writer, editor))
    steps = steps_in_order(captured_spans, "writer", "editor")
    assert [agent_of(s) for s in steps] == ["writer", "editor"]
    for step, name in zip(steps, ("writer", "editor"), strict=True):
        (chat,) = captured_spans.by_name(f"chat {name}-llm")
        assert in_step_of(captured_spans, chat, name) is step
        assert "runnertrace.handoff.source" not in attrs(step)  # a turn, not a transfer
    assert_one_after_another(captured_spans, one(captured_spans, "invoke_agent pipeline"), steps)
    assert_no_anomalies(captured_spans.spans, caplog.text)


@pytest.mark.parametrize("mode", MODES)
async def test_a_loop_agent_gives_each_iteration_its_own_step(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    script = [answer("v1", input_tokens=7), answer("v2", input_tokens=9)]
    drafter = LlmAgent(name="drafter", model=model("drafter", script))
    await run(core(LoopAgent(name="loop", sub_agents=[drafter], max_iterations=2)), mode)

    assert_counted_once(captured_spans, fakes_of(drafter))
    steps = steps_in_order(captured_spans, "drafter")
    assert len(steps) == 2
    assert all(s.name == "agent_step drafter" and agent_of(s) == "drafter" for s in steps)
    assert_one_after_another(captured_spans, one(captured_spans, "invoke_agent loop"), steps)
    assert_no_anomalies(captured_spans.spans, caplog.text)


@pytest.mark.parametrize("mode", MODES)
async def test_a_transfer_is_a_new_step_of_the_new_agent_naming_its_source(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    expert = LlmAgent(name="expert", model=model("expert", [answer("Tuesday.", input_tokens=29)]))
    transfer = call("transfer_to_agent", {"agent_name": "expert"}, "t1", input_tokens=37)
    planner = LlmAgent(name="planner", model=model("planner", [transfer]), sub_agents=[expert])
    await run(core(planner), mode)

    assert_counted_once(captured_spans, fakes_of(planner, expert))
    asking, handed = steps_in_order(captured_spans, "planner", "expert")
    assert in_step_of(captured_spans, one(captured_spans, "chat planner-llm"), "planner") is asking
    assert in_step_of(captured_spans, one(captured_spans, "chat expert-llm"), "expert") is handed
    tool = one(captured_spans, "execute_tool transfer_to_agent")
    assert in_step_of(captured_spans, tool, "planner") is asking
    assert attrs(handed)["runnertrace.handoff.source"] == "planner"
    assert attrs(handed)["runnertrace.handoff.target"] == "expert"
    assert "runnertrace.handoff.source" not in attrs(asking)
    assert_one_after_another(
        captured_spans, one(captured_spans, "invoke_agent planner"), [asking, handed]
    )
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- nested compositions --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_branches_then_a_sequential_turn_and_an_agent_tool_in_a_branch(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    inner = specialist()
    script = [call("specialist", {"request": "Oslo?"}, "l1", input_tokens=53), answer("left ok")]
    left = LlmAgent(name="left", model=model("left", script), tools=[AgentTool(agent=inner)])
    right = branch("right", weather_right, (17, 19))
    summary = LlmAgent(name="summary", model=model("summary", [answer("both ok", input_tokens=3)]))
    both = ParallelAgent(name="both", sub_agents=[left, right])
    await run(core(SequentialAgent(name="flow", sub_agents=[both, summary])), mode)

    assert_counted_once(captured_spans, fakes_of(left, right, inner, summary))
    run_span = one(captured_spans, "invoke_agent flow")
    tool = one(captured_spans, "execute_tool specialist")
    left_first = in_step_of(captured_spans, tool, "left")
    agent_run = one(captured_spans, "invoke_agent specialist")
    assert parent_of(captured_spans, agent_run) is tool
    for chat in captured_spans.by_name("chat specialist-llm"):
        assert parent_of(captured_spans, in_step_of(captured_spans, chat, "specialist")) is (
            agent_run
        )
    right_first = steps_in_order(captured_spans, "right")[0]
    assert overlap(times(left_first), times(right_first))
    (summary_step,) = steps_in_order(captured_spans, "summary")
    assert parent_of(captured_spans, summary_step) is run_span
    branch_steps = steps_in_order(captured_spans, "left", "right")
    assert all(times(s)[1] <= times(summary_step)[0] for s in branch_steps)
    # Branches are the flow's own work; the agent tool's run is nested, with its own totals.
    assert levels_of(captured_spans.spans, model_calls=7) == [
        ("flow", 0, 7, 5, 53 + 10 + 17 + 19 + 3 + 23 + 10),
        ("specialist", 1, 2, 2, 23 + 10),
    ]
    assert_no_anomalies(captured_spans.spans, caplog.text)


# -- with an app-wide SDK provider: ADK's own spans on --------------------------------------------

APP_PROVIDER = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

app = TracerProvider()
exporter = InMemorySpanExporter()
app.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(app)  # ADK's spans, the user's and (reused) ours go here

from runnertrace import traced
from runnertrace.core.agent import Agent
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import TraceConfig
from tests.fidelity_helpers import run
from tests.runners.adk.test_adk_compositions import (
    BranchFailed,
    agent_tool_scenario,
    cancel_scenario,
    check_agent_tool_run,
    check_cancelled_agent_tool,
)

spans = CapturedSpans(exporter, app)


def agent(native, traced_run=True):
    base = GoogleADKRunner()
    runner = traced(base, TraceConfig(type="tests.backends.MemoryBackend")) if traced_run else base
    return Agent(native.name, runner, native)


async def main():
    out = {}
    for mode in ("run", "stream"):
        # untraced: ADK's own spans record, a model call's user span under ADK's
        native, fakes = agent_tool_scenario()
        await run(agent(native, traced_run=False), mode)
        by_id = {s.context.span_id: s for s in spans.spans}
        out["untraced " + mode] = {
            "model spans": sum(s.name.startswith("generate_content") for s in spans.spans),
            "calls": sum(len(f.calls) for f in fakes),
            "http parents": sorted(
                {by_id[s.parent.span_id].name.split()[0] for s in spans.spans
                 if s.name.startswith("http.request")}
            ),
        }
        spans.clear()
        native, fakes = agent_tool_scenario()
        await run(agent(native), mode)
        out["agent tool " + mode] = check_agent_tool_run(spans, fakes, app=True)
        spans.clear()
        native, _ = cancel_scenario()
        try:
            await run(agent(native), mode)
        except BranchFailed:
            pass
        else:
            raise AssertionError("the cancel scenario did not fail")
        out["cancel " + mode] = check_cancelled_agent_tool(spans)
        spans.clear()
    print(json.dumps(out))

asyncio.run(main())
"""


def test_with_an_app_provider_an_agent_tool_nests_counts_once_and_keeps_the_users_spans(
    tmp_path: Path,
) -> None:
    """The same scenarios and checks as the tests above, with the user's provider set
    globally (in a process of its own): ADK's own spans are on there."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APP_PROVIDER)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env={**clean_env(), "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for mode in MODES:
        # untraced, ADK's spans record each call, and the user's span nests under
        # ADK's (so the traced checks can fail)
        adk = seen[f"untraced {mode}"]
        assert adk["model spans"] == adk["calls"] == 4
        assert adk["http parents"] == ["generate_content"]
        # traced: the checks ran in the process; these are the levels they found
        outer, inner = seen[f"agent tool {mode}"].splitlines()
        assert outer.startswith("boss: 4 calls (2 own), 74/20 tokens (41 in own), 2 tools")
        assert inner.startswith("  specialist: 2 calls (2 own), 33/10 tokens (33 in own), 1 tools")
        outer, inner = seen[f"cancel {mode}"].splitlines()
        assert outer.startswith("both: 3 calls (2 own), 31/5 tokens (31 in own), 1 tools")
        assert inner.startswith("  specialist: 1 calls (1 own), 0/0 tokens (0 in own), 0 tools")


def clean_env() -> dict[str, str]:
    """The host's environment without its OpenTelemetry, runnertrace, pytest and ADK settings."""
    prefixes = ("RUNNERTRACE_", "OTEL_", "PYTEST_", "GOOGLE_", "ADK_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_branch_fails_its_own_call_and_step_only(
    mode: str, captured_spans: CapturedSpans
) -> None:
    # The left branch fails once the right one is done (no clock decides the order).
    right_done = asyncio.Event()
    left_llm = ScriptedAdkLlm(
        model="left-llm", script=[BranchFailed("model down")], gate=right_done
    )
    left = LlmAgent(name="left", model=left_llm)
    right = branch("right", weather_right, (17, 19))
    right.after_agent_callback = lambda callback_context: right_done.set()
    with pytest.raises(BranchFailed):
        await run(core(ParallelAgent(name="both", sub_agents=[left, right])), mode)

    (failed,) = captured_spans.by_name("chat left-llm")
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "BranchFailed"
    step = in_step_of(captured_spans, failed, "left")
    assert step.status.status_code is StatusCode.ERROR
    # The other branch finished first: its spans all ended clean, in its own steps.
    right_spans = [s for s in captured_spans.spans if agent_of(s) == "right"]
    assert len(right_spans) == 2 + 2 + 1  # its steps, chat spans and tool span
    for span in right_spans:
        assert span.status.status_code is StatusCode.UNSET, span.name
        assert "runnertrace.incomplete" not in attrs(span), span.name
    assert sum(attrs(s).get("gen_ai.usage.input_tokens", 0) for s in right_spans) == 17 + 19
