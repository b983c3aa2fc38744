"""Model-call, tool and error views, waterfall figures and a foreign app's trace, in Chromium.

A rich chat span (system instructions, a tool call and its result, reasoning,
a long reply, tool definitions, request parameters, time to first chunk) is
written by the SDK into the store; a Pydantic AI agent's own instrumentation
sends its trace over OTLP to the running server. The assertions read what a
user sees: the roles in order, the numbers at the top, what a tab shows.
``RUNNERTRACE_UPDATE_SCREENSHOTS=1`` writes the screenshots under docs/.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from tests.browser import loopback_page  # one Chromium lookup and loopback guard for all

from runnertrace.exporters.local_store import SqliteSpanExporter
from store_engines import ENGINES, new_location
from test_ui_browser import ARGS  # the same launch flags as every browser test
from test_ui_otlp import Server
from ui_fixtures import PRICEY_SESSION, hand_made_runs

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

DOCS = Path(__file__).resolve().parent.parent / "docs"
# Read at import: the suite's autouse fixture clears every RUNNERTRACE_* variable per test.
UPDATE_SCREENSHOTS = bool(os.environ.get("RUNNERTRACE_UPDATE_SCREENSHOTS"))
MS = 1_000_000
LONG_REPLY = "Here is the plan.\n" + "\n".join(f"Step {i}: check item {i}." for i in range(40))


def _messages(*messages: dict) -> str:
    return json.dumps(list(messages))


def rich_run(db: Path) -> None:
    """One run: a chat with everything a model call can carry, a failed chat and a tool."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(db)))
    tracer = provider.get_tracer("views-test")
    t = time.time_ns() - 60_000 * MS
    run = tracer.start_span(
        "invoke_agent planner",
        start_time=t,
        attributes={
            "runnertrace.span.type": "run",
            "gen_ai.agent.name": "planner",
            "runnertrace.framework": "native",
            "gen_ai.conversation.id": "plan-1",
        },
    )
    ctx = trace_api.set_span_in_context(run)
    chat = tracer.start_span(
        "chat gpt-4o",
        context=ctx,
        kind=SpanKind.CLIENT,
        start_time=t + 5 * MS,
        attributes={
            "runnertrace.span.type": "message",
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.request.temperature": 0.2,
            "gen_ai.request.max_tokens": 800,
            "gen_ai.usage.input_tokens": 1234,
            "gen_ai.usage.output_tokens": 56,
            "gen_ai.usage.cost": 0.00049,
            "gen_ai.response.time_to_first_chunk": 0.35,
            "gen_ai.response.finish_reasons": ("stop",),
            "gen_ai.system_instructions": json.dumps(
                [{"type": "text", "content": "You plan trips. Use the weather tool."}]
            ),
            "gen_ai.tool.definitions": json.dumps(
                [
                    {
                        "type": "function",
                        "name": "weather",
                        "description": "Today's weather in a city",
                        "parameters": {"type": "object", "properties": {"city": {}}},
                    }
                ]
            ),
            "gen_ai.input.messages": _messages(
                {"role": "user", "parts": [{"type": "text", "content": "Plan a day in Oslo."}]},
                {
                    "role": "assistant",
                    "parts": [
                        {"type": "reasoning", "content": "I need the weather first."},
                        {
                            "type": "tool_call",
                            "id": "call_1",
                            "name": "weather",
                            "arguments": {"city": "Oslo"},
                        },
                    ],
                },
                {
                    "role": "tool",
                    "parts": [
                        {"type": "tool_call_response", "id": "call_1", "response": "rain, 7 C"}
                    ],
                },
            ),
            "gen_ai.output.messages": _messages(
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": LONG_REPLY}],
                    "finish_reason": "stop",
                }
            ),
        },
    )
    chat.end(end_time=t + 905 * MS)
    tool = tracer.start_span(
        "execute_tool weather",
        context=ctx,
        start_time=t + 910 * MS,
        attributes={
            "runnertrace.span.type": "tool",
            "gen_ai.tool.name": "weather",
            "gen_ai.tool.call.id": "call_2",
            "gen_ai.tool.call.arguments": '{"city": "Bergen"}',
            "error.type": "TimeoutError",
        },
    )
    tool.add_event(
        "exception",
        {
            "exception.type": "TimeoutError",
            "exception.message": "weather service timed out",
            "exception.stacktrace": 'Traceback (most recent call last):\n  File "w.py", line 3\n'
            "TimeoutError: weather service timed out",
        },
    )
    tool.set_status(Status(StatusCode.ERROR, "weather service timed out"))
    tool.end(end_time=t + 1_400 * MS)
    run.end(end_time=t + 1_500 * MS)
    provider.shutdown()


def pydantic_ai_over_otlp(url: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider(resource=Resource.create({"service.name": "adder-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("The sum is 5.")])

    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)
    agent = Agent(
        FunctionModel(model),
        instructions="Be terse.",
        name="adder",
        capabilities=[Instrumentation(settings=settings)],
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    agent.run_sync("What is 2+3?")
    provider.shutdown()


@pytest.fixture(scope="module", params=ENGINES)
def base_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Every view, once over each engine's store."""
    db = new_location(request.param, request, tmp_path_factory.mktemp("ui-views"))
    rich_run(db)
    hand_made_runs(db, time.time_ns() - 3_600_000 * MS)  # 3 "pricey" runs: models, cost, user
    with Server(db) as url:
        pydantic_ai_over_otlp(url)
        yield url


@pytest.fixture
def pg(base_url: str) -> Iterator[object]:
    with loopback_page(1400, 900, ARGS) as page:
        yield page


def shot(page: object, name: str, tmp_path: Path) -> None:
    path = DOCS / name if UPDATE_SCREENSHOTS else tmp_path / name
    page.screenshot(path=str(path))  # type: ignore[attr-defined]
    assert path.stat().st_size > 10_000


def open_run(pg: object, base_url: str, agent: str) -> object:
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    pg.locator(f'#runs tr[data-agent="{agent}"]').first.click()  # type: ignore[attr-defined]
    frame = pg.frame_locator("iframe.trace")  # type: ignore[attr-defined]
    frame.locator("#rows .row").first.wait_for()
    return frame


def test_the_model_call_view(pg: object, base_url: str, tmp_path: Path) -> None:
    frame = open_run(pg, base_url, "planner")
    # the waterfall rows carry their tokens, cost and error
    chat_row = frame.locator("#rows .row", has_text="chat gpt-4o")
    expect(chat_row.locator(".meta")).to_have_text("1,290 tok$0.00049")
    expect(frame.locator("#rows .row.error .meta")).to_have_text("\u26a0 TimeoutError")
    chat_row.click()
    detail = frame.locator("#detail")
    facts = detail.locator(".facts")
    for label, value in (
        ("model", "gpt-4o-2024-08-06"),
        ("provider", "openai"),
        ("tokens in / out", "1,234 / 56"),
        ("cost", "$0.00049"),
        ("duration", "900.0 ms"),
        ("first chunk", "350.0 ms"),
        ("finish", "stop"),
    ):
        expect(facts.locator(".fact", has_text=label).locator("b")).to_have_text(value)
    roles = detail.locator(".chat .msg").evaluate_all("ms => ms.map(m => m.dataset.role)")
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    chat = detail.locator(".chat")
    expect(chat.locator(".msg").first).to_contain_text("You plan trips.")
    expect(chat.locator(".call", has_text="tool call")).to_contain_text('"city": "Oslo"')
    expect(chat.locator(".call.result")).to_contain_text("rain, 7 C")
    expect(chat.locator("details.reasoning summary")).to_have_text("reasoning")
    # the long reply is folded, and unfolds
    reply = chat.locator(".msg.output")
    assert "Step 39" not in reply.inner_text()
    # the header, the tabs and the first messages are on screen at 1400x900
    for node in (facts, detail.locator(".tabbar"), chat.locator(".msg").nth(2)):
        box = node.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900, box
    shot(pg, "ui-model-call.png", tmp_path)
    reply.locator("button.more").click()
    expect(reply).to_contain_text("Step 39: check item 39.")
    # the other tabs
    detail.locator(".tab", has_text="Tools (1)").click()
    expect(detail.locator(".defs")).to_contain_text("Today's weather in a city")
    detail.locator(".tab", has_text="Parameters").click()
    params = detail.locator('[data-pane="params"]')
    expect(params).to_contain_text("gen_ai.request.temperature")
    expect(params).to_contain_text("0.2")
    detail.locator(".tab", has_text="Attributes").click()
    expect(detail.locator('[data-pane="attributes"]')).to_contain_text("gen_ai.input.messages")
    detail.locator(".tab", has_text="Chat").click()


def test_the_tool_and_error_views(pg: object, base_url: str) -> None:
    frame = open_run(pg, base_url, "planner")
    frame.locator("#rows .row.error").click()
    detail = frame.locator("#detail")
    error = detail.locator(".errorbox")
    expect(error.locator("b")).to_have_text("TimeoutError")
    expect(error.locator(".err-msg")).to_have_text("weather service timed out")
    expect(error).to_contain_text('File "w.py", line 3')
    call = detail.locator(".toolcall")
    expect(call).to_contain_text('"city": "Bergen"')
    expect(call).to_contain_text("not captured")  # it failed: no result
    expect(detail.locator(".facts")).to_contain_text("call_2")


def test_a_foreign_apps_trace(pg: object, base_url: str, tmp_path: Path) -> None:
    """Pydantic AI's own instrumentation, sent over OTLP: a run with its chat and tool."""
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    row = pg.locator('#runs tr[data-agent="adder"]')  # type: ignore[attr-defined]
    expect(row).to_contain_text("pydantic-ai")
    frame = open_run(pg, base_url, "adder")
    names = frame.locator("#rows .row .name").all_text_contents()
    assert names[0] == "invoke_agent adder" and "execute_tool add" in names
    frame.locator("#rows .row", has_text="chat function").last.click()
    detail = frame.locator("#detail")
    roles = detail.locator(".chat .msg").evaluate_all("ms => ms.map(m => m.dataset.role)")
    assert roles[0] == "system" and roles[-1] == "assistant"
    expect(detail.locator(".chat .msg").first).to_contain_text("Be terse.")
    expect(detail.locator(".chat .msg.output")).to_contain_text("The sum is 5.")
    expect(detail.locator(".chat .call").first).to_contain_text("add")
    expect(detail.locator(".fact", has_text="model").locator("b")).to_have_text("function:model:")
    shot(pg, "ui-foreign-trace.png", tmp_path)


def test_the_runs_list_filters_sorts_and_keeps_it_in_the_url(pg: object, base_url: str) -> None:
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    rows = pg.locator("#runs tbody tr.link")  # type: ignore[attr-defined]
    expect(rows).to_have_count(5)
    agents = lambda: rows.evaluate_all("rs => rs.map(r => r.dataset.agent)")  # noqa: E731
    # previews: the foreign run's question and answer
    adder = pg.locator('#runs tr[data-agent="adder"]')  # type: ignore[attr-defined]
    expect(adder.locator("td.preview").first).to_have_text("What is 2+3?")
    expect(adder.locator("td.preview").nth(1)).to_have_text("The sum is 5.")
    # the model filter reads the runs' chat spans
    pg.fill("input[name=model]", "gpt-test-mini")  # type: ignore[attr-defined]
    pg.click("#filters button[type=submit]")  # type: ignore[attr-defined]
    expect(rows).to_have_count(2)
    assert "model=gpt-test-mini" in pg.url  # type: ignore[attr-defined]
    # any span in error: the planner (its tool failed, the run went on) and pricey's last run
    pg.goto(base_url + "/#/runs?errors=any")  # type: ignore[attr-defined]
    expect(rows).to_have_count(2)
    assert sorted(agents()) == ["planner", "pricey"]
    # cost range and session prefix, straight from a shared URL
    pg.goto(base_url + "/#/runs?min_cost=0.02&session=" + PRICEY_SESSION[:4])  # type: ignore[attr-defined]
    expect(rows).to_have_count(2)
    expect(pg.locator("input[name=min_cost]")).to_have_value("0.02")  # type: ignore[attr-defined]
    # sort by cost: the header click, then its direction flips
    pg.goto(base_url + "/#/runs?user=ada")  # type: ignore[attr-defined]
    expect(rows).to_have_count(3)
    pg.click('#runs th[data-sort="cost"]')  # type: ignore[attr-defined]
    expect(pg.locator("#runs th.sorted")).to_have_text("cost \u25bc")  # type: ignore[attr-defined]
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td").nth(9)).to_have_text("$0.0375")  # the new page has loaded
    costs = rows.evaluate_all("rs => rs.map(r => r.children[9].textContent)")
    assert costs == ["$0.0375", "$0.025", "$0.0125"]
    assert "sort=cost" in pg.url and "user=ada" in pg.url  # type: ignore[attr-defined]
    pg.click('#runs th[data-sort="cost"]')  # type: ignore[attr-defined]
    expect(rows.first.locator("td").nth(9)).to_have_text("$0.0125")
    pg.reload()  # type: ignore[attr-defined]
    expect(rows.first.locator("td").nth(9)).to_have_text("$0.0125")


def test_sessions_show_previews_span_errors_and_a_failed_turns_error(
    pg: object, base_url: str
) -> None:
    pg.goto(base_url + "/#/sessions")  # type: ignore[attr-defined]
    row = pg.locator(f'#sessions tr[data-session-id="{PRICEY_SESSION}"]')  # type: ignore[attr-defined]
    expect(row.locator("td.preview").first).to_have_text("question 0 about <b>zebras</b>")
    expect(row.locator("td.preview").nth(1)).to_have_text("answer 2")
    planner = pg.locator('#sessions tr[data-session-id="plan-1"]')  # type: ignore[attr-defined]
    # its tool failed, the run went on: recovered, not a failed run
    expect(planner.locator('td[data-k="failed"]')).to_have_text("0")
    expect(planner.locator('td[data-k="recovered"]')).to_have_text("1")
    expect(row.locator('td[data-k="failed"]')).to_have_text("1")  # pricey's last run failed
    row.click()
    turns = pg.locator("#conversation .turn")  # type: ignore[attr-defined]
    expect(turns).to_have_count(3)
    expect(turns.nth(2).locator(".bubble.failed")).to_contain_text("RateLimitError: 429 slow down")
    assert "(content not captured)" not in turns.nth(2).inner_text()


def test_compare_two_runs(pg: object, base_url: str, tmp_path: Path) -> None:
    pg.goto(base_url + "/#/runs?user=ada&sort=start&dir=asc")  # type: ignore[attr-defined]
    rows = pg.locator("#runs tbody tr.link")  # type: ignore[attr-defined]
    expect(rows).to_have_count(3)
    button = pg.locator("#compare")  # type: ignore[attr-defined]
    expect(button).to_be_hidden()
    rows.nth(0).locator("input.pick").check()
    rows.nth(1).locator("input.pick").check()
    expect(button).to_be_visible()
    button.click()
    differences = pg.locator("#differences")  # type: ignore[attr-defined]
    models = differences.locator('tr[data-field="models"]')
    expect(models).to_have_class("differs")
    expect(models.locator("td").nth(1)).to_have_text("gpt-test-mini")
    expect(models.locator("td").nth(2)).to_have_text("gpt-test-large")
    cost = differences.locator('tr[data-field="cost"]')
    expect(cost.locator("td").nth(1)).to_have_text("$0.0125")
    expect(cost.locator("td").nth(2)).to_have_text("$0.025")
    expect(differences.locator('tr[data-field="tools called"]')).to_have_class("same")
    expect(differences.locator('tr[data-field="latency_ns"] td').first).to_have_text("latency")
    expect(differences.locator('tr[data-field="framework"]')).to_have_class("same")
    expect(pg.locator("#matters")).to_contain_text("cost")  # type: ignore[attr-defined]
    timeline = pg.locator("#cmp-timeline .cmp-row")  # type: ignore[attr-defined]
    labels = timeline.evaluate_all("rs => rs.map(r => r.firstChild.textContent)")
    assert labels[0] == "invoke_agent pricey" and "execute_tool lookup" in labels
    # lined up by place in the tree, not by name: the two models' calls share one row
    chats = pg.locator('#cmp-timeline .cmp-row:has-text("chat gpt-test-mini")')  # type: ignore[attr-defined]
    expect(chats).to_have_count(1)
    expect(chats.locator(".cmp-label")).to_have_text("chat gpt-test-mini / chat gpt-test-large")
    expect(chats.locator(".cmp-bar")).to_have_count(2)
    assert "(not in this run)" not in pg.locator("#cmp-timeline").inner_text()  # type: ignore[attr-defined]
    # aligned: the same tool span, at the same offset in both runs, sits at the same x
    tool = pg.locator('#cmp-timeline .cmp-row:has-text("execute_tool lookup") .cmp-bar')  # type: ignore[attr-defined]
    lefts = tool.evaluate_all("bs => bs.map(b => b.style.left)")
    assert len(lefts) == 2 and lefts[0] == lefts[1]
    pg.locator("#cmp-timeline").scroll_into_view_if_needed()  # type: ignore[attr-defined]
    shot(pg, "ui-compare.png", tmp_path)


def test_charts_tiles_error_rate_palette_and_axes(pg: object, base_url: str) -> None:
    pg.goto(base_url + "/#/charts?by=agent&range=")  # type: ignore[attr-defined]
    # latency, tokens, cost, each agent's own cost, error rate
    expect(pg.locator("body")).to_have_attribute("data-charts", "5")  # type: ignore[attr-defined]
    tiles = pg.locator("#tiles .tile")  # type: ignore[attr-defined]
    expect(tiles).to_have_count(7)
    tile = lambda name: pg.locator(f'#tiles .tile[data-tile="{name}"] b')  # type: ignore[attr-defined]  # noqa: E731
    expect(tile("runs")).to_have_text("5")
    # failed runs: one pricey; the planner's tool failed and its run went on: recovered
    expect(tile("error rate")).to_have_text("20.0 %")
    expect(tile("recovered")).to_have_text("1 runs")
    # the Pydantic AI agent's two model calls (a FunctionModel) got no price: a partial sum
    expect(tile("cost")).to_have_text("$0.07549 (partial: 2 calls unpriced)")
    error_chart = pg.locator("#charts .chart", has_text="Error rate per agent")  # type: ignore[attr-defined]
    expect(error_chart).to_have_attribute("data-lines", "3")  # one line per agent
    tips = error_chart.locator("circle title").all_text_contents()
    assert any(t.startswith("planner error rate: 0 %") for t in tips), tips
    assert any(t.startswith("pricey error rate: ") and not t.startswith("pricey error rate: 0 %")
               for t in tips), tips  # fmt: skip
    # y labels sit on their gridlines and are round numbers; the x axis has 7 ticks
    for chart in pg.locator("#charts .chart").all():  # type: ignore[attr-defined]
        placed = chart.evaluate(
            "c => [...c.querySelectorAll('.y-axis text')].map(t => [t.getAttribute('y'),"
            " t.previousSibling.getAttribute('y1')])"
        )
        assert len(placed) >= 3 and all(a == b for a, b in placed), placed
        assert chart.locator(".x-axis text").count() == 7
    distinct = pg.evaluate(  # type: ignore[attr-defined]
        "() => new Set([...document.querySelectorAll('#charts .chart')[0]"
        ".querySelectorAll('.legend i')].map(i => i.style.background)).size"
    )
    assert distinct == pg.locator("#charts .chart").first.locator(".legend i").count()  # type: ignore[attr-defined]


def test_thirteen_agents_get_twelve_distinct_colours_and_other(pg: object, tmp_path: Path) -> None:
    """12 series, each its own colour, and the rest summed into "other" in grey."""
    db = tmp_path / "many.db"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SqliteSpanExporter(db)))
    tracer = provider.get_tracer("palette")
    now = time.time_ns()
    for index in range(14):
        for repeat in range(14 - index):  # distinct counts: a stable order of series
            span = tracer.start_span(
                f"invoke_agent a{index:02d}",
                start_time=now - (index * 20 + repeat) * 1000 * MS,
                attributes={"runnertrace.span.type": "run", "gen_ai.agent.name": f"a{index:02d}"},
            )
            span.end(end_time=now - (index * 20 + repeat) * 1000 * MS + 50 * MS)
    provider.shutdown()
    with Server(db) as url:
        pg.goto(url + "/#/charts?by=agent")  # type: ignore[attr-defined]
        expect(pg.locator("body")).to_have_attribute("data-charts", "5")  # type: ignore[attr-defined]
        legend = pg.locator("#charts .chart").first.locator(".legend span:has(i)")  # type: ignore[attr-defined]
        expect(legend).to_have_count(13)
        names = legend.all_text_contents()
        assert names[:12] == [f"a{i:02d}" for i in range(12)] and names[12] == "other"
        colours = legend.locator("i").evaluate_all("is => is.map(i => i.style.background)")
        assert len(set(colours)) == 13, colours


def test_an_otlp_trace_appears_live(pg: object, base_url: str) -> None:
    pg.goto(base_url + "/#/runs")  # type: ignore[attr-defined]
    pg.wait_for_selector("#live.on")  # type: ignore[attr-defined]
    rows = pg.locator("#runs tbody tr.link")  # type: ignore[attr-defined]
    expect(rows).to_have_count(5)  # planner, adder and the three pricey runs
    provider = TracerProvider(resource=Resource.create({"service.name": "late-app"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=base_url + "/v1/traces"))
    )
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "latecomer"}
    with provider.get_tracer("late").start_as_current_span("late run", attributes=attributes):
        pass
    provider.shutdown()
    fresh = pg.locator('#runs tr.fresh[data-agent="latecomer"]')  # type: ignore[attr-defined]
    expect(fresh).to_have_count(1, timeout=15_000)
    expect(rows).to_have_count(6)
