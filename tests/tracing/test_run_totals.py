"""A run's totals cover its subtree, one way for every path a nested run takes (issue 28).

An agent run that another agent starts is a nested run, whether a runner of ours is
called for it (the tracing layer nests it) or the framework runs it by itself
(``open_nested_run``). Either way, its totals roll up into its parent when it ends,
also when it fails or is cancelled; each model call's usage stays on its chat span.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from tests.composition_checks import check_totals
from tests.nesting_helpers import Outer, call, drive, inner_opened, inner_traced_runner
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

from runnertrace.core import events as ev
from runnertrace.core.observer import open_nested_run
from runnertrace.testing import CapturedSpans
from runnertrace.tracing import attributes as A
from runnertrace.tracing.runner import traced

MODES = ["run", "stream"]


def run_span(spans: CapturedSpans, agent: str) -> dict[str, Any]:
    (span,) = [s for s in spans.by_name(f"invoke_agent {agent}")]
    return dict(span.attributes or {})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", ["traced-runner", "open_nested_run"])
async def test_the_issues_composition_totals_2700_at_the_top_and_500_inside(
    mode: str, path: str, captured_spans: CapturedSpans
) -> None:
    inner = inner_traced_runner(mode) if path == "traced-runner" else inner_opened()
    await drive(traced(Outer(inner)), mode)

    outer, nested = run_span(captured_spans, "outer"), run_span(captured_spans, "inner")
    assert outer[A.AGG_INPUT_TOKENS] == 2700 and nested[A.AGG_INPUT_TOKENS] == 500
    assert outer[A.AGG_OUTPUT_TOKENS] == 35 and nested[A.AGG_OUTPUT_TOKENS] == 5
    assert outer[A.OWN_INPUT_TOKENS] == 2200 and outer[A.OWN_MODEL_CALLS] == 2
    assert (outer[A.AGG_MODEL_CALLS], outer[A.AGG_TOOL_CALLS], outer[A.NESTED_RUNS]) == (3, 1, 1)
    assert A.OWN_INPUT_TOKENS not in nested and A.NESTED_RUNS not in nested
    # the usage of each call is on its chat span only
    assert [A.INPUT_TOKENS in (s.attributes or {}) for s in captured_spans.spans] == [
        (s.attributes or {}).get(A.SPAN_TYPE) == "message" for s in captured_spans.spans
    ]
    levels = check_totals(captured_spans.spans, model_calls=3)
    assert [(lv.agent, lv.depth, lv.model_calls) for lv in levels] == [
        ("outer", 0, 3),
        ("inner", 1, 1),
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_nested_two_deep_rolls_up_through_its_parent(
    mode: str, captured_spans: CapturedSpans
) -> None:
    async def middle() -> None:
        await drive(
            traced(Outer(inner_opened(7), first=100, second=200)), mode, ForeignAgent("middle")
        )

    await drive(traced(Outer(middle)), mode)

    outer, mid, inner = (run_span(captured_spans, n) for n in ("outer", "middle", "inner"))
    assert (inner[A.AGG_INPUT_TOKENS], mid[A.AGG_INPUT_TOKENS], outer[A.AGG_INPUT_TOKENS]) == (
        7,
        307,
        2507,
    )
    assert (mid[A.NESTED_RUNS], outer[A.NESTED_RUNS]) == (1, 2)
    assert (mid[A.OWN_INPUT_TOKENS], outer[A.OWN_INPUT_TOKENS]) == (300, 2200)
    levels = check_totals(captured_spans.spans, model_calls=5)
    assert [(lv.agent, lv.depth) for lv in levels] == [("outer", 0), ("middle", 1), ("inner", 2)]


async def test_a_failed_or_cancelled_nested_run_still_counts_and_says_so(
    captured_spans: CapturedSpans,
) -> None:
    async def both() -> None:
        await inner_opened(fail=True)()
        await inner_opened(cancel=True)()

    await drive(traced(Outer(both)), "run")

    failed, cancelled = captured_spans.by_name("invoke_agent inner")
    chats = [s for s in captured_spans.by_name("chat fake-model")]
    # the two inner model calls were still open: each ends with its run, marked
    assert [dict(c.attributes or {}).get(A.CANCELLED) for c in chats].count(True) == 1
    assert dict(cancelled.attributes or {})[A.CANCELLED] is True
    assert A.CANCELLED not in dict(failed.attributes or {})
    outer = run_span(captured_spans, "outer")
    assert (outer[A.AGG_MODEL_CALLS], outer[A.NESTED_RUNS]) == (4, 2)
    # both open calls ended in error (the run's exception), counted in every level above
    assert outer[A.AGG_ERRORS] == 2 and outer[A.OWN_ERRORS] == 0
    check_totals(captured_spans.spans, model_calls=4)


async def test_a_cancelled_traced_run_in_run_mode_is_marked_cancelled(
    captured_spans: CapturedSpans,
) -> None:
    runner = traced(ForeignRunner(fail_at=3, error=asyncio.CancelledError()))
    with pytest.raises(asyncio.CancelledError):
        await runner.run(ForeignAgent(), ForeignSession(), [])
    root = run_span(captured_spans, "foreign")
    assert root[A.CANCELLED] is True
    # what was open when it was cancelled ends cancelled too
    (chat,) = captured_spans.by_name("chat fake-model")
    assert dict(chat.attributes or {})[A.CANCELLED] is True


# -- cost: priced by the requested model when the response names an unknown one; partial --
@pytest.mark.parametrize("mode", MODES)
async def test_a_call_is_priced_by_the_requested_model_when_the_response_names_an_unknown_one(
    mode: str, captured_spans: CapturedSpans
) -> None:
    priced = {"model": "gpt-4o", "provider": "openai"}
    runner = traced(
        ForeignRunner([*call("a", 1000, 100, **priced, response_model="scripted-model")])
    )
    await drive(runner, mode, ForeignAgent("pricing"))
    (chat,) = captured_spans.by_name("chat gpt-4o")
    cost = dict(chat.attributes or {})[A.COST]
    assert math.isclose(cost, (1000 * 2.5 + 100 * 10) / 1e6)  # gpt-4o's list price per 1M
    root = run_span(captured_spans, "pricing")
    assert math.isclose(root[A.AGG_COST], cost) and A.UNPRICED_CALLS not in root


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_with_an_unpriced_call_says_its_cost_is_partial_and_why(
    mode: str, captured_spans: CapturedSpans
) -> None:
    events = [
        *call("a", 1000, 100, model="gpt-4o", provider="openai"),
        *call("b", 10, 1, model="no-such-model", provider="openai"),
    ]
    await drive(traced(ForeignRunner(events)), mode, ForeignAgent("pricing"))
    root = run_span(captured_spans, "pricing")
    assert root[A.UNPRICED_CALLS] == 1
    assert root[A.UNPRICED_MODELS] == ("openai/no-such-model",)
    assert math.isclose(root[A.AGG_COST], (1000 * 2.5 + 100 * 10) / 1e6)
    check_totals(captured_spans.spans, model_calls=2)


async def test_unpriced_calls_in_a_nested_run_make_the_parents_cost_partial_too(
    captured_spans: CapturedSpans,
) -> None:
    await drive(traced(Outer(inner_opened(), model="gpt-4o", provider="openai")), "run")
    outer, inner = run_span(captured_spans, "outer"), run_span(captured_spans, "inner")
    assert inner[A.UNPRICED_CALLS] == 1 and A.AGG_COST not in inner
    # the outer run's own second call is priced: its total is partial (2 of 3 unpriced)
    assert outer[A.UNPRICED_CALLS] == 2 and outer[A.OWN_UNPRICED_CALLS] == 1
    assert math.isclose(outer[A.AGG_COST], outer[A.OWN_COST])
    check_totals(captured_spans.spans, model_calls=3)


async def test_a_failed_model_call_counts_as_an_error_once(captured_spans: CapturedSpans) -> None:
    broken = ev.EventError(type="RateLimit", message="slow down")
    await drive(traced(ForeignRunner(call("a", 3, error=broken))), "run", ForeignAgent("e"))
    assert run_span(captured_spans, "e")[A.AGG_ERRORS] == 1
    check_totals(captured_spans.spans, model_calls=1)


async def test_a_run_the_framework_nests_inside_a_nested_runs_tool_rolls_up_through_it(
    captured_spans: CapturedSpans,
) -> None:
    """Two framework-run agents deep (an agent tool inside an agent tool): the innermost
    run's parent is the nested run whose tool scope it started in, not the traced run."""

    async def middle() -> None:
        nested = open_nested_run("middle", mode="run")
        assert nested is not None
        for event in call("middle", 40)[:-1]:
            nested(event)
        nested(ev.ToolCallStart(tool_call_id="t2", tool_name="deeper", parent_message_id=None))
        with nested.scope("tool", "t2"):
            await inner_opened(3)()
        nested(ev.ToolCallResult(tool_call_id="t2", content="done"))
        nested(ev.StepEnd(step_name="middle", step_index=0))
        nested.finish()

    await drive(traced(Outer(middle)), "run")
    outer, mid = run_span(captured_spans, "outer"), run_span(captured_spans, "middle")
    assert (mid[A.AGG_INPUT_TOKENS], mid[A.OWN_INPUT_TOKENS]) == (43, 40)
    assert (outer[A.AGG_INPUT_TOKENS], outer[A.NESTED_RUNS]) == (2243, 2)
    levels = check_totals(captured_spans.spans, model_calls=4)
    assert [(lv.agent, lv.depth) for lv in levels] == [("outer", 0), ("middle", 1), ("inner", 2)]


async def test_a_run_cancelled_with_a_nested_run_still_open_ends_it_first_and_counts_it(
    captured_spans: CapturedSpans,
) -> None:
    """A framework may end an agent tool's run after its caller's (a done-callback), or
    never: the caller's cancellation ends it first, cancelled, its totals inside."""
    left_open: list[Any] = []

    async def inner() -> None:
        nested = open_nested_run("inner", mode="run")
        for event in call("inner", 500)[:2]:
            nested(event)  # type: ignore[misc]
        left_open.append(nested)
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await drive(traced(Outer(inner)), "run")
    inner_span = run_span(captured_spans, "inner")
    assert inner_span[A.CANCELLED] is True and inner_span[A.AGG_MODEL_CALLS] == 1
    outer = run_span(captured_spans, "outer")
    assert (outer[A.AGG_MODEL_CALLS], outer[A.NESTED_RUNS]) == (2, 1)
    left_open[0].finish()  # the framework's late end changes nothing
    assert len(captured_spans.by_name("invoke_agent inner")) == 1
    check_totals(captured_spans.spans, model_calls=2)
