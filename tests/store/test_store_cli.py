"""The viewer commands over either engine: one ``--store`` (or ``--db``, or the setting) names
the store, and ``traces``, ``show``, ``report``, ``doctor`` and ``migrate`` read the same runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from runnertrace.cli import main
from runnertrace.store import SpanStore, StoreUrl
from ui_fixtures import build_team_store


def test_every_viewer_reads_the_store_the_store_option_names(
    store_location: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build_team_store(store_location)
    location = str(store_location)
    shown = StoreUrl.parse(location).shown
    store = SpanStore(location, read_only=True)
    runs = store.list_runs(10)
    store.close()
    assert {r.agent for r in runs} == {"planner", "recursive"}
    assert main(["traces", "--store", location]) == 0
    out = capsys.readouterr().out
    assert "planner" in out and "recursive" in out and "runnertrace-test" not in out
    assert main(["show", runs[0].trace_id[:10], "--db", location]) == 0
    out = capsys.readouterr().out
    assert "totals" in out and runs[0].trace_id in out
    report = tmp_path / "r.html"
    assert main(["report", "last", "--store", location, "-o", str(report)]) == 0
    assert runs[0].trace_id in report.read_text()
    capsys.readouterr()
    # The setting (an environment variable here) names it for every command too.
    monkeypatch.setenv("RUNNERTRACE_TRACE__LOCAL__PATH", location)
    assert main(["traces", "-n", "1"]) == 0
    assert runs[0].trace_id in capsys.readouterr().out
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "2 traces" in out and shown.split("://")[0] in out
    assert main(["migrate"]) == 0
    assert "nothing to do" in capsys.readouterr().out
