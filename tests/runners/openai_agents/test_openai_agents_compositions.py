"""OpenAI Agents SDK compositions, traced (issue 20): ``Agent.as_tool()`` and handoffs.

A ``planner`` calls a ``researcher`` through ``researcher.as_tool()``; the
researcher has a tool of its own that opens an app span. The researcher's run must
be an ``invoke_agent researcher`` span under the planner's ``execute_tool
research``, holding its own chat and tool spans with its own ``gen_ai.agent.name``;
each model call appears once and the chat spans' tokens add up to what the scripted
models reported. Each run's totals cover its subtree (the agent tools' runs
included), its own work beside them (``check_totals`` at every level). A handoff is a
new step under the same run, named after the new agent, with the handoff's source.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole.
import pytest

pytest.importorskip(
    "agents", reason="needs the openai-agents extra: pip install -e '.[dev,openai-agents]'"
)


import asyncio
from collections.abc import Iterator
from typing import Any

from agents import Agent, RunHooks, Usage, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.composition_checks import check_totals, rows
from tests.fidelity_helpers import MODES, one, parent_of, run
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.openai_agents import OpenAIRunner, nesting
from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A

user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


@pytest.fixture(autouse=True)
def _no_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # offline by construction


@function_tool
def lookup(city: str) -> str:
    """Look a city's weather up."""
    with user["tracer"].start_as_current_span("db.query lookup"):
        return f"sunny in {city}"


class PlannerModel(ScriptedModel):
    model = "planner-llm"


class ResearcherModel(ScriptedModel):
    model = "researcher-llm"


class BookerModel(ScriptedModel):
    model = "booker-llm"


def usage(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens)


# What each scripted model reports, per call: (input, output) tokens.
TOKENS = {
    "planner-llm": [(17, 6), (19, 5)],
    "researcher-llm": [(5, 3), (7, 2)],
    "booker-llm": [(11, 4)],
}


class CountingHooks(RunHooks[Any]):
    """The user's hooks for the agent tool's run: how often each model call is seen."""

    def __init__(self) -> None:
        self.llm_ends = 0

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.llm_ends += 1


async def ignore(event: Any) -> None:
    """An ``on_stream`` callback: ``as_tool()`` then streams the inner run."""


def as_tool_team(
    researcher_steps: list[Any] | None = None,
    researcher_tools: list[Any] | None = None,
    **as_tool: Any,
) -> CoreAgent:
    r_in, r_out = zip(*TOKENS["researcher-llm"], strict=True)
    researcher = Agent(
        name="researcher",
        instructions="You look the weather up.",
        tools=researcher_tools or [lookup],
        model=ResearcherModel(
            researcher_steps
            or [
                ModelStep(
                    output=[function_call("lookup", {"city": "Oslo"}, call_id="r1")],
                    usage=usage(r_in[0], r_out[0]),
                ),
                ModelStep(
                    output=[assistant_message("sunny in Oslo")], usage=usage(r_in[1], r_out[1])
                ),
            ]
        ),
    )
    p_in, p_out = zip(*TOKENS["planner-llm"], strict=True)
    planner = Agent(
        name="planner",
        instructions="You plan trips.",
        tools=[researcher.as_tool("research", "Research the weather.", **as_tool)],
        model=PlannerModel(
            [
                ModelStep(
                    output=[function_call("research", {"input": "Oslo?"}, call_id="p1")],
                    usage=usage(p_in[0], p_out[0]),
                ),
                ModelStep(
                    output=[assistant_message("Oslo: sunny.")], usage=usage(p_in[1], p_out[1])
                ),
            ]
        ),
    )
    return CoreAgent("planner", TracingRunner(OpenAIRunner(), capture_content=True), planner)


def handoff_team() -> CoreAgent:
    ((b_in, b_out),) = TOKENS["booker-llm"]
    booker = Agent(
        name="booker",
        instructions="You book trips.",
        model=BookerModel(
            [ModelStep(output=[assistant_message("Booked.")], usage=usage(b_in, b_out))]
        ),
    )
    ((p_in, p_out), _) = TOKENS["planner-llm"]
    planner = Agent(
        name="planner",
        instructions="You plan trips.",
        handoffs=[booker],
        model=PlannerModel(
            [
                ModelStep(
                    output=[function_call("transfer_to_booker", {}, call_id="h1")],
                    usage=usage(p_in, p_out),
                )
            ]
        ),
    )
    return CoreAgent("planner", TracingRunner(OpenAIRunner(), capture_content=True), planner)


def chats(spans: CapturedSpans, model: str) -> list[ReadableSpan]:
    return sorted(spans.by_name(f"chat {model}"), key=lambda s: s.start_time or 0)


def ancestors(spans: CapturedSpans, span: ReadableSpan) -> list[str]:
    names: list[str] = []
    while span.parent is not None:
        span = parent_of(spans, span)
        names.append(span.name)
    return names


VARIANTS = {"plain": {}, "streamed": {"on_stream": ignore}}


def levels(spans: CapturedSpans, calls: int | None) -> list[tuple[str, int, int, int, int, int]]:
    """Per run, outermost first: (agent, depth, model calls, tool calls, input tokens, own
    input tokens), once ``check_totals`` held at every level (each call once when ``calls``)."""
    found = check_totals(spans.spans, model_calls=calls)
    print(rows(found))  # the note's per-level figures (pytest -s)
    return [
        (lv.agent, lv.depth, lv.model_calls, lv.tool_calls, lv.input_tokens, lv.own_input_tokens)
        for lv in found
    ]


# The planner's two calls (17, 19 input tokens) and the researcher's (5, 7), each counted once
# at every level above it: the planner's run covers its research tool's run.
AS_TOOL_LEVELS = [
    ("planner", 0, 4, 2, 17 + 19 + 5 + 7, 17 + 19),
    ("researcher", 1, 2, 1, 5 + 7, 5 + 7),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", MODES)
async def test_an_agent_as_tool_is_an_invoke_agent_span_under_its_tool(
    mode: str, variant: str, captured_spans: CapturedSpans
) -> None:
    await run(as_tool_team(**VARIANTS[variant]), mode)
    tool = one(captured_spans, "execute_tool research")
    inner = one(captured_spans, "invoke_agent researcher")
    assert parent_of(captured_spans, inner) == tool
    assert inner.attributes["gen_ai.agent.name"] == "researcher"
    assert tool.attributes["gen_ai.agent.name"] == "planner"
    for chat in chats(captured_spans, "researcher-llm"):
        assert chat.attributes["gen_ai.agent.name"] == "researcher"
        assert ancestors(captured_spans, chat)[:3] == [
            "agent_step researcher",
            "invoke_agent researcher",
            "execute_tool research",
        ]
    lookup_span = one(captured_spans, "execute_tool lookup")
    assert lookup_span.attributes["gen_ai.agent.name"] == "researcher"
    assert ancestors(captured_spans, lookup_span)[:2] == [
        "agent_step researcher",
        "invoke_agent researcher",
    ]
    assert parent_of(captured_spans, one(captured_spans, "db.query lookup")) == lookup_span
    assert inner.end_time is not None and tool.end_time is not None
    assert inner.end_time <= tool.end_time  # the inner run ends inside its tool
    assert levels(captured_spans, 4) == AS_TOOL_LEVELS


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", MODES)
async def test_each_model_call_of_an_agent_as_tool_appears_once_with_its_tokens(
    mode: str, variant: str, captured_spans: CapturedSpans
) -> None:
    await run(as_tool_team(**VARIANTS[variant]), mode)
    for model in ("planner-llm", "researcher-llm"):
        spans = chats(captured_spans, model)
        assert [
            (s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"])
            for s in spans
        ] == TOKENS[model]
    for chat in chats(captured_spans, "planner-llm"):
        assert chat.attributes["gen_ai.agent.name"] == "planner"
    assert levels(captured_spans, 4) == AS_TOOL_LEVELS
    planner, researcher = (
        dict(one(captured_spans, f"invoke_agent {n}").attributes or {})
        for n in ("planner", "researcher")
    )
    assert (planner[A.AGG_OUTPUT_TOKENS], planner[A.OWN_OUTPUT_TOKENS]) == (6 + 5 + 3 + 2, 6 + 5)
    assert planner[A.NESTED_RUNS] == 1
    assert A.OWN_INPUT_TOKENS not in researcher  # nothing nested: own == all


@pytest.mark.parametrize("mode", MODES)
async def test_a_handoff_is_a_new_step_of_the_new_agent_in_the_same_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(handoff_team(), mode)
    run_span = one(captured_spans, "invoke_agent planner")
    planner_step = one(captured_spans, "agent_step planner")
    booker_step = one(captured_spans, "agent_step booker")
    assert parent_of(captured_spans, planner_step) == run_span
    assert parent_of(captured_spans, booker_step) == run_span
    assert booker_step.attributes["gen_ai.agent.name"] == "booker"
    assert booker_step.attributes["runnertrace.handoff.source"] == "planner"
    (planner_chat,) = chats(captured_spans, "planner-llm")
    (booker_chat,) = chats(captured_spans, "booker-llm")
    assert parent_of(captured_spans, planner_chat) == planner_step
    assert parent_of(captured_spans, booker_chat) == booker_step
    assert booker_chat.attributes["gen_ai.agent.name"] == "booker"
    assert planner_chat.attributes["gen_ai.agent.name"] == "planner"
    assert (
        booker_chat.attributes["gen_ai.usage.input_tokens"],
        booker_chat.attributes["gen_ai.usage.output_tokens"],
    ) == TOKENS["booker-llm"][0]
    transfer = one(captured_spans, "execute_tool transfer_to_booker")
    assert parent_of(captured_spans, transfer) == planner_step
    # a handoff stays inside the one run: no nested run, both agents' calls in its totals
    assert levels(captured_spans, 2) == [("planner", 0, 2, 1, 17 + 11, 17 + 11)]


@pytest.mark.parametrize("mode", MODES)
async def test_the_hooks_given_to_as_tool_still_fire_once_per_call(
    mode: str, captured_spans: CapturedSpans
) -> None:
    hooks = CountingHooks()
    await run(as_tool_team(hooks=hooks), mode)
    assert hooks.llm_ends == len(TOKENS["researcher-llm"])
    assert len(chats(captured_spans, "researcher-llm")) == len(TOKENS["researcher-llm"])
    assert levels(captured_spans, 4) == AS_TOOL_LEVELS


@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_model_call_of_an_agent_as_tool_ends_its_own_run_with_the_error(
    mode: str, captured_spans: CapturedSpans
) -> None:
    broken = ModelStep.raise_error(ConnectionError("researcher endpoint reset the connection"))
    await run(
        as_tool_team([broken]), mode
    )  # the SDK tells the planner the tool failed; the planner answers
    inner = one(captured_spans, "invoke_agent researcher")
    (failed,) = chats(captured_spans, "researcher-llm")
    for span in (inner, failed):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"] == "ConnectionError"
    assert parent_of(captured_spans, inner) == one(captured_spans, "execute_tool research")
    assert one(captured_spans, "invoke_agent planner").status.status_code is StatusCode.UNSET
    assert len(chats(captured_spans, "planner-llm")) == 2
    # the failed call counts as a call and an error at both levels
    found = check_totals(captured_spans.spans, model_calls=3)
    assert [(lv.agent, lv.model_calls, lv.input_tokens, lv.errors) for lv in found] == [
        ("planner", 3, 17 + 19, 1),
        ("researcher", 1, 0, 1),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_agents_as_tools_nest_inside_each_other(
    mode: str, captured_spans: CapturedSpans
) -> None:
    class FetcherModel(ScriptedModel):
        model = "fetcher-llm"

    fetcher = Agent(
        name="fetcher",
        model=FetcherModel([ModelStep(output=[assistant_message("raw: sunny")])]),
    )
    calls_fetcher = [
        ModelStep(output=[function_call("fetch", {"input": "Oslo"}, call_id="f1")]),
        ModelStep(output=[assistant_message("sunny in Oslo")]),
    ]
    fetch_tool = fetcher.as_tool("fetch", "Fetch raw data.")
    await run(as_tool_team(calls_fetcher, [fetch_tool]), mode)
    fetch = one(captured_spans, "execute_tool fetch")
    inner = one(captured_spans, "invoke_agent fetcher")
    assert parent_of(captured_spans, inner) == fetch
    assert fetch.attributes["gen_ai.agent.name"] == "researcher"
    assert ancestors(captured_spans, fetch)[:3] == [
        "agent_step researcher",
        "invoke_agent researcher",
        "execute_tool research",
    ]
    (chat,) = chats(captured_spans, "fetcher-llm")
    assert chat.attributes["gen_ai.agent.name"] == "fetcher"
    found = check_totals(captured_spans.spans, model_calls=5)
    assert [
        (lv.agent, lv.depth, lv.model_calls, lv.tool_calls, lv.nested_runs) for lv in found
    ] == [
        ("planner", 0, 5, 2, 2),
        ("researcher", 1, 3, 1, 1),
        ("fetcher", 2, 1, 0, 0),
    ]


@pytest.fixture
def openinference(captured_spans: CapturedSpans) -> Iterator[None]:
    """OpenInference's OpenAI Agents instrumentor, exporting to the same provider."""
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=captured_spans.provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("openinference")
async def test_with_openinference_an_agent_tools_calls_appear_once(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await run(as_tool_team(), mode)
    assert {
        s.instrumentation_scope.name for s in captured_spans.spans if s.instrumentation_scope
    } <= {
        "runnertrace",
        "user-code",
    }
    assert len(chats(captured_spans, "researcher-llm")) == len(TOKENS["researcher-llm"])
    assert len(captured_spans.by_name("execute_tool lookup")) == 1
    assert levels(captured_spans, 4) == AS_TOOL_LEVELS  # no span of theirs counts a call


async def cancel_inside_an_agent_tool(mode: str, captured_spans: CapturedSpans) -> OpenSpanTracker:
    """Run the planner and cancel it while its agent tool's model call hangs."""
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    reached = asyncio.Event()

    async def hang(call: Any) -> ModelStep:
        reached.set()
        await asyncio.Event().wait()  # until cancelled
        raise AssertionError("never answered")

    task = asyncio.create_task(run(as_tool_team([ModelStep.respond(hang)]), mode))
    await reached.wait()
    await cancel_and_settle(task)
    return tracker


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_the_run_ends_an_agent_tools_run_as_cancelled(
    mode: str, captured_spans: CapturedSpans
) -> None:
    tracker = await cancel_inside_an_agent_tool(mode, captured_spans)
    assert not tracker.open  # everything, the agent tool's run included, ended
    inner = one(captured_spans, "invoke_agent researcher")
    assert inner.attributes["runnertrace.cancelled"] is True
    assert parent_of(captured_spans, inner) == one(captured_spans, "execute_tool research")


@pytest.mark.parametrize(
    "mode",
    MODES,
)
async def test_a_cancelled_run_still_counts_its_agent_tools_run(
    mode: str, captured_spans: CapturedSpans
) -> None:
    await cancel_inside_an_agent_tool(mode, captured_spans)
    # the cancelled runs' totals add up, the hung call counted in both
    found = check_totals(captured_spans.spans, model_calls=2)
    assert [(lv.agent, lv.model_calls, lv.input_tokens) for lv in found] == [
        ("planner", 2, 17),
        ("researcher", 1, 0),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_agent_tool_ends_with_its_own_call(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """The agent tool's run ends at its own cancellation, not only when the outer run's
    end sweeps it up: what told its agent tools apart (its config's registration) goes
    with it, so cancelled runs leave nothing behind in the process."""
    before = dict(nesting._origins)  # noqa: SLF001 - what earlier tests' injected faults left
    await cancel_inside_an_agent_tool(mode, captured_spans)
    assert nesting._origins == before  # noqa: SLF001 - this test's registrations are gone


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_fault_ending_an_agent_tools_run_still_forgets_its_registration(
    mode: str, variant: str, captured_spans: CapturedSpans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault of ours while the agent tool's run ends costs telemetry only: the
    registration that told its agent tools apart goes anyway (one entry leaked per
    faulted run before)."""
    from runnertrace._internal.errors import tolerate_internal_errors
    from runnertrace.runners._kit.nesting import NestedAgentRun

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected fault ending a nested run")

    for name in ("end", "fail", "cancel"):
        monkeypatch.setattr(NestedAgentRun, name, broken)
    before = dict(nesting._origins)  # noqa: SLF001 - what earlier tests' injected faults left
    with tolerate_internal_errors():
        await run(as_tool_team(**VARIANTS[variant]), mode)
    assert nesting._origins == before  # noqa: SLF001 - this run's registrations are gone
