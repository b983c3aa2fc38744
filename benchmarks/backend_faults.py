"""Does a failing backend slow the agent down? Ratios measured in one run, printed as a table.

Run it with ``python benchmarks/backend_faults.py [runs_per_batch] [rounds]``
(about a minute with the defaults on a busy 2-core machine).

For each network backend (otlp, langfuse, logfire, openllmetry) a traced
native-agent run (``ScriptedLlm`` + calculator: 9 spans) is timed in batches
against three real OTLP/HTTP receivers on 127.0.0.1 (``tests/otlp_receiver.py``):

* ``healthy``: answers 200;
* ``hang``: holds every export request open far longer than the export timeout;
* ``500``: answers every export with HTTP 500.

Batches of the three conditions are interleaved round by round (rotating which
goes first), and each faulty/healthy ratio is the median of the per-round
ratios. Target: faulty/healthy <= 1.10, i.e. a backend that is down or broken
adds no latency to runs (exports happen on a background thread with a bounded,
dropping queue). The run's own wall time includes whatever CPU the background
export thread takes from it, which is the honest cost on a busy machine.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from otlp_receiver import OtlpReceiver
from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.core.session import Session
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.setup import get_tracing_setup, reset_tracing_setups

TARGET = 1.10
BACKENDS = ["otlp", "langfuse", "logfire", "openllmetry"]
CONDITIONS = ["healthy", "hang", "500"]
PROMPT = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]


def section(backend: str, receiver: OtlpReceiver) -> dict[str, Any]:
    return {
        "otlp": {"otlp": {"endpoint": receiver.traces_url}},
        "langfuse": {"langfuse": {"host": receiver.url, "public_key": "pk", "secret_key": "sk"}},
        "logfire": {"logfire": {"base_url": receiver.url, "token": "pylf_v1_us_bench"}},
        "openllmetry": {"openllmetry": {"base_url": receiver.url, "api_key": "tl"}},
    }[backend]


def make_runner(config: TraceConfig) -> tuple[TracingRunner, CoreAgent]:
    runner = TracingRunner(NativeRunner(), settings=config)
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
    return runner, agent


async def batch(runner: TracingRunner, agent: CoreAgent, runs: int) -> float:
    """Seconds for ``runs`` sequential traced runs."""
    gc.collect()
    started = time.perf_counter()
    for i in range(runs):
        await runner.run(agent, Session(f"s{i}"), PROMPT)
    return time.perf_counter() - started


def main(runs: int = 60, rounds: int = 5) -> int:
    receivers = {c: OtlpReceiver(c, hang_s=120.0).start() for c in CONDITIONS}  # type: ignore[arg-type]
    failures = 0
    print(f"{runs} runs per batch, {rounds} rounds, 9 spans per run, export timeout 2 s")
    print(
        f"{'backend':<12} {'healthy ms/run':>15} {'hang ms/run':>12} {'500 ms/run':>11}"
        f" {'hang/healthy':>13} {'500/healthy':>12}  target <= {TARGET:.2f}"
    )
    try:
        for backend in BACKENDS:
            runners = {}
            for condition, receiver in receivers.items():
                config = TraceConfig(
                    type=backend, flush_timeout_s=2.0, **section(backend, receiver)
                )
                runners[condition] = make_runner(config)
                asyncio.run(batch(*runners[condition], 20))  # warm-up: imports, setup, first export
            times: dict[str, list[float]] = {c: [] for c in CONDITIONS}
            ratios: dict[str, list[float]] = {"hang": [], "500": []}
            for r in range(rounds):
                order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
                this_round = {c: asyncio.run(batch(*runners[c], runs)) for c in order}
                for condition, seconds in this_round.items():
                    times[condition].append(seconds)
                for condition in ratios:
                    ratios[condition].append(this_round[condition] / this_round["healthy"])
            per_run = {c: statistics.median(t) / runs * 1000 for c, t in times.items()}
            hang, five = statistics.median(ratios["hang"]), statistics.median(ratios["500"])
            ok = hang <= TARGET and five <= TARGET
            failures += not ok
            print(
                f"{backend:<12} {per_run['healthy']:>15.3f} {per_run['hang']:>12.3f}"
                f" {per_run['500']:>11.3f} {hang:>13.3f} {five:>12.3f}  {'ok' if ok else 'MISSED'}"
            )
            drops = []
            for condition in ("hang", "500"):
                config = runners[condition][0].settings
                setup = get_tracing_setup(config)
                drops.append(
                    f"{condition}: {sum(getattr(p, 'dropped', 0) for p in setup.processors)}"
                )
            print(f"{'':<12} spans dropped so far ({', '.join(drops)})")
            reset_tracing_setups(timeout_s=2.0)
    finally:
        for receiver in receivers.values():
            receiver.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    sys.exit(main(*args))
