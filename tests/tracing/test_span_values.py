"""What the state machine writes: redacted at one gate, always encodable, no span lost.

* Redaction covers every string we write, in span names, sequences and span
  events too (a model named like an e-mail address must not leak anywhere).
* Strings no exporter can encode (lone surrogates from ``surrogateescape`` or
  JSON's ``"\\ud83d"``) and integers beyond 64 bits are replaced at span creation
  and named in ``runnertrace.sanitized``; every span then encodes as OTLP.
* Foreign (duck-typed) events with fields of the wrong type never leave a span
  open: the span is marked, counted and ended exactly once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.tracing_helpers import ForeignAgent, ForeignRunner, ForeignSession, OpenSpanTracker

from runnertrace import traced
from runnertrace._internal.errors import tolerate_internal_errors
from runnertrace.core import events as ev
from runnertrace.exporters.local_store import SpanStore
from runnertrace.testing import CapturedSpans, capture_spans
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.setup import get_tracing_setup

EMAIL = "alice@example.com"
REDACT = "runnertrace.tracing.content.redact_secrets_and_emails"
SURROGATE_TOOL = b"calc-\xff".decode("utf-8", "surrogateescape")  # as file names and argv give
LONE_HALF = json.loads('"smile \\ud83d"')  # JSON with half a surrogate pair


def strings_of(span: ReadableSpan) -> Iterator[tuple[str, str]]:
    """Every string a span carries, with where it sits: name, status, attributes, events."""
    yield "name", span.name
    yield "status", span.status.description or ""
    sources = [("attr", span.attributes), *(("event", e.attributes) for e in span.events)]
    for where, attrs in sources:
        for key, value in (attrs or {}).items():
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, str):
                    yield f"{where} {key}", item


async def run_both_modes(events: Sequence[Any], **config: Any) -> None:
    runner = traced(ForeignRunner(events), **config)
    await runner.run(ForeignAgent(), ForeignSession(), [])
    async for _ in runner.stream(ForeignAgent(), ForeignSession(), []):
        pass


def redaction_events() -> list[Any]:
    failure = ev.EventError(type="ModelError", message=f"quota of {EMAIL} exceeded")
    return [
        ev.StepStart(step_name=f"plan for {EMAIL}", step_index=0, agent_name=EMAIL),
        ev.MessageStart(
            message_id="m1",
            model=EMAIL,
            provider=EMAIL,
            request_parameters={"stop_sequences": [EMAIL, "STOP"], "temperature": 0.1},
            input_messages=[{"role": "user", "parts": [{"type": "text", "content": EMAIL}]}],
        ),
        ev.TextDelta(message_id="m1", delta=f"mail {EMAIL}"),
        ev.ToolCallStart(tool_call_id=EMAIL, tool_name=EMAIL, parent_message_id="m1"),
        ev.ToolCallArgs(tool_call_id=EMAIL, delta=json.dumps({"to": EMAIL})),
        ev.ToolCallEnd(tool_call_id=EMAIL),
        ev.MessageEnd(message_id="m1", response_model=EMAIL, response_id=EMAIL),
        ev.ToolCallResult(tool_call_id=EMAIL, content=EMAIL, is_error=True),
        ev.MessageStart(message_id="m2", model=EMAIL),
        ev.MessageEnd(message_id="m2", error=failure),
        ev.StepEnd(step_name=f"plan for {EMAIL}", step_index=0, code=EMAIL),
    ]


@pytest.mark.parametrize("capture", [False, True])
@pytest.mark.parametrize("deltas", ["aggregate", "events"])
async def test_redaction_reaches_names_sequences_and_events(
    captured_spans: CapturedSpans, capture: bool, deltas: str
) -> None:
    await run_both_modes(redaction_events(), redact=REDACT, capture_content=capture, deltas=deltas)
    spans = captured_spans.spans
    assert len(spans) == 2 * 5  # run, step, two chats, tool: per mode
    leaks = [(s.name, where) for s in spans for where, text in strings_of(s) if EMAIL in text]
    assert leaks == []
    chat = next(s for s in spans if (s.attributes or {}).get("gen_ai.response.id"))
    assert chat.name == "chat [REDACTED_EMAIL]"
    assert (chat.attributes or {})["gen_ai.request.stop_sequences"] == ("[REDACTED_EMAIL]", "STOP")
    assert "execute_tool [REDACTED_EMAIL]" in captured_spans.names()
    assert "agent_step plan for [REDACTED_EMAIL]" in captured_spans.names()
    events = [e for s in spans for e in s.events]
    assert any(e.name == "exception" for e in events)  # the failed call's event was checked
    if deltas == "events":
        assert any(e.name == "gen_ai.content.delta" for e in events)


async def test_redaction_reaches_the_run_exception(captured_spans: CapturedSpans) -> None:
    error = RuntimeError(f"cannot reach {EMAIL}")
    runner = traced(ForeignRunner(fail_at=1, error=error), redact=REDACT)
    with pytest.raises(RuntimeError) as raised:
        await runner.run(ForeignAgent(name=EMAIL), ForeignSession(id=EMAIL), [])
    assert raised.value is error  # the host's exception is untouched
    run = captured_spans.by_name("invoke_agent [REDACTED_EMAIL]")[0]
    assert run.status.status_code is StatusCode.ERROR
    assert [where for where, text in strings_of(run) if EMAIL in text] == []
    (exception,) = [e for e in run.events if e.name == "exception"]
    assert "[REDACTED_EMAIL]" in str((exception.attributes or {})["exception.stacktrace"])


def encodes(spans: Sequence[ReadableSpan]) -> None:
    """Raises unless every span encodes as OTLP protobuf, the strictest wire we ship."""
    encode_spans(spans).SerializeToString()


async def test_unencodable_values_are_sanitized_and_marked(captured_spans: CapturedSpans) -> None:
    events = [
        ev.StepStart(step_name=SURROGATE_TOOL),
        ev.MessageStart(
            message_id="m",
            model=LONE_HALF,
            request_parameters={"seed": 2**70, "stop_sequences": ["x", 3, None]},
        ),
        ev.TextDelta(message_id="m", delta=LONE_HALF),
        ev.ToolCallStart(tool_call_id="c", tool_name=SURROGATE_TOOL, parent_message_id="m"),
        ev.ToolCallArgs(tool_call_id="c", delta=json.dumps({"path": SURROGATE_TOOL})),
        ev.ToolCallEnd(tool_call_id="c"),
        ev.MessageEnd(message_id="m", finish_reason=LONE_HALF),
        ev.ToolCallResult(tool_call_id="c", content=LONE_HALF),
        ev.StepEnd(step_name=SURROGATE_TOOL),
    ]
    await run_both_modes(events, capture_content=True, deltas="events")
    spans = captured_spans.spans
    encodes(spans)  # before sanitizing: UnicodeEncodeError / ValueError, losing the batch
    tool = captured_spans.by_name("execute_tool calc-\ufffd")[0].attributes or {}
    assert tool["gen_ai.tool.name"] == "calc-\ufffd"
    assert set(tool["runnertrace.sanitized"]) >= {"gen_ai.tool.name", "gen_ai.tool.call.result"}
    chat = captured_spans.by_name("chat smile \ufffd")[0]
    attrs = chat.attributes or {}
    assert attrs["gen_ai.request.seed"] == str(2**70)  # its text, not a wrapped-around number
    assert set(attrs["runnertrace.sanitized"]) >= {
        "gen_ai.request.model",
        "gen_ai.request.seed",
        "gen_ai.response.finish_reasons",
        "gen_ai.output.messages",
    }
    delta = next(e for e in chat.events if e.name == "gen_ai.content.delta")
    assert (delta.attributes or {})["runnertrace.sanitized"] == ("content",)
    assert len(captured_spans.by_name("agent_step calc-\ufffd")) == 2


async def test_one_odd_run_costs_no_good_run_in_the_local_store(tmp_path: Path) -> None:
    """The issue's case: 100 good runs and one whose tool name holds a lone surrogate."""
    config = TraceConfig(type="local", local={"path": str(tmp_path / "traces.db")})
    good = traced(ForeignRunner(), config)
    odd = [ev.ToolCallStart(tool_call_id="c", tool_name=SURROGATE_TOOL), *tool_end("c")]
    for index in range(101):
        runner = traced(ForeignRunner(odd), config) if index == 50 else good
        await runner.run(ForeignAgent(), ForeignSession(), [])
    assert get_tracing_setup(config).flush()
    store = SpanStore(tmp_path / "traces.db")
    runs = store.list_runs(200)
    assert len(runs) == 101
    names = {span.name for run in runs for span in store.get_trace(run.trace_id)}
    assert "execute_tool calc-\ufffd" in names


def tool_end(call: str) -> list[Any]:
    return [ev.ToolCallEnd(tool_call_id=call), ev.ToolCallResult(tool_call_id=call, content="4")]


@pytest.mark.parametrize(
    ("value", "cleaned"),
    [
        ((EMAIL, "STOP"), ("[REDACTED_EMAIL]", "STOP")),  # redacted, not sanitized
        (("x", 3, None), ("x", "3", "None")),  # mixed: OTel would drop the attribute
        ([("nested",), "b"], ("('nested',)", "b")),  # no sequences inside sequences
        ((SURROGATE_TOOL,), ("calc-\ufffd",)),
        ({"k": EMAIL}, "{'k': '[REDACTED_EMAIL]'}"),  # no attribute type: its text, redacted
        (2**64, str(2**64)),
    ],
)
def test_the_gate_makes_any_value_an_attribute(value: Any, cleaned: Any) -> None:
    from runnertrace.tracing.content import ContentPolicy, load_redactor

    policy = ContentPolicy(capture=True, max_length=0, redactor=load_redactor(REDACT))
    attrs = policy.clean({"key": value})
    assert attrs["key"] == cleaned
    assert ("runnertrace.sanitized" in attrs) is (value != (EMAIL, "STOP"))


async def test_clean_values_are_not_marked(captured_spans: CapturedSpans) -> None:
    await run_both_modes(ForeignRunner().events, capture_content=True)
    assert captured_spans.spans
    assert all("runnertrace.sanitized" not in (s.attributes or {}) for s in captured_spans.spans)


# -- foreign events -------------------------------------------------------------------------
def foreign(kind: str, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(type=kind, **fields)


ISSUE_CASES = {
    "error=0": [
        foreign("message_start", message_id="a"),
        foreign("message_end", message_id="a", error=0),
    ],
    "delta=None": [
        foreign("message_start", message_id="a"),
        foreign("text_delta", message_id="a", delta=None),
        foreign("message_end", message_id="a"),
    ],
    "input_tokens='12'": [
        foreign("message_start", message_id="a", model="m"),
        foreign("message_end", message_id="a", input_tokens="12", output_tokens=3),
    ],
}


@pytest.mark.parametrize("case", list(ISSUE_CASES))
@pytest.mark.parametrize("capture", [False, True])
async def test_odd_foreign_fields_are_traced_not_faulted(
    case: str, capture: bool, captured_spans: CapturedSpans
) -> None:
    # No tolerate_internal_errors: under pytest a fault of ours would raise here.
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    await run_both_modes(ISSUE_CASES[case], capture_content=capture)
    assert tracker.open == {}
    chats = captured_spans.by_name("chat m" if "tokens" in case else "chat")
    assert len(chats) == 2
    for chat in chats:
        attrs = chat.attributes or {}
        assert chat.status.status_code is StatusCode.UNSET  # 0 names no error
        assert "runnertrace.incomplete" not in attrs
    if "tokens" in case:
        assert (chats[0].attributes or {})["gen_ai.usage.input_tokens"] == 12
        run = captured_spans.by_name("invoke_agent foreign")[0]
        assert (run.attributes or {})["gen_ai.aggregated_usage.input_tokens"] == 12


async def test_a_failing_handler_ends_its_span_marked_and_counted(
    monkeypatch: pytest.MonkeyPatch, captured_spans: CapturedSpans
) -> None:
    from runnertrace.tracing import usage

    def broken(tracer: Any, value: Any) -> Any:
        raise RuntimeError("usage pricing broke")

    monkeypatch.setattr(usage, "usage_cost", broken)  # a fault deep inside message_end
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    events = [*ISSUE_CASES["input_tokens='12'"], foreign("text_delta", message_id="a", delta="x")]
    with tolerate_internal_errors():
        await run_both_modes(events)
    assert tracker.open == {}
    chats = captured_spans.by_name("chat m")
    assert len(chats) == 2
    for chat in chats:
        attrs = chat.attributes or {}
        assert attrs["runnertrace.event.fault"] == "message_end"
        assert attrs["runnertrace.incomplete"] is True
    for run in captured_spans.by_name("invoke_agent foreign"):
        # the fault, then the delta for a message that was ended by it
        assert (run.attributes or {})["runnertrace.stream.anomalies"] == 2


def poisoned_redactor(text: str) -> str:
    """A redactor with a bug: it raises on one value (loaded by dotted path below)."""
    if "poison" in text:
        raise ValueError("the redactor broke")
    return text


async def test_a_raising_redactor_loses_no_span(captured_spans: CapturedSpans) -> None:
    tracker = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracker)
    counter = EndCounter()
    logging.getLogger("opentelemetry.sdk.trace").addHandler(counter)
    events = [
        ev.StepStart(step_name="s"),
        ev.MessageStart(message_id="m1", model="m"),
        ev.MessageEnd(message_id="m1", response_model="poison"),  # fails in message_end
        ev.MessageStart(message_id="m2", model="m"),
        ev.ToolCallStart(tool_call_id="c", tool_name="t"),
        ev.TextDelta(message_id="m2", delta="x"),  # m2, c and s are open when the run fails
        ev.StepEnd(step_name="s"),  # never sent: the run fails here
    ]
    runner = traced(
        ForeignRunner(events, fail_at=len(events) - 1, error=RuntimeError("poison")),
        redact="tests.tracing.test_span_values.poisoned_redactor",
    )
    try:
        with tolerate_internal_errors(), pytest.raises(RuntimeError, match="poison"):
            await runner.run(ForeignAgent(), ForeignSession(), [])
    finally:
        logging.getLogger("opentelemetry.sdk.trace").removeHandler(counter)
    assert tracker.started == 5  # run, step, two chats, tool
    assert tracker.open == {}
    assert counter.second_ends == 0
    failed = captured_spans.by_name("chat m")[0]
    assert (failed.attributes or {})["runnertrace.event.fault"] == "message_end"


class EndCounter(logging.Handler):
    """Counts the SDK's "Calling end() on an ended span." warnings (a second end)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.second_ends = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "ended span" in record.getMessage():
            self.second_ends += 1


IDS = st.sampled_from(["a", "b"]) | st.just(["unhashable"]) | st.integers(0, 1)
ODD = st.none() | st.sampled_from([0, "", "12", "x", SURROGATE_TOOL, LONE_HALF, 2**70, 1.5])
ANY_VALUE = ODD | st.text(max_size=4) | st.integers(-3, 20) | st.builds(object)
ERRORS = ODD | st.builds(ev.EventError, type=st.just("E")) | st.builds(RuntimeError, st.text())
FIELDS: dict[str, dict[str, Any]] = {
    "step_start": {"step_name": IDS, "step_index": ODD, "agent_name": ODD, "handoff_from": ODD},
    "step_end": {"step_name": IDS, "step_index": ODD, "code": ANY_VALUE},
    "message_start": {
        "message_id": IDS,
        "model": ANY_VALUE,
        "provider": ANY_VALUE,
        "request_parameters": st.none() | st.dictionaries(st.sampled_from(["seed", "top_p"]), ODD),
        "tool_definitions": st.none() | st.lists(ANY_VALUE, max_size=2),
        "input_messages": st.none() | st.just([{"role": "user", "parts": [{"content": ODD}]}]),
    },
    "text_delta": {"message_id": IDS, "delta": ANY_VALUE},
    "message_end": {
        "message_id": IDS,
        "finish_reason": ANY_VALUE,
        "input_tokens": ANY_VALUE,
        "output_tokens": ANY_VALUE,
        "cache_read_input_tokens": ANY_VALUE,
        "response_model": ANY_VALUE,
        "error": ERRORS,
    },
    "reasoning_start": {"message_id": IDS},
    "reasoning_delta": {"message_id": IDS, "delta": ANY_VALUE},
    "reasoning_end": {"message_id": IDS},
    "tool_call_start": {"tool_call_id": IDS, "tool_name": ANY_VALUE, "parent_message_id": IDS},
    "tool_call_args": {"tool_call_id": IDS, "delta": ANY_VALUE},
    "tool_call_end": {"tool_call_id": IDS},
    "tool_call_result": {
        "tool_call_id": IDS,
        "content": ANY_VALUE,
        "is_error": ODD,
        "error": ERRORS,
    },
}
FOREIGN_EVENT = st.one_of(
    *(
        st.fixed_dictionaries({}, optional=fields).map(
            lambda values, kind=kind: SimpleNamespace(type=kind, **values)
        )
        for kind, fields in FIELDS.items()
    )
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    events=st.lists(FOREIGN_EVENT, max_size=25),
    capture=st.booleans(),
    deltas=st.sampled_from(["aggregate", "events"]),
)
def test_duck_typed_event_sequences_end_every_span_exactly_once(
    events: list[Any], capture: bool, deltas: str
) -> None:
    counter = EndCounter()
    sdk_logger = logging.getLogger("opentelemetry.sdk.trace")
    sdk_logger.addHandler(counter)
    try:
        with capture_spans() as captured, tolerate_internal_errors():
            tracker = OpenSpanTracker()
            captured.provider.add_span_processor(tracker)
            asyncio.run(run_both_modes(events, capture_content=capture, deltas=deltas))
            assert tracker.open == {}  # every span that started ended
            assert counter.second_ends == 0  # and none ended twice
            assert len(captured.by_name("invoke_agent foreign")) == 2
            assert len(captured.spans) == tracker.started
            encodes(captured.spans)  # and whatever the fields held, every span encodes
    finally:
        sdk_logger.removeHandler(counter)
