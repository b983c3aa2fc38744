"""What capturing content costs on the run's path (issue 32: within 5% of not capturing).

    python benchmarks/content_cost.py --framework google-adk
    python benchmarks/content_cost.py --framework all --pairs 60

Why a benchmark of its own: ``peers.py`` times the two variants in separate
batches of its rounds, exporting to OTLP, and a cell's interquartile range
(often +-10-20% on a shared 2-core machine) is wider than the difference it is
asked about. Here the two traced runners, ``capture_content`` off and on, alternate
batch by batch in one process into the counting no-op processor, so the ratio
is what recording the messages (and sanitising them) adds to the run itself;
what exporting the larger spans adds is ``peers.py``'s ``rt-otlp+content`` row.

Each pair is one batch of each (CPU time, ``time.process_time``); the median and
interquartile range of the per-pair ratios are printed.

Measured 2026-12-03, 40 pairs of 10 runs, while CI ran beside it: Google ADK
1.018 (IQR 0.98-1.09) run, 1.029 (0.97-1.09) stream; OpenAI Agents 1.030
(0.98-1.10) run, 1.029 (0.98-1.12) stream.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from frameworks import FRAMEWORKS, _modes

from runnertrace import traced
from runnertrace.tracing.config import TraceConfig

Call = Callable[[], Awaitable[None]]
PLAIN = TraceConfig(type="peer_kit.CountingBackend")
CONTENT = TraceConfig(type="peer_kit.CountingBackend", capture_content=True)


async def _batch(call: Call, runs: int) -> float:
    started = time.process_time()
    for _ in range(runs):
        await call()
    return time.process_time() - started


async def measure(name: str, pairs: int, runs: int) -> list[str]:
    """One line per mode: content / plain, the median and IQR over ``pairs`` pairs."""
    build, runner = next((b, r) for n, b, r in FRAMEWORKS if n == name)
    plain = _modes(build(traced(runner(), PLAIN)))
    content = _modes(build(traced(runner(), CONTENT)))
    lines = []
    for mode in ("run", "stream"):
        for _ in range(5):  # warm-up: imports, caches, the price table
            await plain[mode]()
            await content[mode]()
        ratios = []
        for _ in range(pairs):
            off = await _batch(plain[mode], runs)
            on = await _batch(content[mode], runs)
            ratios.append(on / off)
        low, _, high = statistics.quantiles(ratios, n=4)
        lines.append(
            f"{name:14} {mode:6} content / plain {statistics.median(ratios):.3f}x"
            f" (IQR {low:.3f}-{high:.3f}), {pairs} pairs of {runs} runs"
        )
    return lines


def main() -> None:
    names = [name for name, _, _ in FRAMEWORKS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=[*names, "all"], default="all")
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--runs", type=int, default=10, help="runs per batch")
    args = parser.parse_args()
    for name in names if args.framework == "all" else [args.framework]:
        try:
            lines = asyncio.run(measure(name, args.pairs, args.runs))
        except ImportError as exc:  # CrewAI lives in a venv of its own
            print(f"{name}: skipped ({exc})")
            continue
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
