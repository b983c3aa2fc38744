"""An allocation profile per framework and mode: what a traced run allocates beyond an untraced one.

    pip install memray                                # the profiler (in the dev extra)
    python benchmarks/allocations.py                  # every framework installed here
    python benchmarks/allocations.py --framework maf --runs 200 --top 12

Why allocations: after CPU, the allocator is where a tracer's cost hides. Every
attribute dict, event object and encoded buffer is allocated and freed per span, and
a run that allocates more also collects garbage more often. RSS cannot show this
(the memory is freed again); memray's tracker can, counting every ``malloc`` and
pymalloc allocation (``trace_python_allocators``) in every thread, the export
thread's included.

Each framework runs its two-step calculator run (``frameworks.py``) in a process of
its own: warm-up runs traced and untraced, then ``--runs`` untraced runs under one
tracker and ``--runs`` traced runs (OTLP/HTTP to a loopback receiver in another
process, flushed before the tracker stops) under another. It prints allocations and
bytes per run, untraced and traced; the extra per run by top-level package (the
package of the closest non-stdlib frame, so an allocation inside ``copy`` called by
the OTel SDK counts to ``opentelemetry``); the source lines whose allocation count
grew most per run (the leaf frame: the line that allocated); and the same for lines of
ours. ``pip install memray`` is in the ``dev`` extra.

memray slows a run several times over, so the export thread, which wakes on a clock
(``schedule_delay_s``) and posts whatever is queued, makes more and smaller requests
per run here than unprofiled: read the ``requests`` and ``urllib3`` shares (and the
``os.environ`` decoding that ``requests`` does for proxies on every post) as an upper
bound. They vary from capture to capture; the rest by a few allocations at most.

Where the allocations go (2026-12-03, 100 runs each; untraced -> traced allocations a
run, then the extra's shares: the OTel SDK and its OTLP encoder | ours | requests and
urllib3 | the framework and pydantic):

- OpenAI Agents: run 21,029 -> 30,489 (+9,461): 39 | 24 | 25 | 13%; stream +8,252:
  46 | 29 | 15 | 13%. Pydantic's dataclass ``__init__`` (+441 a run) was mostly the
  SDK's ``ModelSettings`` rebuilt for our retry policy (``ModelSettings().resolve(retry)``
  when the user declared no settings). After the cut (the retry settings themselves):
  that line +333 and pydantic's share 650 -> 543 (the rest, the SDK's own merge of
  agent and run settings); the whole extra read +7,350, most of the drop the posts.
- LangGraph: run 19,688 -> 30,076 (+10,387): 44 | 32 | 9 | 16%, the last mostly
  LangChain's callback manager dispatching to our handler (``ahandle_event``, +1,303);
  stream +8,339: 56 | 33 | 8 | 2%.
- Pydantic AI: run 18,728 -> 30,222 (+11,494): 36 | 20 | 11 | 32%, Pydantic AI's part
  (+3,095) the ``copy.copy`` of the ``RunContext`` its combined capability makes for
  every capability on every hook; stream +7,796: 54 | 31 | 11 | 4%.
- smolagents: run 19,465 -> 28,085 (+8,620): 47 | 31 | 15 | 7%; stream +7,859:
  55 | 32 | 6 | 6%.
- Agent Framework: run 6,087 -> 13,179 (+7,092): 53 | 32 | 16 | 2%; stream +6,274:
  59 | 43 | 18 | 2% (Agent Framework itself allocates less in a traced stream).
- Google ADK: run 22,505 -> 32,589 (+10,084): 41 | 27 | 29 | 3%; stream +9,139:
  46 | 31 | 22 | 2%.

Per span (6-7 a run) that is about 600 allocations in the OTel SDK and its encoder
(``_encode_key_value`` alone ~90 a span; the resource's ``__hash__``, which json-dumps
its attributes, once per span in ``_encode_resource_spans``, ~20) and 350-470 in ours.
Ours, by line: the vendor-key mirror copy of each span's attributes on the export
thread (``export.map_span``, ~20 a span), the context-variable sets and resets around
each streamed event (``core.context.reset_var``, ``observer.enter_traced_run``,
``nesting_runs``: 200-300 a stream run), the sanitizer's output dict (``content.clean``)
and the metrics' per-span attribute dicts (``metrics.record_span``, ``_attrs``). No line
of ours reaches 2% of a traced run's allocations: there is no one allocation to cut,
only fewer attributes per span, which would change the spans.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import frameworks as fw  # noqa: E402
from otlp_sink import SinkProcess  # noqa: E402
from retained import FRAMEWORKS  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.tracing.config import TraceConfig  # noqa: E402

LOCATIONS = 100_000  # every distinct leaf line, so the two profiles can be subtracted line by line


def _short(file: str) -> str:
    """``runnertrace/tracing/state.py`` for a file of ours, the bare name for anyone else's."""
    _, ours, rest = file.rpartition("/runnertrace/")
    return f"runnertrace/{rest}" if ours else Path(file).name


def _stats(path: Path) -> dict[str, Any]:
    import memray

    stats = memray._memray.compute_statistics(str(path), num_largest=LOCATIONS)  # noqa: SLF001
    return {
        "allocations": stats.total_num_allocations,
        "bytes": stats.total_memory_allocated,
        "modules": {
            name: [count, size] for name, count, size in stats.top_modules_by_allocation_count
        },
        "lines": {
            f"{function} ({_short(file)}:{line})": count
            for (function, file, line), count in stats.top_locations_by_count
        },
    }


async def profile(name: str, mode: str, runs: int, warmup: int) -> dict[str, Any]:
    """Two memray captures (untraced, traced) of ``runs`` runs each, summarised."""
    import memray

    build = getattr(fw, f"_{name}_agent")
    native = getattr(fw, f"_{name}_runner")
    untraced = fw._modes(build(native()))[mode]  # noqa: SLF001 (the benchmarks' shared scenario)
    sink = SinkProcess()
    try:
        config = TraceConfig(type="otlp", enabled=True, otlp={"endpoint": sink.traces_url})
        wrapped = TracingRunner(native(), config)
        traced = fw._modes(build(wrapped))[mode]  # noqa: SLF001
        for _ in range(warmup):
            await untraced()
            await traced()
        wrapped.setup.flush()
        out: dict[str, Any] = {"framework": name, "mode": mode, "runs": runs}
        with tempfile.TemporaryDirectory() as tmp:
            for label, one in (("untraced", untraced), ("traced", traced)):
                path = Path(tmp) / f"{label}.bin"
                with memray.Tracker(path, trace_python_allocators=True):
                    for _ in range(runs):
                        await one()
                    if label == "traced":
                        wrapped.setup.flush()
                out[label] = _stats(path)
        wrapped.setup.shutdown()
    finally:
        sink.stop()
    return out


def report(record: dict[str, Any], top: int) -> str:
    runs = record["runs"]
    plain, traced = record["untraced"], record["traced"]

    def per_run(value: float) -> float:
        return value / runs

    extra_count = per_run(traced["allocations"] - plain["allocations"])
    extra_bytes = per_run(traced["bytes"] - plain["bytes"])
    lines = [
        f"{record['framework']} {record['mode']}: {per_run(plain['allocations']):,.0f} ->"
        f" {per_run(traced['allocations']):,.0f} allocations a run ({extra_count:+,.0f}),"
        f" {per_run(plain['bytes']) / 1024:,.0f} -> {per_run(traced['bytes']) / 1024:,.0f} KiB"
        f" ({extra_bytes / 1024:+,.0f} KiB), over {runs} runs each"
    ]
    modules = collections.Counter(
        {
            module: per_run(counts[0] - plain["modules"].get(module, [0, 0])[0])
            for module, counts in traced["modules"].items()
        }
    )
    shown = [(m, c) for m, c in modules.most_common(top) if c > 0]
    lines.append(
        "  extra allocations a run by package: "
        + ", ".join(f"{m} {c:+,.0f} ({c / extra_count:.0%})" for m, c in shown)
    )
    grown = collections.Counter(
        {
            where: per_run(count - plain["lines"].get(where, 0))
            for where, count in traced["lines"].items()
        }
    )
    lines.append("  lines that allocate most more a run:")
    lines += [f"    {count:+7.1f}  {where}" for where, count in grown.most_common(top) if count > 0]
    ours = [(w, c) for w, c in grown.most_common() if "runnertrace/" in w and c > 0][:top]
    lines.append("  lines of ours that allocate most a run:")
    lines += [f"    {count:+7.1f}  {where}" for where, count in ours]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="all", choices=["all", *FRAMEWORKS])
    parser.add_argument("--mode", default="both", choices=["both", "run", "stream"])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("memray") is None:
        raise SystemExit("benchmarks/allocations.py needs memray: pip install memray")
    if args.child:
        record = asyncio.run(profile(args.framework, args.mode, args.runs, args.warmup))
        print(json.dumps(record), flush=True)
        return 0
    names = list(FRAMEWORKS) if args.framework == "all" else [args.framework]
    modes = ["run", "stream"] if args.mode == "both" else [args.mode]
    for name in names:
        if importlib.util.find_spec(FRAMEWORKS[name].split(".")[0]) is None:
            print(f"{name}: not installed here, skipped", flush=True)
            continue
        for mode in modes:
            command = [sys.executable, __file__, "--child", "--framework", name, "--mode", mode]
            command += ["--runs", str(args.runs), "--warmup", str(args.warmup)]
            child = subprocess.run(command, capture_output=True, text=True, check=False)
            if child.returncode != 0:
                failure = child.stderr.strip()[-2000:]
                print(f"{name} {mode}: the profile failed (exit {child.returncode}): {failure}")
                continue
            print(report(json.loads(child.stdout.strip().splitlines()[-1]), args.top), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
