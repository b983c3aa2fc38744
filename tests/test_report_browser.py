"""The HTML report, rendered by a real headless Chromium.

The rows only exist once the page's own script has run, so finding every span
in the dumped DOM proves the page works, not just that the JSON was embedded.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode
from tests.browser import chromium

from runnertrace.exporters.local import LocalBackend, LocalConfig
from runnertrace.exporters.local_store import SpanStore, StoredSpan
from runnertrace.report import render_report, write_report
from runnertrace.tracing.config import TraceConfig

MS = 1_000_000
T0 = 1_750_000_000_000 * MS
HOSTILE = '</script><img src=x onerror="document.title=1">'


def chromium_dom(page: Path, fragment: str = "", tmp: Path | None = None) -> str:
    executable = chromium()  # skips without one, fails in CI: see tests/browser.py
    profile = (tmp or page.parent) / "chromium-profile"
    result = subprocess.run(
        [
            executable,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=2000",
            "--dump-dom",
            page.as_uri() + fragment,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def all_text(self) -> str:
        return "".join(self.text) + "".join(c.all_text() for c in self.children)

    def walk(self) -> list[Node]:
        return [self, *(n for c in self.children for n in c.walk())]

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class DomParser(HTMLParser):
    """A minimal DOM (enough for attribute and text assertions) from Chromium's dump."""

    VOID = {"meta", "link", "br", "wbr", "img", "input", "hr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text.append(data)


def parse(dom: str) -> list[Node]:
    parser = DomParser()
    parser.feed(dom)
    return parser.root.walk()


def make_store(db: Path) -> tuple[SpanStore, list[StoredSpan]]:
    """A trace with every span type, an error, events, deep nesting and hostile text."""
    backend = LocalBackend(TraceConfig(local=LocalConfig(path=str(db))))
    provider = TracerProvider()
    for processor in backend.processors():
        provider.add_span_processor(processor)
    tracer = provider.get_tracer("report-test")

    def span(
        name: str, parent: trace_api.Span | None, start: int, end: int, kind: str, **attrs: object
    ) -> trace_api.Span:
        ctx = trace_api.set_span_in_context(parent) if parent is not None else None
        s = tracer.start_span(
            name,
            context=ctx,
            start_time=T0 + start * MS,
            kind=SpanKind.CLIENT if kind == "message" else SpanKind.INTERNAL,
            attributes={"runnertrace.span.type": kind, **attrs},  # type: ignore[dict-item]
        )
        s.end(end_time=T0 + end * MS)
        return s

    root = tracer.start_span(
        "invoke_agent planner",
        start_time=T0,
        attributes={
            "runnertrace.span.type": "run",
            "gen_ai.agent.name": "planner",
            "runnertrace.framework": "native",
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]
            ),
            "server.address": "https://example.invalid/not-a-resource",
        },
    )
    step = tracer.start_span(
        "agent_step planner",
        context=trace_api.set_span_in_context(root),
        start_time=T0 + 1 * MS,
        attributes={"runnertrace.span.type": "step"},
    )
    chat = tracer.start_span(
        "chat scripted-1",
        context=trace_api.set_span_in_context(step),
        start_time=T0 + 2 * MS,
        kind=SpanKind.CLIENT,
        attributes={
            "runnertrace.span.type": "message",
            "gen_ai.usage.input_tokens": 42,
            "gen_ai.usage.output_tokens": 7,
            "hostile.text": HOSTILE,
        },
    )
    span("reasoning", chat, 3, 9, "reasoning", **{"runnertrace.delta.count": 5})
    chat.add_event("gen_ai.content.delta", {"delta.chars": 12}, timestamp=T0 + 10 * MS)
    chat.end(end_time=T0 + 20 * MS)
    tool = tracer.start_span(
        f"execute_tool {HOSTILE}",
        context=trace_api.set_span_in_context(step),
        start_time=T0 + 21 * MS,
        attributes={"runnertrace.span.type": "tool", "gen_ai.tool.name": "lookup"},
    )
    nested = span("invoke_agent helper", tool, 22, 40, "run", **{"gen_ai.agent.name": "helper"})
    del nested
    tool.set_status(Status(StatusCode.ERROR, "lookup failed: 404"))
    tool.end(end_time=T0 + 45 * MS)
    step.end(end_time=T0 + 46 * MS)
    root.end(end_time=T0 + 50 * MS)
    assert provider.force_flush()
    provider.shutdown()
    store = SpanStore(db)
    spans = store.get_trace(store.resolve("last"))
    assert len(spans) == 6
    return store, spans


@pytest.fixture
def report(tmp_path: Path) -> tuple[Path, list[StoredSpan]]:
    store, spans = make_store(tmp_path / "traces.db")
    page = write_report(store, "last", tmp_path / "out" / "run.html")
    return page, spans


def rows_of(nodes: list[Node]) -> dict[str, Node]:
    return {n.attrs["data-span-id"]: n for n in nodes if "data-span-id" in n.attrs}


def test_every_span_is_rendered_as_a_row_by_the_page_script(
    report: tuple[Path, list[StoredSpan]], tmp_path: Path
) -> None:
    page, spans = report
    html = page.read_text(encoding="utf-8")
    assert "data-span-id=" not in html.split("<script", 1)[0]  # rows are not in the markup

    tool = next(s for s in spans if s.span_type == "tool")
    nodes = parse(chromium_dom(page, f"#span={tool.span_id}", tmp_path))
    rows = rows_of(nodes)
    assert set(rows) == {s.span_id for s in spans}
    for span in spans:
        names = [n for n in rows[span.span_id].walk() if "name" in n.classes()]
        assert [n.all_text() for n in names] == [span.name]
    body = next(n for n in nodes if n.tag == "body")
    assert body.attrs["data-rendered"] == str(len(spans))
    # rows are in tree order, indented by depth
    depths = {s.span_id: int(rows[s.span_id].attrs["data-depth"]) for s in spans}
    root = next(s for s in spans if s.parent_span_id is None)
    assert depths[root.span_id] == 0 and max(depths.values()) == 3
    # the error span is marked, and the hostile name stayed text: no <img> was created
    assert "error" in rows[tool.span_id].classes()
    assert not [n for n in nodes if n.tag == "img"]
    # the fragment selected the tool span: its details are in the panel
    detail = next(n for n in nodes if n.attrs.get("id") == "detail")
    assert detail.attrs["data-detail-for"] == tool.span_id
    detail_text = detail.all_text()
    assert "gen_ai.tool.name" in detail_text and "lookup" in detail_text
    assert "lookup failed: 404" in detail_text
    assert "selected" in rows[tool.span_id].classes()


def test_clicking_a_row_shows_its_attributes_and_events_and_carets_collapse(
    report: tuple[Path, list[StoredSpan]], tmp_path: Path
) -> None:
    page, spans = report
    chat = next(s for s in spans if s.span_type == "message")
    step = next(s for s in spans if s.span_type == "step")
    # Drive the page as a user would: click the chat row, then collapse the step.
    driver = (
        "<script>"
        f"document.querySelector('[data-span-id=\"{chat.span_id}\"]').click();"
        f"document.querySelector('[data-span-id=\"{step.span_id}\"] .caret').click();"
        "</script></body>"
    )
    driven = tmp_path / "driven.html"
    driven.write_text(page.read_text(encoding="utf-8").replace("</body>", driver), "utf-8")
    nodes = parse(chromium_dom(driven, tmp=tmp_path))
    detail = next(n for n in nodes if n.attrs.get("id") == "detail")
    assert detail.attrs["data-detail-for"] == chat.span_id
    text = detail.all_text()
    assert "gen_ai.usage.input_tokens" in text and "42" in text
    assert "Events (1)" in text and "gen_ai.content.delta" in text and "delta.chars" in text
    assert HOSTILE in text  # shown verbatim, as text
    rows = rows_of(nodes)
    descendants = {s.span_id for s in spans if s.span_type in ("message", "reasoning", "tool")}
    descendants |= {s.span_id for s in spans if s.name == "invoke_agent helper"}
    hidden = {span_id for span_id, row in rows.items() if "hidden" in row.classes()}
    assert hidden == descendants


def test_the_page_loads_nothing_from_the_network(
    report: tuple[Path, list[StoredSpan]],
) -> None:
    page, _ = report
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.IGNORECASE)
    assert not re.search(r"@import|url\(", html)
    assert "default-src 'none'" in html  # the CSP forbids any fetch at all
    assert "<link" not in html
    # the hostile span name cannot close the data script early
    assert HOSTILE not in html
    assert html.count("</script>") == 2


def test_render_report_rejects_an_empty_trace() -> None:
    with pytest.raises(ValueError, match="at least one span"):
        render_report([])


# -- a nested trace: the run's totals, its partial cost and the per-agent table (issue 28) ----
def _by_attr(nodes: list[Node], key: str) -> dict[str, Node]:
    return {n.attrs[key]: n for n in nodes if key in n.attrs}


def test_a_nested_trace_shows_the_root_totals_partial_cost_and_a_table_per_agent(
    tmp_path: Path,
) -> None:
    from ui_fixtures import build_team_store

    store = SpanStore(build_team_store(tmp_path / "team.db"))
    runs = {r.agent: r for r in store.list_runs()}
    planner = runs["planner"]
    page = write_report(store, planner.trace_id, tmp_path / "planner.html")
    nodes = parse(chromium_dom(page, tmp=tmp_path))

    chips = _by_attr(nodes, "data-chip")
    cost = chips["cost"]
    assert cost.attrs["data-cost-status"] == "partial"
    assert [n.all_text() for n in cost.walk() if n.tag == "b"] == [
        "$0.006 (partial: 2 calls unpriced)"
    ]
    assert cost.attrs["title"].endswith("no price for: runnertrace/scripted-1")
    assert [n.all_text() for n in chips["model calls"].walk() if n.tag == "b"] == ["4"]
    assert [n.all_text() for n in chips["nested runs"].walk() if n.tag == "b"] == ["1"]

    (table,) = [n for n in nodes if n.tag == "table" and "agents" in n.classes()]
    rows = _by_attr(table.walk(), "data-agent")
    assert list(rows) == ["planner", "researcher"]  # first started first

    def cells(agent: str) -> dict[str, str]:
        return {n.attrs["data-k"]: n.all_text() for n in rows[agent].walk() if "data-k" in n.attrs}

    accounts = {a.agent: a for a in store.agents(planner.trace_id)}
    for agent, account in accounts.items():
        shown = cells(agent)
        for side, usage in (("own", account.own), ("total", account.total)):
            assert shown[f"{side}.model_calls"] == str(usage.model_calls)
            assert shown[f"{side}.input_tokens"] == f"{usage.input_tokens:,}"
            assert shown[f"{side}.tool_calls"] == str(usage.tool_calls)
            assert shown[f"{side}.cost"] == usage.cost_label
    assert cells("planner")["own.cost"] == "$0.006"
    assert cells("planner")["total.cost"] == "$0.006 (partial: 2 calls unpriced)"
    assert cells("researcher")["own.cost"] == "unpriced"
    # the researcher ran under the planner: indented, and says who started it
    researcher_name = next(n for n in rows["researcher"].walk() if "agent" in n.classes())
    assert researcher_name.attrs["title"] == "started by planner"

    # each run row of the waterfall shows its subtree's totals
    spans = {s.span_id: s for s in store.get_trace(planner.trace_id)}
    span_rows = rows_of(nodes)
    (researcher_run,) = [s for s in spans.values() if s.name == "invoke_agent researcher"]
    meta = [n for n in span_rows[researcher_run.span_id].walk() if "agg" in n.classes()]
    assert [n.all_text() for n in meta] == ["\u03a3 718 tok", "unpriced"]

    recursive = write_report(store, runs["recursive"].trace_id, tmp_path / "recursive.html")
    nodes = parse(chromium_dom(recursive, tmp=tmp_path))
    chip = _by_attr(nodes, "data-chip")["cost"]
    assert [n.all_text() for n in chip.walk() if n.tag == "b"] == ["unpriced"]
    (table,) = [n for n in nodes if n.tag == "table" and "agents" in n.classes()]
    (row,) = _by_attr(table.walk(), "data-agent").values()  # one agent, nested in itself
    shown = {n.attrs["data-k"]: n.all_text() for n in row.walk() if "data-k" in n.attrs}
    assert (shown["runs"], shown["own.model_calls"], shown["total.model_calls"]) == ("2", "3", "3")


def test_a_cancelled_nested_run_shows_as_cancelled_not_failed(tmp_path: Path) -> None:
    """Cancelled with a failing sibling: it ended in CancelledError, the page says cancelled."""
    import asyncio

    from nesting_helpers import Outer, drive, inner_opened
    from runnertrace.testing import capture_spans
    from runnertrace.tracing.runner import traced

    async def failed_then_cancelled() -> None:
        await inner_opened(fail=True)()
        await inner_opened(cancel=True)()

    with capture_spans() as captured:
        asyncio.run(drive(traced(Outer(failed_then_cancelled)), "run"))
    store = SpanStore(tmp_path / "cancelled.db")
    store.write(captured.spans)
    page = write_report(store, "last", tmp_path / "cancelled.html")
    nodes = parse(chromium_dom(page, tmp=tmp_path))
    rows = rows_of(nodes)
    spans = store.get_trace(store.resolve("last"))
    cancelled = [s for s in spans if s.attributes.get("runnertrace.cancelled")]
    failed = [s for s in spans if s.is_error and not s.attributes.get("runnertrace.cancelled")]
    assert {s.name for s in cancelled} == {
        "invoke_agent inner",
        "agent_step inner",
        "chat fake-model",
    }
    for span in cancelled:
        row = rows[span.span_id]
        assert "cancelled" in row.classes() and "error" not in row.classes()
        marks = [n.all_text() for n in row.walk() if "cancel" in n.classes()]
        assert marks == ["\u2298 cancelled"]
    for span in failed:
        assert "error" in rows[span.span_id].classes()
    (table,) = [n for n in nodes if n.tag == "table" and "agents" in n.classes()]
    inner = next(n for n in table.walk() if n.attrs.get("data-agent") == "inner")
    runs = next(n for n in inner.walk() if n.attrs.get("data-k") == "runs")
    assert runs.all_text() == "2 (1 cancelled) (1 failed)"
