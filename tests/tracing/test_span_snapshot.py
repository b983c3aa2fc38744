"""One traced run per framework, mode and content setting, against a stored snapshot.

Guards the span state machine and the writer gate against changes made for speed:
a cut may change how spans are written, never what they hold. For each runner of
the contract suite (``tests/contract/runner_cases.py``) one run (run mode, stream
mode; content captured or not) is recorded with sequential ids, and each span is
reduced to what must not change: its name, kind, parent (by its place in the
list), status, its events' names and keys, and its attributes (sequence values
compared as sorted lists, so only order-insensitive values are kept). Attributes
whose value is a clock reading or a duration are kept by key only, with their
type; ids a framework draws at random (a tool call's, a response's) are numbered in
the order first met, wherever they appear (a message's JSON names its tool calls);
the ordering of spans is their start order, then their name.

The snapshot is ``span_snapshot.json`` next to this file. A framework that is not
installed in this venv is skipped (CrewAI lives in a venv of its own); a case
missing from the snapshot fails. To record it again, deliberately::

    RUNNERTRACE_UPDATE_SPAN_SNAPSHOT=1 pytest tests/tracing/test_span_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from tests.contract.runner_cases import CASES
from tests.contract.test_runner_contract import drive

from runnertrace import TracingRunner
from runnertrace.testing import CapturedSpans

SNAPSHOT = Path(__file__).with_name("span_snapshot.json")
UPDATE = os.environ.get("RUNNERTRACE_UPDATE_SPAN_SNAPSHOT") == "1"

# Attributes that read a clock (their value differs run to run; their presence may not).
TIMED_SUFFIXES = ("_ms", "_s", "_ns", ".duration", ".time_to_first_chunk", ".latency")


def _timed(key: str) -> bool:
    return key.endswith(TIMED_SUFFIXES) or "time_to_first" in key


# Attributes whose value a framework draws at random.
DRAWN_IDS = ("gen_ai.tool.call.id", "gen_ai.response.id")


def _value(key: str, value: Any, ids: dict[str, str]) -> Any:
    if key in DRAWN_IDS and value in ids:
        return ids[value]
    if isinstance(value, str):  # longest first: one id may hold a shorter one
        for drawn in sorted(ids, key=len, reverse=True):
            value = value.replace(drawn, ids[drawn])
    if _timed(key):
        return f"<{type(value).__name__}>"
    if isinstance(value, tuple | list):
        return sorted(str(v) for v in value)
    return value


def _reduced(spans: list[ReadableSpan]) -> list[dict[str, Any]]:
    ordered = sorted(spans, key=lambda s: (s.start_time or 0, s.name))
    place = {s.context.span_id: index for index, s in enumerate(ordered)}
    ids: dict[str, str] = {}
    for span in ordered:
        for key in DRAWN_IDS:
            drawn = (span.attributes or {}).get(key)
            if isinstance(drawn, str) and drawn not in ids:
                ids[drawn] = f"<id {len(ids)}>"
    out = []
    for span in ordered:
        attrs = dict(span.attributes or {})
        out.append(
            {
                "name": span.name,
                "kind": span.kind.name,
                "parent": None if span.parent is None else place.get(span.parent.span_id, "?"),
                "status": span.status.status_code.name,
                "events": [[e.name, sorted((e.attributes or {}).keys())] for e in span.events],
                "attributes": {k: _value(k, attrs[k], ids) for k in sorted(attrs)},
            }
        )
    return out


def _stored() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}


@pytest.mark.parametrize("capture", [False, True], ids=["no-content", "content"])
@pytest.mark.parametrize("mode", ["run", "stream"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_spans_match_the_snapshot(
    case: Any, mode: str, capture: bool, captured_spans: CapturedSpans
) -> None:
    case.runner_module()  # skips a framework this venv lacks

    def traced(runner: Any) -> TracingRunner:
        return TracingRunner(runner, capture_content=capture)

    await drive(case.make(traced, None), mode)
    got = _reduced(captured_spans.spans)
    key = f"{case.name}/{mode}/{'content' if capture else 'no-content'}"
    if UPDATE:
        stored = _stored()
        stored[key] = got
        SNAPSHOT.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        return
    expected = _stored().get(key)
    assert expected is not None, f"{key} is not in {SNAPSHOT.name}: record it (see the docstring)"
    assert [s["name"] for s in got] == [s["name"] for s in expected]
    for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert mine == theirs, f"span {index} ({mine['name']}) differs"
