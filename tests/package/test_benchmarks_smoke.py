"""A smoke run of ``benchmarks/peers.py`` per framework: it runs, measures and stays isolated.

No timing is asserted (performance lives in the benchmark): what is checked is
that every variant of ours and every peer installed here set up, made spans in
both modes (the counts the benchmark reports are real, not zeros), and that no
peer's spans turned up in another variant's batch -- the leak check that makes
the benchmark's interleaving fair. Each framework runs in a process of its own,
as the benchmark does, with one round of two runs per batch.
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
PEERS = ROOT / "benchmarks" / "peers.py"

# Framework -> the module that tells whether it is installed here.
FRAMEWORKS = {
    "pydantic-ai": "pydantic_ai",
    "openai-agents": "agents",
    "langgraph": "langgraph",
    "smolagents": "smolagents",
    "maf": "agent_framework",
    "google-adk": "google.adk",
    "crewai": "crewai",
}
OURS = ("rt-otlp", "rt-otlp+content", "rt-local", "rt-noexport")
# Each framework's peers and the modules each needs: a peer whose modules are all
# installed must have run (not been skipped).
PEER_NEEDS: dict[str, dict[str, tuple[str, ...]]] = {
    "pydantic-ai": {
        "pai-otel": (),
        "logfire": ("logfire",),
        "openinference": ("openinference.instrumentation.pydantic_ai",),
        "mlflow": ("mlflow",),
    },
    "openai-agents": {
        "openinference": ("openinference.instrumentation.openai_agents",),
        "logfire": ("logfire",),
        "mlflow": ("mlflow",),
    },
    "langgraph": {
        "openinference": ("openinference.instrumentation.langchain",),
        "langfuse": ("langfuse", "langchain"),
        "mlflow": ("mlflow", "sqlparse"),
    },
    "smolagents": {
        "openinference": ("openinference.instrumentation.smolagents",),
        "mlflow": ("mlflow",),
    },
    "maf": {"maf-otel": (), "openinference": ("openinference.instrumentation.agent_framework",)},
    "google-adk": {"adk-otel": (), "openinference": ("openinference.instrumentation.google_adk",)},
    "crewai": {"openinference": ("openinference.instrumentation.crewai",), "mlflow": ("mlflow",)},
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _smoke(framework: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{framework}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "HOME": str(tmp_path),  # CrewAI and MLflow write under it
    }
    command = [sys.executable, str(PEERS), "--framework", framework, "--quick", "--rounds", "1"]
    done = subprocess.run(
        [*command, "--json", str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_peers_benchmark_smoke_run(framework: str, tmp_path: Path) -> None:
    if not _installed(FRAMEWORKS[framework]):
        pytest.skip(f"{framework} is not installed in this interpreter")
    result = _smoke(framework, tmp_path)

    assert result["leaks"] == [], result["leaks"]
    assert result["failures"] == {}, result["failures"]
    expected = {
        name for name, needs in PEER_NEEDS[framework].items() if all(map(_installed, needs))
    }
    ran = {row["variant"] for row in result["variants"]}
    missing = {name: result["skipped"].get(name) for name in expected - ran}
    assert not missing, f"installed peers that did not run: {missing}"
    for mode in ("run", "stream"):
        rows = {r["variant"]: r for r in result["variants"] if r["mode"] == mode}
        assert {"plain", "runner", *OURS} <= set(rows), sorted(rows)
        assert rows["plain"]["spans_per_run"] == 0
        assert rows["runner"]["spans_per_run"] == 0
        ours = {rows[name]["spans_per_run"] for name in OURS}
        # One run makes the same spans whatever receives them.
        assert len(ours) == 1 and ours.pop() > 0, {n: rows[n]["spans_per_run"] for n in OURS}
        for name in expected:
            assert rows[name]["spans_per_run"] > 0, (name, mode, rows[name])
        for row in rows.values():
            assert row["us_per_run"] > 0 and row["ratio"] > 0, row


def test_content_cost_benchmark_smoke_run() -> None:
    """``content_cost.py`` runs both modes and prints one ratio per mode (no timing asserted)."""
    if not _installed("agent_framework"):
        pytest.skip("maf is not installed in this interpreter")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "content_cost.py"),
            "--framework",
            "maf",
            "--pairs",
            "2",
            "--runs",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines()]
    assert [(words[0], words[1]) for words in lines] == [("maf", "run"), ("maf", "stream")]
    assert all(float(words[5].rstrip("x")) > 0 for words in lines), done.stdout
