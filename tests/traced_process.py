"""A traced application in a process of its own, for the fork and exit tests.

``python tests/traced_process.py MODE STORE ENDPOINT`` traces native runs to
the local store at ``STORE`` and to the OTLP receiver at ``ENDPOINT``, and then
returns from ``main``: the interpreter exits the ordinary way, so whatever is
still queued must be exported by the shutdown that runs at exit. Nothing here
flushes before exiting.

* ``exit``: one run (agent ``solo``).
* ``fork``: one run (``parent-1``), a flush, ``os.fork()``; the child makes one
  run (``child``) and exits normally with ``sys.exit``; the parent waits for
  it, then makes one more run (``parent-2``).
* ``multiprocessing``: the same, with the child a ``multiprocessing.Process``
  of the ``fork`` start method (it ends with ``os._exit``: no ``atexit`` there).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SpanStore
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.config import TraceConfig

if TYPE_CHECKING:
    from otlp_receiver import ReceivedSpan


def run_once(runner: TracingRunner, name: str) -> None:
    agent = CoreAgent(name, runner, Agent(ScriptedLlm(), tools=[calculator], name=name))
    reply = asyncio.run(
        runner.run(agent, Session(name), [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")])
    )
    assert str(reply) == "The answer is 7006669.", reply


def main(mode: str, store: str, endpoint: str) -> None:
    config = TraceConfig(type=["local", "otlp"], local={"path": store}, otlp={"endpoint": endpoint})
    runner = TracingRunner(NativeRunner(), settings=config)
    if mode == "exit":
        run_once(runner, "solo")
        return
    run_once(runner, "parent-1")
    # The exporters are in use when the process forks (a store connection is open).
    assert runner.setup.flush()
    if mode == "multiprocessing":
        child = multiprocessing.get_context("fork").Process(target=run_once, args=(runner, "child"))
        child.start()
        child.join(60)
        code = child.exitcode
    else:
        pid = os.fork()
        if pid == 0:
            run_once(runner, "child")
            sys.exit(0)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code != 0:
        sys.exit(f"the child exited with status {code}")
    run_once(runner, "parent-2")


# -- for the tests that start it ----------------------------------------------------------------
def launch(mode: str, store: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    """Run this script with the interpreter running the tests; its output, once it has exited."""
    return subprocess.run(
        [sys.executable, __file__, mode, str(store), endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=store.parent,
        check=False,
    )


def stored_runs(store: Path) -> dict[str, int]:
    """Each stored trace's top span name, with the number of spans stored for that trace."""
    return {run.name: run.span_count for run in SpanStore(store).list_runs(20)}


def received_runs(spans: Iterable[ReceivedSpan]) -> dict[str, int]:
    """The same for what an OTLP receiver got: each root span's name, with its trace's spans."""
    spans = list(spans)
    per_trace = Counter(span.trace_id for span in spans)
    return {span.name: per_trace[span.trace_id] for span in spans if span.parent_span_id is None}


if __name__ == "__main__":
    main(*sys.argv[1:4])
