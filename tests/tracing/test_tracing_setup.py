"""Provider setup, content policy, redaction, switching and bounded flush/shutdown."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from tests import backends
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession

from runnertrace import traced
from runnertrace._internal.errors import tolerate_internal_errors
from runnertrace.core import Session
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestImage, AgentRequestText
from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
from runnertrace.testing import CapturedSpans
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.setup import get_tracing_setup, reset_tracing_setups

SECRET = "sk-test-0123456789abcdefXYZ"
EMAIL = "alice@example.com"
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "output.value",
}


def all_strings(spans: list[ReadableSpan]) -> list[str]:
    out: list[str] = []
    for span in spans:
        out += [str(v) for v in (span.attributes or {}).values()]
        for event in span.events:
            out += [str(v) for v in (event.attributes or {}).values()]
        out.append(span.status.description or "")
    return out


def native(runner: Any) -> CoreAgent:
    return CoreAgent("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))


async def run_and_stream(runner: Any, requests: Any) -> None:
    agent = native(runner)
    await runner.run(agent, Session("s"), requests)
    async for _ in runner.stream(agent, Session("s2"), requests):
        pass


PROMPT = [AgentRequestText(prompt="What is 2 * 3?")]


async def test_content_is_off_by_default(captured_spans: CapturedSpans) -> None:
    await run_and_stream(traced(NativeRunner()), PROMPT)
    keys = {k for s in captured_spans.spans for k in (s.attributes or {})}
    assert not keys & CONTENT_KEYS
    assert "What is 2 * 3?" not in " ".join(all_strings(captured_spans.spans))


async def test_content_on_by_config(captured_spans: CapturedSpans) -> None:
    await run_and_stream(traced(NativeRunner(), capture_content=True), PROMPT)
    root = captured_spans.by_name("invoke_agent math")[0]
    assert "What is 2 * 3?" in (root.attributes or {})["gen_ai.input.messages"]
    assert "The answer is 6." in (root.attributes or {})["gen_ai.output.messages"]
    assert "output.value" not in (root.attributes or {})  # a vendor mirror, added at export
    tool = captured_spans.by_name("execute_tool calculator")[0]
    assert (tool.attributes or {})["gen_ai.tool.call.result"] == "6"
    assert '"2 * 3"' in (tool.attributes or {})["gen_ai.tool.call.arguments"]
    chat = captured_spans.by_name("chat scripted-1")[-1]
    assert "input.value" not in (chat.attributes or {})  # hides the chat in Langfuse
    assert "The answer is 6." in (chat.attributes or {})["gen_ai.output.messages"]


@pytest.mark.parametrize(
    ("value", "captured"),
    [
        ("SPAN_ONLY", True),
        ("SPAN_AND_EVENT", True),
        ("true", True),
        ("NO_CONTENT", False),
        ("false", False),
    ],
)
async def test_content_switch_by_otel_env(
    value: str, captured: bool, monkeypatch: pytest.MonkeyPatch, captured_spans: CapturedSpans
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    await run_and_stream(traced(NativeRunner()), PROMPT)
    keys = {k for s in captured_spans.spans for k in (s.attributes or {})}
    assert bool(keys & CONTENT_KEYS) is captured


async def test_config_false_overrides_env(
    monkeypatch: pytest.MonkeyPatch, captured_spans: CapturedSpans
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    await run_and_stream(traced(NativeRunner(), capture_content=False), PROMPT)
    keys = {k for s in captured_spans.spans for k in (s.attributes or {})}
    assert not keys & CONTENT_KEYS


async def test_content_is_truncated(captured_spans: CapturedSpans) -> None:
    long_prompt = [AgentRequestText(prompt="x" * 500)]
    await traced(NativeRunner(), capture_content=True, max_content_length=50).run(
        native(NativeRunner()), Session("s"), long_prompt
    )
    value = (captured_spans.by_name("invoke_agent math")[0].attributes or {})[
        "gen_ai.input.messages"
    ]
    text = json.loads(value)[0]["parts"][0]["content"]
    assert text.startswith("x" * 50) and "truncated 450 chars" in text


async def test_image_bytes_never_reach_spans(captured_spans: CapturedSpans) -> None:
    payload = base64.b64encode(b"\x89PNG-secret-pixels" * 20).decode()
    requests = [
        AgentRequestText(prompt="describe"),
        AgentRequestImage(image_data=payload, name="cat.png"),
    ]
    await run_and_stream(traced(NativeRunner(), capture_content=True), requests)
    text = " ".join(all_strings(captured_spans.spans))
    assert "cat.png" in text  # the image is described...
    assert payload[:24] not in text  # ...but its bytes are not there


@pytest.mark.parametrize(
    "redact",
    ["tests.backends.redact_planted", "runnertrace.tracing.content.redact_secrets_and_emails"],
)
async def test_redaction_hook_scrubs_every_attribute(
    redact: str, captured_spans: CapturedSpans
) -> None:
    planted = [AgentRequestText(prompt=f"my key is {SECRET} and mail {EMAIL}; what is 2 * 3?")]

    def failing_tool(expression: str) -> str:
        """Fails, quoting the secret.

        Args:
            expression: ignored.
        """
        raise ValueError(f"refused {SECRET} for {EMAIL}")

    from runnertrace.runners.native.tools import FunctionTool

    agent = CoreAgent(
        "math",
        NativeRunner(),
        Agent(ScriptedLlm(), tools=[FunctionTool(failing_tool, name="calculator")], name="math"),
    )
    plain = traced(NativeRunner(), capture_content=True)
    await plain.run(agent, Session(f"{EMAIL}"), planted)
    assert SECRET in " ".join(
        all_strings(captured_spans.spans)
    )  # planted: visible without redaction
    captured_spans.clear()
    runner = traced(NativeRunner(), capture_content=True, redact=redact)
    await runner.run(agent, Session(f"{EMAIL}"), planted)
    async for _ in runner.stream(agent, Session(f"{EMAIL}"), planted):
        pass
    with pytest.raises(RuntimeError):
        await traced(
            ForeignRunner(error=RuntimeError(f"leak {SECRET} {EMAIL}"), fail_at=1), redact=redact
        ).run(ForeignAgent(), ForeignSession(), [])
    text = " ".join(all_strings(captured_spans.spans))
    assert len(captured_spans.spans) > 10
    assert SECRET not in text
    assert EMAIL not in text


async def test_a_redactor_that_returns_no_text_fails_closed(
    captured_spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing unredacted (and no invalid value) is exported; the run goes on; one clear log."""
    planted = [AgentRequestText(prompt=f"my key is {SECRET}; what is 2 * 3?")]
    agent = CoreAgent("math", NativeRunner(), Agent(ScriptedLlm(), tools=[calculator], name="m"))
    runner = traced(NativeRunner(), capture_content=True, redact="tests.backends.redact_to_none")
    untraced = await NativeRunner().run(agent, Session("s"), planted)
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        reply = await runner.run(agent, Session("s"), planted)
        streamed = [event.type async for event in runner.stream(agent, Session("s"), planted)]
    assert reply.text == untraced.text
    assert streamed[-1] == "step_end"
    assert captured_spans.spans == []
    faults = [r for r in caplog.records if "must return the redacted text" in r.getMessage()]
    assert len(faults) == 1
    assert "tests.backends.redact_to_none returned NoneType" in faults[0].getMessage()
    with pytest.raises(TypeError, match=r"trace\.redact: .* returned NoneType"):
        await runner.run(agent, Session("s"), planted)  # under pytest, it raises


def test_bad_redact_path_is_a_clear_error() -> None:
    # Validated like every dotted path in the configuration (core/config_env.py).
    with pytest.raises(
        ValueError, match=r"redact\n.*cannot load 'tests.backends.no_such_function'"
    ):
        traced(NativeRunner(), redact="tests.backends.no_such_function")


def test_setup_is_idempotent_across_many_agents() -> None:
    config = TraceConfig(type="tests.backends.MemoryBackend")
    runners = [traced(NativeRunner(), config) for _ in range(100)]
    setups = {id(r.setup) for r in runners}
    assert len(setups) == 1
    assert len(runners[0].setup.processors) == 1


def test_private_provider_leaves_the_global_one_alone() -> None:
    from opentelemetry import trace

    before = trace.get_tracer_provider()
    setup = get_tracing_setup(TraceConfig(type="tests.backends.MemoryBackend"))
    assert setup.owns_provider
    assert trace.get_tracer_provider() is before
    assert setup.provider is not before


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]),
    )


def test_app_provider_is_reused_never_replaced() -> None:
    result = run_python(
        """
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        app = TracerProvider(); app_exporter = InMemorySpanExporter()
        app.add_span_processor(SimpleSpanProcessor(app_exporter))
        trace.set_tracer_provider(app)
        from runnertrace import traced
        from runnertrace.core import Session
        from runnertrace.core.agent import Agent as CA
        from runnertrace.tracing.config import TraceConfig
        from runnertrace.core.models import AgentRequestText
        from runnertrace.runners.native import Agent, NativeRunner, ScriptedLlm, calculator
        from tests import backends
        runner = traced(NativeRunner(), TraceConfig(type="tests.backends.MemoryBackend"))
        agent = CA("math", runner, Agent(ScriptedLlm(), tools=[calculator], name="math"))
        prompt = [AgentRequestText(prompt="What is 2 * 3?")]
        with trace.get_tracer("app").start_as_current_span("app request"):
            asyncio.run(runner.run(agent, Session("s"), prompt))
        assert trace.get_tracer_provider() is app
        assert runner.setup.provider is app and not runner.setup.owns_provider
        runner.setup.flush()
        ours = backends.MEMORY.get_finished_spans()
        app_names = [s.name for s in app_exporter.get_finished_spans()]
        assert "invoke_agent math" in app_names, app_names
        assert "invoke_agent math" in [s.name for s in ours]
        root = [s for s in app_exporter.get_finished_spans() if s.name == "invoke_agent math"][0]
        app_span = [s for s in app_exporter.get_finished_spans() if s.name == "app request"][0]
        assert root.parent.span_id == app_span.context.span_id
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_otel_env_vars_shape_the_resource() -> None:
    result = run_python(
        """
        from runnertrace.tracing.config import TraceConfig
        from runnertrace.tracing.setup import get_tracing_setup
        setup = get_tracing_setup(TraceConfig(type="tests.backends.MemoryBackend"))
        attrs = dict(setup.provider.resource.attributes)
        print(attrs["service.name"], attrs["deployment.environment.name"])
        """,
        OTEL_SERVICE_NAME="billing-agent",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=staging",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["billing-agent", "staging"]


async def test_otel_sdk_disabled_passes_straight_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    backends.MEMORY.clear()
    base = ForeignRunner()
    runner = traced(base, type="tests.backends.MemoryBackend")
    assert await runner.run(ForeignAgent(), ForeignSession(), []) is base.reply
    assert runner.setup.disabled
    runner.setup.flush()
    assert backends.MEMORY.get_finished_spans() == ()


@pytest.mark.parametrize(("rate", "expected"), [(0.0, 0), (1.0, 20)])
async def test_sample_rate(rate: float, expected: int) -> None:
    backends.MEMORY.clear()
    runner = traced(
        ForeignRunner(report=False), type="tests.backends.MemoryBackend", sample_rate=rate
    )
    for _ in range(20):
        await runner.run(ForeignAgent(), ForeignSession(), [])
    runner.setup.flush()
    assert len(backends.MEMORY.get_finished_spans()) == expected


async def test_flush_after_each_run_on_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "my-fn")
    backends.MEMORY.clear()
    runner = traced(ForeignRunner(), type="tests.backends.MemoryBackend")
    await runner.run(ForeignAgent(), ForeignSession(), [])
    # no explicit flush: the batch delay is 1 s, yet the spans are already exported
    assert len(backends.MEMORY.get_finished_spans()) == 7


async def test_hanging_exporter_bounded_flush_and_shutdown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backends.RELEASE_HANG.clear()
    caplog.set_level(logging.WARNING, logger="runnertrace")
    try:
        with tolerate_internal_errors():
            runner = traced(
                ForeignRunner(), type="tests.backends.HangingBackend", flush_timeout_s=0.5
            )
            reply = await runner.run(ForeignAgent(), ForeignSession(), [])
            assert reply is runner.base.reply
            # Bounded: both give up (False) on an exporter that is still hanging.
            assert runner.setup.flush() is False
            assert runner.setup.shutdown() is False
            assert not backends.RELEASE_HANG.is_set()
    finally:
        backends.RELEASE_HANG.set()
        reset_tracing_setups()


async def test_exporter_fault_is_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    runner = traced(ForeignRunner(), type="tests.backends.RaisingBackend")
    for _ in range(3):
        await runner.run(ForeignAgent(), ForeignSession(), [])
        runner.setup.flush()
    processor = runner.setup.processors[0]
    assert processor.dropped == 21  # type: ignore[attr-defined]
    raised = [r for r in caplog.records if "backend exploded" in r.getMessage()]
    assert len(raised) == 1


async def test_fan_out_one_failing_backend_does_not_affect_the_other() -> None:
    backends.MEMORY.clear()
    runner = traced(
        ForeignRunner(), type=["tests.backends.RaisingBackend", "tests.backends.MemoryBackend"]
    )
    await runner.run(ForeignAgent(), ForeignSession(), [])
    runner.setup.flush()
    assert len(backends.MEMORY.get_finished_spans()) == 7


def test_dotted_path_must_be_a_backend() -> None:
    with pytest.raises(ValueError, match="not a runnertrace Backend"):
        TraceConfig(type="tests.backends.redact_planted")
