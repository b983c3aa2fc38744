"""The terminal tree of one trace (``runnertrace show``): each span's outcome said as it was."""

from __future__ import annotations

from rich.console import Console

from runnertrace.exporters.trace_tree import render_trace_tree
from runnertrace.store.records import StoredSpan


def span(span_id: str, parent: str | None, status: str, **attributes: object) -> StoredSpan:
    return StoredSpan(
        trace_id="t" * 32,
        span_id=span_id,
        parent_span_id=parent,
        name=f"span-{span_id}",
        kind="INTERNAL",
        start_ns=1_000,
        end_ns=2_000,
        status_code=status,
        status_description="CancelledError" if status == "ERROR" else None,
        attributes=dict(attributes),
        is_root=parent is None,
    )


def lines_of(spans: list[StoredSpan]) -> dict[str, str]:
    console = Console(width=200, record=True, color_system=None)
    console.print(render_trace_tree(spans))
    text = console.export_text()
    return {s.name: next(line for line in text.splitlines() if s.name in line) for s in spans}


def test_a_cancelled_span_reads_cancelled_not_error() -> None:
    spans = [
        span("a", None, "OK"),
        # A cancelled span carries an error status (the CancelledError) and the cancelled flag.
        span("b", "a", "ERROR", **{"runnertrace.cancelled": True}),
        span("c", "a", "ERROR"),
    ]
    lines = lines_of(spans)
    assert lines["span-a"].rstrip().endswith("✓")
    assert "cancelled" in lines["span-b"] and "✗" not in lines["span-b"]
    assert "✗ error: CancelledError" in lines["span-c"]
