"""A newcomer's first dashboard, in a real headless Chromium (issue 30).

The store is what ``runnertrace demo`` writes on a fresh machine (run as a user
runs it, in a subprocess), so the content seen is what the demo captures. An
empty store shows where to send spans; a nested trace whose tool fails four
levels down shows its failing path; an unknown trace id is a page that says so.
``RUNNERTRACE_UPDATE_SCREENSHOTS=1`` writes docs/ui.png (the first view) and
docs/ui-failing-path.png.
"""

from __future__ import annotations

import pytest

pytest.importorskip("uvicorn", reason="needs the ui extra: pip install -e '.[dev,ui]'")

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

import test_ui_browser
from runnertrace.exporters.local_store import SpanStore, SqliteSpanExporter
from test_ui_browser import Server

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
UPDATE_SCREENSHOTS = bool(os.environ.get("RUNNERTRACE_UPDATE_SCREENSHOTS"))
MS = 1_000_000
Page = tuple[Any, list[str]]  # the page fixture: the page, and every URL it requested
page = test_ui_browser.page  # that module's browser (requests beyond loopback fail the test)


def demo_store(directory: Path) -> Path:
    """``runnertrace demo`` into a store of its own, from the source tree under test."""
    db = directory / "traces.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNERTRACE_", "OTEL_"))}
    env["PYTHONPATH"] = str(ROOT / "src")  # absolute: the demo runs from another directory
    done = subprocess.run(
        [sys.executable, "-m", "runnertrace.cli", "demo", "--db", str(db)],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return db


def nested_failure(db: Path) -> str:
    """A planner whose tool runs a researcher, whose own tool fails: the failure at depth 4."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(db)))
    tracer = provider.get_tracer("first-view-test")
    t = time.time_ns() - 30_000 * MS

    ends: list[tuple[Any, int]] = []  # each span and its end, in ms: ended innermost first

    def span(name: str, parent: Any, start: int, end: int, **attributes: Any) -> Any:
        context = trace_api.set_span_in_context(parent) if parent is not None else None
        opened = tracer.start_span(
            name, context=context, start_time=t + start * MS, attributes=attributes
        )
        ends.insert(0, (opened, end))
        return opened

    run = span("invoke_agent planner", None, 0, 900, **{"runnertrace.span.type": "run",
               "gen_ai.agent.name": "planner", "runnertrace.framework": "native"})  # fmt: skip
    step = span("agent_step planner", run, 5, 890, **{"runnertrace.span.type": "step",
                "gen_ai.agent.name": "planner"})  # fmt: skip
    span("chat gpt-4o", step, 10, 200, **{"runnertrace.span.type": "message",
                "gen_ai.agent.name": "planner"})  # fmt: skip
    ask = span("execute_tool ask_researcher_about_quarterly_stock_prices", step, 210, 880,
               **{"runnertrace.span.type": "tool", "gen_ai.tool.name": "ask_researcher",
                  "gen_ai.agent.name": "planner"})  # fmt: skip
    inner = span("invoke_agent researcher", ask, 215, 870, **{"runnertrace.span.type": "run",
                 "gen_ai.agent.name": "researcher"})  # fmt: skip
    inner_step = span("agent_step researcher", inner, 220, 860, **{
        "runnertrace.span.type": "step", "gen_ai.agent.name": "researcher"})  # fmt: skip
    fetch = span("execute_tool fetch_stock_prices_from_the_exchange", inner_step, 300, 700,
                 **{"runnertrace.span.type": "tool", "gen_ai.tool.name": "fetch_stock_prices",
                    "gen_ai.agent.name": "researcher",
                    "error.type": "StockServiceDown"})  # fmt: skip
    fetch.set_status(Status(StatusCode.ERROR, "StockServiceDown: the exchange did not answer"))
    for opened, end in ends:
        opened.end(end_time=t + end * MS)
    provider.shutdown()
    return format(run.get_span_context().trace_id, "032x")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    demo = demo_store(tmp_path_factory.mktemp("fresh-machine"))
    nested = tmp_path_factory.mktemp("nested") / "traces.db"
    nested_failure(nested)
    return {"demo": demo, "empty": tmp_path_factory.mktemp("empty") / "traces.db", "nested": nested}


@pytest.fixture(scope="module")
def urls(stores: dict[str, Path]) -> Iterator[dict[str, str]]:
    with (
        Server(stores["demo"]) as demo,
        Server(stores["empty"]) as empty,
        Server(stores["nested"]) as nested,
    ):
        yield {"demo": demo, "empty": empty, "nested": nested}


@pytest.fixture(scope="module")
def base_url(urls: dict[str, str]) -> str:
    return urls["demo"]  # what the imported page fixture asks for


def shot(pg: object, name: str, tmp_path: Path) -> None:
    path = DOCS / name if UPDATE_SCREENSHOTS else tmp_path / name
    pg.screenshot(path=str(path))  # type: ignore[attr-defined]
    assert path.stat().st_size > 10_000


def test_the_first_demo_run_shows_content_in_the_runs_list_and_the_chat_view(
    page: Page, urls: dict[str, str], tmp_path: Path
) -> None:
    pg, _ = page
    pg.set_viewport_size({"width": 1280, "height": 560})
    pg.goto(urls["demo"] + "/#/runs")
    rows = pg.locator("#runs tbody tr.link")
    expect(rows).to_have_count(3)
    pg.wait_for_selector("#live.on")
    previews = rows.locator("td.preview").all_inner_texts()
    assert "What is 1234 * 5678, plus 17?" in previews, previews  # the input column
    assert any("7006669" in text for text in previews), previews  # the output column
    shot(pg, "ui.png", tmp_path)
    pg.set_viewport_size({"width": 1400, "height": 900})
    rows.filter(has_text="1234 * 5678").click()
    frame = pg.frame_locator("iframe.trace")
    frame.locator('#rows .row:has-text("chat")').first.click()
    detail = frame.locator("#detail")
    expect(detail).to_contain_text("What is 1234 * 5678, plus 17?")  # the model call's chat
    expect(detail).not_to_contain_text("No messages were captured")


def test_the_path_to_a_failing_span_is_marked(page: Page, urls: dict[str, str]) -> None:
    """The demo's division by zero: the tool failed (the run went on), its step and run marked."""
    pg, _ = page
    pg.goto(urls["demo"] + "/#/runs")
    pg.locator("#runs tbody tr.link").filter(has_text="divided by 0").click()
    frame = pg.frame_locator("iframe.trace")
    failed = frame.locator("#rows .row.error")
    expect(failed).to_have_count(1)
    expect(failed).to_contain_text("execute_tool calculator")
    marked = frame.locator("#rows .row.fail-path")
    expect(marked).to_have_count(2)
    assert marked.evaluate_all("rs => rs.map(r => r.dataset.depth)") == ["0", "1"]
    # the other steps, whose calls did not fail, are not marked
    assert frame.locator("#rows .row:not(.fail-path):not(.error)").count() > 0


def test_a_nested_failure_marks_its_path_and_the_name_column_resizes(
    page: Page, urls: dict[str, str], tmp_path: Path
) -> None:
    pg, _ = page
    pg.set_viewport_size({"width": 1600, "height": 900})
    pg.goto(urls["nested"] + "/#/runs")
    pg.locator("#runs tbody tr.link").first.click()
    frame = pg.frame_locator("iframe.trace")
    expect(frame.locator("#rows .row")).to_have_count(7)
    marked = frame.locator("#rows .row.fail-path")
    assert marked.evaluate_all("rs => rs.map(r => r.dataset.depth)") == ["0", "1", "2", "3", "4"]
    expect(frame.locator('#rows .row:has-text("chat gpt-4o")')).not_to_have_class("fail-path")
    name = frame.locator("#rows .row.error .name")
    assert name.get_attribute("title") == "execute_tool fetch_stock_prices_from_the_exchange"
    before = name.bounding_box()["width"]
    handle = frame.locator("#axis .resizer").bounding_box()
    assert handle is not None
    y = handle["y"] + handle["height"] / 2
    pg.mouse.move(handle["x"] + 3, y)
    pg.mouse.down()
    pg.mouse.move(handle["x"] + 260, y, steps=5)
    pg.mouse.up()
    assert name.bounding_box()["width"] > before
    frame.locator("#rows .row.error").click()
    shot(pg, "ui-failing-path.png", tmp_path)


def test_an_unknown_trace_id_is_a_page_that_says_so(page: Page, urls: dict[str, str]) -> None:
    pg, _ = page
    pg.goto(urls["demo"] + "/#/trace/0123456789abcdef")
    box = pg.locator("#not-found")
    expect(box).to_contain_text("No trace 0123456789abcdef in this store")
    assert pg.locator("iframe.trace").count() == 0
    assert "{" not in box.inner_text()  # no raw JSON
    # opened directly, the frame's own address is an HTML page too
    pg.goto(urls["demo"] + "/trace/0123456789abcdef")
    expect(pg.locator("h1#not-found")).to_have_text("No such trace in this store")


def test_an_empty_dashboard_shows_the_endpoint_and_a_snippet_per_framework(
    page: Page, urls: dict[str, str]
) -> None:
    pg, _ = page
    pg.goto(urls["empty"] + "/#/runs")
    started = pg.locator("#getting-started")
    expect(started.locator("#otlp-endpoint")).to_have_text(urls["empty"] + "/v1/traces")
    expect(started).to_contain_text("RUNNERTRACE_TRACE__OTLP__ENDPOINT=" + urls["empty"])
    tabs = started.locator(".tabs button")
    expect(tabs).to_have_count(7)
    tabs.filter(has_text="LangGraph").click()
    snippet = started.locator(".snippet")
    expect(snippet).to_have_attribute("data-framework", "LangGraph")
    expect(snippet).to_contain_text("from runnertrace.runners.langgraph import LangGraphModule")
    expect(snippet).to_contain_text("examples/langgraph_agent.py")


def test_an_empty_chart_labels_zero_once_and_no_time_twice(
    page: Page, urls: dict[str, str]
) -> None:
    pg, _ = page
    pg.goto(urls["empty"] + "/#/charts?by=agent&range=")
    expect(pg.locator("body")).to_have_attribute("data-charts", "5")
    for chart in pg.locator("#charts .chart").all():
        values = chart.locator(".y-axis text").evaluate_all("ts => ts.map(t => t.dataset.value)")
        assert values == ["0"], values  # not "0 0 1 1 1" from a made-up scale of 0 to 1
        times = chart.locator(".x-axis text").evaluate_all("ts => ts.map(t => t.textContent)")
        assert times and len(times) == len(set(times)), times


def test_the_demos_store_holds_content_on_every_model_call(stores: dict[str, Path]) -> None:
    """What the views above read: the demo's chat spans carry their messages."""
    store = SpanStore(stores["demo"], read_only=True)
    try:
        for run in store.list_runs(10):
            chats = [s for s in store.get_trace(run.trace_id) if s.span_type == "message"]
            assert chats and all("gen_ai.output.messages" in s.attributes for s in chats)
    finally:
        store.close()


def test_the_session_view_names_a_failed_calls_error_type_once(
    page: Page, urls: dict[str, str]
) -> None:
    """The demo's division: "ZeroDivisionError: division by zero", not the type twice."""
    pg, _ = page
    pg.goto(urls["demo"] + "/#/sessions")
    pg.locator("#sessions tbody tr").first.click()
    failed = pg.locator("#conversation .turn .failed")
    expect(failed).to_have_count(1)
    expect(failed).to_contain_text("ZeroDivisionError: division by zero")
    assert "ZeroDivisionError: ZeroDivisionError" not in failed.inner_text()
