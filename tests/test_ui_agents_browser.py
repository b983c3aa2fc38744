"""The dashboard on a trace with nested agents, in Chromium: the per-agent table on the
trace page and on the session page, honest cost in the runs list, and the "agent
anywhere" filter (issue 28).

The store holds real traced runs (``ui_fixtures.team_runs``): a planner whose tool asks
a researcher (a nested run), and an agent that delegates to itself. What is asserted is
what a user reads: the table's cells, the cost's text and what its hover says.
"""

from __future__ import annotations

import pytest

pytest.importorskip("uvicorn", reason="needs the ui extra: pip install -e '.[dev,ui]'")

import os
from collections.abc import Iterator
from pathlib import Path

from tests.browser import loopback_page  # one Chromium lookup and loopback guard for all

from runnertrace.exporters.local_store import SpanStore
from test_ui_browser import ARGS, Server
from ui_fixtures import TEAM_SESSION, build_team_store

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

DOCS = Path(__file__).resolve().parent.parent / "docs"
# Read at import: the suite's autouse fixture clears every RUNNERTRACE_* variable per test.
UPDATE_SCREENSHOTS = bool(os.environ.get("RUNNERTRACE_UPDATE_SCREENSHOTS"))


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_team_store(tmp_path_factory.mktemp("ui-agents") / "traces.db")


@pytest.fixture(scope="module")
def base_url(db: Path) -> Iterator[str]:
    with Server(db) as url:
        yield url


@pytest.fixture
def pg(base_url: str) -> Iterator[object]:
    with loopback_page(1500, 900, ARGS) as page:
        yield page


def cells(row: object) -> dict[str, str]:
    """A per-agent table row's cells, by what they count (``own.cost``, ``total.time``...)."""
    found = row.locator("td[data-k]")  # type: ignore[attr-defined]
    return {
        found.nth(i).get_attribute("data-k"): found.nth(i).inner_text()
        for i in range(found.count())
    }


def test_the_trace_page_has_a_table_per_agent_that_agrees_with_the_store(
    pg: object, base_url: str, db: Path, tmp_path: Path
) -> None:
    store = SpanStore(db, read_only=True)
    planner = next(r for r in store.list_runs() if r.agent == "planner")
    accounts = {a.agent: a for a in store.agents(planner.trace_id)}
    store.close()
    pg.goto(f"{base_url}/#/trace/{planner.trace_id}")  # type: ignore[attr-defined]
    frame = pg.frame_locator("iframe.trace")  # type: ignore[attr-defined]
    table = frame.locator("#agents table.agents")
    expect(table).to_be_visible()  # open: the trace has more than one agent
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(2)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.agent)") == ["planner", "researcher"]
    for agent, account in accounts.items():
        shown = cells(table.locator(f'tr[data-agent="{agent}"]'))
        for side, usage in (("own", account.own), ("total", account.total)):
            assert shown[f"{side}.model_calls"] == str(usage.model_calls), (agent, side)
            assert shown[f"{side}.input_tokens"] == f"{usage.input_tokens:,}", (agent, side)
            assert shown[f"{side}.output_tokens"] == f"{usage.output_tokens:,}", (agent, side)
            assert shown[f"{side}.tool_calls"] == str(usage.tool_calls), (agent, side)
            assert shown[f"{side}.cost"] == usage.cost_label, (agent, side)
    planner_row = table.locator('tr[data-agent="planner"]')
    total_cost = planner_row.locator('td[data-k="total.cost"]')
    expect(total_cost).to_have_text("$0.006 (partial: 2 calls unpriced)")
    expect(total_cost).to_have_attribute("data-cost-status", "partial")
    title = total_cost.get_attribute("title")
    assert title is not None and "2 calls got no price" in title
    assert title.endswith("runnertrace/scripted-1")
    expect(planner_row.locator('td[data-k="own.cost"]')).to_have_text("$0.006")
    # the nested agent sits under the one that started it
    name = table.locator('tr[data-agent="researcher"] td.agent')
    expect(name).to_have_attribute("title", "started by planner")
    indent = name.evaluate("td => parseFloat(getComputedStyle(td).paddingLeft)")
    top = planner_row.locator("td.agent").evaluate(
        "td => parseFloat(getComputedStyle(td).paddingLeft)"
    )
    assert indent > top
    # the header above the frame reads the same run row
    chip = pg.locator(".tracebar .chips span[data-cost-status]")  # type: ignore[attr-defined]
    expect(chip.locator("b")).to_have_text("$0.006 (partial: 2 calls unpriced)")
    shot = DOCS / "ui-agents.png" if UPDATE_SCREENSHOTS else tmp_path / "ui-agents.png"
    pg.set_viewport_size({"width": 1400, "height": 640})  # type: ignore[attr-defined]
    pg.screenshot(path=str(shot))  # type: ignore[attr-defined]
    assert shot.stat().st_size > 10_000


def test_the_session_page_sums_each_agent_over_its_runs(pg: object, base_url: str) -> None:
    pg.goto(f"{base_url}/#/sessions/{TEAM_SESSION}")  # type: ignore[attr-defined]
    table = pg.locator("#session-agents table.agents")  # type: ignore[attr-defined]
    expect(table.locator("tbody tr")).to_have_count(3)
    recursive = cells(table.locator('tr[data-agent="recursive"]'))
    # two runs, one inside the other: own calls summed (2 + 1), the total counted once
    assert (recursive["runs"], recursive["own.model_calls"], recursive["total.model_calls"]) == (
        "2",
        "3",
        "3",
    )
    assert recursive["own.cost"] == recursive["total.cost"] == "unpriced"
    researcher = cells(table.locator('tr[data-agent="researcher"]'))
    assert (researcher["own.input_tokens"], researcher["total.input_tokens"]) == ("700", "700")
    turns = pg.locator("#conversation .turn .cost")  # type: ignore[attr-defined]
    expect(turns).to_have_text(["$0.006 (partial: 2 calls unpriced)", "unpriced"])
    pg.goto(f"{base_url}/#/sessions")  # type: ignore[attr-defined]
    cost = pg.locator(f'#sessions tr[data-session-id="{TEAM_SESSION}"] td[data-cost-status]')  # type: ignore[attr-defined]
    expect(cost).to_have_text("$0.006 (partial: 5 calls unpriced)")


def test_the_runs_list_costs_and_the_agent_anywhere_filter(pg: object, base_url: str) -> None:
    pg.goto(f"{base_url}/#/runs")  # type: ignore[attr-defined]
    rows = pg.locator("#runs tr.link")  # type: ignore[attr-defined]
    expect(rows).to_have_count(2)
    planner_cost = pg.locator('#runs tr[data-agent="planner"] td[data-cost-status]')  # type: ignore[attr-defined]
    expect(planner_cost).to_have_text("$0.006 (partial: 2 calls unpriced)")
    title = planner_cost.get_attribute("title")
    assert title is not None and title.endswith("runnertrace/scripted-1")
    expect(pg.locator('#runs tr[data-agent="recursive"] td[data-cost-status]')).to_have_text(  # type: ignore[attr-defined]
        "unpriced"
    )
    pick = pg.locator("select[name=any_agent]")  # type: ignore[attr-defined]
    expect(pick.locator("option")).to_have_count(4)  # any, and the three agents of the trees
    pick.select_option("researcher")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-agent", "planner")  # it ran the researcher
    assert "any_agent=researcher" in pg.url  # type: ignore[attr-defined]
