"""Feedback and projects in Chromium: a thumb and a note on a run and on a span picked in the
waterfall survive a reload, show in the runs list and filter it; the project switcher lists
each app with its runs and narrows the list, in the URL."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.browser import loopback_page  # one Chromium lookup and loopback guard for all

from store_engines import ENGINES, new_location
from test_ui_browser import ARGS  # the same launch flags as every browser test
from test_ui_otlp import Server
from ui_fixtures import app_runs, hand_made_runs

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
MS = 1_000_000
DOCS = Path(__file__).resolve().parent.parent / "docs"
# Read at import: the suite's autouse fixture clears every RUNNERTRACE_* variable per test.
UPDATE_SCREENSHOTS = bool(os.environ.get("RUNNERTRACE_UPDATE_SCREENSHOTS"))


@pytest.fixture(scope="module", params=ENGINES)
def base_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    db = new_location(request.param, request, tmp_path_factory.mktemp("ui-feedback"))
    hand_made_runs(db, time.time_ns() - 3_600_000 * MS, count=2)  # app "unknown_service"
    app_runs(db, "shop", 3, time.time_ns() - 60_000 * MS)
    with Server(db) as url:
        yield url


@pytest.fixture
def pg(base_url: str) -> Iterator[object]:
    with loopback_page(1400, 900, ARGS) as page:
        yield page


def test_feedback_survives_a_reload(pg: object, base_url: str, tmp_path: Path) -> None:
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    row = pg.locator('#runs tr[data-agent="pricey"]').first  # type: ignore[attr-defined]
    trace_id = row.get_attribute("data-trace-id")
    row.click()
    frame = pg.frame_locator("iframe.trace")  # type: ignore[attr-defined]
    frame.locator("#rows .row").first.wait_for()
    listed = pg.locator("#feedback-list li")  # type: ignore[attr-defined]
    expect(listed).to_have_count(0)
    # the run: a thumbs up with a note
    pg.fill("#feedback-comment", "right answer, fast")  # type: ignore[attr-defined]
    pg.click("#feedback-up")  # type: ignore[attr-defined]
    expect(listed).to_have_count(1)
    # a span picked in the waterfall: a thumbs down
    tool = frame.locator("#rows .row", has_text="execute_tool lookup")
    tool.click()
    span_id = tool.get_attribute("data-span-id")
    target = pg.locator("#feedback-target")  # type: ignore[attr-defined]
    target.select_option(span_id)
    pg.click("#feedback-down")  # type: ignore[attr-defined]
    expect(listed).to_have_count(2)
    pg.reload()  # type: ignore[attr-defined]
    expect(listed).to_have_count(2)
    expect(listed.nth(0)).to_have_attribute("data-score", "up")
    expect(listed.nth(0)).to_have_attribute("data-span-id", "")
    expect(listed.nth(0).locator(".note")).to_have_text("\u2013 right answer, fast")
    expect(listed.nth(1)).to_have_attribute("data-score", "down")
    expect(listed.nth(1)).to_have_attribute("data-span-id", span_id)
    shot = DOCS / "ui-feedback.png" if UPDATE_SCREENSHOTS else tmp_path / "ui-feedback.png"
    pg.screenshot(path=str(shot))  # type: ignore[attr-defined]
    # the runs list: the run's thumb, its span's besides, and the filter in the URL
    pg.goto(base_url + "/#/runs?feedback=down")  # type: ignore[attr-defined]
    rows = pg.locator("#runs tr.link")  # type: ignore[attr-defined]
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-trace-id", trace_id)
    cell = rows.first.locator("td.feedback")
    expect(cell).to_have_attribute("data-feedback", "up")
    expect(cell.locator(".hint")).to_have_text(" +1")
    pg.reload()  # type: ignore[attr-defined]
    expect(pg.locator('select[name="feedback"]')).to_have_value("down")  # type: ignore[attr-defined]
    expect(rows).to_have_count(1)


def test_the_project_switcher(pg: object, base_url: str) -> None:
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    rows = pg.locator("#runs tr.link")  # type: ignore[attr-defined]
    expect(rows).to_have_count(5)
    switcher = pg.locator("#project")  # type: ignore[attr-defined]
    expect(switcher.locator("option")).to_have_text(
        ["all projects", "shop (3)", "unknown_service (2)"]
    )
    switcher.select_option("shop")
    expect(rows).to_have_count(3)
    assert pg.url.endswith("#/runs?project=shop")  # type: ignore[attr-defined]
    pg.reload()  # type: ignore[attr-defined]
    expect(switcher).to_have_value("shop")
    expect(rows).to_have_count(3)


def test_feedback_given_elsewhere_arrives_without_reloading_the_waterfall(
    pg: object, base_url: str
) -> None:
    """Feedback moves the run on the live feed; the open trace shows it in its list, and the
    waterfall (with the span picked in it) stays as it is: no reload for a change of thumbs."""
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    row = pg.locator('#runs tr[data-agent="pricey"]').nth(1)  # type: ignore[attr-defined]
    trace_id = row.get_attribute("data-trace-id")
    row.click()
    expect(pg.locator("#live")).to_have_text("live")  # type: ignore[attr-defined]
    frame = pg.frame_locator("iframe.trace")  # type: ignore[attr-defined]
    tool = frame.locator("#rows .row", has_text="execute_tool lookup")
    tool.click()
    span_id = tool.get_attribute("data-span-id")
    target = pg.locator("#feedback-target")  # type: ignore[attr-defined]
    target.select_option(span_id)
    drawn = pg.locator("iframe.trace").element_handle().content_frame()  # type: ignore[attr-defined]
    drawn.evaluate("window.drawnOnce = true")
    seq = int(pg.locator("body").get_attribute("data-live-seq") or 0)  # type: ignore[attr-defined]
    sent = json.dumps({"trace_id": trace_id, "score": "up", "comment": "from a colleague"})
    request = urllib.request.Request(
        base_url + "/api/feedback", sent.encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    listed = pg.locator("#feedback-list li")  # type: ignore[attr-defined]
    expect(listed).to_have_count(1)
    expect(listed.first.locator(".note")).to_have_text("\u2013 from a colleague")
    expect(pg.locator("body")).not_to_have_attribute("data-live-seq", str(seq))  # type: ignore[attr-defined]
    assert drawn.evaluate("window.drawnOnce === true")
    expect(target).to_have_value(span_id)
    expect(tool).to_have_class(re.compile(r"\bselected\b"))
