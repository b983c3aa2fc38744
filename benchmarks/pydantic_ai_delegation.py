"""What the Pydantic AI delegation hook costs an untraced run (issue 28).

    python benchmarks/pydantic_ai_delegation.py            # about a minute on a busy 2-core box
    python benchmarks/pydantic_ai_delegation.py --quick    # a smoke run

The first traced Pydantic AI run wraps ``Agent.iter`` once per process, so that an
agent a traced run's tool runs (``await other.run(..., usage=ctx.usage)``) is traced
as a nested run. Every Pydantic AI run in the process goes through that wrapper
afterwards, traced or not; outside a traced run's tool it reads one context variable
and calls the original. This measures what that costs an untraced run, with the hook
installed against never installed, in one process: ``Agent.iter`` is the original
before the first traced run, and the two are swapped between interleaved batches.

- ``native run``: the two-step calculator (``benchmarks/frameworks.py``'s, over the
  example's ``FunctionModel``), ``agent.run`` with no runner of ours;
- ``native delegation``: an agent whose tool runs another agent with
  ``usage=ctx.usage`` (two runs through the hook, one inside a tool), untraced;
- ``runner run`` / ``runner stream``: the calculator through an untraced
  ``PydanticAIRunner``;
- ``iter() alone``: ``agent.iter(...)`` made and dropped, never entered: the wrapper's
  own cost, per call, with nothing around it.

Each ratio is the median of the per-round ratios (hooked / never installed, with
their range), all measured in this one run.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from frameworks import _pydantic_ai_agent  # noqa: E402
from overhead import DISCARD  # noqa: E402
from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402
from runnertrace.runners.pydantic_ai import PydanticAIRunner  # noqa: E402

REQUEST = "What is 6 times 7?"
_ids = itertools.count()
Case = Callable[[], Awaitable[Any]]


def _delegating() -> Agent[Any, str]:
    """A boss whose tool runs a joker (Pydantic AI's delegation pattern)."""

    def joker_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("A cat joke.")])

    def boss_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if messages[-1].parts[-1].part_kind == "tool-return":
            return ModelResponse(parts=[TextPart("Here it is.")])
        return ModelResponse(parts=[ToolCallPart("delegate", {}, tool_call_id="d1")])

    joker: Agent[None, str] = Agent(FunctionModel(joker_model, model_name="joker"), name="joker")
    boss: Agent[Any, str] = Agent(FunctionModel(boss_model, model_name="boss"), name="boss")

    @boss.tool
    async def delegate(ctx: RunContext[Any]) -> str:
        return (await joker.run("A joke, please.", usage=ctx.usage)).output

    return boss


def cases() -> dict[str, Case]:
    requests = [AgentRequestText(prompt=REQUEST)]
    plain = _pydantic_ai_agent(PydanticAIRunner())
    calculator = plain.native
    boss = _delegating()

    async def native_run() -> None:
        await calculator.run(REQUEST, deps={})

    async def native_delegation() -> None:
        await boss.run("Tell me a joke.")

    async def runner_run() -> None:
        await plain.runner.run(plain, Session(f"s{next(_ids)}"), requests)

    async def runner_stream() -> None:
        async for _ in plain.runner.stream(plain, Session(f"s{next(_ids)}"), requests):
            pass

    async def iter_alone() -> None:
        for _ in range(100):  # a batch: one call alone is below the timer's resolution
            calculator.iter(REQUEST, deps={})

    return {
        "native run": native_run,
        "native delegation": native_delegation,
        "runner run": runner_run,
        "runner stream": runner_stream,
        "iter() alone": iter_alone,
    }


async def install_hook() -> tuple[Any, Any]:
    """``Agent.iter`` before and after the first traced run (which installs the hook)."""
    original = Agent.iter
    traced = _pydantic_ai_agent(TracingRunner(PydanticAIRunner(), DISCARD))
    await traced.runner.run(traced, Session("install"), [AgentRequestText(prompt=REQUEST)])
    hooked = Agent.iter
    if hooked is original or getattr(hooked, "__wrapped__", None) is not original:
        raise SystemExit("the first traced run did not install the delegation hook")
    return original, hooked


async def timed(case: Case, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await case()
    return (time.perf_counter() - start) / n


async def main(quick: bool) -> None:
    original, hooked = await install_hook()
    table = cases()
    variants = {"never installed": original, "hook installed": hooked}
    rounds, per_round = (3, 10) if quick else (15, 40)
    for iter_ in variants.values():  # warm up every path once
        Agent.iter = iter_  # type: ignore[method-assign]
        for case in table.values():
            await timed(case, 5)
    samples: dict[tuple[str, str], list[float]] = {
        (name, variant): [] for name in table for variant in variants
    }
    try:
        for index in range(rounds):
            # interleaved, and the order of the two variants alternates: drift hits both alike
            order = list(variants.items()) if index % 2 == 0 else list(variants.items())[::-1]
            for name, case in table.items():
                for variant, iter_ in order:
                    Agent.iter = iter_  # type: ignore[method-assign]
                    samples[name, variant].append(await timed(case, per_round))
    finally:
        Agent.iter = hooked  # type: ignore[method-assign]
    for name in table:
        scale, unit = (1e9 / 100, "ns per call") if name == "iter() alone" else (1e6, "us per run")
        base = statistics.median(samples[name, "never installed"]) * scale
        with_hook = statistics.median(samples[name, "hook installed"]) * scale
        print(
            f"{name:>18}: {base:9.1f} | {with_hook:9.1f} {unit} (never installed | hook installed)"
        )
    wrapper_ns = (
        statistics.median(samples["iter() alone", "hook installed"])
        - statistics.median(samples["iter() alone", "never installed"])
    ) * (1e9 / 100)
    run_ns = statistics.median(samples["native run", "never installed"]) * 1e9
    print(
        f"the wrapper's own cost: {wrapper_ns:.0f} ns per iter() call, "
        f"{wrapper_ns / run_ns:.4%} of a native run"
    )
    for name in table:
        ratios = [
            a / b
            for a, b in zip(
                samples[name, "hook installed"], samples[name, "never installed"], strict=True
            )
        ]
        low, high = min(ratios), max(ratios)
        print(
            f"{name}, hook installed / never installed: {statistics.median(ratios):.3f}x "
            f"(rounds {low:.3f}-{high:.3f}, {rounds} x {per_round} runs)"
        )


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
