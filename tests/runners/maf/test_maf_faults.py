"""A fault in any part of the MAF runner's nesting costs telemetry only.

tests/contract/test_runner_every_method.py breaks every public method of the runner's mapper
and adapter classes and every function of its ``quiet`` and ``nesting`` modules, one
at a time, on one agent with one tool: the parts that map an inner agent (the
dispatchers on an ``as_tool()`` agent, the delegation, the lending, a workflow's
agents) are never reached there, and skip. Here the same targets, found by the same
reflection, are broken on the two scenarios that reach them: an agent whose tool is
another agent (``agent.as_tool()``, the inner agent running a tool of its own), and a
workflow registered as the agent (two agents in sequence, the first running a tool).

In run mode the traced reply is the healthy one; in stream mode the traced and the
untraced stream agree under the same fault. Nothing raises, at most one line per
boundary is logged, and no span stays open. A workflow lends the framework context in
an untraced run too (its agents' tools need it), so its lending parts are reached
untraced as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("agent_framework")

from agent_framework import Agent, tool
from agent_framework.orchestrations import SequentialBuilder
from tests.contract.runner_cases import CASES, RunnerCase
from tests.contract.test_runner_contract import drive, settle
from tests.contract.test_runner_every_method import (
    Target,
    break_target,
    internal_faults,
    shape,
    targets,
)
from tests.tracing_helpers import OpenSpanTracker

from runnertrace import TracingRunner
from runnertrace._internal.errors import internal_log
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.runners.maf import MAFRunner
from runnertrace.runners.maf.testing import ScriptedChatClient, call, say
from runnertrace.testing import CapturedSpans, tolerate_internal_errors

MODES = ["run", "stream"]
(MAF,) = (case for case in CASES if case.name == "maf")


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two whole numbers."""
    return a * b


def _as_tool(wrap: Callable[[Any], Any]) -> CoreAgent:
    expert = Agent(
        ScriptedChatClient([call(("e1", "multiply", {"a": 6, "b": 7})), say("42.")]),
        "Be exact.",
        name="expert",
        tools=[multiply],
    )
    client = ScriptedChatClient(
        [call(("x1", "expert", {"task": "6 times 7?"})), say("The expert says 42.")]
    )
    native = Agent(client, name="calc", tools=[expert.as_tool()])
    return CoreAgent("calc", wrap(MAFRunner()), native)


def _workflow(wrap: Callable[[Any], Any]) -> CoreAgent:
    writer = Agent(
        ScriptedChatClient([call(("w1", "multiply", {"a": 6, "b": 7})), say("A draft: 42.")]),
        "You write.",
        name="writer",
        tools=[multiply],
    )
    editor = Agent(ScriptedChatClient([say("The final: 42.")]), "You edit.", name="editor")
    workflow = SequentialBuilder(participants=[writer, editor]).build()
    return CoreAgent("pipeline", wrap(MAFRunner()), workflow.as_agent(name="pipeline"))


SCENARIOS: dict[str, Callable[[Callable[[Any], Any]], CoreAgent]] = {
    "as_tool": _as_tool,
    "workflow": _workflow,
}


def _params(case: RunnerCase) -> list[Any]:
    found = list(targets(case))
    return [
        pytest.param(scenario, target, id=f"{scenario}-{target.label}")
        for scenario in SCENARIOS
        for target in found
    ]


def plain(runner: Any) -> Any:
    return runner


@pytest.fixture
def tracker(captured_spans: CapturedSpans) -> OpenSpanTracker:
    tracking = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracking)
    return tracking


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("scenario", "target"), _params(MAF))
async def test_a_fault_in_any_part_of_the_nesting_costs_telemetry_only(
    scenario: str,
    target: Target,
    mode: str,
    tracker: OpenSpanTracker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make = SCENARIOS[scenario]
    healthy_reply, _ = await drive(make(plain), mode)
    broken = break_target(target, monkeypatch)
    internal_log.reset()  # each test counts its own lines
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        _, untraced_events = await drive(make(plain), mode)
        reached_untraced = broken.calls
        reply, events = await drive(make(TracingRunner), mode)
    await settle()
    if broken.calls == 0:
        pytest.skip(f"{target.label} is not reached by the {scenario} scenario in {mode} mode")
    if mode == "run":
        if scenario == "as_tool":  # (a workflow lends the context untraced too)
            assert reached_untraced == 0, "untraced run mode reached the mapping"
        assert reply == healthy_reply
    else:
        assert shape(events) == shape(untraced_events)
    logged = internal_faults(caplog)
    assert 1 <= len(logged) <= 2, logged  # one per boundary it crossed: mapping, install
    assert tracker.open == {}
