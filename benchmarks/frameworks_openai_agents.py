"""What runnertrace costs on top of the OpenAI Agents SDK, as ratios measured in one run.

    python benchmarks/frameworks_openai_agents.py          # about 20-40 s

The workload is the example's offline calculator (``examples/openai_agents_agent.py``):
two model calls and one tool call per run, driven by the SDK's ``ScriptedModel``,
so the SDK's own loop is the whole "framework" cost. Rows:

- adapter: ``OpenAIRunner.run`` (untraced, no observer) vs ``agents.Runner.run``
  on the same agent and input: the cost of request conversion, history and
  the composed hooks.
- traced / untraced: ``TracingRunner(OpenAIRunner())`` vs ``OpenAIRunner()``, in
  run mode (events come from the composed hooks) and stream mode (from the
  stream mapping). Tracing exports through ``overhead.DiscardBackend``, so the
  full OTel span lifecycle is counted but no exporter.

The SDK's own tracing is switched off for every variant (``set_tracing_disabled``)
so its span bookkeeping does not dilute the ratios. Runs are timed in batches,
variants interleaved (``overhead._paired``), and each ratio is the median of the
per-round ratios, printed with their range: on a busy machine read the range too.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
os.environ.pop("OPENAI_API_KEY", None)  # offline, always

from agents import Agent, set_tracing_disabled  # noqa: E402
from agents import Runner as SdkRunner  # noqa: E402
from openai_agents_agent import OfflineModel, multiply  # noqa: E402
from overhead import DISCARD, Row, _paired  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.agent import Agent as CoreAgent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402
from runnertrace.runners.openai_agents import OpenAIRunner  # noqa: E402

PROMPT = "What is 6 times 7?"
REQUESTS = [AgentRequestText(prompt=PROMPT)]


def _agent(runner: Any) -> CoreAgent:
    native = Agent(name="calculator", model=OfflineModel(), tools=[multiply])
    return CoreAgent("calculator", runner, native)


async def measure(rounds: int, batch: int) -> list[Row]:
    plain = _agent(OpenAIRunner())
    wrapped = _agent(TracingRunner(OpenAIRunner(), DISCARD))

    async def sdk_run() -> None:
        await SdkRunner.run(plain.native, PROMPT)

    async def run_plain() -> None:
        await plain.runner.run(plain, Session("s"), REQUESTS)

    async def run_traced() -> None:
        await wrapped.runner.run(wrapped, Session("s"), REQUESTS)

    async def stream_plain() -> None:
        async for _ in plain.runner.stream(plain, Session("s"), REQUESTS):
            pass

    async def stream_traced() -> None:
        async for _ in wrapped.runner.stream(wrapped, Session("s"), REQUESTS):
            pass

    rows: list[Row] = []
    for label, base, other in (
        ("adapter: OpenAIRunner / agents.Runner.run", sdk_run, run_plain),
        ("traced/untraced, run mode", run_plain, run_traced),
        ("traced/untraced, stream mode", stream_plain, stream_traced),
    ):
        b, t, ratios = await _paired(base, other, rounds, batch)
        detail = (
            f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run, per-round ratios "
            f"{min(ratios):.2f}..{max(ratios):.2f} over {len(ratios)} rounds"
        )
        rows.append(Row(f"openai-agents {label}", statistics.median(ratios), "x", detail))
    return rows


def main() -> None:
    set_tracing_disabled(True)
    rows = asyncio.run(measure(rounds=int(os.environ.get("ROUNDS", "9")), batch=40))
    width = max(len(r.label) for r in rows)
    for row in rows:
        print(f"{row.label:<{width}}  {row.value:6.3f}{row.unit}  {row.detail}")


if __name__ == "__main__":
    main()
