"""What the store gives back: spans, run rows, per-agent accounts and metric points.

Plain data, the same from either engine: every viewer (the CLI, the report, the
dashboard) reads these and nothing of the database below them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from runnertrace.store.jsontext import dumps as _dumps
from runnertrace.store.schema import RUN_COLUMNS
from runnertrace.tracing import attributes as attr

__all__ = [
    "AgentAccount",
    "RunSummary",
    "StoredMetricPoint",
    "StoredSpan",
    "Usage",
    "agent_account",
    "cost_label",
    "cost_status",
    "format_cost",
    "run_summary",
    "span_tree",
]


@dataclass(frozen=True)
class StoredSpan:
    """One span as read back from the store (plain data, JSON-ready)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status_code: str
    status_description: str | None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    is_root: bool = False

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def span_type(self) -> str | None:
        value = self.attributes.get(attr.SPAN_TYPE)
        return value if isinstance(value, str) else None

    @property
    def is_error(self) -> bool:
        return self.status_code == "ERROR"

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "kind": self.kind,
            "type": self.span_type,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "status_code": self.status_code,
            "status_description": self.status_description,
            "attributes": self.attributes,
            "events": self.events,
            "resource": self.resource,
            "scope": self.scope,
        }


@dataclass(frozen=True)
class RunSummary:
    """One row of ``runnertrace traces``: a trace, described by its top span and run span.

    The numbers (tokens, cost, calls, errors) are the top run span's totals, which
    cover its whole subtree, nested agent runs included; ``derived`` says they were
    summed from the trace's model-call and tool spans instead, because its run spans
    carry no totals (another app's trace).
    """

    trace_id: str
    name: str
    start_ns: int
    end_ns: int
    span_count: int
    error_count: int
    """Spans in error, of any kind (``errors`` counts failed model and tool calls)."""
    input_tokens: int
    output_tokens: int
    status: str
    """``ok``, ``error``, ``cancelled``, or ``incomplete`` (the top span was never stored)."""
    agent: str | None = None
    framework: str | None = None
    mode: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    cost: float | None = None
    """USD: the sum of the priced model calls (``None``: none was priced). Partial when
    ``unpriced_calls`` > 0."""
    model_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    """Model and tool calls that ended in error."""
    unpriced_calls: int = 0
    """Model calls that reported tokens but got no price: the cost leaves them out."""
    unpriced_models: tuple[str, ...] = ()
    """The models no price was found for."""
    nested_runs: int = 0
    derived: bool = False
    """The numbers are sums of the trace's model-call spans (its run spans carry none)."""
    service_name: str | None = None
    """The app the run came from (its top span's resource ``service.name``): its project.
    ``None``: a run stored before schema 4 whose spans did not say."""

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_status(self) -> str | None:
        """``priced``, ``partial`` (some calls unpriced), ``unpriced`` (no call priced),
        or ``None`` (no model call reported tokens)."""
        return cost_status(self.cost, self.unpriced_calls)

    @property
    def cost_label(self) -> str:
        """The cost as every viewer prints it, e.g. ``$0.0002206 (partial: 2 calls unpriced)``."""
        return cost_label(self.cost, self.unpriced_calls)


def format_cost(cost: float) -> str:
    """USD to four significant digits, as the pages' ``RT.cost`` prints it."""
    if cost == 0:
        return "$0"
    if cost >= 1:
        return f"${cost:.2f}"
    digits = min(10, max(2, 3 - math.floor(math.log10(cost))))
    return "$" + f"{cost:.{digits}f}".rstrip("0").rstrip(".")


def cost_status(cost: float | None, unpriced_calls: int) -> str | None:
    """Whether a cost covers every call: ``priced``, ``partial``, ``unpriced`` or ``None``."""
    if unpriced_calls > 0:
        return "unpriced" if cost is None else "partial"
    return None if cost is None else "priced"


def cost_label(cost: float | None, unpriced_calls: int) -> str:
    """A cost that says when it misses calls: ``$0.003``, ``$0.0002 (partial: 2 calls
    unpriced)``, ``unpriced`` (calls, none priced), or ``-`` (no model call had tokens)."""
    if unpriced_calls > 0:
        if cost is None:
            return "unpriced"
        calls = f"{unpriced_calls} call{'s' if unpriced_calls != 1 else ''}"
        return f"{format_cost(cost)} (partial: {calls} unpriced)"
    return "-" if cost is None else format_cost(cost)


@dataclass(slots=True)
class Usage:
    """What a share of a trace's work added up to: tokens, cost, calls, errors and time."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    unpriced_calls: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    duration_ns: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add_cost(self.cost, other.cost),
            self.unpriced_calls + other.unpriced_calls,
            self.model_calls + other.model_calls,
            self.tool_calls + other.tool_calls,
            self.errors + other.errors,
            self.duration_ns + other.duration_ns,
        )

    @property
    def cost_label(self) -> str:
        return cost_label(self.cost, self.unpriced_calls)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost_status"] = cost_status(self.cost, self.unpriced_calls)
        return data


_NO_USAGE = Usage()


def _add_cost(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


@dataclass(frozen=True, slots=True)
class AgentAccount:
    """One agent of a trace (or a session): its own work, and with what it started.

    ``own`` counts the model and tool calls of the agent's runs, without the runs
    nested in them; ``total`` adds everything those nested runs did. An agent that
    ran several times sums its runs; one nested in itself is counted once in
    ``total`` (its outermost runs only). Times: ``total`` is the wall time of those
    outermost runs, ``own`` that of its runs minus the time its nested runs took.
    """

    agent: str
    start_ns: int
    runs: int
    cancelled: int
    failed: int
    """Runs that ended in error (not counting the cancelled ones)."""
    depth: int
    """How many runs it sits under at the least (0: a top run)."""
    started_by: tuple[str, ...]
    own: Usage
    total: Usage
    unpriced_models: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "start_ns": self.start_ns,
            "runs": self.runs,
            "cancelled": self.cancelled,
            "failed": self.failed,
            "depth": self.depth,
            "started_by": list(self.started_by),
            "own": self.own.to_json(),
            "total": self.total.to_json(),
            "unpriced_models": list(self.unpriced_models),
        }

    def row(self, trace_id: str) -> tuple[object, ...]:
        own, total = self.own, self.total
        return (
            trace_id,
            self.agent,
            self.start_ns,
            self.runs,
            self.cancelled,
            self.failed,
            self.depth,
            _dumps(list(self.started_by)) if self.started_by else None,
            own.input_tokens,
            own.output_tokens,
            own.cost,
            own.unpriced_calls,
            own.model_calls,
            own.tool_calls,
            own.errors,
            own.duration_ns,
            total.input_tokens,
            total.output_tokens,
            total.cost,
            total.unpriced_calls,
            total.model_calls,
            total.tool_calls,
            total.errors,
            total.duration_ns,
            _dumps(list(self.unpriced_models)) if self.unpriced_models else None,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> AgentAccount:
        """From the columns of ``AGENT_COLUMNS`` but the trace id (a sum of rows works too)."""
        return cls(
            agent=row[0],
            start_ns=int(row[1]),
            runs=int(row[2]),
            cancelled=int(row[3]),
            failed=int(row[4]),
            depth=int(row[5]),
            started_by=_names(row[6]),
            own=_usage(row[7:15]),
            total=_usage(row[15:23]),
            unpriced_models=_names(row[23]),
        )


def _usage(values: Sequence[Any]) -> Usage:
    """A :class:`Usage` from its 8 columns, in field order (a cost may be NULL)."""
    cost = values[2]
    return Usage(
        int(values[0] or 0),
        int(values[1] or 0),
        float(cost) if cost is not None else None,
        *(int(v or 0) for v in values[3:8]),
    )


def _names(value: object) -> tuple[str, ...]:
    """The names in a column's JSON list (or in several, comma-joined by a GROUP_CONCAT)."""
    if not isinstance(value, str) or not value:
        return ()
    try:
        found = json.loads(f"[{value}]")
    except ValueError:
        return ()
    names: list[str] = []
    for item in found:
        for name in item if isinstance(item, list) else [item]:
            if isinstance(name, str) and name not in names:
                names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class StoredMetricPoint:
    """One metric data point over one export interval (delta): a sum, or a histogram.

    ``value`` is a counter's increase, or a histogram's sum; histograms also
    have ``count``, ``min``, ``max`` and their buckets (``bounds`` are the upper
    bounds; ``bucket_counts`` has one more entry, for values above the last).
    """

    time_ns: int
    start_ns: int
    name: str
    unit: str
    kind: str
    attributes: dict[str, Any]
    value: float
    count: int | None = None
    min: float | None = None
    max: float | None = None
    bounds: list[float] | None = None
    bucket_counts: list[int] | None = None

    def row(self) -> tuple[object, ...]:
        return (
            self.time_ns,
            self.start_ns,
            self.name,
            self.unit,
            self.kind,
            _dumps(self.attributes),
            self.value,
            self.count,
            self.min,
            self.max,
            None if self.bounds is None else _dumps(self.bounds),
            None if self.bucket_counts is None else _dumps(self.bucket_counts),
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredMetricPoint:
        return cls(
            time_ns=row[0],
            start_ns=row[1],
            name=row[2],
            unit=row[3],
            kind=row[4],
            attributes=json.loads(row[5]),
            value=row[6],
            count=row[7],
            min=row[8],
            max=row[9],
            bounds=None if row[10] is None else json.loads(row[10]),
            bucket_counts=None if row[11] is None else json.loads(row[11]),
        )


def span_tree(spans: Iterable[StoredSpan]) -> list[tuple[StoredSpan, int]]:
    """Spans in depth-first order with their depth; children sorted by start time.

    A span whose parent is not in the list (a remote parent, or a parent that
    was dropped) is shown at the top level rather than hidden.
    """
    spans = sorted(spans, key=lambda s: (s.start_ns, s.name, s.span_id))
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[StoredSpan]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in ids else None
        children.setdefault(parent, []).append(span)
    ordered: list[tuple[StoredSpan, int]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:  # a malformed store with a parent cycle
            continue
        seen.add(span.span_id)
        ordered.append((span, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(span.span_id, [])))
    # Spans caught in a parent cycle are unreachable from the top; show them flat.
    ordered.extend((s, 0) for s in spans if s.span_id not in seen)
    return ordered


def run_summary(row: Sequence[Any]) -> RunSummary:
    """A :class:`RunSummary` from a ``runs`` row (the columns of ``RUN_COLUMNS``)."""
    return RunSummary(
        **dict(zip(_RUN_FIELDS, row[:19], strict=True)),
        unpriced_models=_names(row[19]),
        nested_runs=int(row[20] or 0),
        derived=bool(row[21]),
        service_name=row[22],
    )


_RUN_FIELDS = tuple(name.strip() for name in RUN_COLUMNS.split(","))[:19]


def agent_account(row: Sequence[Any]) -> AgentAccount:
    """An :class:`AgentAccount` from a ``run_agents`` row (``AGENT_COLUMNS`` but the trace id)."""
    return AgentAccount.from_row(row)
