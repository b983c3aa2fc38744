"""Does the first priced model call of a process wait for the price table? (issue 32, item 5)

Run it with ``python benchmarks/first_priced_call.py [--processes N]``. Each sample is a
fresh Python process (so the genai-prices table is cold): it builds the tracing
pipeline (which starts loading the table on its thread), then drives one
:class:`~runnertrace.tracing.state.RunTracer` through ``CALLS`` model calls priced as
``gpt-4o``/``openai`` and times, with ``perf_counter``, the ``message_end`` handler of
each: the one place where a call is priced. It prints the median over processes of the
first call and of the later calls of that run, in microseconds; then flushes (which ends
whatever waited for the table, off the timed path) and times a second run's calls, made
with the table loaded: those are priced on the run's path, as they always were.

Figures (2-core machine shared with other jobs, 9 processes each, ``/work/main/.venv``):

* 2026-12-02, wt-offpath: before (``main`` at 3744e1e: the call waits for the table on
  the run's path) first call 71,155 µs median, later calls 30 µs; after, first call
  30 µs, later calls 7 µs.
* 2026-12-02 17:40 UTC, wt-offpath2 (the load average was 8-9 on 2 cores, so the table
  took far longer to load than on an idle machine): three rounds each, before
  (``main`` at 2d88e6f, pricing on the run's path) and after (pricing off it, every
  provider's flush and shutdown settling it), alternated:

  ==========================  ===========================  =================
  ``message_end``, median     before                       after
  ==========================  ===========================  =================
  first priced call           207,615 / 186,931 / 195,734  29 / 28 / 21 µs
  later calls, same run       22 / 32 / 21 µs              8 / 6 / 5 µs
  a later run (table loaded)  18 / 27 / 18 µs              27 / 19 / 18 µs
  ==========================  ===========================  =================

  While the table loads, the later calls of the same run are handed over too, so their
  timed part is smaller; their pricing runs on the settling thread. Once it is loaded
  nothing is handed over: the same cost as before, within this machine's noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CALLS = 20


def one_process() -> dict[str, float]:
    """In this (fresh) process: the time of each priced call's ``message_end``, in µs."""
    from runnertrace.core import events as ev
    from runnertrace.tracing import get_tracing_setup
    from runnertrace.tracing.config import TraceConfig
    from runnertrace.tracing.content import ContentPolicy
    from runnertrace.tracing.state import RunTracer

    setup = get_tracing_setup(TraceConfig(type="overhead.DiscardBackend", enabled=True))

    def timed_run(name: str) -> list[float]:
        tracer = RunTracer(
            setup.tracer,
            ContentPolicy(capture=False, max_length=4096, redactor=None),
            agent_name=name,
            framework="native",
            session_id="s",
            user_id=None,
            mode="run",
            deltas_as_events=False,
            parent=None,
        )
        times: list[float] = []
        for i in range(CALLS):
            mid = f"m{i}"
            tracer.handle(ev.MessageStart(message_id=mid, model="gpt-4o", provider="openai"))
            end = ev.MessageEnd(
                message_id=mid, finish_reason="stop", input_tokens=100, output_tokens=5
            )
            start = time.perf_counter()
            tracer.handle(end)
            times.append((time.perf_counter() - start) * 1e6)
        tracer.finish()
        return times

    times = timed_run("first")
    setup.flush(10.0)  # ends whatever waited for the table, off the timed path
    loaded = timed_run("loaded")  # the table is loaded now: priced on the run's path
    setup.flush(10.0)
    return {
        "first": times[0],
        "later": statistics.median(times[1:]),
        "loaded": statistics.median(loaded),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=9)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process()))
        return
    samples = []
    for _ in range(args.processes):
        out = subprocess.run(
            [sys.executable, __file__, "--child"], capture_output=True, text=True, check=True
        )
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = statistics.median(s["first"] for s in samples)
    later = statistics.median(s["later"] for s in samples)
    print(f"first priced call's message_end: {first:,.0f} µs (median of {len(samples)} processes)")
    loaded = statistics.median(s["loaded"] for s in samples)
    print(f"later priced calls' message_end: {later:,.0f} µs")
    print(f"a later run's calls (table loaded): {loaded:,.0f} µs")


if __name__ == "__main__":
    main()
