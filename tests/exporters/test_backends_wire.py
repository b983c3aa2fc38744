"""The network backends on the wire: a real OTLP/HTTP receiver on 127.0.0.1 decodes what they send.

Each backend (otlp, langfuse, logfire, openllmetry) runs a traced native agent in
run and stream mode and is checked for path, auth header, span names, parent
links, its own attribute mapping, and content privacy. Then: fan-out, faults
(down, refusing, hanging, 500), bad configuration, and ``check()`` for doctor.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import requests
from tests.otlp_fixtures import (  # noqa: F401 - fixtures are used by name
    ANSWER,
    LANGFUSE_PUBLIC,
    LANGFUSE_SECRET,
    LOGFIRE_TOKEN,
    NATIVE_SPAN_COUNTS,
    SECRETS,
    SESSION_ID,
    TARGETS,
    TRACELOOP_KEY,
    USER_ID,
    batch_processors,
    clean_vendor_env_fixture,
    make_receiver_fixture,
    receiver_fixture,
    trace_config,
    traced_run,
    wait_until,
)
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

from runnertrace._internal.errors import tolerate_internal_errors
from runnertrace.exporters.langfuse import LangfuseBackend
from runnertrace.exporters.logfire import LogfireBackend, base_url_for_token
from runnertrace.exporters.openllmetry import OpenLLMetryBackend
from runnertrace.exporters.otlp import OtlpBackend, otlp_http_exporter
from runnertrace.tracing.config import ConfigError, TraceConfig, load_settings
from runnertrace.tracing.setup import build_backends, get_tracing_setup

BACKENDS = ["otlp", "langfuse", "logfire", "openllmetry"]
MODES = ["run", "stream"]

CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "output.value",
    "traceloop.entity.input",
    "traceloop.entity.output",
    "langfuse.observation.input",
    "langfuse.observation.output",
}


async def send_one_run(
    backend: str, receiver: OtlpReceiver, mode: str, **extra: Any
) -> list[ReceivedSpan]:
    config = trace_config(backend, {backend: receiver}, **extra)
    assert await traced_run(config, mode) == ANSWER
    assert get_tracing_setup(config).flush()
    return receiver.spans


def of_type(spans: list[ReceivedSpan], span_type: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.attributes.get("runnertrace.span.type") == span_type]


# -- the receiver itself -----------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_receiver_decodes_plain_and_gzip_bodies(receiver: OtlpReceiver, compression: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = otlp_http_exporter(
        receiver.traces_url,
        {"x-probe": "1"},
        timeout_s=2,
        compression=compression,  # type: ignore[arg-type]
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with (
        tracer.start_as_current_span("outer", attributes={"a": 1, "b": [1.5, 2.5], "c": True}),
        tracer.start_as_current_span("inner", attributes={"s": "x"}),
    ):
        pass
    provider.shutdown()
    (first,) = receiver.requests[:1]
    assert first.encoding == ("gzip" if compression == "gzip" else "")
    assert first.headers["x-probe"] == "1"
    inner, outer = receiver.by_name("inner")[0], receiver.by_name("outer")[0]
    assert outer.attributes == {"a": 1, "b": [1.5, 2.5], "c": True}
    assert inner.parent_span_id == outer.span_id and outer.parent_span_id is None
    assert inner.trace_id == outer.trace_id
    assert "service.name" in outer.resource


# -- every backend: path, auth, names, parents, privacy ----------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_backend_wire_basics(backend: str, mode: str, receiver: OtlpReceiver) -> None:
    spans = await send_one_run(backend, receiver, mode)
    target = TARGETS[backend]
    assert receiver.requests
    for request in receiver.requests:
        assert request.path == target.path
        assert request.headers.get("authorization") == target.auth
        assert request.headers["content-type"] == "application/x-protobuf"
        # vendors get gzip like their own SDKs send; otlp follows the OTel default (none)
        assert request.encoding == ("" if backend == "otlp" else "gzip")
    counts: dict[str, int] = {}
    for span in spans:
        counts[span.name] = counts.get(span.name, 0) + 1
    assert counts == NATIVE_SPAN_COUNTS
    (run,) = of_type(spans, "run")
    steps = of_type(spans, "step")
    assert run.parent_span_id is None
    assert {s.parent_span_id for s in steps} == {run.span_id}
    step_ids = {s.span_id for s in steps}
    for child in of_type(spans, "message") + of_type(spans, "tool"):
        assert child.parent_span_id in step_ids
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert run.attributes["runnertrace.mode"] == mode
    assert run.resource["service.name"] == "runnertrace"
    leaked = {k for s in spans for k in s.attributes if k in CONTENT_KEYS}
    assert leaked == set(), f"content sent without capture_content: {leaked}"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_backend_sends_content_only_when_enabled(
    backend: str, receiver: OtlpReceiver
) -> None:
    spans = await send_one_run(backend, receiver, "stream", capture_content=True)
    (run,) = of_type(spans, "run")
    assert "1234 * 5678" in run.attributes["gen_ai.input.messages"]
    final = of_type(spans, "message")[-1]
    assert ANSWER in final.attributes["gen_ai.output.messages"]
    tool = of_type(spans, "tool")[0]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {
        "expression": "1234 * 5678"
    }
    assert tool.attributes["gen_ai.tool.call.result"] == "7006652"


# -- otlp --------------------------------------------------------------------------------------
async def test_otlp_sends_plain_spans_with_config_and_env_headers(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-from-env=e1,x-both=env")
    config = TraceConfig(
        type="otlp",
        otlp={"endpoint": receiver.traces_url, "headers": {"x-team": "t1", "x-both": "config"}},
    )
    assert await traced_run(config) == ANSWER
    assert get_tracing_setup(config).flush()
    headers = receiver.requests[0].headers
    assert (headers["x-from-env"], headers["x-team"], headers["x-both"]) == ("e1", "t1", "config")
    keys = {k for s in receiver.spans for k in s.attributes}
    assert not any(k.startswith(("langfuse.", "traceloop.", "llm.")) for k in keys)
    assert "session.id" in keys


@pytest.mark.parametrize("vendor_keys", [True, False])
async def test_otlp_adds_the_openinference_spellings_unless_told_not_to(
    receiver: OtlpReceiver, vendor_keys: bool
) -> None:
    config = TraceConfig(
        type="otlp",
        capture_content=True,
        otlp={"endpoint": receiver.traces_url, "vendor_keys": vendor_keys},
    )
    assert await traced_run(config) == ANSWER
    assert get_tracing_setup(config).flush()
    kinds = {
        s.attributes["runnertrace.span.type"]: s.attributes.get("openinference.span.kind")
        for s in receiver.spans
    }
    tool = of_type(receiver.spans, "tool")[0]
    if vendor_keys:
        assert kinds == {"run": "AGENT", "step": "CHAIN", "message": "LLM", "tool": "TOOL"}
        assert tool.attributes["input.value"] == tool.attributes["gen_ai.tool.call.arguments"]
        assert all(s.attributes["session.id"] == SESSION_ID for s in receiver.spans)
    else:
        assert set(kinds.values()) == {None}
        assert "input.value" not in tool.attributes
        assert all("session.id" not in s.attributes for s in receiver.spans)


LEGACY_KEYS = {"gen_ai.system", "gen_ai.client.operation.time_to_first_chunk", "tool.name"}


@pytest.mark.parametrize("vendor_keys", [None, "all", "none"])
async def test_otlp_adds_no_deprecated_or_other_vendor_keys_unless_asked(
    receiver: OtlpReceiver, vendor_keys: str | None
) -> None:
    section: dict[str, Any] = {"endpoint": receiver.traces_url}
    if vendor_keys is not None:
        section["vendor_keys"] = vendor_keys
    config = TraceConfig(type="otlp", otlp=section)
    assert await traced_run(config, "stream") == ANSWER
    assert get_tracing_setup(config).flush()
    keys = {k for s in receiver.spans for k in s.attributes}
    # the facts those keys would repeat are there, in their semconv keys
    assert {"gen_ai.provider.name", "gen_ai.response.time_to_first_chunk"} <= keys
    if vendor_keys == "all":
        assert keys >= LEGACY_KEYS
    else:
        assert keys.isdisjoint(LEGACY_KEYS)
        assert ("openinference.span.kind" in keys) is (vendor_keys is None)


def test_otlp_vendor_keys_reads_the_old_switch() -> None:
    assert TraceConfig(otlp={"vendor_keys": True}).otlp.vendor_keys == "all"
    assert TraceConfig(otlp={"vendor_keys": False}).otlp.vendor_keys == "none"
    with pytest.raises(ConfigError, match="vendor_keys"):
        load_settings(trace={"otlp": {"vendor_keys": "some"}})


async def test_otlp_endpoint_comes_from_the_otel_env(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url + "/")
    config = TraceConfig(type="otlp")
    assert OtlpBackend(config).traces_endpoint() == receiver.traces_url
    assert await traced_run(config) == ANSWER
    assert get_tracing_setup(config).flush()
    assert receiver.requests[0].path == "/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/custom")
    assert OtlpBackend(config).traces_endpoint() == "http://127.0.0.1:1/custom"


async def test_vendor_backends_do_not_forward_the_collectors_otel_headers(
    make_receiver: Callable[..., OtlpReceiver], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=do-not-leak")
    for backend in ("langfuse", "logfire", "openllmetry"):
        receiver = make_receiver()
        await send_one_run(backend, receiver, "run")
        assert all("x-collector-key" not in r.headers for r in receiver.requests), backend


# -- langfuse ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_langfuse_mapping(mode: str, receiver: OtlpReceiver) -> None:
    config = trace_config("langfuse", {"langfuse": receiver})
    config.langfuse.tags = ["prod"]
    assert await traced_run(config, mode) == ANSWER
    assert get_tracing_setup(config).flush()
    spans = receiver.spans
    headers = receiver.requests[0].headers
    assert headers["x-langfuse-ingestion-version"] == "4"
    assert headers["x-langfuse-public-key"] == LANGFUSE_PUBLIC
    expected_types = {"run": "agent", "step": "chain", "message": "generation", "tool": "tool"}
    for span in spans:
        kind = span.attributes["runnertrace.span.type"]
        assert span.attributes["langfuse.observation.type"] == expected_types[kind]
        assert span.attributes["langfuse.session.id"] == SESSION_ID
        assert span.attributes["langfuse.user.id"] == USER_ID
    (run,) = of_type(spans, "run")
    assert run.attributes["langfuse.trace.name"] == "math"
    assert run.attributes["langfuse.trace.tags"] == ["prod", "native"]
    assert not any("langfuse.trace.name" in s.attributes for s in spans if s is not run)
    chats = of_type(spans, "message")
    for chat in chats:
        assert chat.attributes["langfuse.observation.model.name"] == "scripted-1"
        usage = json.loads(chat.attributes["langfuse.observation.usage_details"])
        assert usage["input"] == chat.attributes["gen_ai.usage.input_tokens"]
        assert usage["total"] == usage["input"] + usage["output"]
    timed = [c for c in chats if "gen_ai.response.time_to_first_chunk" in c.attributes]
    assert timed, "the final answer streams text, so it has a time to first chunk"
    for chat in timed:
        iso = chat.attributes["langfuse.observation.completion_start_time"]
        start = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1e9
        expected = chat.start_ns + chat.attributes["gen_ai.response.time_to_first_chunk"] * 1e9
        assert abs(start - expected) < 2_000  # microsecond precision
        assert chat.start_ns - 1_000 <= start <= chat.end_ns + 1_000
    assert not any(
        "langfuse.observation.completion_start_time" in c.attributes
        for c in chats
        if c not in timed
    )


async def test_langfuse_marks_failed_observations(
    receiver: OtlpReceiver,
) -> None:
    from runnertrace.core import Session
    from runnertrace.core.agent import Agent as CoreAgent
    from runnertrace.core.models import AgentRequestText
    from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm
    from runnertrace.tracing import TracingRunner

    config = trace_config("langfuse", {"langfuse": receiver})
    runner = TracingRunner(NativeRunner(), settings=config)
    agent = CoreAgent("math", runner, Agent(ScriptedLlm(turns=[]), name="math"))
    with pytest.raises(RuntimeError, match="ran out of turns"):
        await runner.run(agent, Session(SESSION_ID), [AgentRequestText(prompt="hi")])
    assert get_tracing_setup(config).flush()
    (run,) = of_type(receiver.spans, "run")
    assert run.status_code == 2  # STATUS_CODE_ERROR
    assert run.attributes["langfuse.observation.level"] == "ERROR"
    assert "ran out of turns" in run.attributes["langfuse.observation.status_message"]


# -- logfire -----------------------------------------------------------------------------------
@pytest.mark.needs_logfire
@pytest.mark.parametrize("mode", MODES)
async def test_logfire_mapping_and_scrubbing(mode: str, receiver: OtlpReceiver) -> None:
    from logfire._internal.scrubbing import Scrubber

    spans = await send_one_run("logfire", receiver, mode)
    (run,) = of_type(spans, "run")
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"  # Agents view
    assert run.attributes["gen_ai.agent.name"] == "math"
    for chat in of_type(spans, "message"):  # LLM view
        assert chat.attributes["gen_ai.system"] == chat.attributes["gen_ai.provider.name"]
        assert chat.attributes["gen_ai.request.model"] == "scripted-1"
    for chat in of_type(spans, "message"):
        if "gen_ai.response.time_to_first_chunk" in chat.attributes:
            assert (
                chat.attributes["gen_ai.client.operation.time_to_first_chunk"]
                == chat.attributes["gen_ai.response.time_to_first_chunk"]
            )
    scrubber = Scrubber(patterns=None)
    for span in spans:
        assert "session.id" not in span.attributes
        assert span.attributes["gen_ai.conversation.id"] == SESSION_ID
        scrubbed, notes = scrubber.scrub_value(("attributes",), span.attributes)
        assert notes == [], f"Logfire would scrub {notes} on {span.name}"
        assert scrubbed["gen_ai.conversation.id"] == SESSION_ID
    # ...while the key we drop would not have survived:
    _, notes = scrubber.scrub_value(("attributes",), {"session.id": SESSION_ID})
    assert notes and notes[0]["matched_substring"] == "session"


def test_logfire_base_url_follows_the_token_region(monkeypatch: pytest.MonkeyPatch) -> None:
    assert base_url_for_token("pylf_v1_eu_abc") == "https://logfire-eu.pydantic.dev"
    assert base_url_for_token("pylf_v1_us_abc") == "https://logfire-us.pydantic.dev"
    assert base_url_for_token("legacy-token") == "https://logfire-us.pydantic.dev"
    monkeypatch.setenv("LOGFIRE_TOKEN", "pylf_v2_eu_xyz")
    assert (
        LogfireBackend(TraceConfig()).traces_endpoint()
        == "https://logfire-eu.pydantic.dev/v1/traces"
    )
    monkeypatch.setenv("LOGFIRE_BASE_URL", "http://127.0.0.1:9/")
    assert LogfireBackend(TraceConfig()).traces_endpoint() == "http://127.0.0.1:9/v1/traces"


# -- openllmetry -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_openllmetry_mapping(mode: str, receiver: OtlpReceiver) -> None:
    spans = await send_one_run("openllmetry", receiver, mode, capture_content=True)
    (run,) = of_type(spans, "run")
    assert run.attributes["traceloop.span.kind"] == "workflow"
    assert run.attributes["traceloop.entity.name"] == "math"
    assert run.attributes["traceloop.entity.input"] == "What is 1234 * 5678, plus 17?"
    if mode == "run":  # a stream has no reply object to record
        assert run.attributes["traceloop.entity.output"] == ANSWER
    for span in spans:
        assert span.attributes["traceloop.workflow.name"] == "math"
        props = "traceloop.association.properties."
        assert span.attributes[props + "session_id"] == SESSION_ID
        assert span.attributes[props + "user_id"] == USER_ID
    for step in of_type(spans, "step"):
        assert step.attributes["traceloop.span.kind"] == "task"
        assert step.attributes["traceloop.entity.name"] == "math"
        assert "traceloop.entity.path" not in step.attributes  # nothing encloses it
    for tool in of_type(spans, "tool"):
        assert tool.attributes["traceloop.span.kind"] == "tool"
        assert tool.attributes["traceloop.entity.name"] == "calculator"
        assert tool.attributes["traceloop.entity.path"] == "math"
        assert (
            tool.attributes["traceloop.entity.input"]
            == tool.attributes["gen_ai.tool.call.arguments"]
        )
    for chat in of_type(spans, "message"):
        assert not any(k.startswith("traceloop.entity.") for k in chat.attributes)
        assert "traceloop.span.kind" not in chat.attributes
        assert chat.attributes["llm.request.type"] == "chat"
        assert chat.attributes["llm.usage.total_tokens"] == (
            chat.attributes["gen_ai.usage.input_tokens"]
            + chat.attributes["gen_ai.usage.output_tokens"]
        )


async def test_openllmetry_nested_agent_is_an_agent_in_the_outer_workflow(
    receiver: OtlpReceiver,
) -> None:
    from runnertrace.core import Session
    from runnertrace.core.agent import Agent as CoreAgent
    from runnertrace.core.models import AgentRequestText
    from runnertrace.runners.native import (
        Agent,
        LlmResponse,
        NativeRunner,
        ScriptedLlm,
        ToolCall,
        calculator,
    )
    from runnertrace.runners.native.tools import tool
    from runnertrace.tracing import TracingRunner

    config = trace_config("openllmetry", {"openllmetry": receiver})
    inner_runner = TracingRunner(NativeRunner(), settings=config)
    inner = CoreAgent("inner", inner_runner, Agent(ScriptedLlm(), tools=[calculator], name="inner"))

    @tool
    async def ask_inner(expression: str) -> str:
        """Ask the inner agent.

        Args:
            expression: what to compute.
        """
        return str(
            await inner_runner.run(inner, Session("inner-s"), [AgentRequestText(prompt=expression)])
        )

    outer_llm = ScriptedLlm(
        turns=[
            LlmResponse(content=[ToolCall("c1", "ask_inner", {"expression": "What is 2 * 3?"})]),
            "done",
        ]
    )
    outer_runner = TracingRunner(NativeRunner(), settings=config)
    outer = CoreAgent("outer", outer_runner, Agent(outer_llm, tools=[ask_inner], name="outer"))
    await outer_runner.run(outer, Session(SESSION_ID), [AgentRequestText(prompt="go")])
    assert get_tracing_setup(config).flush()
    spans = receiver.spans
    outer_run = receiver.by_name("invoke_agent outer")[0]
    inner_run = receiver.by_name("invoke_agent inner")[0]
    ask = receiver.by_name("execute_tool ask_inner")[0]
    assert inner_run.parent_span_id == ask.span_id
    assert outer_run.attributes["traceloop.span.kind"] == "workflow"
    assert inner_run.attributes["traceloop.span.kind"] == "agent"
    assert {s.attributes["traceloop.workflow.name"] for s in spans} == {"outer"}
    assert ask.attributes["traceloop.entity.path"] == "outer"
    inner_tool = receiver.by_name("execute_tool calculator")[0]
    assert inner_tool.attributes["traceloop.entity.path"] == "outer.ask_inner.inner"
    # the session association follows each run's own session
    assert inner_tool.attributes["traceloop.association.properties.session_id"] == "inner-s"


def test_openllmetry_key_is_optional_for_a_self_hosted_collector(receiver: OtlpReceiver) -> None:
    backend = OpenLLMetryBackend(TraceConfig(openllmetry={"base_url": receiver.url}))
    assert backend.headers() == {}
    with pytest.raises(
        ConfigError, match=r"trace\.openllmetry\.api_key is not set.*TRACELOOP_API_KEY"
    ):
        OpenLLMetryBackend(TraceConfig()).headers()  # api.traceloop.com needs a key


def test_openllmetry_imports_no_traceloop_unless_instrumentation_is_asked_for() -> None:
    import sys

    backend = OpenLLMetryBackend(TraceConfig(openllmetry={"base_url": "http://127.0.0.1:9"}))
    backend.processors()
    assert not any(
        m.startswith(("traceloop", "opentelemetry.instrumentation.openai")) for m in sys.modules
    )


# -- fan-out -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["refuse", "hang"])
@pytest.mark.parametrize("down", ["otlp", "langfuse"])
async def test_fan_out_one_backend_down_the_other_gets_everything(
    down: str, fault: str, make_receiver: Callable[..., OtlpReceiver]
) -> None:
    """One flush delivers everything to the healthy backend, whichever one is down.

    The backends flush at once under one deadline: a dead or hanging backend
    listed first must not spend the time the healthy one needs."""
    receivers = {
        name: make_receiver(fault if name == down else "healthy") for name in ("otlp", "langfuse")
    }
    config = trace_config(["otlp", "langfuse"], receivers, flush_timeout_s=1.0)
    with tolerate_internal_errors():
        for mode in MODES:
            assert await traced_run(config, mode) == ANSWER
        flushed = get_tracing_setup(config).flush()
        up = receivers["langfuse" if down == "otlp" else "otlp"]
        assert len(up.spans) == 2 * sum(NATIVE_SPAN_COUNTS.values())
        # A refused export completes (its spans are dropped and counted), though its retries
        # can outlast one flush's budget (the exporter's timeout is that same budget); a hang
        # never completes.
        if fault == "refuse":
            assert flushed or wait_until(get_tracing_setup(config).flush)
        else:
            assert flushed is False
        if fault == "refuse":
            assert wait_until(lambda: batch_processors(config)[down].dropped > 0)
    assert batch_processors(config)[down].exported == 0


async def test_fan_out_maps_each_copy_for_its_own_backend(
    make_receiver: Callable[..., OtlpReceiver],
) -> None:
    receivers = {name: make_receiver() for name in ("otlp", "langfuse", "logfire")}
    config = trace_config(["otlp", "langfuse", "logfire"], receivers)
    assert await traced_run(config) == ANSWER
    assert get_tracing_setup(config).flush()
    plain = {k for s in receivers["otlp"].spans for k in s.attributes}
    assert not any(k.startswith("langfuse.") for k in plain) and "session.id" in plain
    assert all("langfuse.observation.type" in s.attributes for s in receivers["langfuse"].spans)
    assert all("session.id" not in s.attributes for s in receivers["logfire"].spans)
    assert all("session.id" in s.attributes for s in receivers["langfuse"].spans)


# -- faults ------------------------------------------------------------------------------------
FAULTS = ["refuse", "down", "hang", "500"]


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_faulty_backend_never_breaks_the_run(
    backend: str,
    fault: str,
    make_receiver: Callable[..., OtlpReceiver],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    receiver = make_receiver(fault, hang_s=60.0)
    flush_timeout = 0.5
    config = trace_config(backend, {backend: receiver}, flush_timeout_s=flush_timeout)
    per_run = sum(NATIVE_SPAN_COUNTS.values())
    with tolerate_internal_errors():
        setup = get_tracing_setup(config)
        for mode in MODES:
            assert await traced_run(config, mode) == ANSWER
            setup.flush()
        processor = batch_processors(config)[backend]
        assert wait_until(lambda: processor.dropped == 2 * per_run), processor.dropped
        assert processor.exported == 0
        setup.shutdown()
        # Bounded: the shutdown gave up on a request the receiver is still holding.
        assert receiver.held >= 1 if fault == "hang" else receiver.held == 0
    # One line (rate-limited), then the exact total when the backend shuts down.
    ours = [r.getMessage() for r in caplog.records if f"lost so far for {backend}" in r.msg]
    assert 1 <= len(ours) <= 2 and f"{2 * per_run} spans lost" in ours[-1], ours
    # The OTLP span exporter's own retry and failure lines are folded into ours; the
    # metric exporter's (its own logger) are rate-limited to one per message.
    assert not [
        r
        for r in caplog.records
        if r.name.startswith("opentelemetry.exporter") and "trace_exporter" in r.name
    ]
    from_exporter: dict[tuple[str, str], int] = {}
    for record in caplog.records:
        if record.name.startswith("opentelemetry.exporter"):
            key = (record.name, str(record.msg))
            from_exporter[key] = from_exporter.get(key, 0) + 1
    assert all(n == 1 for n in from_exporter.values()), from_exporter
    assert not any(secret in caplog.text for secret in SECRETS)


async def test_a_backend_that_recovers_gets_later_spans(
    make_receiver: Callable[..., OtlpReceiver],
) -> None:
    receiver = make_receiver("500")
    config = trace_config("langfuse", {"langfuse": receiver}, flush_timeout_s=1.0)
    with tolerate_internal_errors():
        await traced_run(config)
        get_tracing_setup(config).flush()
        receiver.mode = "healthy"
        await traced_run(config)
        assert get_tracing_setup(config).flush()
    assert len(receiver.spans) == sum(NATIVE_SPAN_COUNTS.values())


# -- bad configuration -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("backend", "section", "message"),
    [
        (
            "langfuse",
            {"secret_key": "s"},
            r"trace\.langfuse\.public_key is not set; "
            r"set it in runnertrace\.yaml or LANGFUSE_PUBLIC_KEY",
        ),
        (
            "langfuse",
            {"public_key": "p"},
            r"trace\.langfuse\.secret_key is not set; .*LANGFUSE_SECRET_KEY",
        ),
        ("logfire", {}, r"trace\.logfire\.token is not set; .*LOGFIRE_TOKEN"),
        ("openllmetry", {}, r"trace\.openllmetry\.api_key is not set; .*TRACELOOP_API_KEY"),
    ],
)
def test_missing_credentials_name_the_key_and_the_fix(
    backend: str, section: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build_backends(TraceConfig(type=backend, **{backend: section}))


@pytest.mark.parametrize(
    "host",
    [
        "htp://cloud.langfuse.com",
        "cloud.langfuse.com",
        "http://",
        "http://host:99999",
        "http://a b",
    ],
)
def test_malformed_host_names_the_key_and_an_example(host: str) -> None:
    config = TraceConfig(
        type="langfuse", langfuse={"host": host, "public_key": "p", "secret_key": LANGFUSE_SECRET}
    )
    with pytest.raises(ConfigError) as caught:
        build_backends(config)
    text = str(caught.value)
    assert "trace.langfuse.host is not a valid URL" in text
    assert "https://cloud.langfuse.com" in text
    assert LANGFUSE_SECRET not in text


def test_malformed_url_from_env_names_its_source_and_hides_userinfo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACELOOP_BASE_URL", "ftp://user:hunter2@example.com")
    with pytest.raises(ConfigError) as caught:
        OpenLLMetryBackend(TraceConfig()).traces_endpoint()
    text = str(caught.value)
    assert "trace.openllmetry.base_url" in text and "TRACELOOP_BASE_URL" in text
    assert "hunter2" not in text


def test_credentials_come_from_the_vendor_env_vars(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-env")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-env")
    monkeypatch.setenv("LANGFUSE_HOST", receiver.url)
    backend = LangfuseBackend(TraceConfig())
    assert backend.traces_endpoint() == receiver.url + "/api/public/otel/v1/traces"
    assert backend.headers()["x-langfuse-public-key"] == "pk-env"
    monkeypatch.setenv("LANGFUSE_BASE_URL", "http://127.0.0.1:9")  # the newer name wins
    assert backend.traces_endpoint().startswith("http://127.0.0.1:9/")
    monkeypatch.setenv(
        "RUNNERTRACE_TRACE__LANGFUSE__PUBLIC_KEY", "pk-config"
    )  # config beats vendor env
    assert LangfuseBackend(load_settings().trace).headers()["x-langfuse-public-key"] == "pk-config"


def test_unknown_logfire_region_asks_for_a_base_url() -> None:
    with pytest.raises(
        ConfigError, match=r"region 'mars'.*trace\.logfire\.base_url.*LOGFIRE_BASE_URL"
    ):
        LogfireBackend(TraceConfig(logfire={"token": "pylf_v1_mars_abc"})).traces_endpoint()


def test_unknown_backend_name_lists_the_valid_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"trace\.type.*unknown trace type 'langfuse2'.*langfuse, local, logfire"
    ):
        load_settings(trace={"type": ["otlp", "langfuse2"]})


def test_opt_in_instrumentation_without_the_extra_says_how_to_install_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = TraceConfig(
        type="openllmetry",
        openllmetry={"base_url": "http://127.0.0.1:9", "instrument": ["openai"]},
    )
    # A missing extra is the user's to fix: one warning naming the pip line, no traceback,
    # and runs go untraced (issue 22).
    with caplog.at_level("WARNING", logger="runnertrace"):
        assert get_tracing_setup(config).disabled
    (warning,) = [r for r in caplog.records if r.name == "runnertrace"]
    assert "pip install 'runnertrace[openllmetry]'" in warning.getMessage()
    assert warning.exc_info is None


def test_doctor_reports_the_missing_instrumentation_extra() -> None:
    backend = OpenLLMetryBackend(
        TraceConfig(openllmetry={"base_url": "http://127.0.0.1:1", "instrument": ["anthropic"]})
    )
    finding = next(c for c in backend.check() if c.name == "instrument")
    assert finding.status == "fail"
    assert "pip install 'runnertrace[openllmetry]'" in finding.fix


def test_unknown_instrumentation_library_is_a_config_error() -> None:
    backend = OpenLLMetryBackend(TraceConfig(openllmetry={"instrument": ["telepathy"]}))
    with pytest.raises(
        ConfigError, match=r"trace\.openllmetry\.instrument: unknown library 'telepathy'.*openai"
    ):
        backend.processors()


# -- check() for runnertrace doctor ------------------------------------------------------------
def backend_for(name: str, receiver: OtlpReceiver, **extra: Any) -> Any:
    config = trace_config(name, {name: receiver}, **extra)
    cls = {
        "otlp": OtlpBackend,
        "langfuse": LangfuseBackend,
        "logfire": LogfireBackend,
        "openllmetry": OpenLLMetryBackend,
    }[name]
    return cls(config)


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_passes_against_a_healthy_endpoint(backend: str, receiver: OtlpReceiver) -> None:
    checks = backend_for(backend, receiver).check()
    assert [c.status for c in checks] == ["ok"] * len(checks)
    assert checks[-1].name == "reachable"
    assert receiver.requests and receiver.requests[-1].path == TARGETS[backend].path
    assert receiver.spans == []  # the probe sends no data
    assert not any(secret in repr(checks) for secret in SECRETS)


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        ("refuse", "cannot connect"),
        ("down", "cannot connect"),
        ("hang", "did not answer"),
        ("500", "answered HTTP 500"),
    ],
)
def test_check_reports_an_unhealthy_endpoint_within_its_bound(
    mode: str, detail: str, make_receiver: Callable[..., OtlpReceiver]
) -> None:
    receiver = make_receiver(mode, hang_s=60.0)
    backend = backend_for("langfuse", receiver, flush_timeout_s=0.5)
    checks = backend.check()
    # Bounded: the check gave up on a request the receiver is still holding.
    assert receiver.held == (1 if mode == "hang" else 0)
    reachable = checks[-1]
    assert reachable.name == "reachable" and detail in reachable.detail
    assert reachable.status == ("warn" if mode == "500" else "fail")
    assert not any(secret in repr(checks) for secret in SECRETS)


def test_check_reports_rejected_credentials(make_receiver: Callable[..., OtlpReceiver]) -> None:
    receiver = make_receiver(expect_headers={"authorization": "Bearer the-right-key"})
    reachable = backend_for("openllmetry", receiver).check()[-1]
    assert (reachable.status, reachable.name) == ("fail", "reachable")
    assert "rejected the credentials (HTTP 401)" in reachable.detail
    assert TRACELOOP_KEY not in repr(reachable)


def test_check_reports_missing_credentials_and_bad_urls_without_raising() -> None:
    checks = LangfuseBackend(
        TraceConfig(langfuse={"host": "nope", "secret_key": LANGFUSE_SECRET})
    ).check()
    by_name = {(c.name, c.status) for c in checks}
    assert ("credentials", "fail") in by_name and ("endpoint", "fail") in by_name
    missing = next(c for c in checks if c.name == "credentials")
    assert "LANGFUSE_PUBLIC_KEY" in missing.fix
    assert not any(c.name == "reachable" for c in checks)
    assert LANGFUSE_SECRET not in repr(checks)
    logfire_checks = LogfireBackend(
        TraceConfig(logfire={"token": LOGFIRE_TOKEN, "base_url": "http://127.0.0.1:1"})
    ).check()
    assert "found trace.logfire.token from runnertrace.yaml" in logfire_checks[0].detail
    assert LOGFIRE_TOKEN not in repr(logfire_checks)


def test_probe_sends_exactly_the_export_headers(make_receiver: Callable[..., OtlpReceiver]) -> None:
    receiver = make_receiver(expect_headers={"x-langfuse-ingestion-version": "4"})
    assert backend_for("langfuse", receiver).check()[-1].status == "ok"
    assert receiver.requests[-1].headers["authorization"] == TARGETS["langfuse"].auth
    assert requests.post(receiver.traces_url, data=b"", timeout=2).status_code == 401
