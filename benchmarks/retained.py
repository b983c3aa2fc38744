"""What of ours outlives a traced run: a census of runnertrace objects, per framework and mode.

    python benchmarks/retained.py                    # every framework installed here
    python benchmarks/retained.py --framework openai --runs 200

RSS growth mixes a framework's own state (LangGraph's ``InMemorySaver``, ADK's
in-memory sessions, a scripted model's call log) with allocator high-water marks,
so it cannot say whether *we* keep anything. This can: it runs each framework's
two-step calculator run (``frameworks.py``) traced to a backend that stores
nothing, warms up, counts every live object whose class is ours after a
``gc.collect()``, runs ``--runs`` more, and counts again. A class whose count
grows with the run count is held by something that outlives the run; the line
names it, and ``gc.get_referrers`` on one instance finds the holder.

It found the OpenAI Agents growth: the SDK copies a run's model settings, our
retry policy among them, into what it keeps, and the policy held the run's
hooks (200 mappers, builders and hooks alive after 200 runs; none since
``adapter.HooksLink``). Test doubles of ours that record calls on purpose (the
ADK ``testing.CallRecord``) and the released, empty link the SDK's copies hold
are reported and marked as such.

CrewAI runs in its own venv: ``.venv-crewai/bin/python benchmarks/retained.py
--framework crewai`` (with ``PYTHONPATH=src``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import frameworks as fw  # noqa: E402
from overhead import DISCARD  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402

FRAMEWORKS = {  # the name frameworks.py builds it under -> the module that says it is installed
    "openai": "agents",
    "langgraph": "langgraph",
    "pydantic_ai": "pydantic_ai",
    "smolagents": "smolagents",
    "maf": "agent_framework",
    "adk": "google.adk",
    "crewai": "crewai",
}
BY_DESIGN = {
    ".testing.": "a test double's call log",
    "HooksLink": "released and empty, held by the model settings the SDK copied",
}


def census() -> collections.Counter[str]:
    """Live objects per class of ours, after a full collection."""
    gc.collect()
    counts: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        module = getattr(type(obj), "__module__", None)
        if isinstance(module, str) and module.startswith("runnertrace"):
            counts[f"{module}.{type(obj).__qualname__}"] += 1
    return counts


async def grown(name: str, mode: str, warmup: int, runs: int) -> list[tuple[int, str]]:
    """The classes of ours whose live count grew over ``runs`` traced runs."""
    native = getattr(fw, f"_{name}_runner")()
    agent = getattr(fw, f"_{name}_agent")(TracingRunner(native, DISCARD))
    one = fw._modes(agent)[mode]  # noqa: SLF001 (the benchmarks' shared scenario)
    for _ in range(warmup):
        await one()
    before = census()
    for _ in range(runs):
        await one()
    after = census()
    growth = [(after[k] - before.get(k, 0), k) for k in after]
    return sorted((g for g in growth if g[0] > 0), reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="all", choices=["all", *FRAMEWORKS])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    names = list(FRAMEWORKS) if args.framework == "all" else [args.framework]
    for name in names:
        if importlib.util.find_spec(FRAMEWORKS[name].split(".")[0]) is None:
            print(f"{name}: not installed here, skipped")
            continue
        for mode in ("run", "stream"):
            growth = asyncio.run(grown(name, mode, args.warmup, args.runs))
            if not growth:
                print(f"{name} {mode}: nothing of ours outlives its run ({args.runs} runs)")
            for count, cls in growth:
                why = next(
                    (f" ({why}, by design)" for part, why in BY_DESIGN.items() if part in cls), ""
                )
                print(f"{name} {mode}: +{count} {cls} over {args.runs} runs{why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
