"""OTLP in: real exporters on loopback send to a running ``runnertrace ui``, which stores and shows.

The server is uvicorn on 127.0.0.1 in this process; the senders are the OTel
SDK's own OTLP/HTTP exporter, Pydantic AI's native instrumentation behind it,
OpenInference's attribute builders, and our own ``otlp`` backend. What they
sent is read back through the dashboard's JSON APIs, as the page reads it.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import uvicorn
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

from runnertrace.exporters.local_store import SpanStore
from runnertrace.ui import create_app
from runnertrace.ui.ingest import MAX_BODY


class Server:
    """uvicorn on 127.0.0.1 with an ephemeral port, in a thread of this process."""

    def __init__(self, db: Path, **options: object) -> None:
        config = uvicorn.Config(
            create_app(db, **options),
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


@pytest.fixture
def served(store_location: Path) -> Iterator[tuple[str, Path]]:
    """The dashboard with OTLP ingest, over a new store of each engine."""
    db = store_location
    with Server(db) as url:
        yield url, db


def api(url: str, path: str, **params: object) -> dict:
    response = requests.get(url + path, params=params, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def span_count(db: Path) -> int:
    store = SpanStore(db, read_only=True)
    if not store.exists():
        return 0
    try:
        return store.count()[1]
    finally:
        store.close()


def sdk_provider(url: str, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))
    return provider


def test_the_sdk_exporter_sends_a_foreign_trace_that_shows_as_a_run(
    served: tuple[str, Path],
) -> None:
    url, _ = served
    provider = sdk_provider(url, "billing-service")
    tracer = provider.get_tracer("acme.billing")
    with tracer.start_as_current_span("handle invoice", kind=SpanKind.SERVER) as root:
        root.set_attribute("user.id", "grace")
        with tracer.start_as_current_span("charge card") as child:
            child.set_status(Status(StatusCode.ERROR, "card declined"))
            child.set_attribute("error.type", "CardDeclined")
    provider.shutdown()
    runs = api(url, "/api/runs")["runs"]
    assert len(runs) == 1
    run = runs[0]
    assert run["name"] == "handle invoice" and run["span_count"] == 2
    assert run["user_id"] == "grace" and run["error_count"] == 1
    spans = api(url, f"/api/runs/{run['trace_id']}")
    assert spans["status"] == "ok"  # the root went on; the child's error is counted
    page = requests.get(f"{url}/trace/{run['trace_id']}", timeout=10).text
    assert "card declined" in page and "billing-service" in page


def test_pydantic_ai_native_instrumentation_shows_its_agent_model_and_tokens(
    served: tuple[str, Path],
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    url, _ = served
    provider = sdk_provider(url, "adder-app")

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

    assert agent.run_sync("What is 2+3?").output == "The sum is 5."
    provider.shutdown()
    run = api(url, "/api/runs")["runs"][0]
    assert run["agent"] == "adder" and run["framework"] == "pydantic-ai"
    assert run["status"] == "ok" and run["span_count"] == 4
    # the two chat spans' usage, counted once (the agent span's sum is an aggregate key)
    assert run["input_tokens"] > 0 and run["tokens"] == run["input_tokens"] + run["output_tokens"]
    turns = api(url, f"/api/sessions/{run['session_id']}")["turns"]
    assert turns[0]["input"] == "What is 2+3?" and turns[0]["output"] == "The sum is 5."
    tools = api(url, "/api/metrics", by="tool")["series"]
    assert [s["name"] for s in tools] == ["add"]
    models = api(url, "/api/metrics", by="model")["series"]
    assert [s["name"] for s in models] == ["function:model:"]


def test_openinference_spans_are_mapped_onto_the_views(served: tuple[str, Path]) -> None:
    """Spans that carry only OpenInference's keys, built by OpenInference's own helpers."""
    from openinference.instrumentation import (
        get_input_attributes,
        get_llm_attributes,
        get_output_attributes,
        get_span_kind_attributes,
        get_tool_attributes,
    )

    url, db = served
    provider = sdk_provider(url, "oi-app")
    tracer = provider.get_tracer("openinference.instrumentation.acme_agents")
    agent_attrs = {
        **get_span_kind_attributes("agent"),
        **get_input_attributes("Weather in Oslo?"),
        **get_output_attributes("Rainy, 7 C."),
        "session.id": "oi-session-1",
        "agent.name": "weatherbot",
    }
    with tracer.start_as_current_span("weatherbot", attributes=agent_attrs):
        llm = get_llm_attributes(
            provider="openai",
            model_name="gpt-4o-mini",
            input_messages=[
                {"role": "system", "content": "You report weather."},
                {"role": "user", "content": "Weather in Oslo?"},
            ],
            output_messages=[
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "t1",
                            "function": {"name": "forecast", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                }
            ],
            token_count={"prompt": 31, "completion": 9, "total": 40},
            tools=[{"json_schema": json.dumps({"name": "forecast", "parameters": {}})}],
        )
        with tracer.start_as_current_span(
            "ChatCompletion", attributes={**get_span_kind_attributes("llm"), **llm}
        ):
            pass
        tool_attrs = {
            **get_span_kind_attributes("tool"),
            **get_tool_attributes(name="forecast", description="a forecast", parameters={}),
            **get_input_attributes('{"city": "Oslo"}'),
            **get_output_attributes("Rainy, 7 C."),
        }
        with tracer.start_as_current_span("forecast", attributes=tool_attrs):
            pass
    provider.shutdown()
    run = api(url, "/api/runs")["runs"][0]
    assert run["agent"] == "weatherbot" and run["framework"] == "acme-agents"
    assert (run["input_tokens"], run["output_tokens"]) == (31, 9)
    assert run["session_id"] == "oi-session-1"
    store = SpanStore(db, read_only=True)
    spans = {s.name: s for s in store.get_trace(run["trace_id"])}
    store.close()
    chat = spans["ChatCompletion"].attributes
    assert chat["runnertrace.span.type"] == "message"
    assert chat["gen_ai.request.model"] == "gpt-4o-mini"
    messages = json.loads(chat["gen_ai.input.messages"])
    assert [m["role"] for m in messages] == ["system", "user"]
    reply = json.loads(chat["gen_ai.output.messages"])[0]["parts"][0]
    assert reply == {
        "type": "tool_call",
        "id": "t1",
        "name": "forecast",
        "arguments": {"city": "Oslo"},
    }
    tool = spans["forecast"].attributes
    assert tool["gen_ai.tool.name"] == "forecast"
    assert tool["gen_ai.tool.call.result"] == "Rainy, 7 C."
    assert chat["llm.token_count.prompt"] == 31  # the app's own keys are kept
    assert [d["name"] for d in json.loads(chat["gen_ai.tool.definitions"])] == ["forecast"]


def test_openllmetry_attributes_are_mapped_onto_the_views(served: tuple[str, Path]) -> None:
    """OpenLLMetry's spellings (traceloop-sdk is not installed here: its keys, sent by the SDK)."""
    url, db = served
    provider = sdk_provider(url, "traceloop-app")
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai")
    workflow = {
        "traceloop.span.kind": "workflow",
        "traceloop.entity.name": "support_bot",
        "traceloop.association.properties.session_id": "tl-1",
        "traceloop.association.properties.user_id": "lin",
    }
    with tracer.start_as_current_span("support_bot.workflow", attributes=workflow):
        chat = {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "Be kind.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "My order is late.",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Sorry! Let me check.",
            "gen_ai.completion.0.finish_reason": "stop",
            "gen_ai.usage.prompt_tokens": 12,
            "gen_ai.usage.completion_tokens": 6,
        }
        with tracer.start_as_current_span("openai.chat", attributes=chat):
            pass
    provider.shutdown()
    run = api(url, "/api/runs")["runs"][0]
    assert run["agent"] == "support_bot" and run["framework"] == "openai"
    assert (run["session_id"], run["user_id"]) == ("tl-1", "lin")
    assert (run["input_tokens"], run["output_tokens"]) == (12, 6)
    store = SpanStore(db, read_only=True)
    spans = {s.name: s.attributes for s in store.get_trace(run["trace_id"])}
    store.close()
    attributes = spans["openai.chat"]
    messages = json.loads(attributes["gen_ai.input.messages"])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert json.loads(attributes["gen_ai.output.messages"])[0]["parts"][0]["content"] == (
        "Sorry! Let me check."
    )
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes["gen_ai.provider.name"] == "openai"


def test_json_bodies_and_gzip_are_taken_too(served: tuple[str, Path]) -> None:
    url, db = served
    provider = TracerProvider()
    captured: list = []

    class Keep(OTLPSpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            captured.extend(spans)
            return SpanExportResult.SUCCESS

    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    with provider.get_tracer("json-app").start_as_current_span("json root"):
        pass
    provider.shutdown()
    message = json_format.MessageToDict(encode_spans(captured))
    for resource in message["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:  # OTLP/JSON ids are hex, not base64
                for key in ("traceId", "spanId"):
                    span[key] = base64.b64decode(span[key]).hex()
    body = json.dumps(message).encode()
    response = requests.post(
        url + "/v1/traces",
        data=gzip.compress(body),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        timeout=10,
    )
    assert response.status_code == 200 and response.json() == {}
    assert span_count(db) == 1
    assert api(url, "/api/runs")["runs"][0]["name"] == "json root"


@pytest.mark.parametrize(
    ("body", "headers", "message"),
    [
        (b"\xff\xff\xff garbage", {"Content-Type": "application/x-protobuf"}, "not an OTLP"),
        (b"{not json", {"Content-Type": "application/json"}, "not JSON"),
        (b'{"resourceSpans": 5}', {"Content-Type": "application/json"}, "not an OTLP JSON"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "name": "x"}]}]}]}',
            {"Content-Type": "application/json"},
            "traceId 'zz' is not hex",
        ),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "0102", '
            b'"spanId": "0102030405060708", "name": "short"}]}]}]}',
            {"Content-Type": "application/json"},
            "trace id of 2 bytes, not 16",
        ),
        (b"{}", {"Content-Type": "text/plain"}, "Content-Type 'text/plain' is not supported"),
        (
            b"abc",
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            "cannot be decompressed",
        ),
        (
            gzip.compress(b"\0" * (MAX_BODY + 10)),  # small on the wire, over the limit inflated
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            "decompressed body is over",
        ),
        (b"x" * (MAX_BODY + 1), {"Content-Type": "application/x-protobuf"}, "over the 16 MiB"),
    ],
)
def test_a_bad_body_is_a_400_and_nothing_is_stored(
    served: tuple[str, Path], body: bytes, headers: dict, message: str
) -> None:
    url, db = served
    good = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0102030405060708090a0b0c0d0e0f10",
                                "spanId": "0102030405060708",
                                "name": "good",
                                "startTimeUnixNano": "1",
                                "endTimeUnixNano": "2",
                            }
                        ]
                    }
                ]
            }
        ]
    }
    if message.startswith("trace id of"):  # a good span beside the bad one is not kept either
        bad = json.loads(body)
        bad["resourceSpans"][0]["scopeSpans"][0]["spans"].extend(
            good["resourceSpans"][0]["scopeSpans"][0]["spans"]
        )
        body = json.dumps(bad).encode()
    response = requests.post(url + "/v1/traces", data=body, headers=headers, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error and "\n" not in error
    assert span_count(db) == 0
    # the server goes on: the next good request is stored
    ok = requests.post(url + "/v1/traces", json=good, timeout=10)
    assert ok.status_code == 200 and span_count(db) == 1


def test_our_otlp_backend_pointed_at_the_ui_stores_our_runs(served: tuple[str, Path]) -> None:
    from runnertrace.core import Runtime, Session
    from runnertrace.core.models import AgentRequestText
    from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
    from runnertrace.tracing import get_tracing_setup
    from runnertrace.tracing.config import Settings

    url, _ = served
    settings = Settings(
        trace={
            "enabled": True,
            "type": "otlp",
            "otlp": {"endpoint": url + "/v1/traces"},
            "capture_content": True,
        }
    )
    runtime = Runtime(settings=settings)
    native = Agent(ScriptedLlm(), tools=[calculator], instructions="Use the tool.", name="calc")
    agent = NativeModule([native], runtime=runtime).get(native)

    async def one_run() -> None:
        await runtime.run(agent, Session("otlp-s"), [AgentRequestText(prompt="What is 6 * 7?")])

    asyncio.run(one_run())
    assert get_tracing_setup(settings.trace).flush()
    run = api(url, "/api/runs")["runs"][0]
    assert run["agent"] == "calc" and run["framework"] == "native"
    assert run["session_id"] == "otlp-s" and run["status"] == "ok"
    assert api(url, "/api/sessions/otlp-s")["turns"][0]["input"] == "What is 6 * 7?"


def test_an_exported_trace_goes_back_in_unchanged(tmp_path: Path, store_location: Path) -> None:
    """Export as OTLP/JSON from one dashboard, POST it to another (of each engine): the same
    spans come out."""
    from ui_fixtures import build_store

    source = build_store(tmp_path / "source.db")
    target = store_location
    with Server(source) as one, Server(target) as two:
        runs = api(one, "/api/runs")["runs"]
        for run in runs:
            exported = requests.get(f"{one}/api/runs/{run['trace_id']}/otlp", timeout=10)
            assert exported.status_code == 200
            assert "attachment" in exported.headers["content-disposition"]
            sent = requests.post(f"{two}/v1/traces", json=exported.json(), timeout=10)
            assert sent.status_code == 200, sent.text
        again = {r["trace_id"]: r for r in api(two, "/api/runs")["runs"]}
        for run in runs:
            copy = dict(again[run["trace_id"]])
            assert {
                k: v for k, v in copy.items() if k not in ("input_preview", "output_preview")
            } == {k: v for k, v in run.items() if k not in ("input_preview", "output_preview")}
    before, after = SpanStore(source, read_only=True), SpanStore(target, read_only=True)
    try:
        for run in runs:
            original = [s.to_json() for s in before.get_trace(run["trace_id"])]
            copied = [s.to_json() for s in after.get_trace(run["trace_id"])]
            assert copied == original
    finally:
        before.close()
        after.close()


def test_the_runs_list_as_csv(store_location: Path) -> None:
    import csv
    import io

    from ui_fixtures import hand_made_runs

    db = store_location
    hand_made_runs(db, time.time_ns(), count=3)
    with Server(db) as url:
        response = requests.get(url + "/api/runs.csv", params={"errors": "any"}, timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 1 and rows[0]["status"] == "error" and rows[0]["agent"] == "pricey"
    assert float(rows[0]["cost"]) == pytest.approx(0.0375)
    assert rows[0]["input_preview"] == "question 2 about <b>zebras</b>"


def test_metrics_are_answered_as_not_kept(served: tuple[str, Path]) -> None:
    """The otlp backend also sends run metrics: the answer says, in OTLP terms, none are kept."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    )

    url, db = served
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "gen_ai.client.token.usage"
    metric.sum.data_points.add().as_int = 12
    metric.sum.data_points.add().as_int = 30
    response = requests.post(
        url + "/v1/metrics",
        data=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert response.status_code == 200
    answer = ExportMetricsServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_data_points == 2
    assert "keeps traces only" in answer.partial_success.error_message
    bad = requests.post(
        url + "/v1/metrics",
        data=b"\xff\xff",
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert bad.status_code == 400 and "not an OTLP metrics request" in bad.json()["error"]
    assert span_count(db) == 0


def test_a_foreign_trace_with_a_delegating_agent_gets_the_sums_of_its_model_calls(
    served: tuple[str, Path],
) -> None:
    """Pydantic AI's own instrumentation, one agent delegating to another in a tool (its
    docs' pattern): the root span carries no totals of ours, so the run's numbers are its
    model-call spans' sums, marked derived, and each call is its nearest agent's own."""
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    url, db = served
    provider = sdk_provider(url, "jokes-app")
    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)

    def selector(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("jokes", {"count": 2}, tool_call_id="j1")])
        return ModelResponse(parts=[TextPart("The second one.")])

    def writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("joke one\njoke two")])

    instrument = [Instrumentation(settings=settings)]
    inner = Agent(FunctionModel(writer), name="joke_writer", capabilities=instrument)
    outer = Agent(FunctionModel(selector), name="joke_selector", capabilities=instrument)

    async def jokes(ctx: RunContext[None], count: int) -> str:
        return (await inner.run(f"Write {count} jokes.", usage=ctx.usage)).output

    # (the annotations as objects: this module's postponed ones name a local import)
    jokes.__annotations__.update({"ctx": RunContext[None], "count": int, "return": str})
    outer.tool(jokes)

    assert outer.run_sync("Tell me a joke.").output == "The second one."
    provider.shutdown()

    (run,) = api(url, "/api/runs")["runs"]
    store = SpanStore(db, read_only=True)
    spans = store.get_trace(run["trace_id"])
    store.close()
    chats = [s for s in spans if s.span_type == "message"]
    agents = [s for s in spans if s.span_type == "run"]
    assert len(chats) == 3 and len(agents) == 2
    assert run["derived"] is True and run["agent"] == "joke_selector"
    assert run["model_calls"] == 3 and run["tool_calls"] == 1
    assert run["input_tokens"] == sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats)
    assert run["output_tokens"] == sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats)
    # no call had a price: honest about it
    assert (run["cost"], run["cost_status"], run["unpriced_calls"]) == (None, "unpriced", 3)
    table = {a["agent"]: a for a in api(url, f"/api/runs/{run['trace_id']}/agents")["agents"]}
    selector_row, writer_row = table["joke_selector"], table["joke_writer"]
    assert (selector_row["own"]["model_calls"], selector_row["total"]["model_calls"]) == (2, 3)
    assert (writer_row["own"]["model_calls"], writer_row["total"]["model_calls"]) == (1, 1)
    assert writer_row["started_by"] == ["joke_selector"]
    assert selector_row["total"]["input_tokens"] == run["input_tokens"]
