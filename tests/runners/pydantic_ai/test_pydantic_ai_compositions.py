"""Pydantic AI compositions, traced (issue 28): an agent that a tool runs (delegation).

A ``boss`` agent's tool ``delegate`` runs a ``joker`` agent itself, the pattern of
Pydantic AI's multi-agent docs: ``await joker.run(..., usage=ctx.usage)`` (or
``run_stream`` / ``iter``). No runner of ours is called for the joker; the runner's
delegation hook makes its run a nested run: ``invoke_agent joker`` under the boss's
``execute_tool delegate``, its chats and tools inside, each model call once. Pydantic
AI's own usage is cumulative there (the joker adds to the boss's ``RunUsage``); the
totals on each ``invoke_agent`` must still count each call once: the boss's its whole
subtree, the joker's its own calls.

The hook is process-wide (Pydantic AI has no registry of capabilities): it is installed
by the first traced run, does nothing outside a traced run's tool, and leaves the app's
own ``Agent.instrument_all()`` working without counting a call twice.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole.
import pytest

pytest.importorskip(
    "pydantic_ai", reason="needs the pydantic-ai extra: pip install -e '.[dev,pydantic-ai]'"
)

import asyncio
import inspect
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from itertools import count
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage, RunUsage
from tests.composition_checks import check_totals
from tests.fidelity_helpers import MODES, attrs, one, parent_of
from tests.tracing_helpers import OpenSpanTracker, cancel_and_settle

from runnertrace import TracingRunner
from runnertrace.core import Session, observing
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners._kit.adapter import is_guarded
from runnertrace.runners.pydantic_ai import PydanticAIRunner, nesting
from runnertrace.testing import CapturedSpans, tolerate_internal_errors
from runnertrace.tracing import attributes as A

REPO = Path(__file__).resolve().parents[3]
QUESTION = [AgentRequestText(prompt="Tell me a joke about cats.")]
user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


# -- the scripted models ---------------------------------------------------------------------------
class PricedFunctionModel(FunctionModel):
    """A ``FunctionModel`` that names a provider with prices (so its calls get a cost)."""

    @property
    def system(self) -> str:
        return "openai"


class Script:
    """A model that asks for ``calls`` (all in one response), then, once their results
    are back, answers ``answer``. Run mode reports ``tokens`` (first response, answer);
    stream mode gets Pydantic AI's own estimate. ``hang``: the answer never comes."""

    def __init__(
        self,
        name: str,
        calls: list[tuple[str, dict[str, Any]]],
        answer: str,
        tokens: tuple[tuple[int, int], tuple[int, int]] = ((10, 2), (12, 3)),
        *,
        priced: bool = False,
        fail: BaseException | None = None,
        hang: asyncio.Event | None = None,
    ) -> None:
        self.name, self.calls, self.answer, self.tokens = name, calls, answer, tokens
        self.priced, self.fail, self.hang = priced, fail, hang
        self.ids = count(1)
        self.answered = 0  # model calls that returned a response

    def model(self) -> FunctionModel:
        kind = PricedFunctionModel if self.priced else FunctionModel
        return kind(self.respond, stream_function=self.stream, model_name=self.name)

    async def _parts(self, messages: list[ModelMessage]) -> tuple[list[Any], int]:
        if self.fail is not None:
            raise self.fail
        returned = any(isinstance(p, ToolReturnPart) for p in messages[-1].parts)
        if returned or not self.calls:
            if self.hang is not None:
                self.hang.set()
                await asyncio.Event().wait()  # until cancelled
            return [TextPart(self.answer)], 1
        parts = [
            ToolCallPart(tool, args, tool_call_id=f"{self.name}-{next(self.ids)}")
            for tool, args in self.calls
        ]
        return parts, 0

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts, turn = await self._parts(messages)
        self.answered += 1
        tokens_in, tokens_out = self.tokens[turn]
        usage = RequestUsage(input_tokens=tokens_in, output_tokens=tokens_out)
        return ModelResponse(parts=parts, usage=usage)

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        parts, _ = await self._parts(messages)
        self.answered += 1
        if isinstance(parts[0], TextPart):
            text = parts[0].content
            yield text[: len(text) // 2]
            yield text[len(text) // 2 :]
            return
        yield {
            index: DeltaToolCall(
                part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
            )
            for index, part in enumerate(parts)
        }


# -- the agents ------------------------------------------------------------------------------------
async def delegate_by(style: str, agent: Agent[Any, Any], prompt: str, usage: RunUsage) -> str:
    """Run ``agent`` the way a tool would, in ``style``, sharing the caller's usage."""
    if style == "run":
        return str((await agent.run(prompt, usage=usage)).output)
    if style == "run_stream":
        async with agent.run_stream(prompt, usage=usage) as streamed:
            return str(await streamed.get_output())
    if style == "iter":
        async with agent.iter(prompt, usage=usage) as agent_run:
            async for _ in agent_run:
                pass
        assert agent_run.result is not None
        return str(agent_run.result.output)
    raise AssertionError(style)


STYLES = ["run", "run_stream", "iter"]


class Team:
    """``boss`` delegates to ``joker`` through its tool ``delegate``; the joker looks
    something up with its own tool ``lookup`` (which opens a user span)."""

    def __init__(
        self,
        style: str = "run",
        *,
        boss: Script | None = None,
        joker: Script | None = None,
        **agent_kw: Any,
    ) -> None:
        self.boss_llm = boss or Script(
            "boss-llm", [("delegate", {"topic": "cats"})], "Here it is.", ((11, 3), (13, 4))
        )
        self.joker_llm = joker or Script(
            "joker-llm", [("lookup", {"topic": "cats"})], "A cat joke.", ((7, 2), (5, 1))
        )
        self.joker: Agent[Any, Any] = Agent(self.joker_llm.model(), name="joker", **agent_kw)
        self.boss: Agent[Any, Any] = Agent(self.boss_llm.model(), name="boss", **agent_kw)
        self.own_usage: list[RunUsage] = []  # what each delegated run added to ctx.usage
        self.run_usage: list[RunUsage] = []  # the boss's own RunUsage (ctx.usage), per call

        @self.joker.tool_plain
        def lookup(topic: str) -> str:
            with user["tracer"].start_as_current_span("db.query lookup"):
                return f"{topic} are liquid"

        @self.boss.tool
        async def delegate(ctx: RunContext[Any], topic: str) -> str:
            if not any(usage is ctx.usage for usage in self.run_usage):
                self.run_usage.append(ctx.usage)
            before = RunUsage(
                requests=ctx.usage.requests,
                input_tokens=ctx.usage.input_tokens,
                output_tokens=ctx.usage.output_tokens,
            )
            output = await delegate_by(style, self.joker, f"A joke about {topic}.", ctx.usage)
            self.own_usage.append(
                RunUsage(
                    requests=ctx.usage.requests - before.requests,
                    input_tokens=ctx.usage.input_tokens - before.input_tokens,
                    output_tokens=ctx.usage.output_tokens - before.output_tokens,
                )
            )
            return output

    @property
    def calls(self) -> int:
        return self.boss_llm.answered + self.joker_llm.answered

    def traced(self) -> CoreAgent:
        return CoreAgent("boss", TracingRunner(PydanticAIRunner()), self.boss)

    def untraced(self) -> CoreAgent:
        return CoreAgent("boss", PydanticAIRunner(), self.boss)


async def drive(agent: CoreAgent, mode: str) -> Any:
    if mode == "run":
        return await agent.runner.run(agent, Session("s1"), QUESTION)
    async for _ in agent.runner.stream(agent, Session("s1"), QUESTION):
        pass
    return None


def ancestors(spans: CapturedSpans, span: ReadableSpan) -> list[str]:
    names: list[str] = []
    while span.parent is not None:
        span = parent_of(spans, span)
        names.append(span.name)
    return names


DELEGATION_TREE = [
    (
        "invoke_agent boss",
        [
            (
                "agent_step boss",
                [
                    ("chat boss-llm", []),
                    (
                        "execute_tool delegate",
                        [
                            (
                                "invoke_agent joker",
                                [
                                    (
                                        "agent_step joker",
                                        [
                                            ("chat joker-llm", []),
                                            (
                                                "execute_tool lookup",
                                                [("db.query lookup", [])],
                                            ),
                                        ],
                                    ),
                                    ("agent_step joker", [("chat joker-llm", [])]),
                                ],
                            )
                        ],
                    ),
                ],
            ),
            ("agent_step boss", [("chat boss-llm", [])]),
        ],
    )
]


# -- the tree and the totals -----------------------------------------------------------------------
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("mode", MODES)
async def test_a_delegated_agent_is_an_invoke_agent_span_under_the_tool_that_ran_it(
    mode: str, style: str, captured_spans: CapturedSpans
) -> None:
    team = Team(style)
    await drive(team.traced(), mode)
    assert captured_spans.tree() == DELEGATION_TREE
    inner = one(captured_spans, "invoke_agent joker")
    tool = one(captured_spans, "execute_tool delegate")
    assert attrs(inner)[A.AGENT_NAME] == "joker"
    assert attrs(tool)[A.AGENT_NAME] == "boss"
    for chat in captured_spans.by_name("chat joker-llm"):
        assert attrs(chat)[A.AGENT_NAME] == "joker"
    assert attrs(one(captured_spans, "execute_tool lookup"))[A.AGENT_NAME] == "joker"
    assert inner.end_time is not None and tool.end_time is not None
    assert inner.end_time <= tool.end_time  # the delegated run ends inside its tool


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("mode", MODES)
async def test_each_call_counts_once_and_each_run_totals_its_subtree(
    mode: str, style: str, captured_spans: CapturedSpans
) -> None:
    team = Team(style)
    reply = await drive(team.traced(), mode)
    assert team.calls == 4
    boss, joker = check_totals(captured_spans.spans, model_calls=team.calls)
    assert (boss.agent, boss.depth, joker.agent, joker.depth) == ("boss", 0, "joker", 1)
    assert (boss.model_calls, boss.own_model_calls, boss.tool_calls) == (4, 2, 2)
    assert (joker.model_calls, joker.own_model_calls, joker.tool_calls) == (2, 2, 1)
    # Pydantic AI's own usage is cumulative (usage=ctx.usage): the delegate's calls are
    # in the boss's RunUsage once, and the joker's share is what its run added to it.
    (added,) = team.own_usage
    assert (joker.input_tokens, joker.output_tokens) == (added.input_tokens, added.output_tokens)
    assert added.requests == joker.model_calls
    # A streamed call's usage is Pydantic AI's estimate; the others report the script's.
    boss_own = (11 + 13, 3 + 4) if mode == "run" else None
    joker_own = (7 + 5, 2 + 1) if style != "run_stream" else None
    if joker_own is not None:
        assert (joker.input_tokens, joker.output_tokens) == joker_own
    if boss_own is not None and joker_own is not None:
        assert boss.input_tokens == boss_own[0] + joker_own[0]
        assert boss.output_tokens == boss_own[1] + joker_own[1]
    if mode == "run":
        assert reply is not None and reply.text == "Here it is."
    root = attrs(one(captured_spans, "invoke_agent boss"))
    assert root[A.NESTED_RUNS] == 1
    assert root[A.OWN_INPUT_TOKENS] == boss.input_tokens - joker.input_tokens
    assert A.NESTED_RUNS not in attrs(one(captured_spans, "invoke_agent joker"))


@pytest.mark.parametrize("mode", MODES)
async def test_the_boss_runs_cumulative_usage_equals_its_subtree_total(
    mode: str, captured_spans: CapturedSpans
) -> None:
    """Pydantic AI's own figure for the whole run (the boss's ``RunUsage``, which the
    delegate added to) is what our root span says: each call once, none left out; the
    joker's span says less, its own calls only."""
    team = Team()
    await drive(team.traced(), mode)
    (usage,) = team.run_usage  # the boss's RunUsage object, final once the run ended
    boss, joker = check_totals(captured_spans.spans, model_calls=4)
    assert (usage.input_tokens, usage.output_tokens) == (boss.input_tokens, boss.output_tokens)
    assert usage.requests == boss.model_calls
    assert joker.input_tokens < usage.input_tokens


@pytest.mark.parametrize("mode", MODES)
async def test_a_priced_delegate_makes_the_boss_cost_partial_and_its_own_whole(
    mode: str, captured_spans: CapturedSpans
) -> None:
    joker = Script(
        "gpt-4o-mini",
        [("lookup", {"topic": "cats"})],
        "A cat joke.",
        ((700, 20), (500, 10)),
        priced=True,
    )
    team = Team(joker=joker)
    await drive(team.traced(), mode)
    boss, inner = check_totals(captured_spans.spans, model_calls=4)
    assert inner.cost is not None and inner.cost > 0 and inner.unpriced == 0
    assert boss.cost == pytest.approx(inner.cost) and boss.unpriced == 2
    root = attrs(one(captured_spans, "invoke_agent boss"))
    assert root[A.UNPRICED_MODELS] == ("function/boss-llm",)
    assert A.OWN_COST not in root and root[A.OWN_UNPRICED_CALLS] == 2
    assert A.UNPRICED_CALLS not in attrs(one(captured_spans, "invoke_agent joker"))


@pytest.mark.parametrize("mode", MODES)
async def test_a_delegate_of_a_delegate_nests_and_totals_at_three_levels(
    mode: str, captured_spans: CapturedSpans
) -> None:
    punster_llm = Script("punster-llm", [], "A pun.", ((3, 1), (3, 1)))
    punster: Agent[Any, Any] = Agent(punster_llm.model(), name="punster")
    joker = Script("joker-llm", [("ask_punster", {})], "A cat pun.", ((7, 2), (5, 1)))
    team = Team(joker=joker)

    @team.joker.tool
    async def ask_punster(ctx: RunContext[Any]) -> str:
        return str((await punster.run("A pun, please.", usage=ctx.usage)).output)

    await drive(team.traced(), mode)
    calls = team.calls + punster_llm.answered
    assert calls == 5
    levels = check_totals(captured_spans.spans, model_calls=calls)
    assert [(level.agent, level.depth, level.model_calls) for level in levels] == [
        ("boss", 0, 5),
        ("joker", 1, 3),
        ("punster", 2, 1),
    ]
    inner = one(captured_spans, "invoke_agent punster")
    assert ancestors(captured_spans, inner)[:3] == [
        "execute_tool ask_punster",
        "agent_step joker",
        "invoke_agent joker",
    ]
    assert attrs(one(captured_spans, "invoke_agent boss"))[A.NESTED_RUNS] == 2
    assert attrs(one(captured_spans, "invoke_agent joker"))[A.NESTED_RUNS] == 1


@pytest.mark.parametrize("mode", MODES)
async def test_parallel_delegates_sharing_ctx_usage_each_nest_under_their_own_tool(
    mode: str, captured_spans: CapturedSpans
) -> None:
    boss = Script(
        "boss-llm",
        [("delegate", {"topic": "cats"}), ("delegate", {"topic": "dogs"})],
        "Two jokes.",
        ((11, 3), (13, 4)),
    )
    team = Team(boss=boss)
    await drive(team.traced(), mode)
    assert team.calls == 6
    levels = check_totals(captured_spans.spans, model_calls=team.calls)
    assert [(level.agent, level.depth, level.model_calls) for level in levels] == [
        ("boss", 0, 6),
        ("joker", 1, 2),
        ("joker", 1, 2),
    ]
    tools = captured_spans.by_name("execute_tool delegate")
    inners = captured_spans.by_name("invoke_agent joker")
    assert sorted(parent_of(captured_spans, s).context.span_id for s in inners) == sorted(
        s.context.span_id for s in tools
    )
    if mode == "run":
        assert [level.input_tokens for level in levels] == [11 + 13 + 2 * (7 + 5), 12, 12]


# -- failure and cancellation ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_a_failed_delegate_ends_its_run_with_the_error_and_still_rolls_up(
    mode: str, captured_spans: CapturedSpans
) -> None:
    joker = Script("joker-llm", [], "never", fail=ConnectionError("joker endpoint reset"))
    team = Team(joker=joker)
    with pytest.raises(ConnectionError, match="joker endpoint reset"):
        await drive(team.traced(), mode)
    inner = one(captured_spans, "invoke_agent joker")
    (failed,) = captured_spans.by_name("chat joker-llm")
    for span in (inner, failed):
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)[A.ERROR_TYPE] == "ConnectionError"
    assert parent_of(captured_spans, inner) == one(captured_spans, "execute_tool delegate")
    boss, joker_level = check_totals(captured_spans.spans, model_calls=2)
    assert (boss.model_calls, boss.errors, joker_level.errors) == (2, 2, 1)


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_the_run_ends_the_delegated_run_as_cancelled(
    mode: str, captured_spans: CapturedSpans
) -> None:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    reached = asyncio.Event()
    joker = Script("joker-llm", [("lookup", {"topic": "cats"})], "never", hang=reached)
    team = Team(joker=joker)
    task = asyncio.create_task(drive(team.traced(), mode))
    await reached.wait()
    await cancel_and_settle(task)
    assert tracker.started > 0 and not tracker.open  # everything ended
    inner = one(captured_spans, "invoke_agent joker")
    assert attrs(inner)[A.CANCELLED] is True
    assert parent_of(captured_spans, inner) == one(captured_spans, "execute_tool delegate")
    boss, joker_level = check_totals(captured_spans.spans)
    assert (boss.model_calls, joker_level.model_calls) == (3, 2)


# -- a fault in the delegation hook ---------------------------------------------------------------
# Every public method of the delegation (found by reflection, so a new one is covered too):
# the contract suite's calculator delegates to no one, so only this reaches them. A guarded
# one has its body broken under the guard; one left unguarded is broken whole, and fails.
# ``around`` passes the delegate's own exceptions through: its parts are the others.
DELEGATION = nesting._Delegation  # noqa: SLF001 - broken one part at a time
DELEGATION_PARTS = sorted(
    name
    for name, value in vars(DELEGATION).items()
    if not name.startswith("_")
    and inspect.isfunction(getattr(value, "__func__", value))
    and name != "around"
)


def renamed(*args: Any, **kwargs: Any) -> Any:
    raise KeyError("an attribute Pydantic AI renamed")


@pytest.mark.parametrize("part", DELEGATION_PARTS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_fault_in_the_delegation_costs_telemetry_only(
    mode: str,
    part: str,
    captured_spans: CapturedSpans,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    expected = await drive(Team().untraced(), mode)
    value = vars(DELEGATION)[part]
    function = getattr(value, "__func__", value)
    if is_guarded(function):
        monkeypatch.setattr(function, "__wrapped__", renamed)
    else:
        whole = classmethod(renamed) if isinstance(value, classmethod) else renamed
        monkeypatch.setattr(DELEGATION, part, whole)
    caplog.set_level(logging.WARNING, logger="runnertrace")
    team = Team()
    with tolerate_internal_errors():
        reply = await drive(team.traced(), mode)
    await asyncio.sleep(0)
    assert reply == expected
    assert team.calls == 4  # both agents answered, twice each
    logged = [r.getMessage() for r in caplog.records if r.name == "runnertrace"]
    assert len(logged) == 1 and "internal error in pydantic_ai mapping" in logged[0], logged
    assert tracker.started > 0 and not tracker.open
    assert one(captured_spans, "execute_tool delegate").status.status_code is not StatusCode.ERROR


# -- the hook is scoped to traced runs -------------------------------------------------------------
@pytest.fixture
def delegations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The agents whose ``iter`` the hook looked past its one context-variable read at."""
    seen: list[str] = []
    delegation = nesting._Delegation  # noqa: SLF001 - counted, not changed
    original = delegation.open

    def counting(cls: Any, agent: Any, args: Any, kwargs: Any) -> Any:
        seen.append(agent.name)
        return original(agent, args, kwargs)

    monkeypatch.setattr(delegation, "open", classmethod(counting))
    return seen


@pytest.mark.parametrize("mode", MODES)
async def test_an_untraced_delegating_agent_in_the_same_process_makes_no_span(
    mode: str, captured_spans: CapturedSpans, delegations: list[str]
) -> None:
    await drive(Team().traced(), mode)  # installs the hook (if no test did before)
    assert hasattr(Agent.iter, "__wrapped__")
    assert delegations == ["joker"]  # (the count below can fail)
    delegations.clear()
    captured_spans.clear()
    untraced = Team()
    await drive(untraced.untraced(), mode)
    assert (await untraced.boss.run("Again?")).output == "Here it is."
    seen: list[ev.StreamEvent] = []
    observed = Team()
    with observing(seen.append):  # observed, but no tracing layer: nothing to nest in
        await drive(observed.untraced(), "run")
    assert scopes(captured_spans.spans) == {"user-code"}  # the lookups' own spans only
    assert len(captured_spans.by_name("db.query lookup")) == 3
    assert untraced.calls == 8 and observed.calls == 4
    assert {e.step_name for e in seen if isinstance(e, ev.StepStart)} == {"boss"}
    # Outside a traced run's tool the hook reads its context variable and goes no further,
    # except inside the observed run's tool (observed by a runner: nothing nests there).
    assert delegations == ["joker"]


@pytest.mark.parametrize("mode", MODES)
async def test_an_untraced_run_beside_a_traced_one_stays_untraced(
    mode: str, captured_spans: CapturedSpans, delegations: list[str]
) -> None:
    traced, untraced = Team(), Team()
    await asyncio.gather(drive(traced.traced(), mode), untraced.boss.run("Concurrently?"))
    assert untraced.calls == 4
    assert delegations == ["joker"]  # the traced boss's delegate only
    assert len(captured_spans.by_name("invoke_agent joker")) == 1
    check_totals(captured_spans.spans, model_calls=traced.calls)


@pytest.mark.parametrize("mode", MODES)
async def test_a_traced_runner_called_in_a_tool_is_nested_once_by_the_tracing_layer(
    mode: str, captured_spans: CapturedSpans
) -> None:
    team = Team()
    inner_agent = CoreAgent("joker", TracingRunner(PydanticAIRunner()), team.joker)
    untraced_agent = CoreAgent("joker", PydanticAIRunner(), team.joker)

    @team.boss.tool_plain
    async def ask_runners() -> str:
        traced_reply = await inner_agent.runner.run(inner_agent, Session("i"), QUESTION)
        untraced_reply = await untraced_agent.runner.run(untraced_agent, Session("u"), QUESTION)
        return f"{traced_reply} / {untraced_reply}"

    team.boss_llm.calls = [("ask_runners", {})]
    await drive(team.traced(), mode)
    # The traced runner's run: one invoke_agent, the tracing layer's; the untraced
    # runner's run stays untraced (a runner of ours decides how it is traced).
    (inner,) = captured_spans.by_name("invoke_agent joker")
    assert parent_of(captured_spans, inner) == one(captured_spans, "execute_tool ask_runners")
    assert team.joker_llm.answered == 4
    levels = check_totals(captured_spans.spans, model_calls=team.calls - 2)
    assert [(level.agent, level.model_calls) for level in levels] == [("boss", 4), ("joker", 2)]


PROBE_INSTALL = """
import asyncio, json
from pydantic_ai import Agent
import runnertrace.runners.pydantic_ai
from runnertrace import TracingRunner
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.pydantic_ai import PydanticAIRunner
from runnertrace.tracing.config import TraceConfig
from pydantic_ai.models.test import TestModel

original = Agent.iter
seen = {"at import": Agent.iter is original}
agent = Agent(TestModel(), name="solo")
requests = [AgentRequestText(prompt="hi")]

async def main():
    plain = CoreAgent("solo", PydanticAIRunner(), agent)
    await plain.runner.run(plain, Session("a"), requests)
    async for _ in plain.runner.stream(plain, Session("b"), requests):
        pass
    await agent.run("native")
    seen["after untraced runs"] = Agent.iter is original
    runner = TracingRunner(PydanticAIRunner(), TraceConfig(type="tests.backends.MemoryBackend"))
    traced = CoreAgent("solo", runner, agent)
    await traced.runner.run(traced, Session("c"), requests)
    seen["after a traced run"] = Agent.iter is original
    seen["wraps the original"] = Agent.iter.__wrapped__ is original
    hooked = Agent.iter
    await traced.runner.run(traced, Session("d"), requests)
    seen["installed once"] = Agent.iter is hooked

asyncio.run(main())
print(json.dumps(seen))
"""


def probe(code: str, tmp_path: Path) -> dict[str, Any]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OTEL_", "PYTEST_", "LOGFIRE_"))
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env={**env, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_hook_is_installed_by_the_first_traced_run_not_at_import(tmp_path: Path) -> None:
    assert probe(PROBE_INSTALL, tmp_path) == {
        "at import": True,
        "after untraced runs": True,
        "after a traced run": False,
        "wraps the original": True,
        "installed once": True,
    }


# -- alongside the app's own instrumentation -------------------------------------------------------
@pytest.fixture
def instrument_all(captured_spans: CapturedSpans) -> Iterator[Callable[[], list[ReadableSpan]]]:
    """``Agent.instrument_all()`` on, onto the very provider our spans go to (the worst
    case: a call Pydantic AI also recorded would be counted twice in one trace)."""
    Agent.instrument_all(InstrumentationSettings(tracer_provider=captured_spans.provider))
    try:
        yield lambda: [s for s in captured_spans.spans if s.instrumentation_scope is not None]
    finally:
        Agent.instrument_all(False)


def scopes(spans: list[ReadableSpan]) -> set[str]:
    return {s.instrumentation_scope.name for s in spans if s.instrumentation_scope is not None}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("mode", MODES)
async def test_with_instrument_all_on_each_call_counts_once(
    mode: str,
    style: str,
    captured_spans: CapturedSpans,
    instrument_all: Callable[[], list[ReadableSpan]],
) -> None:
    untraced = Team(style)
    await drive(untraced.untraced(), mode)
    # Untraced, the spans are Pydantic AI's own, for both agents (so the check below can fail).
    theirs = instrument_all()
    assert scopes(theirs) == {"pydantic-ai", "user-code"}
    assert sorted(s.name for s in theirs if s.name.startswith("invoke_agent")) == [
        "invoke_agent boss",
        "invoke_agent joker",
    ]
    captured_spans.clear()
    team = Team(style)
    await drive(team.traced(), mode)
    assert scopes(captured_spans.spans) == {"runnertrace", "user-code"}
    assert captured_spans.tree() == DELEGATION_TREE
    check_totals(captured_spans.spans, model_calls=team.calls)


@pytest.mark.parametrize("how", ["agent.instrument", "capability"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_delegate_instrumented_on_its_own_counts_once(
    mode: str, how: str, captured_spans: CapturedSpans
) -> None:
    settings = InstrumentationSettings(tracer_provider=captured_spans.provider)
    kw: dict[str, Any] = {}
    if how == "capability":
        kw["capabilities"] = [Instrumentation(settings=settings)]
    untraced, team = Team(**kw), Team(**kw)
    if how == "agent.instrument":
        untraced.joker.instrument = team.joker.instrument = settings
    await untraced.boss.run("Untraced?")
    assert "invoke_agent joker" in [s.name for s in captured_spans.spans]  # (the check can fail)
    captured_spans.clear()
    await drive(team.traced(), mode)
    assert scopes(captured_spans.spans) == {"runnertrace", "user-code"}
    check_totals(captured_spans.spans, model_calls=team.calls)


# -- an app provider (the global one), with Pydantic AI instrumented onto it too -------------------
APP_PROVIDER = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

provider, exporter = TracerProvider(), InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from pydantic_ai import Agent
from tests.composition_checks import check_totals
import tests.runners.pydantic_ai.test_pydantic_ai_compositions as t
from runnertrace import traced
from runnertrace.runners.pydantic_ai import PydanticAIRunner
from runnertrace.tracing.config import TraceConfig
from runnertrace.core.agent import Agent as CoreAgent

t.user["tracer"] = trace.get_tracer("user-code")

def seen(team):
    # A process's first priced calls end once the price table is in (off the run's path):
    # flushing the provider settles them, as an app reading its exporter must.
    provider.force_flush()
    spans = list(exporter.get_finished_spans())
    exporter.clear()
    by_id = {s.context.span_id: s for s in spans}
    def name(s):
        parent = by_id.get(s.parent.span_id) if s.parent else None
        return parent.name if parent else None
    out = {
        "scopes": sorted({s.instrumentation_scope.name for s in spans}),
        "names": sorted(s.name for s in spans),
        "calls": team.calls,
        "joker parent": [name(s) for s in spans if s.name == "invoke_agent joker"],
        "db parent": [name(s) for s in spans if s.name == "db.query lookup"],
    }
    if "runnertrace" in out["scopes"]:
        out["levels"] = [
            [lv.agent, lv.depth, lv.model_calls, lv.input_tokens]
            for lv in check_totals(spans, model_calls=team.calls)
        ]
    return out

async def main():
    report = {}
    for instrumented in (False, True):
        Agent.instrument_all(instrumented)  # onto the global provider, as logfire does
        for mode in ("run", "stream"):
            key = f"{'instrumented ' if instrumented else ''}{mode}"
            team = t.Team()
            await t.drive(team.untraced(), mode)
            report[f"untraced {key}"] = seen(team)
            team = t.Team()
            runner = traced(PydanticAIRunner(), TraceConfig(type="app"))
            await t.drive(CoreAgent("boss", runner, team.boss), mode)
            report[f"traced {key}"] = seen(team)
    print(json.dumps(report))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def app_spans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return probe(APP_PROVIDER, tmp_path_factory.mktemp("app"))


@pytest.mark.parametrize("instrumented", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_with_an_app_provider_the_delegate_nests_and_each_call_counts_once(
    mode: str, instrumented: bool, app_spans: dict[str, Any]
) -> None:
    key = f"{'instrumented ' if instrumented else ''}{mode}"
    untraced = app_spans[f"untraced {key}"]
    if instrumented:  # Pydantic AI's spans, onto the app's provider (so the check can fail)
        assert untraced["scopes"] == ["pydantic-ai", "user-code"]
        assert "invoke_agent joker" in untraced["names"]
    else:
        assert untraced["scopes"] == ["user-code"]
    got = app_spans[f"traced {key}"]
    assert got["scopes"] == ["runnertrace", "user-code"]
    assert got["joker parent"] == ["execute_tool delegate"]
    assert got["db parent"] == ["execute_tool lookup"]
    assert [level[:3] for level in got["levels"]] == [["boss", 0, 4], ["joker", 1, 2]]
    assert got["calls"] == 4
