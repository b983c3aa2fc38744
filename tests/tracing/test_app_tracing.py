"""Joining the app's own tracing (issue 14, item 9), with the real vendor SDKs.

Each app runs in a subprocess (a global tracer provider can be set once per
process), configures its vendor SDK the way its docs say, and runs the native
agent with tracing switched on by ``runnertrace.yaml``. The vendor SDK and our
backends both point at one loopback OTLP receiver, which counts arrivals per
span id: our spans must arrive, each exactly once.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.otlp_fixtures import make_receiver_fixture, receiver_fixture  # noqa: F401 - fixtures
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.test_first_hour import APP, SPANS_PER_RUN, env_for, user_store


def run_app_with(setup: str, config: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``APP`` (the native agent, no tracing code) after the app's own tracing ``setup``."""
    (cwd / "runnertrace.yaml").write_text(textwrap.dedent(config))
    (cwd / "app.py").write_text(textwrap.dedent(setup) + APP)
    return subprocess.run(
        [sys.executable, "app.py", "1"],
        cwd=cwd,
        env=env_for(cwd),
        capture_output=True,
        text=True,
        timeout=120,
    )


def ours(receiver: OtlpReceiver) -> list[ReceivedSpan]:
    # Logfire also ships a "pending span" (its own id) when each span starts, for its
    # live view; those are Logfire's placeholders, not a second copy of a span.
    return [
        s
        for s in receiver.spans
        if s.scope == "runnertrace" and s.attributes.get("logfire.span_type") != "pending_span"
    ]


def assert_each_once(receiver: OtlpReceiver) -> None:
    arrivals = collections.Counter(s.span_id for s in receiver.spans)
    twice = {span_id: n for span_id, n in arrivals.items() if n > 1}
    assert not twice, twice
    assert len(ours(receiver)) == SPANS_PER_RUN, sorted(s.name for s in receiver.spans)


def test_logfire_app_processors_see_our_spans(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """``logfire.configure()`` installs a proxy; our spans still go through its processors."""
    pytest.importorskip("logfire")
    setup = f"""
        import logfire
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        logfire.configure(
            send_to_logfire=False,
            console=False,
            service_name="logfire-app",
            additional_span_processors=[
                SimpleSpanProcessor(OTLPSpanExporter(endpoint="{receiver.traces_url}"))
            ],
        )
        """
    result = run_app_with(setup, "trace:\n  enabled: true\n", tmp_path)
    assert result.returncode == 0, result.stderr
    assert_each_once(receiver)
    # The spans are the app's: its resource, not a private pipeline's.
    assert {s.resource.get("service.name") for s in ours(receiver)} == {"logfire-app"}
    assert user_store(tmp_path).is_file()  # and our own local backend still has them


def test_logfire_app_shipping_to_logfire_gets_each_span_once(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """trace.type: logfire while the app's Logfire already ships there: no second copy."""
    pytest.importorskip("logfire")
    token = "pylf_v1_us_0123456789abcdef"
    setup = f"""
        import logfire

        logfire.configure(
            token="{token}",
            send_to_logfire=True,
            console=False,
            advanced=logfire.AdvancedOptions(base_url="{receiver.url}"),
        )
        """
    config = f"""
        trace:
          enabled: true
          type: logfire
          logfire:
            token: {token}
            base_url: {receiver.url}
        """
    result = run_app_with(setup, config, tmp_path)
    assert result.returncode == 0, result.stderr
    assert_each_once(receiver)


def test_langfuse_client_app_gets_each_span_once(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """The Langfuse client installs an SDK provider with its exporter; ours is not added."""
    pytest.importorskip("langfuse")
    setup = f"""
        from langfuse import Langfuse

        Langfuse(public_key="pk-lf-app", secret_key="sk-lf-app", host="{receiver.url}")
        """
    config = f"""
        trace:
          enabled: true
          type: langfuse
          langfuse:
            public_key: pk-lf-app
            secret_key: sk-lf-app
            host: {receiver.url}
        """
    result = run_app_with(setup, config, tmp_path)
    assert result.returncode == 0, result.stderr
    assert_each_once(receiver)
    assert {r.path for r in receiver.requests} == {"/api/public/otel/v1/traces"}


def test_traceloop_app_gets_each_span_once(tmp_path: Path, receiver: OtlpReceiver) -> None:
    """``Traceloop.init()`` installs an SDK provider that ships to Traceloop; ours joins it.

    traceloop-sdk pulls some 40 instrumentation packages, so it lives in a venv of its
    own (``.ci/extra-openllmetry``); the main suite skips this test.
    """
    pytest.importorskip("traceloop.sdk")
    setup = f"""
        from traceloop.sdk import Traceloop

        Traceloop.init(
            app_name="traceloop-app",
            api_endpoint="{receiver.url}",
            api_key="tl-app-key",
            disable_batch=True,
            telemetry_enabled=False,
        )
        """
    config = f"""
        trace:
          enabled: true
          type: openllmetry
          openllmetry:
            api_key: tl-app-key
            base_url: {receiver.url}
        """
    result = run_app_with(setup, config, tmp_path)
    assert result.returncode == 0, result.stderr
    assert_each_once(receiver)
    # They went through Traceloop's pipeline: its resource, not a private one of ours.
    assert {s.resource.get("service.name") for s in ours(receiver)} == {"traceloop-app"}


def test_trace_type_app_uses_the_apps_provider_as_it_stands(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    setup = f"""
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider = TracerProvider(resource=Resource.create({{"service.name": "my-app"}}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint="{receiver.traces_url}"))
        )
        trace.set_tracer_provider(provider)
        """
    result = run_app_with(setup, "trace:\n  enabled: true\n  type: app\n", tmp_path)
    assert result.returncode == 0, result.stderr
    assert_each_once(receiver)
    assert {s.resource.get("service.name") for s in ours(receiver)} == {"my-app"}
    assert not user_store(tmp_path).exists()  # no processors of our own
