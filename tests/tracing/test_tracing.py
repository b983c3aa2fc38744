"""TracingRunner: transparency, span tree, attributes, errors, faults, nesting."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession, scripted_events

from runnertrace import TracingRunner, traced
from runnertrace._internal.errors import tolerate_internal_errors
from runnertrace.core import Runtime, Session
from runnertrace.core import events as ev
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeModule, NativeRunner, ScriptedLlm, calculator
from runnertrace.runners.native.tools import tool
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing.config import TraceConfig, load_settings
from runnertrace.tracing.state import RunTracer

PROMPT = [AgentRequestText(prompt="What is 1234 * 5678, plus 17?")]


def native_agent(runner: Any, name: str = "math") -> CoreAgent:
    return CoreAgent(name, runner, Agent(ScriptedLlm(), tools=[calculator], name=name))


async def drain(runner: Any, agent: Any, session: Any, requests: Any = PROMPT) -> list[Any]:
    return [e async for e in runner.stream(agent, session, requests)]


EXPECTED_NATIVE_TREE = [
    (
        "invoke_agent math",
        [
            ("agent_step math", [("chat scripted-1", []), ("execute_tool calculator", [])]),
            ("agent_step math", [("chat scripted-1", []), ("execute_tool calculator", [])]),
            ("agent_step math", [("chat scripted-1", [])]),
        ],
    )
]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_native_span_tree_in_both_modes(mode: str, captured_spans: CapturedSpans) -> None:
    runner = TracingRunner(NativeRunner())
    agent = native_agent(runner)
    if mode == "run":
        await runner.run(agent, Session("s"), PROMPT)
    else:
        await drain(runner, agent, Session("s"))
    assert captured_spans.tree() == EXPECTED_NATIVE_TREE
    root = captured_spans.by_name("invoke_agent math")[0]
    attrs = dict(root.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "math"
    assert attrs["gen_ai.conversation.id"] == "s"
    assert attrs["runnertrace.mode"] == mode
    assert attrs["runnertrace.framework"] == "native"
    assert not any(k.startswith("gen_ai.usage.") for k in attrs)
    chat = captured_spans.by_name("chat scripted-1")[0]
    assert chat.kind is SpanKind.CLIENT
    chat_attrs = dict(chat.attributes or {})
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.request.model"] == "scripted-1"
    assert chat_attrs["gen_ai.usage.input_tokens"] > 0
    assert chat_attrs["gen_ai.request.stream"] is (mode == "stream")
    step = captured_spans.by_name("agent_step math")[0]
    step_attrs = dict(step.attributes or {})
    assert "gen_ai.operation.name" not in step_attrs
    assert "gen_ai.request.model" not in step_attrs
    tool_span = captured_spans.by_name("execute_tool calculator")[0]
    tool_attrs = dict(tool_span.attributes or {})
    assert tool_attrs["gen_ai.tool.name"] == "calculator"
    assert tool_attrs["gen_ai.tool.type"] == "function"
    assert tool_attrs["gen_ai.tool.call.id"]
    # every span carries the session, once, in its semconv key; vendor spellings
    # are the backends' business (added to their exported copies)
    for span in captured_spans.spans:
        span_attrs = span.attributes or {}
        assert span_attrs["gen_ai.conversation.id"] == "s"
        assert not VENDOR_KEYS & set(span_attrs), span.name


async def test_run_returns_the_same_reply_object(captured_spans: CapturedSpans) -> None:
    base = ForeignRunner()
    runner = traced(base)
    agent, session = ForeignAgent(), ForeignSession()
    requests = [AgentRequestText(prompt="hi")]
    reply = await runner.run(agent, session, requests)
    assert reply is base.reply
    assert (
        base.calls[0][0] is agent and base.calls[0][1] is session and base.calls[0][2] is requests
    )
    # a foreign runner reporting through the observer channel gets the full tree
    assert [n for n, _ in captured_spans.tree()[0][1]] == ["agent_step plan", "agent_step answer"]


async def test_stream_yields_the_same_objects_in_order(captured_spans: CapturedSpans) -> None:
    base = ForeignRunner()
    received = await drain(traced(base), ForeignAgent(), ForeignSession())
    assert len(received) == len(base.events)
    assert all(a is b for a, b in zip(received, base.events, strict=True))


async def test_duck_typed_events_of_other_classes_are_traced(captured_spans: CapturedSpans) -> None:
    class Evt:
        def __init__(self, **fields: Any) -> None:
            self.__dict__.update(fields)

    events = [
        Evt(**e.model_dump()) for e in scripted_events()
    ]  # same ``type`` values and fields, other classes
    received = await drain(traced(ForeignRunner(events)), ForeignAgent(), ForeignSession())
    assert received == events
    names = captured_spans.names()
    assert "chat fake-model" in names and "execute_tool lookup" in names and "reasoning" in names


async def test_run_mode_without_reports_still_gets_a_run_span(
    captured_spans: CapturedSpans,
) -> None:
    await traced(ForeignRunner(report=False)).run(ForeignAgent(), ForeignSession(), [])
    assert captured_spans.tree() == [("invoke_agent foreign", [])]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_base_exception_propagates_unchanged_and_marks_error(
    mode: str, captured_spans: CapturedSpans
) -> None:
    error = ValueError("model exploded")
    base = ForeignRunner(fail_at=3, error=error)
    runner = traced(base)
    with pytest.raises(ValueError) as info:
        if mode == "run":
            await runner.run(ForeignAgent(), ForeignSession(), [])
        else:
            await drain(runner, ForeignAgent(), ForeignSession())
    assert info.value is error
    root = captured_spans.by_name("invoke_agent foreign")[0]
    assert root.status.status_code is StatusCode.ERROR
    assert (root.attributes or {})["error.type"] == "ValueError"
    assert any(e.name == "exception" for e in root.events)
    # the step and message open at the failure are ended, in error, and marked incomplete
    open_then = [
        s for s in captured_spans.spans if (s.attributes or {}).get("runnertrace.incomplete")
    ]
    assert {s.name for s in open_then} == {"agent_step plan", "chat fake-model", "reasoning"}
    assert all(s.status.status_code is StatusCode.ERROR for s in open_then)


async def test_each_event_is_recorded_before_it_is_yielded(captured_spans: CapturedSpans) -> None:
    seen_at_message_end: list[str] = []
    stream = traced(ForeignRunner()).stream(ForeignAgent(), ForeignSession(), [])
    async for event in stream:
        if event.type == "message_end":
            seen_at_message_end = captured_spans.names()
            break
    assert "chat fake-model" in seen_at_message_end
    await stream.aclose()
    # and once the consumer stopped, everything else was closed too
    assert "invoke_agent foreign" in captured_spans.names()


async def test_run_options_and_validation_pass_through() -> None:
    runtime = Runtime(settings=load_settings(trace={"enabled": True}))
    module = NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
    agent = runtime.agents().get("math")
    assert isinstance(agent.runner, TracingRunner)
    assert agent.runner.framework == "native"
    with pytest.raises(ValueError, match="'context' is reserved by NativeRunner"):
        module.run_options("math", context={})
    module.run_options("math", max_steps=1)
    assert agent.run_options == {"max_steps": 1}
    with capture_spans() as spans:
        reply = await runtime.run(agent, runtime.sessions().new("x"), PROMPT)
    # max_steps=1 reached the native loop: one step, no final answer
    assert "Stopped after 1 steps" in str(reply)
    assert len(spans.by_name("agent_step math")) == 1


async def test_nested_run_nests_under_the_calling_tool_span(captured_spans: CapturedSpans) -> None:
    inner = native_agent(TracingRunner(NativeRunner()), name="inner")

    @tool
    async def ask_inner(expression: str) -> str:
        """Ask the inner agent.

        Args:
            expression: what to compute.
        """
        reply = await inner.runner.run(
            inner, Session("inner-s"), [AgentRequestText(prompt=expression)]
        )
        return str(reply)

    outer_native = Agent(
        ScriptedLlm(
            turns=[
                lambda req: __import__(
                    "runnertrace.runners.native", fromlist=["LlmResponse"]
                ).LlmResponse(
                    content=[
                        __import__("runnertrace.runners.native", fromlist=["ToolCall"]).ToolCall(
                            "call-outer", "ask_inner", {"expression": "What is 2 * 3?"}
                        )
                    ]
                ),
                "done",
            ]
        ),
        tools=[ask_inner],
        name="outer",
    )
    outer = CoreAgent("outer", TracingRunner(NativeRunner()), outer_native)
    await outer.runner.run(outer, Session("outer-s"), [AgentRequestText(prompt="go")])
    tool_span = captured_spans.by_name("execute_tool ask_inner")[0]
    inner_root = captured_spans.by_name("invoke_agent inner")[0]
    assert inner_root.parent is not None
    assert inner_root.parent.span_id == tool_span.context.span_id
    assert inner_root.context.trace_id == tool_span.context.trace_id


async def test_deltas_are_aggregated_by_default(captured_spans: CapturedSpans) -> None:
    await drain(traced(ForeignRunner()), ForeignAgent(), ForeignSession())
    chats = captured_spans.by_name("chat fake-model")
    answer = next(s for s in chats if (s.attributes or {}).get("runnertrace.delta.count") == 2)
    attrs = dict(answer.attributes or {})
    assert attrs["runnertrace.delta.chars"] == len("Hello world")
    assert attrs["gen_ai.response.time_to_first_chunk"] >= 0
    assert "gen_ai.client.operation.time_to_first_chunk" not in attrs  # Logfire's, at export
    assert not answer.events
    assert len(captured_spans.spans) == 7  # never one span per delta


async def test_deltas_as_span_events(captured_spans: CapturedSpans) -> None:
    await drain(traced(ForeignRunner(), deltas="events"), ForeignAgent(), ForeignSession())
    chats = captured_spans.by_name("chat fake-model")
    events = [e for s in chats for e in s.events]
    assert [e.attributes["length"] for e in events if e.name == "gen_ai.content.delta"] == [6, 5]
    assert len(captured_spans.spans) == 7


async def test_fault_in_span_code_is_logged_once_and_run_succeeds(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, captured_spans: CapturedSpans
) -> None:
    def broken(self: RunTracer, event: Any) -> None:
        raise RuntimeError("bug in span code")

    monkeypatch.setitem(
        # (private access below) a fault injected into the dispatch table, where real bugs would be
        __import__("runnertrace.tracing.state", fromlist=["_HANDLERS"])._HANDLERS,  # noqa: SLF001
        "message_start",
        broken,
    )
    caplog.set_level(logging.WARNING, logger="runnertrace")
    base = ForeignRunner()
    with tolerate_internal_errors():
        reply = await traced(base).run(ForeignAgent(), ForeignSession(), [])
        events = await drain(traced(base), ForeignAgent(), ForeignSession())
    assert reply is base.reply
    assert len(events) == len(base.events)
    faults = [r for r in caplog.records if "bug in span code" in r.getMessage()]
    assert len(faults) == 1  # rate-limited: logged once across both runs


async def test_fault_in_span_code_raises_under_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: RunTracer, event: Any) -> None:
        raise RuntimeError("bug in span code")

    monkeypatch.setitem(
        # (private access below) a fault injected into the dispatch table, where real bugs would be
        __import__("runnertrace.tracing.state", fromlist=["_HANDLERS"])._HANDLERS,  # noqa: SLF001
        "step_start",
        broken,
    )
    with capture_spans(), pytest.raises(RuntimeError, match="bug in span code"):
        await traced(ForeignRunner()).run(ForeignAgent(), ForeignSession(), [])


async def test_malformed_stream_warns_once_and_closes_everything(
    caplog: pytest.LogCaptureFixture, captured_spans: CapturedSpans
) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    events = [
        ev.MessageEnd(message_id="never-started"),
        ev.ToolCallStart(tool_call_id="t", tool_name="a"),
        ev.ToolCallStart(tool_call_id="t", tool_name="a"),  # duplicate id
        ev.MessageStart(message_id="m"),
        ev.TextDelta(message_id="m", delta="x"),
        ev.StepEnd(step_name="nope"),
    ]
    received = await drain(traced(ForeignRunner(events)), ForeignAgent(), ForeignSession())
    assert all(a is b for a, b in zip(received, events, strict=True))
    warnings = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warnings) == 1
    root = captured_spans.by_name("invoke_agent foreign")[0]
    assert (root.attributes or {})["runnertrace.stream.anomalies"] >= 3
    assert all(s.end_time is not None for s in captured_spans.spans)


async def test_runtime_wraps_runner_when_enabled_in_yaml(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "runnertrace.yaml").write_text("trace:\n  enabled: true\n  type: console\n")
    monkeypatch.chdir(tmp_path)
    runtime = Runtime()
    NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
    assert isinstance(runtime.agents().get("math").runner, TracingRunner)


async def test_runtime_wraps_runner_when_enabled_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABLED", "true")
    runtime = Runtime()
    NativeModule([Agent(ScriptedLlm(), name="a")], runtime=runtime)
    assert isinstance(runtime.agents().get("a").runner, TracingRunner)
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABLED", "false")
    plain = Runtime()
    NativeModule([Agent(ScriptedLlm(), name="a")], runtime=plain)
    assert isinstance(plain.agents().get("a").runner, NativeRunner)


def test_traced_is_idempotent() -> None:
    once = traced(NativeRunner())
    assert traced(once) is once


def test_unknown_trace_type_lists_valid_ones() -> None:
    from runnertrace.tracing.config import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"unknown trace type 'langfus'; did you mean 'langfuse'\? expected one of .*local",
    ):
        load_settings(trace={"type": "langfus"})
    with pytest.raises(Exception, match="unknown trace type 'nope'"):
        TraceConfig(type=["local", "nope"])


# Keys that spell a fact the core span already carries in its semconv key.
VENDOR_KEYS = {
    "session.id",
    "gen_ai.system",
    "tool.name",
    "openinference.span.kind",
    "gen_ai.client.operation.time_to_first_chunk",
    "input.value",
    "output.value",
}


async def test_semconv_version_1_puts_the_vendor_spellings_on_the_span(
    captured_spans: CapturedSpans,
) -> None:
    runner = TracingRunner(NativeRunner(), semconv_version=1, capture_content=True)
    await runner.run(native_agent(runner), Session("s"), PROMPT)
    root = dict(captured_spans.by_name("invoke_agent math")[0].attributes or {})
    assert root["session.id"] == root["gen_ai.conversation.id"] == "s"
    assert root["openinference.span.kind"] == "AGENT"
    assert root["input.value"] == "What is 1234 * 5678, plus 17?"
    assert root["output.value"] == str(root["output.value"]) and "7006669" in root["output.value"]
    step = dict(captured_spans.by_name("agent_step math")[0].attributes or {})
    assert step["openinference.span.kind"] == "CHAIN"
    tool = dict(captured_spans.by_name("execute_tool calculator")[0].attributes or {})
    assert tool["tool.name"] == tool["gen_ai.tool.name"] == "calculator"
    assert tool["input.value"] == tool["gen_ai.tool.call.arguments"]
    assert tool["output.value"] == tool["gen_ai.tool.call.result"]
    chat = dict(captured_spans.by_name("chat scripted-1")[0].attributes or {})
    assert chat["openinference.span.kind"] == "LLM"
    assert "input.value" not in chat  # hides the structured chat in Langfuse


async def test_default_vocabulary_states_each_fact_once(captured_spans: CapturedSpans) -> None:
    runner = TracingRunner(NativeRunner(), capture_content=True)
    await drain(runner, native_agent(runner), Session("s"))
    assert captured_spans.spans
    for span in captured_spans.spans:
        assert not VENDOR_KEYS & set(span.attributes or {}), span.name


class _KernelEvent:
    """An event as Agent Kernel 0.9.5 spells it: ``content``/``name`` fields, no pydantic."""

    def __init__(self, type: str, **fields: Any) -> None:
        self.type = type
        self.__dict__.update(fields)


class _KernelRunner:
    """A duck-typed runner declaring its framework by ``name``, streaming kernel-shaped events."""

    name = "agent-kernel"

    async def run(self, agent: Any, session: Any, requests: Any) -> str:
        return "done"

    async def stream(self, agent: Any, session: Any, requests: Any) -> Any:
        kernel = _KernelEvent
        for event in (
            kernel("step_start", name="plan"),
            kernel("message_start", message_id="m1", model="k-1"),
            kernel("text_delta", message_id="m1", content="Hello "),
            kernel("text_delta", message_id="m1", content="there"),
            kernel("message_end", message_id="m1"),
            kernel("tool_call_start", tool_call_id="c1", name="lookup"),
            kernel("tool_call_args", tool_call_id="c1", content='{"q": 1}'),
            kernel("tool_call_end", tool_call_id="c1"),
            kernel("tool_call_result", tool_call_id="c1", content="42"),
            kernel("step_end", name="plan"),
        ):
            yield event


async def test_foreign_events_with_agent_kernel_spellings(captured_spans: CapturedSpans) -> None:
    events = await drain(
        traced(_KernelRunner(), capture_content=True), ForeignAgent(), ForeignSession()
    )
    assert len(events) == 10
    assert captured_spans.tree() == [
        (
            "invoke_agent foreign",
            [("agent_step plan", [("chat k-1", []), ("execute_tool lookup", [])])],
        )
    ]
    root = dict(captured_spans.by_name("invoke_agent foreign")[0].attributes or {})
    assert root["runnertrace.framework"] == "agent-kernel"
    assert "runnertrace.stream.anomalies" not in root
    chat = dict(captured_spans.by_name("chat k-1")[0].attributes or {})
    assert chat["runnertrace.delta.chars"] == len("Hello there")
    assert "Hello there" in chat["gen_ai.output.messages"]
    tool = dict(captured_spans.by_name("execute_tool lookup")[0].attributes or {})
    assert tool["gen_ai.tool.call.arguments"] == '{"q": 1}'
    assert tool["gen_ai.tool.call.result"] == "42"
