"""``runnertrace copy``: a SQLite store of the demo's runs into PostgreSQL, interrupted and
resumed, copied again: the same runs, spans and metric points, each once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runnertrace.cli import main
from runnertrace.store import SpanStore
from store_engines import Postgres


def _everything(store: SpanStore) -> tuple[list[object], list[object], int]:
    runs = sorted(store.list_runs(1000), key=lambda r: r.trace_id)
    spans = [[s.to_json() for s in store.get_trace(r.trace_id)] for r in runs]
    return runs, spans, len(store.metric_points())


def test_copy_a_demo_store_interrupted_and_resumed(
    postgres: Postgres, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "demo.db"
    for _ in range(2):  # six runs of the demo, with their metric points
        assert main(["demo", "--db", str(source)]) == 0
    capsys.readouterr()
    url = postgres.create_database()
    # One step only: stopped early, as an interruption would leave it.
    assert main(["copy", str(source), "--store", url, "--batch", "1", "--max-batches", "1"]) == 0
    assert "Copied 1 trace" in capsys.readouterr().out
    # Killed in the middle of a copy (after its first step was reported).
    copy = subprocess.Popen(
        [sys.executable, "-m", "runnertrace.cli", "copy", str(source), "--store", url,
         "--batch", "1", "--progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert copy.stdout is not None
    first = copy.stdout.readline()
    copy.send_signal(signal.SIGKILL)
    copy.wait(30)
    assert first.startswith("copied "), copy.stderr.read() if copy.stderr else ""
    # Resumed: it goes on after the last trace copied, and finishes.
    assert main(["copy", str(source), "--store", url]) == 0
    out = capsys.readouterr().out
    assert "resumed after trace" in out and "; done." in out
    before, after = SpanStore(source, read_only=True), SpanStore(url, read_only=True)
    try:
        runs, spans, points = _everything(before)
        assert len(runs) == 6 and points > 0
        assert _everything(after) == (runs, spans, points)  # each once: no span, no point twice
        assert after.count() == before.count()
        # Again: nothing more to do, nothing doubled.
        assert main(["copy", str(source), "--store", url]) == 0
        assert "Copied 0 traces" in capsys.readouterr().out
        assert _everything(after) == (runs, spans, points)
    finally:
        before.close()
        after.close()


def test_copy_goes_from_a_file_to_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["copy", str(tmp_path / "a.db"), "--store", str(tmp_path / "b.db")]) == 1
    assert "copy writes to a PostgreSQL store" in capsys.readouterr().err
