"""What the untraced runner adds to each framework's own call (issue 32 item 4: <= 1.03x).

    python benchmarks/untraced.py --framework maf            # one framework, both modes
    python benchmarks/untraced.py --framework all --rounds 9
    python benchmarks/untraced.py --framework maf --profile  # differential profile

For each framework the scenario of ``frameworks.py`` is run two ways, in run and in
stream mode: the framework's own call (``frameworks.OWN_CALLS``) and our runner,
untraced (``agent.runner.run`` / ``.stream`` on a fresh ``Session``). Batches are
interleaved and timed in CPU time (``time.process_time``: on a shared machine the
other processes' load does not count); each round's ratio is runner / own of that
round, and the median and interquartile range of those ratios are printed.

``--profile`` runs each side under cProfile for the same number of runs and prints
the functions whose own time (tottime) grew most in the runner's profile: where
the runner's extra time goes.

Where the untraced runner's time goes (issue 32, measured 2026-12-02 on the loaded
2-core box; ``--framework all --rounds 5 --runs 20``, medians, IQR in brackets):

- MAF run 1.15-1.35x over six runs of 7 rounds; stream 1.43-1.66x. Run mode: saving
  the session, ``AgentSession.to_dict()`` (``save`` in ``maf/runner.py``): 145 us of a
  ~1.4 ms run measured alone, 21% of the runner's profile; the own call keeps its
  ``AgentSession`` in memory and serialises nothing. Stream mode: that, plus Agent
  Framework's own machinery for our chat and function middleware (its stream wrapped
  in more ``ResponseStream`` layers: ``_finish_consumption`` 1,600 calls against the
  own call's 1,000 per 200 runs). In-process A/B, 10 interleaved rounds, with
  ``to_dict`` stubbed out (measurement only): run 1.318x -> 1.006x, stream 1.479x ->
  1.389x, so run mode's whole gap is the session's serialisation; our mapping
  itself (``_Mapper.update``, ``chat_started``, the builder) is under 5% of the
  runner's profile.
  Tried: ending the last step from a result hook on the agent's stream instead of
  the agent middleware: no gain measurable in-process (A/B, 12 interleaved rounds:
  1.461x against 1.449x), so not kept.
- Our own events: pydantic ``__init__`` costs ~3.8 us per ``TextDelta`` and ~7.5 us per
  ``MessageStart``; ``model_construct`` is slower (8.6 / 14.3 us), so it buys nothing.
- Other frameworks, untraced runner / own call, run and stream: OpenAI Agents 1.06x
  (0.92-1.16) / 1.15x (1.11-1.43); LangGraph 1.01x (0.79-1.08) / 1.20x (1.15-1.39);
  Pydantic AI 1.03x (1.01-1.12) / 1.17x (1.13-1.63); smolagents 0.95x (0.90-1.14) /
  1.19x (1.03-1.37); ADK 1.10x (1.01-1.12) / 1.07x (1.03-1.22); CrewAI not run (not in
  this venv). These were taken while other processes loaded the machine: the stream
  ratios' IQRs are wide; rerun on a quiet machine before drawing on them.
- smolagents stream (``--profile``, 2026-12-03): the own call drains smolagents'
  generator in its worker thread (``list(agent.run(..., stream=True))``) and hands
  the loop nothing until the end; the runner hands each item to the loop as it comes,
  which is what a stream is for. That costs the loop wake-ups a thread's hand-off
  takes (``call_soon_threadsafe``, the self-pipe's ``recv``: +19 a run, already
  coalesced to one per batch of items that arrive while the loop is busy) and the
  queue's futures; the kit's relay and stream loop and the tick drain are about 200 us
  a run of the profiled time (cProfile inflates every call). A live stream cannot
  skip the hand-off, so the gap against that baseline stays.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import frameworks  # noqa: E402

from runnertrace.core.session import Session  # noqa: E402

Call = Callable[[], Awaitable[None]]
_ids = itertools.count()


def _sides(name: str) -> dict[str, dict[str, Call]] | None:
    """``{"own": {mode: call}, "runner": {mode: call}}`` for one framework, or None."""
    table = {fw: (build, runner) for fw, build, runner in frameworks.FRAMEWORKS}
    build, make_runner = table[name]
    try:
        ours, theirs = build(make_runner()), build(make_runner())
    except ImportError as exc:
        print(f"({name}: skipped, not installed in this venv: {exc.name or exc})")
        return None

    async def run() -> None:
        await ours.runner.run(ours, Session(f"u{next(_ids)}"), frameworks.REQUESTS)

    async def stream() -> None:
        async for _ in ours.runner.stream(ours, Session(f"u{next(_ids)}"), frameworks.REQUESTS):
            pass

    return {"own": frameworks.OWN_CALLS[name](theirs), "runner": {"run": run, "stream": stream}}


async def _batch(call: Call, runs: int) -> float:
    start = time.process_time()
    for _ in range(runs):
        await call()
    return (time.process_time() - start) / runs


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q1, statistics.median(values), q3


async def measure(name: str, rounds: int, runs: int) -> None:
    sides = _sides(name)
    if sides is None:
        return
    for mode in ("run", "stream"):
        own, ours = sides["own"][mode], sides["runner"][mode]
        await _batch(own, runs)  # warm-up
        await _batch(ours, runs)
        ratios: list[float] = []
        own_t: list[float] = []
        our_t: list[float] = []
        for index in range(rounds):
            pair = [(own, own_t), (ours, our_t)]
            if index % 2:
                pair.reverse()
            for call, sink in pair:
                sink.append(await _batch(call, runs))
            ratios.append(our_t[-1] / own_t[-1])
        q1, med, q3 = _quartiles(ratios)
        print(
            f"{name:>14} {mode:>6}: runner/own {med:.3f}x (IQR {q1:.3f}-{q3:.3f}), "
            f"own {statistics.median(own_t) * 1e6:.0f} us, "
            f"runner {statistics.median(our_t) * 1e6:.0f} us, {rounds} x {runs} runs",
            flush=True,
        )


async def _profiled(call: Call, runs: int) -> pstats.Stats:
    for _ in range(5):
        await call()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(runs):
        await call()
    profile.disable()
    return pstats.Stats(profile)


async def profile(name: str, runs: int, top: int) -> None:
    sides = _sides(name)
    if sides is None:
        return
    for mode in ("run", "stream"):
        own = (await _profiled(sides["own"][mode], runs)).stats  # type: ignore[attr-defined]
        ours = (await _profiled(sides["runner"][mode], runs)).stats  # type: ignore[attr-defined]
        own_total = sum(v[2] for v in own.values())
        our_total = sum(v[2] for v in ours.values())
        print(
            f"\n== {name} {mode}: own {own_total / runs * 1e6:.0f} us/run, "
            f"runner {our_total / runs * 1e6:.0f} us/run (under cProfile)"
        )
        grown = []
        for key, value in ours.items():
            before = own.get(key, (0, 0, 0.0, 0.0))
            grown.append((value[2] - before[2], value[0] - before[0], key))
        grown.sort(reverse=True)
        for extra, calls, (file, line, func) in grown[:top]:
            where = f"{func}  {file}:{line}"
            print(f"{extra / runs * 1e6:8.1f} us/run {calls / runs:+7.1f} calls  {where}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    names = [fw for fw, _, _ in frameworks.FRAMEWORKS]
    parser.add_argument("--framework", default="maf", choices=[*names, "all"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    chosen = names if args.framework == "all" else [args.framework]
    for name in chosen:
        if args.profile:
            asyncio.run(profile(name, args.runs * 5, args.top))
        else:
            asyncio.run(measure(name, args.rounds, args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
