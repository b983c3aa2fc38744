"""What the GenAI metrics add to a traced run, measured in one run (ratios, not targets).

Run it with ``python benchmarks/metrics.py``. It traces the native agent
(``ScriptedLlm``, three model calls and two tool calls per run) to the ``local``
backend with ``trace.metrics`` on and off, interleaved, and prints:

* the run's own thread: CPU per run (what the traced task pays; metrics are
  recorded on a worker thread, so this should barely move);
* the whole process: CPU per run including every background thread (the
  worker that records metrics, the exporters), after a flush;
* the price lookup per model call (``usage_cost`` for a priced model).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.cost import usage_cost
from runnertrace.tracing.setup import get_tracing_setup

REQUESTS = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]


def agent(config: TraceConfig) -> CoreAgent:
    runner = TracingRunner(NativeRunner(), config)
    return CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))


async def batch(wrapped: CoreAgent, config: TraceConfig, n: int) -> tuple[float, float]:
    """(run-thread CPU s, process CPU s) per run over ``n`` runs, including the flush."""
    gc.collect()
    thread0, process0 = time.thread_time(), time.process_time()
    for _ in range(n):
        await wrapped.runner.run(wrapped, Session("s"), REQUESTS)
    thread1 = time.thread_time()
    get_tracing_setup(config).flush()
    process1 = time.process_time()
    return (thread1 - thread0) / n, (process1 - process0) / n


async def main(rounds: int = 12, n: int = 100) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        on = TraceConfig(type="local", local={"path": str(Path(tmp) / "on.db")})
        off = TraceConfig(type="local", local={"path": str(Path(tmp) / "off.db")}, metrics=False)
        agents = {"on": agent(on), "off": agent(off)}
        configs = {"on": on, "off": off}
        for name in ("on", "off"):  # warm up: imports, setups, the price table
            await batch(agents[name], configs[name], 5)
        thread_ratio: list[float] = []
        process_ratio: list[float] = []
        per_run: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
        for i in range(rounds):
            order = ("on", "off") if i % 2 == 0 else ("off", "on")
            got = {name: await batch(agents[name], configs[name], n) for name in order}
            for name in got:
                per_run[name].append(got[name])
            thread_ratio.append(got["on"][0] / got["off"][0])
            process_ratio.append(got["on"][1] / got["off"][1])
        for config in configs.values():
            get_tracing_setup(config).shutdown(10.0)

    def med(name: str, index: int) -> float:
        return statistics.median(v[index] for v in per_run[name]) * 1e6

    print(f"runs of the native agent to `local`, {rounds} rounds of {n}, metrics on vs off:")
    print(
        f"  run's thread CPU:  {med('off', 0):.0f} -> {med('on', 0):.0f} us/run, "
        f"ratio {statistics.median(thread_ratio):.2f}x"
    )
    print(
        f"  process CPU:       {med('off', 1):.0f} -> {med('on', 1):.0f} us/run, "
        f"ratio {statistics.median(process_ratio):.2f}x (worker threads and flush included)"
    )
    usage_cost("gpt-4o", "openai", 1, 1)
    count = 100_000
    start = time.perf_counter()
    for i in range(count):
        usage_cost("gpt-4o", "openai", 1000 + i, 500)
    print(f"  usage_cost, priced model: {(time.perf_counter() - start) / count * 1e6:.2f} us/call")


if __name__ == "__main__":
    asyncio.run(main(rounds=4, n=30) if "--quick" in sys.argv else main())
