"""Retention on either engine: ``runnertrace prune --older-than`` and ``trace.local.retention``
remove old runs whole (spans, per-agent rows, run rows, metric points), in bounded steps,
with content search kept in step."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lossy_process import SPANS_PER_RUN, run_many
from runnertrace.cli import main
from runnertrace.runners.native import NativeRunner
from runnertrace.store import SpanStore
from runnertrace.store.retention import parse_age, prune_step
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.config import TraceConfig
from runnertrace.ui.queries import Dashboard, RunFilter
from ui_fixtures import hand_made_runs

DAY_NS = 86_400 * 10**9
HAND_MADE_SPANS = 3  # a run, its chat, its tool


def _old_and_new(location: Path) -> None:
    hand_made_runs(location, time.time_ns() - 40 * DAY_NS, count=3)  # "zebras" in each
    hand_made_runs(location, time.time_ns() - 1 * DAY_NS, count=2)


def test_prune_removes_old_runs_whole_and_search_follows(
    store_location: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _old_and_new(store_location)
    dashboard = Dashboard(store_location)
    dashboard.start()
    try:
        if engine == "sqlite":  # the side index has every run before the prune
            assert dashboard.search is not None and dashboard.search.caught_up.wait(30)
            assert len(dashboard.search.matches("zebras")[0]) == 5  # type: ignore[index]
        assert main(["prune", "--older-than", "30d", "--store", str(store_location)]) == 0
        assert "Pruned 3 runs (9 spans" in capsys.readouterr().out
        store = SpanStore(store_location, read_only=True)
        assert store.count() == (2 * HAND_MADE_SPANS, 2)
        left = store.read("SELECT COUNT(*), COUNT(DISTINCT trace_id) FROM run_agents")
        assert left[0][1] == 2
        store.close()
        assert len(dashboard.runs(RunFilter(search="zebras"))["runs"]) == 2
        if engine == "sqlite":  # and the pruned runs' documents left the side file
            assert len(dashboard.search.matches("zebras")[0]) == 2  # type: ignore[union-attr,index]
        assert main(["prune", "--older-than", "30d", "--store", str(store_location)]) == 0
        assert "Pruned 0 runs" in capsys.readouterr().out
    finally:
        dashboard.close()


def test_each_prune_step_is_bounded(store_location: Path) -> None:
    _old_and_new(store_location)
    store = SpanStore(store_location)
    cutoff = time.time_ns() - 30 * DAY_NS
    assert [prune_step(store, cutoff, batch=2).runs for _ in range(3)] == [2, 1, 0]
    assert store.count() == (2 * HAND_MADE_SPANS, 2)
    store.close()


def test_the_retention_setting_prunes_as_the_writer_goes(store_location: Path) -> None:
    _old_and_new(store_location)
    config = TraceConfig(
        type=["local"], local={"path": str(store_location), "retention": "30d"}, metrics=False
    )
    runner = TracingRunner(NativeRunner(), settings=config)
    run_many(runner, "fresh", 1)
    assert runner.setup.flush()
    store = SpanStore(store_location, read_only=True)
    assert store.count() == (2 * HAND_MADE_SPANS + SPANS_PER_RUN, 3)
    assert sorted({r.agent or "" for r in store.list_runs()}) == ["fresh", "pricey"]
    store.close()
    assert runner.setup.shutdown()


def test_an_age_is_a_number_and_a_unit(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_age("30d") == 30 * 86400 and parse_age("12h") == 12 * 3600
    assert parse_age("2w") == 14 * 86400 and parse_age("1.5m") == 90
    for bad in ("30", "d", "-1d", "0d", "30 days"):
        with pytest.raises(ValueError, match="not an age"):
            parse_age(bad)
    assert main(["prune", "--older-than", "thirty"]) == 1
    err = capsys.readouterr().err
    assert "--older-than: 'thirty' is not an age" in err and "30d" in err
    with pytest.raises(ValueError, match=r"trace\.local\.retention: invalid value 'a month'"):
        TraceConfig(type=["local"], local={"retention": "a month"})
