"""Compare two runs by their place in the tree, not by span name.

Why not by name: a model call's span name holds its model (``chat gpt-4o``), so
comparing one prompt on two models, the main reason to compare, paired no model
call at all. A span's place is what two runs of one agent share: the path from
the root of (kind, agent, tool) with the position among the siblings of that
same kind, agent and tool. Two models, two prompts or two frameworks with the
same agent shape then line up row by row.

This re-pairs the rows the dashboard's compare query gives (one per span, keyed
``"<name> #<n>"``, the n-th span of that name in the tree's depth-first order)
and walks the two trees again to learn each span's place. It reads the store
through its public calls only and holds no SQL: the query stays where queries are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runnertrace.store import SpanStore, StoredSpan, span_tree
from runnertrace.tracing import attributes as attr

__all__ = ["MATTERS", "by_position"]

MATTERS = ("tokens in", "tokens out", "cost", "latency_ns", "errors", "output")
"""The differences a reader compares two runs for, in the order the page names them;
the rest (spans, parameters, ...) explain these."""

Place = tuple[tuple[str, str, str, int], ...]


def _places(spans: Sequence[StoredSpan]) -> list[tuple[str, Place]]:
    """Each span's query key and its place, in the tree's depth-first order.

    The root is placed by its kind alone: the two runs compared are the two
    roots, whatever their agents are called.
    """
    names: dict[str, int] = {}
    path: list[tuple[str, str, str, int]] = []
    siblings: list[dict[tuple[str, str, str], int]] = [{}]
    out: list[tuple[str, Place]] = []
    for span, depth in span_tree(spans):
        count = names[span.name] = names.get(span.name, 0) + 1
        del path[depth:]
        del siblings[depth + 1 :]
        a = span.attributes
        kind = span.span_type or "other"
        ident = (
            (kind, "", "")
            if depth == 0
            else (kind, str(a.get(attr.AGENT_NAME) or ""), str(a.get(attr.TOOL_NAME) or ""))
        )
        seen = siblings[depth]
        seen[ident] = seen.get(ident, 0) + 1
        path.append((*ident, seen[ident]))
        siblings.append({})
        out.append((f"{span.name} #{count}", tuple(path)))
    return out


def _merged(first: list[Place], second: list[Place]) -> list[Place]:
    """Both trees' places, depth first: each node's children in the first run's order,
    then those only the second run has, so a missing span keeps its place in the tree."""
    children: dict[Place, list[Place]] = {}
    for places in (first, second):
        for place in places:
            siblings = children.setdefault(place[:-1], [])
            if place not in siblings:
                siblings.append(place)
    ordered: list[Place] = []
    stack = list(reversed(children.get((), [])))
    while stack:
        place = stack.pop()
        ordered.append(place)
        stack.extend(reversed(children.get(place, [])))
    return ordered


def by_position(compared: dict[str, Any], store: SpanStore) -> dict[str, Any]:
    """The compare query's answer with its timeline paired by place, a framework row
    among the differences and ``matters``: the fields of ``MATTERS`` that differ."""
    rows = compared["timeline"]
    entries = [{r["key"]: r[side] for r in rows if r[side]} for side in ("a", "b")]
    placed = [_places(store.get_trace(compared[side]["trace_id"])) for side in ("a", "b")]
    at = [{place: key for key, place in side} for side in placed]
    timeline = []
    for place in _merged(*([place for _, place in side] for side in placed)):
        pair = [entries[i].get(at[i][place]) if place in at[i] else None for i in range(2)]
        label = " / ".join(dict.fromkeys(e["name"] for e in pair if e))
        timeline.append(
            {"key": "/".join(f"{k}:{g}:{t}:{n}" for k, g, t, n in place), "label": label,
             "a": pair[0], "b": pair[1]}
        )  # fmt: skip
    differences = list(compared["differences"])
    frameworks = compared["a"].get("framework"), compared["b"].get("framework")
    row = {"field": "framework", "a": frameworks[0], "b": frameworks[1]}
    row["same"] = row["a"] == row["b"]
    differences.insert(1 if differences else 0, row)
    matters = [
        d["field"] for name in MATTERS for d in differences if d["field"] == name and not d["same"]
    ]
    return {**compared, "timeline": timeline, "differences": differences, "matters": matters}
