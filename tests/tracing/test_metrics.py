"""OTel GenAI metrics and cost, decoded from what reaches a loopback OTLP receiver.

A scripted set of native runs (two good runs, one whose model fails, one whose
tool fails) goes through the ``otlp`` backend; the metrics that arrive at
``/v1/metrics`` are decoded with opentelemetry-proto and counted exactly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.otlp_fixtures import LOGFIRE_TOKEN, clean_vendor_env_fixture  # noqa: F401 - fixture
from tests.otlp_receiver import OtlpReceiver, ReceivedPoint

from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import (
    Agent,
    LlmRequest,
    LlmResponse,
    Message,
    NativeRunner,
    ScriptedLlm,
    ToolCall,
    calculator,
    tool,
)
from runnertrace.runners.native.types import Usage
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.cost import usage_cost
from runnertrace.tracing.metrics import (
    DURATION_BUCKETS,
    TOKEN_BUCKETS,
    MetricsSpanProcessor,
)
from runnertrace.tracing.setup import get_tracing_setup

QUESTION = "What is 1234 * 5678, plus 17?"

# Published list prices of gpt-4o (USD per million tokens), written here on purpose:
# the test checks genai-prices' table against them, not against itself.
GPT4O_INPUT_PER_M = 2.50
GPT4O_OUTPUT_PER_M = 10.00
GPT4O_CACHED_INPUT_PER_M = 1.25


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


def failing_turn(request: LlmRequest) -> LlmResponse:
    raise RuntimeError("model unavailable")


@tool
def explode(reason: str) -> str:
    """Fails on purpose."""
    raise ValueError(f"boom: {reason}")


class PricedLlm(ScriptedLlm):
    """A scripted model that reports itself as OpenAI's gpt-4o, with fixed usage."""

    provider = "openai"


async def run(
    config: TraceConfig, name: str, llm: ScriptedLlm, tools: list[Any], mode: str = "run"
) -> Any:
    runner = TracingRunner(NativeRunner(), settings=config)
    agent = CoreAgent(name, runner, Agent(llm, tools=tools, name=name))
    requests = [AgentRequestText(prompt=QUESTION)]
    if mode == "run":
        return await runner.run(agent, Session("s-1"), requests)
    return [e async for e in runner.stream(agent, Session("s-1"), requests)]


async def scripted_runs(config: TraceConfig) -> None:
    """2 good runs of "math" (run and stream), 1 failed model call, 1 failed tool."""
    await run(config, "math", ScriptedLlm(), [calculator])
    await run(config, "math", ScriptedLlm(), [calculator], mode="stream")
    with pytest.raises(RuntimeError, match="model unavailable"):
        await run(config, "broken", ScriptedLlm(turns=[failing_turn]), [calculator])
    turns = [LlmResponse(content=[ToolCall("c1", "explode", {"reason": "x"})]), "Saw it."]
    await run(config, "toolfail", ScriptedLlm(turns=turns), [explode])


def otlp_config(receiver: OtlpReceiver, **extra: Any) -> TraceConfig:
    return TraceConfig(type="otlp", otlp={"endpoint": receiver.traces_url}, **extra)


def points(receiver: OtlpReceiver, name: str, **attrs: str) -> list[ReceivedPoint]:
    return [
        p
        for p in receiver.points
        if p.name == name and all(p.attributes.get(k) == v for k, v in attrs.items())
    ]


def total(receiver: OtlpReceiver, name: str, **attrs: str) -> float:
    return sum(p.value for p in points(receiver, name, **attrs))


def count(receiver: OtlpReceiver, name: str, **attrs: str) -> int:
    return sum(p.count for p in points(receiver, name, **attrs))


AGENT, TOOL, OP, ERR = (
    "gen_ai.agent.name",
    "gen_ai.tool.name",
    "gen_ai.operation.name",
    "error.type",
)


async def test_metrics_arrive_over_otlp_with_exact_counts(receiver: OtlpReceiver) -> None:
    config = otlp_config(receiver)
    await scripted_runs(config)
    assert get_tracing_setup(config).flush()

    assert {r.path for r in receiver.requests} == {"/v1/traces"}
    assert {r.path for r in receiver.metric_requests} == {"/v1/metrics"}
    assert {p.scope for p in receiver.points} == {"runnertrace"}
    # counters (cumulative: one point per attribute set, the running total)
    assert total(receiver, "runnertrace.runs", **{AGENT: "math"}) == 2
    assert total(receiver, "runnertrace.runs", **{AGENT: "broken"}) == 1
    assert total(receiver, "runnertrace.runs", **{AGENT: "toolfail"}) == 1
    assert total(receiver, "runnertrace.runs") == 4
    errors = points(receiver, "runnertrace.run.errors")
    assert [(p.attributes[AGENT], p.attributes[ERR], p.value) for p in errors] == [
        ("broken", "RuntimeError", 1.0)
    ]
    assert total(receiver, "runnertrace.tool.calls", **{AGENT: "math", TOOL: "calculator"}) == 4
    assert total(receiver, "runnertrace.tool.calls", **{AGENT: "toolfail", TOOL: "explode"}) == 1
    tool_errors = points(receiver, "runnertrace.tool.errors")
    assert [(p.attributes[TOOL], p.attributes[ERR], p.value) for p in tool_errors] == [
        ("explode", "ValueError", 1.0)
    ]
    assert {p.attributes["runnertrace.framework"] for p in receiver.points} == {"native"}

    # histograms: durations per operation, with the conventions' buckets
    durations = points(receiver, "gen_ai.client.operation.duration")
    assert {p.unit for p in durations} == {"s"}
    assert {tuple(p.bounds) for p in durations} == {DURATION_BUCKETS}
    assert count(receiver, "gen_ai.client.operation.duration", **{OP: "invoke_agent"}) == 4
    spans = receiver.spans
    chats = [s for s in spans if s.attributes.get("runnertrace.span.type") == "message"]
    tools = [s for s in spans if s.attributes.get("runnertrace.span.type") == "tool"]
    assert count(receiver, "gen_ai.client.operation.duration", **{OP: "chat"}) == len(chats)
    assert count(receiver, "gen_ai.client.operation.duration", **{OP: "execute_tool"}) == 5
    assert len(tools) == 5
    failed_run = points(
        receiver, "gen_ai.client.operation.duration", **{OP: "invoke_agent", ERR: "RuntimeError"}
    )
    assert [p.count for p in failed_run] == [1]

    # tokens: one record per model call and type, summing to the spans' own counts
    usage = points(receiver, "gen_ai.client.token.usage")
    assert {tuple(p.bounds) for p in usage} == {tuple(float(b) for b in TOKEN_BUCKETS)}
    for token_type, key in (
        ("input", "gen_ai.usage.input_tokens"),
        ("output", "gen_ai.usage.output_tokens"),
    ):
        expected = sum(s.attributes.get(key, 0) for s in chats)
        recorded = [s for s in chats if key in s.attributes]
        assert expected > 0
        kind = {"gen_ai.token.type": token_type}
        assert total(receiver, "gen_ai.client.token.usage", **kind) == expected
        assert count(receiver, "gen_ai.client.token.usage", **kind) == len(recorded)
    model_attrs = {p.attributes.get("gen_ai.request.model") for p in usage}
    assert model_attrs == {"scripted-1"}
    assert {p.attributes.get("gen_ai.provider.name") for p in usage} == {"runnertrace"}

    # time to first chunk: every model call whose output arrived, text or tool calls (all
    # but the failed one); a tool call announced is the response's first chunk too
    first = points(receiver, "gen_ai.client.operation.time_to_first_chunk")
    streamed = [s for s in chats if "gen_ai.response.time_to_first_chunk" in s.attributes]
    assert sum(p.count for p in first) == len(streamed) == len(chats) - 1 == 8
    assert sorted(p.attributes[AGENT] for p in first for _ in range(p.count)) == [
        *["math"] * 6,
        *["toolfail"] * 2,
    ]

    # an unpriced model records no cost anywhere
    assert points(receiver, "runnertrace.cost") == []
    assert not any("gen_ai.usage.cost" in s.attributes for s in spans)


async def test_cost_on_chat_and_run_spans_and_as_a_metric(receiver: OtlpReceiver) -> None:
    config = otlp_config(receiver)
    turns = [
        LlmResponse(
            content=[ToolCall("c1", "calculator", {"expression": "2 + 2"})],
            usage=Usage(input_tokens=1000, output_tokens=500),
        ),
        LlmResponse(
            content=[Message("assistant", "It is 4.")],
            usage=Usage(input_tokens=1200, output_tokens=40),
        ),
    ]
    await run(config, "priced", PricedLlm(turns=turns, model="gpt-4o"), [calculator])
    assert get_tracing_setup(config).flush()

    expected = [
        (1000 * GPT4O_INPUT_PER_M + 500 * GPT4O_OUTPUT_PER_M) / 1e6,
        (1200 * GPT4O_INPUT_PER_M + 40 * GPT4O_OUTPUT_PER_M) / 1e6,
    ]
    chats = sorted(
        (s for s in receiver.spans if s.attributes.get("runnertrace.span.type") == "message"),
        key=lambda s: s.start_ns,
    )
    assert [s.attributes["gen_ai.usage.cost"] for s in chats] == pytest.approx(expected)
    (run_span,) = [s for s in receiver.spans if s.attributes.get("runnertrace.span.type") == "run"]
    assert run_span.attributes["gen_ai.aggregated_usage.cost"] == pytest.approx(sum(expected))
    assert "gen_ai.usage.cost" not in run_span.attributes  # no vendor may count it twice
    (cost,) = points(receiver, "runnertrace.cost")
    assert cost.unit == "USD"
    assert cost.value == pytest.approx(sum(expected))
    assert cost.attributes["gen_ai.request.model"] == "gpt-4o"
    assert cost.attributes["gen_ai.provider.name"] == "openai"


async def test_waiting_for_the_price_table_is_not_counted_in_the_model_call(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that ends while the price table still loads waits for it, and that wait is
    ours: the chat span ends when the call did, and the cost is still recorded."""
    import threading

    from runnertrace.tracing import cost

    cost.preload_prices()  # the real load first, so no loader thread sets the stand-in
    assert cost._loaded.wait(30)  # noqa: SLF001
    slow_load = threading.Event()  # the table "loads" 1.5 s from now, long after the call
    loaded_at: list[int] = []

    def finish_loading() -> None:
        loaded_at.append(time.time_ns())
        slow_load.set()

    monkeypatch.setattr(cost, "_loaded", slow_load)
    monkeypatch.setattr(cost, "_rates", {})
    threading.Timer(1.5, finish_loading).start()
    config = otlp_config(receiver)
    turns = [
        LlmResponse(
            content=[Message("assistant", "Hi.")],
            usage=Usage(input_tokens=1000, output_tokens=500),
        )
    ]
    await run(config, "priced", PricedLlm(turns=turns, model="gpt-4o"), [])
    assert get_tracing_setup(config).flush()
    typed = {s.attributes["runnertrace.span.type"]: s for s in receiver.spans}
    chat, run_span = typed["message"], typed["run"]
    assert chat.attributes["gen_ai.usage.cost"] > 0  # priced once the table was there
    assert chat.end_ns < loaded_at[0] < run_span.end_ns  # the wait is after the call


def test_an_unpriced_provider_never_waits_for_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from runnertrace.tracing import cost

    def never(timeout: float | None = None) -> bool:
        raise AssertionError("waited for the price table")

    monkeypatch.setattr(cost._loaded, "wait", never)  # noqa: SLF001
    monkeypatch.setattr(cost._loaded, "is_set", lambda: False)  # noqa: SLF001
    assert usage_cost("scripted-1", "runnertrace", 10, 5) is None


def test_usage_cost_against_published_prices() -> None:
    assert usage_cost("gpt-4o", "openai", 1_000_000, 0) == pytest.approx(GPT4O_INPUT_PER_M)
    assert usage_cost("gpt-4o", "openai", 0, 1_000_000) == pytest.approx(GPT4O_OUTPUT_PER_M)
    # 200 of the 1000 input tokens were cache reads, billed at the cached price
    cached = 800 * GPT4O_INPUT_PER_M + 200 * GPT4O_CACHED_INPUT_PER_M + 10 * GPT4O_OUTPUT_PER_M
    assert usage_cost("gpt-4o", "openai", 1000, 10, 200) == pytest.approx(cached / 1e6)
    # never a guess: unknown model or provider, no provider, or a token count missing
    assert usage_cost("scripted-1", "runnertrace", 1000, 500) is None
    assert usage_cost("no-such-model-xyz", "openai", 1000, 500) is None
    assert usage_cost("gpt-4o", None, 1000, 500) is None
    assert usage_cost("gpt-4o", "openai", None, 500) is None
    assert usage_cost("gpt-4o", "openai", "1000", 500) is None


async def test_an_unknown_model_gets_no_cost_attribute(receiver: OtlpReceiver) -> None:
    config = otlp_config(receiver)
    turns = [
        LlmResponse(
            content=[Message("assistant", "Hi.")], usage=Usage(input_tokens=10, output_tokens=2)
        )
    ]
    await run(config, "unpriced", PricedLlm(turns=turns, model="in-house-7b"), [])
    assert get_tracing_setup(config).flush()
    typed = {s.attributes["runnertrace.span.type"]: s for s in receiver.spans}
    assert typed["message"].attributes["gen_ai.usage.input_tokens"] == 10
    assert "gen_ai.usage.cost" not in typed["message"].attributes
    assert "gen_ai.aggregated_usage.cost" not in typed["run"].attributes
    assert points(receiver, "runnertrace.cost") == []


async def test_attribute_values_beyond_the_cap_become_other(receiver: OtlpReceiver) -> None:
    config = otlp_config(receiver)
    setup = get_tracing_setup(config)
    (processor,) = [p for p in setup.processors if isinstance(p, MetricsSpanProcessor)]
    processor.pipeline.metrics.max_values = 2
    for name in ("a1", "a2", "a3", "a4"):
        turns = ["Hi."]
        await run(config, name, ScriptedLlm(turns=turns), [])
    assert setup.flush()
    runs = {p.attributes[AGENT]: p.value for p in points(receiver, "runnertrace.runs")}
    assert runs == {"a1": 1, "a2": 1, "_OTHER": 2}
    # the cap is per attribute: the two-valued framework/model attributes are untouched
    assert {p.attributes["runnertrace.framework"] for p in receiver.points} == {"native"}


async def test_metrics_off_sends_no_metrics(receiver: OtlpReceiver) -> None:
    config = otlp_config(receiver, metrics=False)
    await run(config, "math", ScriptedLlm(), [calculator])
    setup = get_tracing_setup(config)
    assert setup.flush()
    assert not any(isinstance(p, MetricsSpanProcessor) for p in setup.processors)
    assert receiver.requests and receiver.metric_requests == []
    assert receiver.points == []


async def test_logfire_gets_delta_metrics_with_its_token_and_operation_cost(
    receiver: OtlpReceiver,
) -> None:
    config = TraceConfig(type="logfire", logfire={"base_url": receiver.url, "token": LOGFIRE_TOKEN})
    turns = [
        LlmResponse(
            content=[Message("assistant", "Hi.")], usage=Usage(input_tokens=1000, output_tokens=100)
        )
    ]
    await run(config, "priced", PricedLlm(turns=turns, model="gpt-4o"), [])
    assert get_tracing_setup(config).flush()
    metric_requests = receiver.metric_requests
    assert {r.path for r in metric_requests} == {"/v1/metrics"}
    assert {r.headers.get("authorization") for r in metric_requests} == {LOGFIRE_TOKEN}
    assert {p.temporality for p in receiver.points} == {1}  # AGGREGATION_TEMPORALITY_DELTA
    assert total(receiver, "runnertrace.runs") == 1
    (chat,) = [s for s in receiver.spans if s.attributes.get("runnertrace.span.type") == "message"]
    expected = (1000 * GPT4O_INPUT_PER_M + 100 * GPT4O_OUTPUT_PER_M) / 1e6
    assert chat.attributes["operation.cost"] == pytest.approx(expected)
    (run_span,) = [s for s in receiver.spans if s.attributes.get("runnertrace.span.type") == "run"]
    assert "operation.cost" not in run_span.attributes


async def test_local_store_keeps_metric_points_in_its_own_table(tmp_path: Any) -> None:
    from runnertrace.exporters.local_store import SpanStore

    path = tmp_path / "traces.db"
    config = TraceConfig(type="local", local={"path": str(path)})
    await scripted_runs(config)
    setup = get_tracing_setup(config)
    assert setup.flush()
    await run(config, "math", ScriptedLlm(), [calculator])  # a second export interval
    assert setup.flush()

    store = SpanStore(path)
    runs = store.metric_points("runnertrace.runs")
    by_agent: dict[str, float] = {}
    for point in runs:
        assert point.kind == "sum" and point.unit == "{run}"
        by_agent[point.attributes[AGENT]] = by_agent.get(point.attributes[AGENT], 0) + point.value
    assert by_agent == {"math": 3, "broken": 1, "toolfail": 1}  # delta rows add up
    assert len({p.time_ns for p in runs}) == 2  # one row set per export interval
    durations = [
        p
        for p in store.metric_points("gen_ai.client.operation.duration")
        if p.attributes[OP] == "invoke_agent"
    ]
    assert sum(p.count or 0 for p in durations) == 5
    assert all(p.bounds == list(DURATION_BUCKETS) for p in durations)
    assert all(sum(p.bucket_counts or []) == p.count for p in durations)
    assert all(0 < (p.min or 0) <= (p.max or 0) for p in durations)
    chats = [s for s in store.get_trace(store.resolve("last")) if s.span_type == "message"]
    assert chats  # spans and metrics share the file
    assert store.metric_points("runnertrace.cost") == []


def test_a_store_without_metrics_reads_as_empty(tmp_path: Any) -> None:
    import sqlite3

    from runnertrace.exporters.local_store import SpanStore

    sqlite3.connect(tmp_path / "old.db").close()  # a store from before metrics existed
    assert SpanStore(tmp_path / "old.db").metric_points() == []


APP_PROVIDER_SCRIPT = """
import asyncio, json, sys
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

app_reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[app_reader]))
metrics.get_meter("the-app").create_counter("app.requests").add(3)

from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.tracing.config import TraceConfig
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SpanStore
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.tracing import TracingRunner
from runnertrace.tracing.metrics import MetricsSpanProcessor
from runnertrace.tracing.setup import get_tracing_setup

config = TraceConfig(type="local", local={"path": sys.argv[1]})
runner = TracingRunner(NativeRunner(), config)
agent = CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
prompt = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]
asyncio.run(runner.run(agent, Session("s"), prompt))
setup = get_tracing_setup(config)
assert setup.flush()
(processor,) = [p for p in setup.processors if isinstance(p, MetricsSpanProcessor)]
app_names = sorted(
    {m.name for rm in app_reader.get_metrics_data().resource_metrics
     for sm in rm.scope_metrics for m in sm.metrics}
)
stored = sorted({p.name for p in SpanStore(sys.argv[1]).metric_points()})
runs = sum(p.value for p in SpanStore(sys.argv[1]).metric_points("runnertrace.runs"))
print(json.dumps({
    "app": app_names, "stored": stored, "runs": runs,
    "owns": processor.pipeline.owns_provider,
    "same": processor.pipeline.provider is metrics.get_meter_provider(),
}))
setup.shutdown()
"""


def test_the_apps_meter_provider_is_reused_and_never_replaced(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    # A subprocess: a global meter provider can be set only once per process.
    result = subprocess.run(
        [sys.executable, "-c", APP_PROVIDER_SCRIPT, str(tmp_path / "traces.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["owns"] is False and seen["same"] is True
    # the app's own reader sees our instruments beside its own
    assert "app.requests" in seen["app"] and "runnertrace.runs" in seen["app"]
    # our local reader, added to the app's provider, stores ours only
    assert "app.requests" not in seen["stored"] and "runnertrace.runs" in seen["stored"]
    assert seen["runs"] == 1
