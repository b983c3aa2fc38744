"""The dashboard in a real headless Chromium, driven by Playwright, served by uvicorn on loopback.

The page's rows, trees and charts only exist once its own script has run
against the live server, so seeing them proves the whole path: SQL, JSON
APIs, the front end and the report's waterfall in its frame. Every request
the page makes is recorded, and any to another host fails the test.
"""

from __future__ import annotations

# A module of its framework's tests: without its extra, skipped as a whole (before the
# imports below), so `pytest -k <framework>` runs in a venv with that one extra.
import pytest

pytest.importorskip("uvicorn", reason="needs the ui extra: pip install -e '.[dev,ui]'")

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import uvicorn
from tests.browser import chromium

from runnertrace.ui import create_app
from store_engines import ENGINES, new_location
from ui_fixtures import build_store, hand_made_runs

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
README_SHOT = Path(__file__).resolve().parent.parent / "docs" / "ui-runs.png"
# Read at import: the suite's autouse fixture clears every RUNNERTRACE_* variable per test.
UPDATE_SCREENSHOTS = bool(os.environ.get("RUNNERTRACE_UPDATE_SCREENSHOTS"))


class Server:
    """uvicorn on 127.0.0.1 with an ephemeral port, in a thread of this process."""

    def __init__(self, db: Path) -> None:
        config = uvicorn.Config(
            create_app(db),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module", params=ENGINES)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main pages, once over each engine's store."""
    return build_store(new_location(request.param, request, tmp_path_factory.mktemp("ui-browser")))


@pytest.fixture(scope="module")
def base_url(db: Path) -> Iterator[str]:
    with Server(db) as url:
        yield url


@pytest.fixture
def page(base_url: str) -> Iterator[tuple[object, list[str]]]:
    executable = chromium()  # skips without one, fails in CI: see tests/browser.py
    requested: list[str] = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 820})

        def guard(route: object) -> None:
            url = route.request.url  # type: ignore[attr-defined]
            requested.append(url)
            if urlsplit(url).hostname == "127.0.0.1" or url.startswith("data:"):
                route.continue_()  # type: ignore[attr-defined]
            else:
                route.abort()  # type: ignore[attr-defined]

        context.route("**/*", guard)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page, requested
        assert errors == [], errors
        browser.close()
    outside = [u for u in requested if urlsplit(u).hostname not in ("127.0.0.1", None)]
    assert outside == [], f"the page reached beyond loopback: {outside}"


def test_runs_filter_trace_tree_and_failed_tool(page: tuple, base_url: str, tmp_path: Path) -> None:
    pg, requested = page
    pg.goto(base_url + "/#/runs")
    rows = pg.locator("#runs tbody tr.link")
    rows.first.wait_for()
    assert rows.count() == 7
    pg.wait_for_selector("#live.on")
    pg.select_option("select[name=agent]", "calc")
    expect(rows).to_have_count(3)
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.agent)")) == {"calc"}
    assert "agent=calc" in pg.url
    pg.screenshot(path=str(tmp_path / "runs-filtered.png"))

    # The run whose tool failed: it is the one with an error span.
    failed = pg.locator("#runs tr.link", has_text="1 err")
    assert failed.count() == 1
    failed.click()
    frame = pg.frame_locator("iframe.trace")
    tree = frame.locator("#rows .row")
    tree.first.wait_for()
    names = tree.locator(".name").all_text_contents()
    assert names[0] == "invoke_agent calc" and "execute_tool calculator" in names
    assert frame.locator("#rows .row.error").count() == 1
    frame.locator("#rows .row.error").click()
    detail = frame.locator("#detail")
    detail.locator("h2", has_text="execute_tool calculator").wait_for()
    assert "ZeroDivisionError: division by zero" in detail.inner_text()
    assert "error.type" in detail.inner_text()
    assert pg.locator(".tracebar").inner_text().count("calc") >= 1
    pg.screenshot(path=str(tmp_path / "trace.png"))
    assert any("/trace/" in u for u in requested)


def test_sessions_errors_and_charts(page: tuple, base_url: str, tmp_path: Path) -> None:
    pg, _ = page
    pg.goto(base_url + "/#/sessions")
    pg.locator("#sessions tr.link").first.wait_for()
    assert pg.locator("#sessions tr.link").count() == 3
    pg.locator('#sessions tr[data-session-id="calc-session"]').click()
    turns = pg.locator("#conversation .turn")
    turns.first.wait_for()
    assert turns.count() == 3
    assert "What is 100 divided by 0?" in turns.nth(1).inner_text()
    assert "The answer is 7006669." in turns.nth(0).inner_text()
    pg.screenshot(path=str(tmp_path / "session.png"))

    pg.goto(base_url + "/#/errors")
    pg.locator('#errors tr[data-error-type="RateLimitError"]').click()
    pg.locator("#error-runs tr.link").first.wait_for()
    assert "429 slow down" in pg.locator("#error-runs").inner_text()
    pg.locator("#error-runs tr.link").first.click()
    frame = pg.frame_locator("iframe.trace")
    frame.locator("#rows .row.error").first.wait_for()
    assert "cost $0.0" in frame.locator("#summary").inner_text()  # the report shows it too

    # latency, tokens and cost (calls per tool), the error rate; per agent also its own cost
    for by, charts in (("agent", 5), ("model", 4), ("tool", 3)):
        pg.goto(base_url + f"/#/charts?by={by}")
        expect(pg.locator("body")).to_have_attribute("data-charts", str(charts))
        # every chart gets its lines (drawn after the count is set: wait, on a busy machine)
        # (one check: a live update may redraw the charts between two separate ones)
        pg.wait_for_function(
            "() => { const cs = [...document.querySelectorAll('#charts .chart')];"
            " return cs.length > 0 && cs.every(c => Number(c.dataset.lines) > 0)"
            " && document.querySelectorAll('#charts svg path').length > 0; }",
            timeout=10_000,
        )
    legend = pg.locator("#charts .legend").first.inner_text()
    assert "lookup" in legend and "calculator" in legend
    pg.goto(base_url + "/#/charts?by=agent")
    expect(pg.locator("body")).to_have_attribute("data-charts", "5")
    pg.screenshot(path=str(tmp_path / "charts.png"), full_page=True)


def test_new_runs_appear_without_a_reload(page: tuple, base_url: str, db: Path) -> None:
    pg, _ = page
    pg.goto(base_url + "/#/runs?agent=pricey")
    expect(pg.locator("#runs tr.link")).to_have_count(3)
    pg.wait_for_selector("#live.on")
    pg.evaluate("window.__marker = 1")  # gone if the page reloads
    hand_made_runs(db, time.time_ns(), count=2)
    expect(pg.locator("#runs tr.link")).to_have_count(5, timeout=15000)
    assert pg.evaluate("window.__marker") == 1
    assert pg.locator("#runs tr.fresh").count() == 2


def test_readme_screenshot(page: tuple, base_url: str, tmp_path: Path) -> None:
    """The runs list as docs/ui.md shows it (RUNNERTRACE_UPDATE_SCREENSHOTS=1: docs/ui-runs.png)."""
    pg, _ = page
    shot = README_SHOT if UPDATE_SCREENSHOTS else tmp_path / "ui.png"
    pg.set_viewport_size({"width": 1280, "height": 560})
    pg.goto(base_url + "/#/runs")
    pg.locator("#runs tr.link").first.wait_for()
    pg.wait_for_selector("#live.on")
    pg.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
