"""Smoke runs of the memory benchmarks: ``benchmarks/soak.py`` and ``benchmarks/allocations.py``.

No figure is asserted beyond what must hold on any machine: the soak's receiver got
every span made and none was dropped, and no object of ours outlived its run (a
class of ours growing with the run count is the leak the soak exists to find); the
allocation profile saw a traced run allocate more than an untraced one, some of it
in our package. Each runs the benchmark's child process directly, on a few runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
INSTALLED_AS = {"maf": "agent_framework", "openai": "agents"}


def _child(script: str, *args: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--child", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return record


def _needs(framework: str) -> None:
    if importlib.util.find_spec(INSTALLED_AS[framework]) is None:
        pytest.skip(f"{framework} is not installed in this interpreter")


# OpenAI Agents is the framework whose copies of a run's model settings once kept every
# finished run's mapping alive (adapter.HooksLink); Agent Framework is the quickest run.
@pytest.mark.parametrize("framework", ["maf", "openai"])
def test_the_soak_delivers_every_span_and_keeps_nothing_of_ours(framework: str) -> None:
    _needs(framework)
    record = _child(
        "soak.py",
        *("--framework", framework, "--runs", "60", "--control", "20"),
        *("--every", "30", "--warmup", "10"),
    )
    spans = record["spans"]
    assert spans["exported_and_dropped"] > 0
    assert spans["received"] == spans["exported_and_dropped"], spans
    assert spans["dropped"] == 0, spans
    assert [runs for runs, _ in record["traced"]["curve"]] == [0, 30, 60]
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from retained import BY_DESIGN
    finally:
        sys.path.remove(str(BENCHMARKS))
    grown = {cls: n for cls, n in record["grown"] if not any(part in cls for part in BY_DESIGN)}
    assert grown == {}, grown


def test_the_allocation_profile_sees_what_a_traced_run_adds() -> None:
    _needs("maf")
    if importlib.util.find_spec("memray") is None:
        pytest.skip("memray (the profiler the benchmark uses, in the dev extra) is missing")
    record = _child(
        "allocations.py", "--framework", "maf", "--mode", "run", "--runs", "10", "--warmup", "3"
    )
    untraced, traced = record["untraced"], record["traced"]
    assert traced["allocations"] > untraced["allocations"] > 0
    assert traced["modules"].get("runnertrace", [0, 0])[0] > 0, sorted(traced["modules"])
    assert any("runnertrace/" in where for where in traced["lines"])
