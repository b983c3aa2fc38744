"""A long soak per framework: RSS over 100,000 traced runs, against the untraced runner's slope.

    python benchmarks/soak.py                               # every framework installed here
    python benchmarks/soak.py --framework maf --runs 100000 --control 20000

Each framework runs in a process of its own (so each RSS is its own), its two-step
calculator run (``frameworks.py``), in run mode, a new session every run:

1. ``--warmup`` untraced runs, then ``--control`` more, RSS before and after: the
   framework's own growth per 10,000 runs (LangGraph's ``InMemorySaver`` and ADK's
   in-memory session service keep every session; the scripted models log their calls).
2. The same agent traced (a ``TracingRunner`` exporting through the batch processor and
   OTLP/HTTP to a loopback receiver in another process, as in production), ``--warmup``
   runs, then ``--runs`` more, RSS sampled every ``--every`` runs after a ``gc.collect()``.

It prints the RSS curve, the growth per 10,000 runs traced and untraced (over the whole
soak and over its second half, where warm-up and allocator high-water marks are behind),
the spans the receiver got against the spans made, the spans our queue dropped, and the
classes of ours with more live objects at the end than after warm-up (``retained.py``'s
census). A traced slope at the untraced one, no drop and no class of ours growing mean
we keep nothing per run; a traced slope above it with no class growing points at memory
held outside our objects (the framework keeping what we hand it, or the allocator).

Measured 2026-12-03 (the table is in ``docs/performance.md``): nothing of ours grew on any
of the seven; traced slopes equal to the untraced ones (LangGraph +181, ADK +242 MB per
10,000 runs: their in-memory session stores) or within a megabyte (Pydantic AI,
smolagents, Agent Framework), but OpenAI Agents' +52 against +41, which is the SDK's
scripted test model logging a deep copy of each call's settings (ours carry the retry
settings); every span delivered except 578 of 600,000 on Agent Framework, whose 1.5 ms run
filled the export queue on the shared machine (dropped, counted and reported).

CrewAI runs in its own venv (``PYTHONPATH=src .venv-crewai/bin/python benchmarks/soak.py
--framework crewai``); at about 30 ms a run its soak takes an hour per 100,000 runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import frameworks as fw  # noqa: E402
from otlp_sink import SinkProcess  # noqa: E402
from overhead import rss_mb  # noqa: E402
from retained import BY_DESIGN, FRAMEWORKS, census  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.tracing.config import TraceConfig  # noqa: E402
from runnertrace.tracing.export import BoundedBatchSpanProcessor  # noqa: E402


def settled_rss() -> float:
    gc.collect()
    return rss_mb()


async def soak(name: str, runs: int, control: int, every: int, warmup: int) -> dict[str, Any]:
    """One framework's soak, as a JSON-ready record (see the module docstring)."""
    build = getattr(fw, f"_{name}_agent")
    native = getattr(fw, f"_{name}_runner")
    untraced = fw._modes(build(native()))["run"]  # noqa: SLF001 (the benchmarks' shared scenario)
    for _ in range(warmup):
        await untraced()
    control_start, started = settled_rss(), time.process_time()
    for _ in range(control):
        await untraced()
    control_cpu = time.process_time() - started
    control_end = settled_rss()

    sink = SinkProcess()
    try:
        config = TraceConfig(type="otlp", enabled=True, otlp={"endpoint": sink.traces_url})
        wrapped = TracingRunner(native(), config)
        traced = fw._modes(build(wrapped))["run"]  # noqa: SLF001
        for _ in range(warmup):
            await traced()
        wrapped.setup.flush()
        batch = [p for p in wrapped.setup.processors if isinstance(p, BoundedBatchSpanProcessor)]
        counted_before = sum(p.exported + p.dropped for p in batch)
        dropped_before = sum(p.dropped for p in batch)
        objects_before = census()
        sent_before = sink.totals()[0]
        curve = [(0, settled_rss())]
        started = time.process_time()
        for done in range(1, runs + 1):
            await traced()
            if done % every == 0 or done == runs:
                curve.append((done, settled_rss()))
        traced_cpu = time.process_time() - started
        wrapped.setup.flush()
        received = sink.totals()[0] - sent_before
        dropped = sum(p.dropped for p in batch) - dropped_before
        made = sum(p.exported + p.dropped for p in batch) - counted_before
        grown = census() - objects_before
        wrapped.setup.shutdown()
    finally:
        sink.stop()
    return {
        "framework": name,
        "control": {"runs": control, "rss": [control_start, control_end], "cpu_s": control_cpu},
        "traced": {"runs": runs, "curve": curve, "cpu_s": traced_cpu},
        "spans": {"received": received, "exported_and_dropped": made, "dropped": dropped},
        "grown": sorted(grown.items(), key=lambda item: -item[1]),
    }


def per_10k(mb: float, runs: int) -> float:
    return mb / runs * 10_000 if runs else 0.0


def report(record: dict[str, Any]) -> str:
    control, traced = record["control"], record["traced"]
    curve = traced["curve"]
    (_, first), (last_runs, last) = curve[0], curve[-1]
    middle_runs, middle = min(curve, key=lambda point: abs(point[0] - last_runs / 2))
    untraced_slope = per_10k(control["rss"][1] - control["rss"][0], control["runs"])
    traced_us = traced["cpu_s"] / last_runs * 1e6
    untraced_us = control["cpu_s"] / max(control["runs"], 1) * 1e6
    lines = [
        f"{record['framework']}: {last_runs} traced runs, RSS {first:.0f} -> {last:.0f} MB"
        f" ({last - first:+.1f}); per 10,000 runs: traced {per_10k(last - first, last_runs):+.2f}"
        f" MB (second half {per_10k(last - middle, last_runs - middle_runs):+.2f}),"
        f" untraced {untraced_slope:+.2f} MB (over {control['runs']} runs);"
        f" CPU {traced_us:.0f} | {untraced_us:.0f} µs a run traced | untraced",
        "  RSS curve (runs: MB): " + ", ".join(f"{n}: {mb:.1f}" for n, mb in curve),
    ]
    spans = record["spans"]
    lines.append(
        f"  spans: {spans['received']} received of {spans['exported_and_dropped']} made,"
        f" {spans['dropped']} dropped"
    )
    mine = [
        (cls, count) for cls, count in record["grown"] if not any(part in cls for part in BY_DESIGN)
    ]
    lines.append(
        "  objects of ours grown since warm-up: "
        + (", ".join(f"{cls} +{count}" for cls, count in mine) if mine else "none")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="all", choices=["all", *FRAMEWORKS])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--control", type=int, default=20_000, help="untraced runs, for the slope")
    parser.add_argument("--every", type=int, default=10_000, help="RSS sample interval, in runs")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        record = asyncio.run(soak(args.framework, args.runs, args.control, args.every, args.warmup))
        print(json.dumps(record), flush=True)
        return 0
    names = list(FRAMEWORKS) if args.framework == "all" else [args.framework]
    for name in names:
        if importlib.util.find_spec(FRAMEWORKS[name].split(".")[0]) is None:
            print(f"{name}: not installed here, skipped", flush=True)
            continue
        command = [
            sys.executable,
            __file__,
            "--child",
            "--framework",
            name,
            *("--runs", str(args.runs), "--control", str(args.control)),
            *("--every", str(args.every), "--warmup", str(args.warmup)),
        ]
        child = subprocess.run(command, capture_output=True, text=True, check=False)
        if child.returncode != 0:
            failure = child.stderr.strip()[-2000:]
            print(f"{name}: the soak failed (exit {child.returncode}): {failure}")
            continue
        print(report(json.loads(child.stdout.strip().splitlines()[-1])), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
