"""The span tree of one trace, drawn with rich: ``runnertrace show`` and the console backend.

It lives beside the store whose spans it draws, below both of its users: the CLI
prints it for a stored trace, and the ``console`` backend for each finished one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from rich.tree import Tree

if TYPE_CHECKING:
    from runnertrace.exporters.local_store import RunSummary, StoredSpan

__all__ = ["STATUS_STYLES", "TYPE_STYLES", "format_duration", "render_trace_tree"]

TYPE_STYLES = {
    "run": "bold magenta",
    "step": "cyan",
    "message": "blue",
    "reasoning": "purple",
    "tool": "yellow",
}
STATUS_STYLES = {"ok": "green", "error": "bold red", "cancelled": "yellow", "incomplete": "yellow"}


def format_duration(ns: int) -> str:
    """``ns`` in the unit a reader takes in at a glance: µs, ms or s."""
    if ns < 1_000_000:
        return f"{ns / 1_000:.0f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.1f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


def _span_label(span: StoredSpan) -> Text:
    label = Text()
    label.append(span.name, style=TYPE_STYLES.get(span.span_type or "", "white"))
    label.append(f"  {format_duration(span.duration_ns)}", style="dim")
    attrs = span.attributes
    tokens_in, tokens_out = (
        attrs.get("gen_ai.usage.input_tokens"),
        attrs.get("gen_ai.usage.output_tokens"),
    )
    if tokens_in is not None or tokens_out is not None:
        label.append(f"  {tokens_in or 0}→{tokens_out or 0} tok", style="dim")
    if attrs.get("runnertrace.cancelled"):  # a cancelled span carries an error status too
        label.append("  cancelled", style="yellow")
    elif span.is_error:
        label.append("  ✗ error", style="bold red")
        if span.status_description:
            label.append(f": {span.status_description}", style="red")
    else:
        label.append("  ✓", style="green")
    return label


def render_trace_tree(spans: Sequence[StoredSpan], run: RunSummary | None = None) -> Tree:
    """A rich tree of one trace: a header line, then the spans nested as they ran."""
    from runnertrace.exporters.local_store import span_tree

    header = Text()
    header.append("trace ", style="dim")
    header.append(spans[0].trace_id, style="bold")
    if run is not None:
        facts = [run.agent, run.framework, run.mode, format_duration(run.duration_ns)]
        header.append("  " + " · ".join(f for f in facts if f), style="dim")
        header.append(f"  {run.status}", style=STATUS_STYLES.get(run.status, ""))
    tree = Tree(header, guide_style="dim")
    stack: list[Tree] = []
    for span, depth in span_tree(spans):
        del stack[depth:]
        parent = stack[-1] if stack else tree
        stack.append(parent.add(_span_label(span)))
    return tree
