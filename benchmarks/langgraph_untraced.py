"""What ``LangGraphRunner`` adds to LangGraph's own call, untraced and traced (issue 11 item 7).

    python benchmarks/langgraph_untraced.py            # about a minute on a busy 2-core box
    python benchmarks/langgraph_untraced.py --quick    # a smoke run

The same two-step calculator graph (``create_react_agent`` over the example's
scripted model, ``InMemorySaver``) is run in interleaved batches:

- run mode: ``LangGraphRunner.run`` untraced, and traced (``TracingRunner`` with
  ``overhead.DISCARD``: the full span lifecycle, no exporter), against a plain
  ``graph.ainvoke``;
- stream mode: ``LangGraphRunner.stream`` untraced and traced against the
  ``astream(stream_mode=["messages", "updates"], subgraphs=True)`` it drives,
  and, for reference, against ``astream_events(version="v2")``, the feed the
  runner used before.

Each ratio is the median of the per-round ratios (with their range), all
measured in this one run.
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

from frameworks import _langgraph_agent  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from overhead import DISCARD  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402
from runnertrace.runners.langgraph import LangGraphRunner  # noqa: E402

REQUEST = "What is 6 times 7?"
_ids = itertools.count()
Case = Callable[[], Awaitable[Any]]


def cases() -> dict[str, Case]:
    from runnertrace.core.models import AgentRequestText

    requests = [AgentRequestText(prompt=REQUEST)]
    plain = _langgraph_agent(LangGraphRunner())
    traced = _langgraph_agent(TracingRunner(LangGraphRunner(), settings=DISCARD))
    graph = plain.native

    def config() -> dict[str, Any]:
        return {"configurable": {"thread_id": f"t{next(_ids)}"}}

    def native_input() -> dict[str, Any]:
        return {"messages": [HumanMessage(REQUEST)]}

    async def ainvoke() -> None:
        await graph.ainvoke(native_input(), config())

    async def astream() -> None:
        stream_mode = ["messages", "updates"]
        async for _ in graph.astream(
            native_input(), config(), stream_mode=stream_mode, subgraphs=True
        ):
            pass

    async def astream_events() -> None:
        async for _ in graph.astream_events(native_input(), config(), version="v2"):
            pass

    def run(agent: Any) -> Case:
        async def go() -> None:
            await agent.runner.run(agent, Session(f"s{next(_ids)}"), requests)

        return go

    def stream(agent: Any) -> Case:
        async def go() -> None:
            async for _ in agent.runner.stream(agent, Session(f"s{next(_ids)}"), requests):
                pass

        return go

    return {
        "ainvoke": ainvoke,
        "astream": astream,
        "astream_events": astream_events,
        "run untraced": run(plain),
        "run traced": run(traced),
        "stream untraced": stream(plain),
        "stream traced": stream(traced),
    }


async def timed(case: Case, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await case()
    return (time.perf_counter() - start) / n


async def main(quick: bool) -> None:
    table = cases()
    rounds, per_round = (3, 20) if quick else (15, 60)
    for case in table.values():  # warm up every path once
        await timed(case, 5)
    samples: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(rounds):
        for name, case in table.items():  # interleaved: drift hits every case alike
            samples[name].append(await timed(case, per_round))
    pairs = [
        ("run untraced", "ainvoke"),
        ("run traced", "ainvoke"),
        ("stream untraced", "astream"),
        ("stream traced", "astream"),
        ("stream untraced", "astream_events"),
    ]
    for name in table:
        print(f"{name:>16}: {statistics.median(samples[name]) * 1e3:7.3f} ms per run")
    for ours, theirs in pairs:
        ratios = [a / b for a, b in zip(samples[ours], samples[theirs], strict=True)]
        low, high = min(ratios), max(ratios)
        print(
            f"{ours} / {theirs}: {statistics.median(ratios):.3f}x "
            f"(rounds {low:.3f}-{high:.3f}, {rounds} x {per_round} runs)"
        )


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
