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

import itertools
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.adk.agents import BaseAgent, LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
from google.adk.tools.agent_tool import AgentTool
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.fidelity_helpers import MODES, in_start_order, one, parent_of, run

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.runners.adk_testing import ScriptedAdkLlm, Turn, answer, call
from runnertrace.testing import CapturedSpans

# ADK deprecates its workflow agents in favour of Workflow, which cannot yet be a
# sub-agent; its own AgentTool still builds its sub-runner with `plugins=`.
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*deprecated in favor of Workflow"),
    pytest.mark.filterwarnings("ignore:The `plugins` argument is deprecated"),
]

REPO = Path(__file__).resolve().parents[1]
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


# -- AgentTool ----------------------------------------------------------------------------------


def lookup(topic: str) -> str:
    """The specialist's own tool."""
    return f"notes on {topic}"


def specialist() -> LlmAgent:
    script = [call("lookup", {"topic": "Oslo"}, "s1", input_tokens=23), answer("Fly Tuesday.")]
    return LlmAgent(
        name="specialist",
        description="Knows Oslo.",
        model=model("specialist", script),
        tools=[lookup],
    )


@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_tool_is_an_agent_run_under_its_tool_not_a_transfer(
    mode: str, captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    inner = specialist()
    script = [call("specialist", {"request": "Oslo?"}, "b1", input_tokens=31), answer("Tuesday.")]
    boss = LlmAgent(name="boss", model=model("boss", script), tools=[AgentTool(agent=inner)])
    await run(core(boss), mode)

    assert_counted_once(captured_spans, fakes_of(boss, inner))
    run_span = one(captured_spans, "invoke_agent boss")
    asking = in_step_of(captured_spans, in_start_order(captured_spans, "chat boss-llm")[0], "boss")
    tool = one(captured_spans, "execute_tool specialist")
    assert in_step_of(captured_spans, tool, "boss") is asking
    assert parent_of(captured_spans, asking) is run_span
    # The sub-agent: one invoke_agent span under the tool, holding its own steps.
    agent_run = one(captured_spans, "invoke_agent specialist")
    assert parent_of(captured_spans, agent_run) is tool
    assert agent_of(agent_run) == "specialist"
    chats = in_start_order(captured_spans, "chat specialist-llm")
    steps = [in_step_of(captured_spans, chat, "specialist") for chat in chats]
    assert len({s.context.span_id for s in steps}) == 2
    for step in steps:
        assert parent_of(captured_spans, step) is agent_run
    assert not [s.name for s in captured_spans.spans if "runnertrace.handoff.source" in attrs(s)]
    assert (
        in_step_of(captured_spans, one(captured_spans, "execute_tool lookup"), "specialist")
        is (steps[0])
    )
    # Each span ends inside its parent: steps, agent run, tool, the asking step.
    assert times(agent_run)[1] <= times(tool)[1] <= times(asking)[1]
    assert all(times(step)[1] <= times(agent_run)[1] for step in steps)
    assert_clean(captured_spans, caplog)


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
    assert_clean(captured_spans, caplog)


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
    assert_clean(captured_spans, caplog)


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
    assert_clean(captured_spans, caplog)


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
    assert_clean(captured_spans, caplog)


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
trace.set_tracer_provider(app)  # ADK's spans and (reused) ours go here

from google.adk.agents import LlmAgent, ParallelAgent
from google.adk.tools.agent_tool import AgentTool
from runnertrace import traced
from runnertrace.core import Session
from runnertrace.core.agent import Agent
from runnertrace.tracing.config import TraceConfig
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.adk import GoogleADKRunner
from runnertrace.runners.adk_testing import ScriptedAdkLlm, answer, call

def lookup(topic: str) -> str:
    '''The specialist's tool.'''
    with trace.get_tracer("user-code").start_as_current_span("db.query lookup"):
        return f"notes on {topic}"

def agent(runner):
    inner = LlmAgent(
        name="specialist",
        model=ScriptedAdkLlm(
            model="specialist-llm",
            script=[call("lookup", {"topic": "Oslo"}, "s1", input_tokens=23), answer("Tue.")],
        ),
        tools=[lookup],
    )
    boss = LlmAgent(
        name="boss",
        model=ScriptedAdkLlm(
            model="boss-llm",
            script=[call("specialist", {"request": "Oslo?"}, "b1", input_tokens=31), answer("Ok.")],
        ),
        tools=[AgentTool(agent=inner)],
    )
    right = LlmAgent(
        name="right", model=ScriptedAdkLlm(model="right-llm", script=[answer("R.", input_tokens=7)])
    )
    return Agent("both", runner, ParallelAgent(name="both", sub_agents=[boss, right])), [
        boss.model, inner.model, right.model
    ]

async def go(runner, mode):
    a, fakes = agent(runner)
    requests = [AgentRequestText(prompt="Trip?")]
    if mode == "run":
        await a.runner.run(a, Session("s1"), requests)
    else:
        async for _ in a.runner.stream(a, Session("s1"), requests):
            pass
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (db,) = [s for s in spans if s.name == "db.query lookup"]
    parent = by_id.get(db.parent.span_id) if db.parent else None
    chats = [s for s in spans if s.name.startswith(("chat", "generate_content", "call_llm"))]
    exporter.clear()
    return {
        "names": sorted(s.name for s in spans if s is not db),
        "db parent": parent.name if parent else None,
        "model spans": len(chats),
        "input tokens": sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in chats),
        "reported": sum(c.input_tokens for f in fakes for c in f.calls),
        "calls": sum(len(f.calls) for f in fakes),
    }

async def main():
    out = {}
    for mode in ("run", "stream"):
        out["untraced " + mode] = await go(GoogleADKRunner(), mode)
        tracing = traced(GoogleADKRunner(), TraceConfig(type="tests.backends.MemoryBackend"))
        out["traced " + mode] = await go(tracing, mode)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_with_an_app_provider_each_call_of_an_agent_tool_and_a_branch_is_ours_once(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APP_PROVIDER)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**clean_env(), "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for mode in MODES:
        # untraced, ADK's own spans record the sub-agent's calls (so the check can fail)
        adk = seen[f"untraced {mode}"]
        assert sum(n.startswith("generate_content") for n in adk["names"]) == adk["calls"] == 5
        traced_run = seen[f"traced {mode}"]
        assert not [n for n in traced_run["names"] if n.startswith("generate_content")]
        assert traced_run["model spans"] == traced_run["calls"] == 5
        assert traced_run["input tokens"] == traced_run["reported"] == 31 + 10 + 23 + 10 + 7
        assert traced_run["names"].count("invoke_agent specialist") == 1
        assert traced_run["names"].count("execute_tool lookup") == 1
        assert traced_run["db parent"] == "execute_tool lookup"


def clean_env() -> dict[str, str]:
    """The host's environment without its OpenTelemetry, runnertrace, pytest and ADK settings."""
    prefixes = ("RUNNERTRACE_", "OTEL_", "PYTEST_", "GOOGLE_", "ADK_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


class BranchFailed(RuntimeError):
    """What the failing branch's model raises."""


@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_branch_fails_its_own_call_and_step_only(
    mode: str, captured_spans: CapturedSpans
) -> None:
    left = LlmAgent(name="left", model=model("left", [BranchFailed("model down")]))
    right = branch("right", weather_right, (17, 19))
    right.model.delay = DELAY / 5  # type: ignore[union-attr]
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
