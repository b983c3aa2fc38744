"""The ``cloudwatch`` backend on the wire: SigV4-verified OTLP, moto for metrics and dashboards.

Everything stays on 127.0.0.1: spans go to a local receiver that verifies the
SigV4 signature with botocore, AWS APIs go to moto in server mode, and the
credentials are fake ones set in the environment.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from tests.moto_server import MotoServer, moto_fixture, moto_process_fixture  # noqa: F401 - fixtures
from tests.otlp_receiver import OtlpReceiver, closed_port_url
from tests.sigv4_receiver import SigV4Verifier

from runnertrace._internal.errors import tolerate_internal_errors
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.cloudwatch import (
    CloudWatchBackend,
    CloudWatchMetricExporter,
    SigV4Session,
    cloudwatch_checks,
    cloudwatch_client,
    dashboard_body,
    deploy_dashboard,
)
from runnertrace.runners.native import Agent, LlmRequest, LlmResponse, NativeRunner, ScriptedLlm
from runnertrace.runners.native import calculator as calculator_tool
from runnertrace.tracing import TracingRunner, get_tracing_setup, reset_tracing_setups
from runnertrace.tracing.config import ConfigError, TraceConfig, load_settings
from runnertrace.tracing.export import BoundedBatchSpanProcessor
from runnertrace.tracing.setup import TracingSetup

ACCESS_KEY = "AKIDRUNNERTRACETEST1"
SECRET_KEY = "runnertrace/test/secret/key/0123456789abcdef"
REGION = "us-east-1"
PROMPT = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "output.value",
)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """Fake credentials, a fixed region, no AWS config files, no metadata service."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for var in (
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_CLOUDWATCH",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(var, raising=False)
    yield
    reset_tracing_setups()


def config(endpoint: str | None = None, **cloudwatch: Any) -> TraceConfig:
    section: dict[str, Any] = {"metrics": False, **cloudwatch}
    if endpoint is not None:
        section["endpoint"] = endpoint
    return TraceConfig(type="cloudwatch", flush_timeout_s=2.0, cloudwatch=section)


def traced_agent(settings: TraceConfig, name: str = "math", llm: Any = None) -> CoreAgent:
    runner = TracingRunner(NativeRunner(), settings)
    native = Agent(llm or ScriptedLlm(), tools=[calculator_tool], name=name)
    return CoreAgent(name, runner, native)


async def run_agent(agent: CoreAgent, mode: str = "run", session: str = "sess-1") -> Any:
    if mode == "run":
        return await agent.runner.run(agent, Session(session), PROMPT)
    return [event async for event in agent.runner.stream(agent, Session(session), PROMPT)]


def setup_of(settings: TraceConfig) -> TracingSetup:
    return get_tracing_setup(settings)


def backend_of(settings: TraceConfig) -> CloudWatchBackend:
    backend = setup_of(settings).backends[0]
    assert isinstance(backend, CloudWatchBackend)
    return backend


def signed_request(url: str, body: bytes = b"payload") -> requests.PreparedRequest:
    prepared = requests.Request(
        "POST",
        url,
        data=gzip.compress(body),
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
    ).prepare()
    SigV4Session(REGION).sign(prepared)
    return prepared


def verify_prepared(verifier: SigV4Verifier, prepared: requests.PreparedRequest) -> Any:
    path = prepared.path_url
    body = prepared.body if isinstance(prepared.body, bytes) else b""
    return verifier.verify(str(prepared.method), path, dict(prepared.headers), body)


# -- the verifier itself --------------------------------------------------------------------------


def test_verifier_accepts_the_published_aws_test_vector_and_rejects_a_change() -> None:
    # "get-vanilla" from AWS's SigV4 test suite: an independent known answer.
    verifier = SigV4Verifier(
        "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", max_skew_s=None
    )
    headers = {
        "Host": "example.amazonaws.com",
        "X-Amz-Date": "20150830T123600Z",
        "Authorization": (
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        ),
    }
    good = verifier.verify("GET", "/", headers, b"")
    assert good.ok, good.reason
    assert (good.service, good.region) == ("service", "us-east-1")
    assert verifier.verify("GET", "/other", headers, b"").reason == "signature mismatch"
    assert verifier.verify("POST", "/", headers, b"").reason == "signature mismatch"


def test_signing_session_signature_verifies_and_any_tampering_fails() -> None:
    verifier = SigV4Verifier(ACCESS_KEY, SECRET_KEY)
    prepared = signed_request("http://127.0.0.1:4318/v1/traces")
    verdict = verify_prepared(verifier, prepared)
    assert verdict.ok, verdict.reason
    assert (verdict.service, verdict.region) == ("xray", REGION)
    assert verdict.signed_headers == (
        "content-encoding",
        "content-type",
        "host",
        "x-amz-date",
    )
    assert SECRET_KEY not in json.dumps(dict(prepared.headers))

    tampered_body = gzip.compress(b"payloae")
    assert verifier.verify(
        "POST", prepared.path_url, dict(prepared.headers), tampered_body
    ).reason == ("signature mismatch")
    headers = {**prepared.headers, "Content-Encoding": "deflate"}
    assert verifier.verify("POST", prepared.path_url, headers, prepared.body).reason == (  # type: ignore[arg-type]
        "signature mismatch"
    )
    wrong_secret = SigV4Verifier(ACCESS_KEY, SECRET_KEY + "x")
    assert verify_prepared(wrong_secret, prepared).reason == "signature mismatch"
    unsigned = {k: v for k, v in prepared.headers.items() if k != "Authorization"}
    assert not verifier.verify("POST", prepared.path_url, unsigned, prepared.body).ok  # type: ignore[arg-type]


def test_verifier_accepts_what_boto3_itself_signs() -> None:
    """The receiver's check is generic SigV4: a real boto3 call to it verifies too."""
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        client = cloudwatch_client(REGION, f"http://127.0.0.1:{receiver.port}", 2.0)
        client.list_dashboards()  # the empty 200 parses as an empty answer
    verdict = receiver.arrived[0].verdict
    assert verdict is not None and verdict.ok, verdict
    assert (verdict.service, verdict.region) == ("monitoring", REGION)
    assert receiver.arrived[0].header("amz-sdk-request") == "attempt=1; max=2"


def test_temporary_credentials_send_and_sign_the_session_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-123")
    prepared = signed_request("http://127.0.0.1:4318/v1/traces")
    assert prepared.headers["X-Amz-Security-Token"] == "token-123"
    verdict = verify_prepared(SigV4Verifier(ACCESS_KEY, SECRET_KEY, "token-123"), prepared)
    assert verdict.ok, verdict.reason
    assert "x-amz-security-token" in verdict.signed_headers
    assert not verify_prepared(SigV4Verifier(ACCESS_KEY, SECRET_KEY, "other"), prepared).ok


# -- spans on the wire ----------------------------------------------------------------------------


def assert_native_run_tree(spans: list[Any]) -> None:
    by_id = {span.span_id: span for span in spans}
    roots = [span for span in spans if not span.parent_span_id]
    assert [root.name for root in roots] == ["invoke_agent math"]
    root = roots[0]
    steps = [s for s in spans if s.parent_span_id == root.span_id]
    assert [s.name for s in steps] == ["agent_step math"] * 3
    children = sorted(
        (by_id[s.parent_span_id].name, s.name)
        for s in spans
        if s.parent_span_id != root.span_id and s is not root
    )
    assert children == sorted(
        [("agent_step math", "chat scripted-1")] * 3
        + [("agent_step math", "execute_tool calculator")] * 2
    )
    assert all(s.trace_id == root.trace_id for s in spans)
    assert root.attributes["gen_ai.agent.name"] == "math"
    assert root.attributes["runnertrace.framework"] == "native"
    assert root.attributes["runnertrace.span.type"] == "run"


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_traced_run_is_sent_signed_with_cloudwatch_attributes(mode: str) -> None:
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        settings = config(receiver.traces_url)
        await run_agent(traced_agent(settings), mode)
        assert setup_of(settings).flush()
        received = receiver.wait_for(1)
    for item in received:
        assert item.path == "/v1/traces"
        assert item.verdict is not None and item.verdict.ok, item.verdict
        assert (item.verdict.service, item.verdict.region) == ("xray", REGION)
        assert item.header("content-encoding") == "gzip"
        assert item.header("content-type") == "application/x-protobuf"
        assert item.header(
            "authorization",
        ).startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")  # type: ignore[union-attr]
        assert SECRET_KEY not in json.dumps(item.headers)
    spans = receiver.spans
    assert len(spans) == 9
    assert_native_run_tree(spans)
    for span in spans:
        assert span.resource["aws.service.type"] == "gen_ai_agent"
        assert "aws.log.group.names" not in span.resource
        assert span.attributes["session.id"] == "sess-1"
        assert not set(CONTENT_KEYS) & set(span.attributes), "content must be off by default"
    chats = [s for s in spans if s.name == "chat scripted-1"]
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in chats)


async def test_content_is_truncated_harder_and_log_groups_reach_the_resource() -> None:
    long_prompt = [AgentRequestText(prompt="What is 2 + 3? " + "Please be precise. " * 20)]
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        settings = config(
            receiver.traces_url, max_content_length=40, log_group_names=["/agents/app"]
        )
        settings.capture_content = True
        agent = traced_agent(settings)
        await agent.runner.run(agent, Session("sess-2"), long_prompt)
        assert setup_of(settings).flush()
        receiver.wait_for(1)
    spans = receiver.spans
    root = next(s for s in spans if s.name == "invoke_agent math")
    assert root.resource["aws.log.group.names"] == ["/agents/app"]
    value = root.attributes["gen_ai.input.messages"]
    assert value.startswith('[{"role": "user", "parts": [{"type": "te')
    assert value.endswith("chars]") and "...[truncated " in value
    assert len(value.split("...[truncated")[0]) == 40
    contents = [v for s in spans for k, v in s.attributes.items() if k in CONTENT_KEYS]
    assert contents, "capture_content=True must still send (truncated) content"
    assert all(len(v.split("...[truncated")[0]) <= 40 for v in contents)


async def test_endpoint_env_override_is_still_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        monkeypatch.setenv("RUNNERTRACE_TRACE__TYPE", "cloudwatch")
        monkeypatch.setenv("RUNNERTRACE_TRACE__CLOUDWATCH__ENDPOINT", receiver.traces_url)
        monkeypatch.setenv("RUNNERTRACE_TRACE__CLOUDWATCH__METRICS", "false")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=meant-for-a-collector")
        settings = load_settings().trace
        assert settings.cloudwatch.endpoint == receiver.traces_url
        await run_agent(traced_agent(settings))
        assert setup_of(settings).flush()
        received = receiver.wait_for(1)
    assert all(item.verdict is not None and item.verdict.ok for item in received)
    assert all(item.header("x-collector-key") is None for item in received)
    assert len(receiver.spans) == 9


async def test_collector_endpoint_from_otel_env_is_sent_unsigned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.traces_url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k1")
        settings = config()
        assert not backend_of(settings).target.signed
        await run_agent(traced_agent(settings))
        assert setup_of(settings).flush()
        received = receiver.wait_for(1)
    for item in received:
        assert item.path == "/v1/traces"
        assert item.header("authorization") is None
        assert item.header("x-amz-date") is None
        assert item.header("x-collector-key") == "k1"
    spans = receiver.spans
    assert len(spans) == 9
    assert all(s.resource["aws.service.type"] == "gen_ai_agent" for s in spans)
    assert all(s.attributes["session.id"] == "sess-1" for s in spans)


def test_default_target_is_xray_in_the_region(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = CloudWatchBackend(config())
    assert backend.target.url == "https://xray.us-east-1.amazonaws.com/v1/traces"
    assert backend.target.signed
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    assert CloudWatchBackend(config()).target.url == (
        "https://xray.eu-west-3.amazonaws.com/v1/traces"
    )
    explicit = CloudWatchBackend(config(region="ap-south-1"))
    assert explicit.target.url == "https://xray.ap-south-1.amazonaws.com/v1/traces"


def test_session_id_reaches_spans_of_other_instrumentations() -> None:
    """A framework's own span under our run span gets the run's session id."""
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        backend = CloudWatchBackend(config(receiver.traces_url))
        provider = TracerProvider()
        for processor in backend.processors():
            provider.add_span_processor(processor)
        ours = provider.get_tracer("runnertrace")
        theirs = provider.get_tracer("some.framework")
        run_attrs = {"session.id": "s-9", "runnertrace.span.type": "run"}
        with (
            ours.start_as_current_span("invoke_agent a", attributes=run_attrs),
            theirs.start_as_current_span("framework.internal"),
            theirs.start_as_current_span("framework.deeper"),
        ):
            pass
        assert provider.force_flush(5000)
        receiver.wait_for(1)
        provider.shutdown()
    spans = {s.name: s for s in receiver.spans}
    assert set(spans) == {"invoke_agent a", "framework.internal", "framework.deeper"}
    assert {s.attributes.get("session.id") for s in spans.values()} == {"s-9"}


# -- metrics and dashboards against moto ----------------------------------------------------------


def failing_turn(request: LlmRequest) -> LlmResponse:
    raise RuntimeError("model unavailable")


def metric_sum(
    client: Any, name: str, dims: dict[str, str], stat: str = "Sum", namespace: str = "RTTest"
) -> float:
    now = dt.datetime.now(dt.UTC)
    result = client.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "q",
                "MetricStat": {
                    "Metric": {
                        "Namespace": namespace,
                        "MetricName": name,
                        "Dimensions": [{"Name": k, "Value": v} for k, v in dims.items()],
                    },
                    "Period": 60,
                    "Stat": stat,
                },
            }
        ],
        StartTime=now - dt.timedelta(minutes=10),
        EndTime=now + dt.timedelta(minutes=10),
    )
    values = result["MetricDataResults"][0]["Values"]
    if stat == "Maximum":
        return max(values, default=0.0)
    return float(sum(values))


def moto_client(server: MotoServer) -> Any:
    import boto3

    return boto3.client("cloudwatch", region_name=REGION, endpoint_url=server.url)


def metrics_of(settings: TraceConfig) -> CloudWatchMetricExporter:
    exporter = backend_of(settings).metrics
    assert exporter is not None
    return exporter


async def test_metrics_are_readable_from_cloudwatch(moto: MotoServer) -> None:
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        settings = config(
            receiver.traces_url, metrics=True, metrics_endpoint=moto.url, namespace="RTTest"
        )
        settings.flush_timeout_s = 10.0  # a bound for a loaded machine, not a measurement
        await run_agent(traced_agent(settings), "run")
        await run_agent(traced_agent(settings), "stream", session="sess-2")
        broken = traced_agent(settings, name="broken", llm=ScriptedLlm(turns=[failing_turn]))
        with pytest.raises(RuntimeError, match="model unavailable"):
            await run_agent(broken)
        setup = setup_of(settings)
        assert setup.flush()
        receiver.wait_for(1)
    exporter = metrics_of(settings)
    assert exporter.failed_exports == 0 and exporter.sent_datums > 0
    spans = receiver.spans
    math_chats = [
        s
        for s in spans
        if s.attributes.get("runnertrace.span.type") == "message"
        and s.attributes.get("gen_ai.agent.name") == "math"
    ]
    expected_in = sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in math_chats)
    expected_out = sum(s.attributes.get("gen_ai.usage.output_tokens", 0) for s in math_chats)
    assert expected_in > 0 and expected_out > 0

    client = moto_client(moto)
    math = {"Agent": "math", "Framework": "native"}
    assert metric_sum(client, "runnertrace.runs", math) == 2
    assert metric_sum(client, "runnertrace.runs", {"Agent": "broken", "Framework": "native"}) == 1
    broken_errors = {"Agent": "broken", "ErrorType": "RuntimeError", "Framework": "native"}
    assert metric_sum(client, "runnertrace.run.errors", broken_errors) == 1
    tools = {**math, "Tool": "calculator"}
    assert metric_sum(client, "runnertrace.tool.calls", tools) == 4
    chat = {
        **math,
        "Model": "scripted-1",
        "Operation": "chat",
        "Provider": "runnertrace",
        "ResponseModel": "scripted-1",
    }
    usage = "gen_ai.client.token.usage"
    assert metric_sum(client, usage, {**chat, "TokenType": "input"}) == expected_in
    assert metric_sum(client, usage, {**chat, "TokenType": "output"}) == expected_out
    assert metric_sum(client, usage, {**chat, "TokenType": "input"}, "SampleCount") == len(
        math_chats
    )
    runs = {**math, "Operation": "invoke_agent"}
    duration = "gen_ai.client.operation.duration"
    assert metric_sum(client, duration, runs, "SampleCount") == 2
    assert metric_sum(client, duration, runs, "Maximum") > 0
    listed = client.list_metrics(Namespace="RTTest")["Metrics"]
    assert {m["MetricName"] for m in listed} == {
        "runnertrace.runs",
        "runnertrace.run.errors",
        "runnertrace.tool.calls",
        duration,
        usage,
        "gen_ai.client.operation.time_to_first_chunk",
    }


async def test_metrics_endpoint_from_aws_env_var_is_honoured(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDWATCH", moto.url)
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        settings = config(receiver.traces_url, metrics=True, namespace="RTEnv")
        settings.flush_timeout_s = 10.0
        await run_agent(traced_agent(settings))
        assert setup_of(settings).flush()
    assert metrics_of(settings).failed_exports == 0
    runs = {"Agent": "math", "Framework": "native"}
    assert metric_sum(moto_client(moto), "runnertrace.runs", runs, namespace="RTEnv") == 1


async def test_trace_metrics_off_sends_no_cloudwatch_metrics(moto: MotoServer) -> None:
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        settings = config(
            receiver.traces_url, metrics=True, metrics_endpoint=moto.url, namespace="RTOff"
        )
        settings.metrics = False
        await run_agent(traced_agent(settings))
        assert setup_of(settings).flush()
    assert backend_of(settings).metrics is None
    assert moto_client(moto).list_metrics(Namespace="RTOff")["Metrics"] == []


async def test_metrics_failures_are_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        settings = config(receiver.traces_url, metrics=True, metrics_endpoint=closed_port_url())
        replies = []
        with tolerate_internal_errors():
            for _ in range(2):  # two export intervals, each with a run in it
                replies.append(await run_agent(traced_agent(settings)))
                setup_of(settings).flush()
    assert all(reply.text == "The answer is 7006669." for reply in replies)
    exporter = metrics_of(settings)
    assert exporter.failed_exports == 2 and exporter.sent_datums == 0
    messages = [r.getMessage() for r in caplog.records if "metrics to CloudWatch" in r.getMessage()]
    assert len(messages) == 1
    assert SECRET_KEY not in messages[0] and ACCESS_KEY not in messages[0]


async def test_a_hung_metrics_api_never_blocks_runs_and_shutdown_is_bounded() -> None:
    with (
        OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver,
        OtlpReceiver(mode="hang") as hung_api,
    ):
        settings = config(
            receiver.traces_url, metrics=True, metrics_endpoint=f"http://127.0.0.1:{hung_api.port}"
        )
        settings.flush_timeout_s = 1.0
        with tolerate_internal_errors():
            for _ in range(4):
                await run_agent(traced_agent(settings))
            setup_of(settings).shutdown()
            # Bounded: the shutdown gave up on the metrics request the API still holds.
            assert hung_api.held >= 1


async def test_dashboard_is_created_then_updated(moto: MotoServer) -> None:
    first = config(metrics_endpoint=moto.url, namespace="TeamA")
    response = deploy_dashboard("runnertrace-agents", first)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    client = moto_client(moto)
    body = json.loads(client.get_dashboard(DashboardName="runnertrace-agents")["DashboardBody"])
    titles = [w["properties"]["title"] for w in body["widgets"]]
    assert titles == [
        "Runs",
        "Run latency p50 / p95 (s)",
        "Errors",
        "Tokens",
        "Top tools (calls)",
        "Cost (USD, list price)",
    ]
    text = json.dumps(body)
    assert "TeamA" in text and "${" not in text
    assert {w["properties"]["region"] for w in body["widgets"]} == {REGION}
    latency = body["widgets"][1]["properties"]["metrics"]
    assert ["p50" in json.dumps(latency), "p95" in json.dumps(latency)] == [True, True]
    top_tools = body["widgets"][4]["properties"]["metrics"][0][0]["expression"]
    assert 'SCHEMA("TeamA", Agent, Framework, Tool) GROUP BY Tool' in top_tools

    deploy_dashboard("runnertrace-agents", config(metrics_endpoint=moto.url, namespace="TeamB"))
    updated = client.get_dashboard(DashboardName="runnertrace-agents")["DashboardBody"]
    assert "TeamB" in updated and "TeamA" not in updated
    names = [d["DashboardName"] for d in client.list_dashboards()["DashboardEntries"]]
    assert names == ["runnertrace-agents"]


def test_dashboard_name_and_region_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="dashboard name"):
        deploy_dashboard("bad name!", config())
    monkeypatch.delenv("AWS_REGION")
    with pytest.raises(ConfigError, match=r"trace\.cloudwatch\.region"):
        deploy_dashboard("ok-name", config())


def test_dashboard_template_is_valid_json_for_any_valid_namespace() -> None:
    body = json.loads(dashboard_body("My/App:prod#1", "eu-central-1"))
    assert len(body["widgets"]) == 6
    assert "My/App:prod#1" in body["widgets"][4]["properties"]["metrics"][0][0]["expression"]


# -- faults -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["down", "500", "hang"])
async def test_receiver_faults_never_fail_runs_and_shutdown_is_bounded(fault: str) -> None:
    receiver = OtlpReceiver(
        verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY), mode="500" if fault == "500" else "hang"
    )
    with receiver:
        url = closed_port_url() if fault == "down" else receiver.traces_url
        settings = config(url)
        settings.flush_timeout_s = 1.0
        with tolerate_internal_errors():
            reply = await run_agent(traced_agent(settings))
            assert reply.text == "The answer is 7006669."
            events = await run_agent(traced_agent(settings), "stream")
            assert events
            setup = setup_of(settings)
            setup.flush()
            if fault != "down":
                receiver.wait_for(1)
            setup.shutdown()
            # Bounded: the shutdown gave up on a request the receiver still holds.
            assert receiver.held >= 1 if fault == "hang" else receiver.held == 0
    batch = setup.processors[0]
    assert isinstance(batch, BoundedBatchSpanProcessor)
    if fault in ("down", "500"):
        assert batch.dropped > 0
    if fault != "down":
        assert all(item.verdict is not None and item.verdict.ok for item in receiver.arrived)


# -- bad config ---------------------------------------------------------------------------------


def test_malformed_region_in_config_names_the_key_and_fix() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(trace={"type": "cloudwatch", "cloudwatch": {"region": "evil.com/x"}})
    message = str(info.value)
    assert "trace.cloudwatch.region" in message and "us-east-1" in message


@pytest.mark.parametrize("var", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_malformed_region_from_env_names_the_key_and_fix(
    var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv(var, "us-east-1.attacker.example#")
    with pytest.raises(ConfigError) as info:
        CloudWatchBackend(config())
    message = str(info.value)
    assert "trace.cloudwatch.region" in message and var in message and "us-east-1" in message


def test_missing_region_names_the_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("AWS_REGION")
    # A configuration error: one log line without a traceback, and runs go untraced.
    assert get_tracing_setup(config()).disabled
    (record,) = [r for r in caplog.records if "tracing is off" in r.getMessage()]
    assert re.search(r"trace\.cloudwatch\.region.*AWS_REGION", record.getMessage())
    assert record.exc_info is None


def test_malformed_endpoints_name_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"trace\.cloudwatch\.endpoint"):
        load_settings(trace={"cloudwatch": {"endpoint": "xray.us-east-1.amazonaws.com"}})
    with pytest.raises(ConfigError, match=r"trace\.cloudwatch\.metrics_endpoint"):
        load_settings(trace={"cloudwatch": {"metrics_endpoint": "http://host:99999"}})
    with pytest.raises(ConfigError, match=r"trace\.cloudwatch\.namespace"):
        load_settings(trace={"cloudwatch": {"namespace": "AWS/Lambda"}})
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        CloudWatchBackend(config())


def test_missing_boto3_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    # A missing extra is the user's to fix: one warning naming the pip line, no traceback,
    # and runs go untraced (issue 22).
    with caplog.at_level("WARNING", logger="runnertrace"):
        assert get_tracing_setup(config()).disabled
    (warning,) = [r for r in caplog.records if r.name == "runnertrace"]
    assert "pip install 'runnertrace[cloudwatch]'" in warning.getMessage()
    assert warning.exc_info is None
    checks = {c.name: c for c in cloudwatch_checks(config(), probe=False)}
    assert checks["boto3"].status == "fail"
    assert checks["boto3"].fix == "pip install 'runnertrace[cloudwatch]'"


def test_importing_the_backend_loads_no_aws_sdk() -> None:
    code = (
        "import sys, runnertrace.exporters.cloudwatch, runnertrace.tracing.config;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    # logfire's pydantic plugin is loaded by pydantic itself (see test_imports); skip it here.
    env = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": "logfire-plugin"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    assert out.stdout.strip() == "[]"


# -- doctor ---------------------------------------------------------------------------------------


def test_check_reports_problems_and_never_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, SECRET_KEY)) as receiver:
        backend = CloudWatchBackend(config(receiver.traces_url, metrics=True))
        checks = {c.name: c for c in backend.check()}
        assert receiver.arrived[0].verdict is not None and receiver.arrived[0].verdict.ok
    assert {name: c.status for name, c in checks.items()} == {
        "boto3": "ok",
        "region": "ok",
        "endpoint": "ok",
        "metrics": "ok",
        "credentials": "ok",
        "reachable": "ok",
    }
    assert receiver.traces_url in checks["endpoint"].detail and "SigV4" in checks["endpoint"].detail
    assert checks["credentials"].detail == "found (source: env)"
    text = json.dumps([c.__dict__ for c in checks.values()])
    assert SECRET_KEY not in text and ACCESS_KEY not in text

    with OtlpReceiver(verifier=SigV4Verifier(ACCESS_KEY, "another-secret")) as rejecting:
        reachable = {c.name: c for c in CloudWatchBackend(config(rejecting.traces_url)).check()}
    assert reachable["reachable"].status == "fail"
    assert "rejected the credentials" in reachable["reachable"].detail

    default = {c.name: c for c in cloudwatch_checks(config(), probe=False)}
    assert "https://xray.us-east-1.amazonaws.com/v1/traces" in default["endpoint"].detail
    assert "reachable" not in default

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    checks = {c.name: c for c in backend.check()}
    assert (
        checks["credentials"].status == "fail" and "AWS_ACCESS_KEY_ID" in checks["credentials"].fix
    )
    assert "reachable" not in checks

    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    creds = {c.name: c for c in backend.check()}["credentials"]
    assert creds.status == "fail" and "ProfileNotFound" in creds.detail
    monkeypatch.delenv("AWS_PROFILE")

    monkeypatch.setenv("AWS_REGION", "Not A Region")
    region = {c.name: c for c in backend.check()}["region"]
    assert region.status == "fail" and "trace.cloudwatch.region" in region.detail

    monkeypatch.delenv("AWS_REGION")
    endpoint = {c.name: c for c in cloudwatch_checks(config(), probe=False)}["endpoint"]
    assert endpoint.status == "fail" and "AWS_REGION" in endpoint.fix
