"""A run's numbers, one definition: the ``runs`` row and the ``run_agents`` rows of a trace.

A run's numbers (tokens, cost, model and tool calls, errors, unpriced calls) are
its root span's: every ``invoke_agent`` span carries its whole subtree's totals
(SEMCONV.md, "Totals and nesting"), and the store copies them, computing nothing
of its own. Only a trace whose top run spans carry none of those keys (another
app's, sent over OTLP, or one written before them) gets sums of its model-call
spans instead, marked ``derived``. Beside each run, ``run_agents`` holds one row
per agent of the trace (its own work and what it started, summed over its runs):
the per-agent tables, the cost-by-agent chart and the "agent anywhere" filter
read it.

The writer (either engine) recomputes the rows of every trace a batch touched,
inside the batch's transaction, through :func:`refresh_runs`: a few statements
per 500 traces, whatever their number (see ``Writing`` for why that matters).
The same rules, over a trace's spans in memory, are :func:`agent_accounts`
(what the report draws).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runnertrace.store.codec import tokens
from runnertrace.store.dialect import Dialect
from runnertrace.store.jsontext import dumps as _dumps
from runnertrace.store.records import _NO_USAGE, AgentAccount, StoredSpan, Usage
from runnertrace.store.schema import AGENT_COLUMNS, RUN_COLUMNS
from runnertrace.tracing import attributes as attr

__all__ = ["COST", "Writing", "agent_accounts", "refresh_runs"]

# The cost of a chat span, when a price was known (never guessed).
COST = "gen_ai.usage.cost"


class Writing(Protocol):
    """One write transaction of an engine: what the summary and the span insert need."""

    dialect: Dialect

    def execute(self, sql: str, params: Sequence[object] = ()) -> None: ...

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]: ...

    def store_rows(
        self, table: str, columns: str, keys: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        """Insert ``rows`` (over the rows of the same ``keys``; no keys: append), in as few
        statements as the engine can (a batch is a few statements, never one per row)."""


# -- a run's numbers ------------------------------------------------------------------------
# The totals contract (SEMCONV.md "Totals and nesting"): a run's own work is on its span
# only when it had nested runs.
# A run span's totals, in Usage's field order: its subtree's, and its own work's.
_TOTAL_KEYS = (
    attr.AGG_INPUT_TOKENS,
    attr.AGG_OUTPUT_TOKENS,
    attr.AGG_COST,
    attr.UNPRICED_CALLS,
    attr.AGG_MODEL_CALLS,
    attr.AGG_TOOL_CALLS,
    attr.AGG_ERRORS,
)
_OWN_KEYS = (
    attr.OWN_INPUT_TOKENS,
    attr.OWN_OUTPUT_TOKENS,
    attr.OWN_COST,
    attr.OWN_UNPRICED_CALLS,
    attr.OWN_MODEL_CALLS,
    attr.OWN_TOOL_CALLS,
    attr.OWN_ERRORS,
)


def _run_usage(attrs: dict[str, Any], keys: tuple[str, ...]) -> Usage:
    """A run span's ``keys`` (:data:`_TOTAL_KEYS` or :data:`_OWN_KEYS`) as a Usage."""
    tokens_in, tokens_out, cost, unpriced, calls, tools, errors = (attrs.get(k) for k in keys)
    return Usage(
        _count(tokens_in),
        _count(tokens_out),
        _money(cost),
        _count(unpriced),
        _count(calls),
        _count(tools),
        _count(errors),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _money(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _model_label(found: object) -> str:
    """``provider/model`` from ``[provider, response model, request model]`` (SQL's answer)."""
    provider, *models = found if isinstance(found, list) else [None, found]
    model = next((m for m in models if isinstance(m, str) and m), None)
    if isinstance(provider, str) and provider and model:
        return f"{provider}/{model}"
    return model or (provider if isinstance(provider, str) and provider else "unknown")


@dataclass
class _Run:
    """One ``invoke_agent`` span of a trace, with its totals and its own work."""

    span_id: str
    parent: str | None  # the nearest run span above it
    agent: str
    start_ns: int
    end_ns: int
    failed: bool  # its span is in error (a cancelled one's is too)
    cancelled: bool
    ours: bool  # it carries the totals keys
    total: Usage
    own: Usage
    unpriced_models: tuple[str, ...]
    nested_runs: int


def _run(
    span_id: str,
    parent: str | None,
    name: str,
    start_ns: int,
    end_ns: int,
    status: str,
    attrs: dict[str, Any],
) -> _Run:
    """A run from its span: the totals its span carries, and its own work (the
    ``runnertrace.own.*`` keys, present when it had nested runs; else its totals)."""
    ours = attr.AGG_MODEL_CALLS in attrs
    agent = attrs.get(attr.AGENT_NAME)
    if not ours:  # another app's run, or one from before the totals: its calls say
        return _Run(
            span_id,
            parent,
            agent if isinstance(agent, str) and agent else name,
            start_ns,
            end_ns,
            status == "ERROR",
            bool(attrs.get(attr.CANCELLED)),
            False,
            _NO_USAGE,
            _NO_USAGE,
            (),
            0,
        )
    total = _run_usage(attrs, _TOTAL_KEYS)
    if attr.NESTED_RUNS in attrs or any(key in attrs for key in _OWN_KEYS):
        own = _run_usage(attrs, _OWN_KEYS)
    else:
        own = total
    models = attrs.get(attr.UNPRICED_MODELS)
    return _Run(
        span_id=span_id,
        parent=parent,
        agent=agent if isinstance(agent, str) and agent else name,
        start_ns=start_ns,
        end_ns=end_ns,
        failed=status == "ERROR",
        cancelled=bool(attrs.get(attr.CANCELLED)),
        ours=True,
        total=total,
        own=own,
        unpriced_models=tuple(m for m in models if isinstance(m, str))
        if isinstance(models, list | tuple)
        else (),
        nested_runs=_count(attrs.get(attr.NESTED_RUNS)),
    )


def _is_ours(runs: Sequence[_Run]) -> bool:
    """Do the trace's top runs carry the totals? Then they are its numbers."""
    tops = [r for r in runs if r.parent is None]
    return bool(tops) and all(r.ours for r in tops)


# (span_id, parent_span_id, span_type, status_code, tokens in, out, cost, unpriced model)
_CallSpan = tuple[str, str | None, str | None, str, int, int, object, object]


def _attributed(runs: Sequence[_Run], spans: Sequence[_CallSpan]) -> list[_Run]:
    """``runs`` with totals summed from the model and tool spans under them: a call is
    the own work of its nearest run, a run's total its own plus its nested runs'.
    (For a trace whose spans carry no totals; ours never need it.)"""
    parents = {s[0]: s[1] for s in spans}
    by_id = {r.span_id: r for r in runs}
    own: dict[str, Usage] = {r.span_id: Usage() for r in runs}
    models: dict[str, list[str]] = {r.span_id: [] for r in runs}
    for _, parent, span_type, status, tokens_in, tokens_out, cost, model in spans:
        if span_type not in ("message", "tool"):
            continue
        at, hops = parent, 0
        while at is not None and at not in by_id and hops < 64:
            at, hops = parents.get(at), hops + 1
        if at not in by_id:
            continue
        assert at is not None
        failed = int(status == "ERROR")
        if span_type == "message":
            unpriced = int(tokens_in + tokens_out > 0 and cost is None)
            call = Usage(tokens_in, tokens_out, _money(cost), unpriced, 1, 0, failed)
            if unpriced and (label := _model_label(model)) not in models[at]:
                models[at].append(label)
        else:
            call = Usage(tool_calls=1, errors=failed)
        own[at] += call
    children: dict[str, list[str]] = {}
    for run in runs:
        if run.parent in by_id:
            children.setdefault(run.parent, []).append(run.span_id)
    totals: dict[str, tuple[Usage, list[str]]] = {}

    def total(run_id: str, seen: frozenset[str]) -> tuple[Usage, list[str]]:
        if run_id not in totals:
            usage, found = own[run_id], list(models[run_id])
            for child in children.get(run_id, ()):
                if child not in seen:  # a malformed store's parent cycle
                    more, their = total(child, seen | {child})
                    usage += more
                    found += [m for m in their if m not in found]
            totals[run_id] = (usage, found)
        return totals[run_id]

    out = []
    for run in runs:
        usage, found = total(run.span_id, frozenset({run.span_id}))
        out.append(_replace(run, total=usage, own=own[run.span_id], models=tuple(found)))
    return out


def _replace(run: _Run, *, total: Usage, own: Usage, models: tuple[str, ...]) -> _Run:
    return _Run(
        run.span_id,
        run.parent,
        run.agent,
        run.start_ns,
        run.end_ns,
        run.failed,
        run.cancelled,
        run.ours,
        total,
        own,
        models,
        0,
    )


def _covered(intervals: Sequence[tuple[int, int]], start: int, end: int) -> int:
    """Nanoseconds of ``start..end`` that ``intervals`` cover (overlaps counted once)."""
    covered, reach = 0, start
    for a, b in sorted((max(a, start), min(b, end)) for a, b in intervals):
        if b <= reach:
            continue
        covered += b - max(a, reach)
        reach = b
    return covered


def _accounts(runs: Sequence[_Run]) -> list[AgentAccount]:
    """One :class:`AgentAccount` per agent of the trace, first started first."""
    if len(runs) == 1:  # the common case: one agent, once
        [run] = runs
        duration = max(0, run.end_ns - run.start_ns)
        return [
            AgentAccount(
                agent=run.agent,
                start_ns=run.start_ns,
                runs=1,
                cancelled=int(run.cancelled),
                failed=int(run.failed and not run.cancelled),
                depth=0,
                started_by=(),
                own=_with_time(run.own, duration),
                total=_with_time(run.total, duration),
                unpriced_models=run.unpriced_models,
            )
        ]
    by_id = {r.span_id: r for r in runs}
    children: dict[str, list[_Run]] = {}
    for run in runs:
        if run.parent in by_id:
            children.setdefault(run.parent, []).append(run)
    found: dict[str, dict[str, Any]] = {}
    for run in runs:
        chain: list[str] = []  # the agents of the runs above it, nearest first
        at, seen = run.parent, {run.span_id}
        while at is not None and at in by_id and at not in seen:
            seen.add(at)
            chain.append(by_id[at].agent)
            at = by_id[at].parent
        duration = max(0, run.end_ns - run.start_ns)
        nested = [(c.start_ns, c.end_ns) for c in children.get(run.span_id, ())]
        own_ns = max(0, duration - _covered(nested, run.start_ns, run.end_ns))
        entry = found.get(run.agent)
        if entry is None:
            entry = found[run.agent] = {
                "start_ns": run.start_ns,
                "runs": 0,
                "cancelled": 0,
                "failed": 0,
                "depth": len(chain),
                "started_by": [],
                "own": Usage(),
                "total": Usage(),
                "models": [],
            }
        entry["start_ns"] = min(entry["start_ns"], run.start_ns)
        entry["runs"] += 1
        entry["cancelled"] += int(run.cancelled)
        entry["failed"] += int(run.failed and not run.cancelled)
        entry["depth"] = min(entry["depth"], len(chain))
        if chain and chain[0] not in entry["started_by"]:
            entry["started_by"].append(chain[0])
        entry["own"] += _with_time(run.own, own_ns)
        if run.agent not in chain:  # nested in itself: its outermost run counted it already
            entry["total"] += _with_time(run.total, duration)
            entry["models"] += [m for m in run.unpriced_models if m not in entry["models"]]
    accounts = [
        AgentAccount(
            agent=agent,
            start_ns=e["start_ns"],
            runs=e["runs"],
            cancelled=e["cancelled"],
            failed=e["failed"],
            depth=e["depth"],
            started_by=tuple(e["started_by"]),
            own=e["own"],
            total=e["total"],
            unpriced_models=tuple(e["models"]),
        )
        for agent, e in found.items()
    ]
    return sorted(accounts, key=lambda a: (a.start_ns, a.agent))


def _with_time(usage: Usage, duration_ns: int) -> Usage:
    return Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cost,
        usage.unpriced_calls,
        usage.model_calls,
        usage.tool_calls,
        usage.errors,
        duration_ns,
    )


def _trace_runs(
    stored: Sequence[_Run],
    calls: Sequence[_CallSpan] | None,
    derived: tuple[Usage, tuple[str, ...]],
    top_is_run: bool,
) -> list[_Run]:
    """The trace's runs with the totals the accounts read: as their spans say (ours), or
    summed from the calls under them (a derived trace)."""
    if _is_ours(stored) or not stored:
        return list(stored)
    if len(stored) == 1 and top_is_run:  # one run, the root: every call is its own
        [run] = stored
        usage, models = derived
        return [_replace(run, total=usage, own=usage, models=models)]
    return _attributed(stored, calls or ())


def agent_accounts(spans: Sequence[StoredSpan]) -> list[AgentAccount]:
    """The per-agent table of one trace, from its spans: what the store keeps in
    ``run_agents``, by the same rules (the report draws it from this)."""
    by_id = {s.span_id: s for s in spans}
    stored: list[_Run] = []
    for span in spans:
        if span.span_type != "run":
            continue
        # Up to the nearest run, within this process's part of the trace (as run_tree does).
        at, hops = (None if span.is_root else span.parent_span_id), 0
        while at is not None and at in by_id and by_id[at].span_type != "run" and hops < 64:
            above = by_id[at]
            at, hops = (None if above.is_root else above.parent_span_id), hops + 1
        parent = at if at is not None and at in by_id and by_id[at].span_type == "run" else None
        stored.append(
            _run(
                span.span_id,
                parent,
                span.name,
                span.start_ns,
                span.end_ns,
                span.status_code,
                span.attributes,
            )
        )
    calls: list[_CallSpan] = []
    derived = Usage()
    models: list[str] = []
    for span in spans:
        a = span.attributes
        tokens_in, tokens_out = (
            tokens(a.get(attr.INPUT_TOKENS)),
            tokens(a.get(attr.OUTPUT_TOKENS)),
        )
        cost = a.get(COST) if span.span_type == "message" else None
        model = [a.get(attr.PROVIDER), a.get(attr.RESPONSE_MODEL), a.get(attr.REQUEST_MODEL)]
        calls.append(
            (span.span_id, span.parent_span_id, span.span_type, span.status_code,
             tokens_in, tokens_out, cost, model)
        )  # fmt: skip
        if span.span_type == "message":
            unpriced = int(tokens_in + tokens_out > 0 and cost is None)
            failed = int(span.is_error)
            derived += Usage(tokens_in, tokens_out, _money(cost), unpriced, 1, 0, failed)
            if unpriced and (label := _model_label(model)) not in models:
                models.append(label)
        elif span.span_type == "tool":
            derived += Usage(tool_calls=1, errors=int(span.is_error))
    ordered = sorted(spans, key=lambda s: (not s.is_root, s.start_ns, s.span_id))
    top_is_run = bool(ordered) and ordered[0].span_type == "run"
    return _accounts(_trace_runs(stored, calls, (derived, tuple(models)), top_is_run))


# span_id, is_root, name, start_ns, end_ns, status_code, attributes (None: a run span's),
# service name
_SummarySpan = tuple[str, int, str, int, int, str, str | None, str | None]


@dataclass
class _Trace:
    """What one batch's queries found about one trace."""

    top: _SummarySpan | None = None
    runs: list[_Run] = field(default_factory=list)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)  # run spans', by id

    def top_attributes(self) -> dict[str, Any]:
        assert self.top is not None
        text = self.top[6]
        return self.attributes.get(self.top[0], {}) if text is None else json.loads(text)

    def top_is_run(self) -> bool:
        return self.top is not None and self.top[6] is None


_NO_CALLS: tuple[Usage, tuple[str, ...]] = (Usage(), ())


def _derived_usage(sums: Sequence[Any]) -> tuple[Usage, tuple[str, ...]]:
    """A trace's numbers summed from its model-call and tool spans (a ``_CALL_SUMS`` row)."""
    (tokens_in, tokens_out, cost, chats, tools, failed, unpriced, models) = sums[1:9]
    labels: list[str] = []
    for found in json.loads(models) if models and models != "[null]" else ():
        if found is not None and (label := _model_label(found)) not in labels:
            labels.append(label)
    usage = Usage(
        int(tokens_in or 0),
        int(tokens_out or 0),
        _money(cost),
        int(unpriced or 0),
        int(chats or 0),
        int(tools or 0),
        int(failed or 0),
    )
    return usage, tuple(labels)


def _summarise(
    aggregates: Sequence[Any],
    trace: _Trace,
    runs: Sequence[_Run],
    derived: tuple[Usage, tuple[str, ...]],
) -> tuple[object, ...]:
    """The ``runs`` row of one trace: its top run spans' totals (or, for a trace whose
    spans carry none, the sums of its calls), with the facts of its top and run span.

    Only the columns a summary needs are read (no events or resource JSON to parse):
    this runs for every trace of every batch the writer stores.
    """
    trace_id, first, last, count, error_spans = aggregates[:5]
    top = trace.top
    assert top is not None
    top_id, is_root, name, top_start, top_end, top_status = top[:6]
    earliest = min(trace.runs, key=lambda r: (r.start_ns, r.span_id)) if trace.runs else None
    if earliest is not None:
        run_id, run_failed = earliest.span_id, earliest.failed
        run_attributes = trace.attributes[run_id]
    else:
        run_id, run_failed = top_id, top_status == "ERROR"
        run_attributes = trace.top_attributes()
    # A cancelled run ends in error too (its CancelledError): it says cancelled, not error.
    if not is_root:
        status = "incomplete"
    elif run_attributes.get(attr.CANCELLED) or (
        run_id != top_id and trace.top_attributes().get(attr.CANCELLED)
    ):
        status = "cancelled"
    elif top_status == "ERROR" or run_failed:
        status = "error"
    else:
        status = "ok"

    def text(*keys: str) -> str | None:
        # The first key is today's; later ones are read from stores written before it.
        for key in keys:
            value = run_attributes.get(key)
            if isinstance(value, str):
                return value
        return None

    tops = [r for r in runs if r.parent is None]
    ours = _is_ours(runs)
    if ours:
        usage = sum((r.total for r in tops), Usage())
        models: list[str] = []
        for r in tops:
            models += [m for m in r.unpriced_models if m not in models]
        unpriced_models: tuple[str, ...] = tuple(models)
        nested = sum(r.nested_runs for r in tops)
    else:
        usage, unpriced_models = derived
        nested = sum(1 for r in runs if r.parent is not None)
    return (
        trace_id,
        name,
        top_start if is_root else first,
        top_end if is_root else last,
        count,
        error_spans,
        usage.input_tokens,
        usage.output_tokens,
        status,
        text(attr.AGENT_NAME),
        text(attr.FRAMEWORK),
        text(attr.MODE),
        text(attr.CONVERSATION_ID, attr.SESSION_ID),
        text(attr.USER_ID),
        usage.cost,
        usage.model_calls,
        usage.tool_calls,
        usage.errors,
        usage.unpriced_calls,
        _dumps(list(unpriced_models)) if unpriced_models else None,
        nested,
        0 if ours else 1,
        top[7] if isinstance(top[7], str) else None,
    )


# -- the queries a batch's summaries take ------------------------------------------------------
@dataclass(frozen=True)
class _Sql:
    """The summary's statements in one dialect (``{}``: the batch's ``?`` marks)."""

    aggregates: str
    call_sums: str
    run_tree: str
    call_spans: str
    root_spans: str
    earliest_spans: str


def _statements(d: Dialect) -> _Sql:
    model = d.triple("attributes", attr.PROVIDER, attr.RESPONSE_MODEL, attr.REQUEST_MODEL)
    cost = d.number("attributes", COST)
    # A model call with tokens and no price is unpriced; its [provider, model, request model]
    # name it.
    unpriced = f"span_type = 'message' AND input_tokens + output_tokens > 0 AND {cost} IS NULL"
    # The top span of each trace: its root (the earliest, if several), else its earliest
    # span. The attributes of a run span are not sent again (the run tree has them).
    # And the app it came from (its resource's service.name: the run's project).
    top = (
        "trace_id, span_id, is_root, name, start_ns, end_ns, status_code, "
        "CASE WHEN span_type = 'run' THEN NULL ELSE attributes END, "
        f"{d.text('resource', 'service.name')}"
    )
    is_error = d.flag("status_code = 'ERROR'")
    is_chat = d.flag("span_type = 'message'")
    is_tool = d.flag("span_type = 'tool'")
    failed_call = d.flag("span_type IN ('message', 'tool') AND status_code = 'ERROR'")
    models = d.json_group_distinct(f"CASE WHEN {unpriced} THEN {model} END")
    return _Sql(
        # Per trace: its span count, error spans and time span.
        aggregates=(
            "SELECT trace_id, MIN(start_ns), MAX(end_ns), COUNT(*), "
            f"SUM({is_error}) "
            "FROM spans WHERE trace_id IN ({}) GROUP BY trace_id"
        ),
        # The sums of a trace's model-call and tool spans: a run's numbers only when its
        # top run spans carry none (a foreign trace: derived). Read for those traces alone.
        call_sums=(
            "SELECT trace_id, "
            "SUM(CASE WHEN span_type = 'message' THEN input_tokens ELSE 0 END), "
            "SUM(CASE WHEN span_type = 'message' THEN output_tokens ELSE 0 END), "
            f"SUM(CASE WHEN span_type = 'message' THEN {cost} END), "
            f"SUM({is_chat}), SUM({is_tool}), SUM({failed_call}), SUM({d.flag(unpriced)}), "
            f"{models} "
            "FROM spans WHERE trace_id IN ({}) GROUP BY trace_id"
        ),
        # Every run span of the traces, with its nearest run span above it (NULL: a top
        # run), found by walking up the parent links through the primary key (at most 64
        # spans up). The walk stops at a span whose parent is in another process (is_root):
        # a run there (an agent served over A2A, say) is in no total of the caller's.
        run_tree=(
            "WITH RECURSIVE up(trace_id, run_id, at, hops, parent_run) AS ("
            "SELECT trace_id, span_id, CASE WHEN is_root = 1 THEN NULL ELSE parent_span_id END, "
            "0, CASE WHEN 0 = 1 THEN span_id END "
            f"FROM spans WHERE trace_id IN ({{}}) AND {d.noindex('span_type')} = 'run' "
            "UNION ALL SELECT up.trace_id, up.run_id, "
            "CASE WHEN s.is_root = 1 THEN NULL ELSE s.parent_span_id END, up.hops + 1, "
            "CASE WHEN s.span_type = 'run' THEN s.span_id END "
            "FROM up JOIN spans AS s ON s.trace_id = up.trace_id AND s.span_id = up.at "
            "WHERE up.parent_run IS NULL AND up.hops < 64) "
            "SELECT r.trace_id, r.span_id, p.parent_run, r.is_root, r.name, r.start_ns, "
            "r.end_ns, r.status_code, r.attributes "
            "FROM (SELECT trace_id, run_id, MAX(parent_run) AS parent_run FROM up "
            "GROUP BY trace_id, run_id) AS p "
            "JOIN spans AS r ON r.trace_id = p.trace_id AND r.span_id = p.run_id"
        ),
        # The tree of a derived trace with several runs: each model or tool call is its
        # nearest run's own work. (A trace of ours never needs this: its run spans say it.)
        call_spans=(
            "SELECT trace_id, span_id, parent_span_id, span_type, status_code, input_tokens, "
            f"output_tokens, CASE WHEN span_type = 'message' THEN {cost} END, "
            f"CASE WHEN {unpriced} THEN {model} END "
            "FROM spans WHERE trace_id IN ({})"
        ),
        root_spans=f"SELECT {top} FROM spans WHERE trace_id IN ({{}}) AND is_root = 1",
        # A trace whose root is not stored (yet): its earliest span.
        earliest_spans=d.first_per(
            "trace_id", top, "FROM spans WHERE trace_id IN ({})", "start_ns"
        ),
    )


_SQL: dict[str, _Sql] = {}


def _sql(d: Dialect) -> _Sql:
    found = _SQL.get(d.name)
    if found is None:
        found = _SQL[d.name] = _statements(d)
    return found


def _json_value(value: object) -> object:
    """A JSON value SQL gave back as text (SQLite's json_extract of several paths)."""
    return json.loads(value) if isinstance(value, str) else value


def _marks(count: int) -> str:
    return ", ".join("?" * count)


def refresh_runs(tx: Writing, trace_ids: Iterable[str], *, lock_sequence: Any = None) -> None:
    """Recompute the ``runs`` and ``run_agents`` rows of ``trace_ids`` (inside the
    caller's transaction).

    Each row gets a new ``seq``, higher than any before, so a viewer polling for
    ``seq > last seen`` finds every run that changed. ``lock_sequence`` (PostgreSQL's)
    is called just before the highest ``seq`` is read: it holds every other writer
    back from that point until this transaction commits, so ``seq`` values become
    visible in the order they were given, and a viewer that has seen one has seen
    every lower one.
    """
    d = tx.dialect
    sql = _sql(d)
    wanted = sorted(set(trace_ids))
    rows: list[tuple[object, ...]] = []
    agent_rows: list[tuple[object, ...]] = []
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = _marks(len(chunk))
        traces: dict[str, _Trace] = {trace_id: _Trace() for trace_id in chunk}
        for trace_id, *top in tx.rows(sql.root_spans.format(marks), chunk):
            trace = traces[trace_id]
            if trace.top is None or (top[3], top[0]) < (trace.top[3], trace.top[0]):
                trace.top = tuple(top)
        rootless = [trace_id for trace_id, trace in traces.items() if trace.top is None]
        if rootless:
            for trace_id, *top, _ in tx.rows(
                sql.earliest_spans.format(_marks(len(rootless))), rootless
            ):
                traces[trace_id].top = tuple(top)
        for trace_id, span_id, parent, _, name, begin, end, status, text in tx.rows(
            sql.run_tree.format(marks), chunk
        ):
            trace = traces[trace_id]
            attributes = trace.attributes[span_id] = json.loads(text)
            trace.runs.append(_run(span_id, parent, name, begin, end, status, attributes))
        # Derived traces with several runs (or one under a foreign root): their calls.
        attributed = [
            trace_id
            for trace_id, trace in traces.items()
            if trace.runs
            and not _is_ours(trace.runs)
            and not (len(trace.runs) == 1 and trace.top_is_run())
        ]
        derived: dict[str, tuple[Usage, tuple[str, ...]]] = {}
        fallback = [trace_id for trace_id, trace in traces.items() if not _is_ours(trace.runs)]
        if fallback:
            for sums in tx.rows(sql.call_sums.format(_marks(len(fallback))), fallback):
                derived[sums[0]] = _derived_usage(sums)
        calls: dict[str, list[_CallSpan]] = {}
        if attributed:
            for trace_id, *call in tx.rows(
                sql.call_spans.format(_marks(len(attributed))), attributed
            ):
                call[7] = _json_value(call[7])
                calls.setdefault(trace_id, []).append(tuple(call))
        for aggregates in tx.rows(sql.aggregates.format(marks), chunk):
            trace_id = aggregates[0]
            trace = traces[trace_id]
            sums = derived.get(trace_id, _NO_CALLS)
            runs = _trace_runs(trace.runs, calls.get(trace_id), sums, trace.top_is_run())
            rows.append(_summarise(aggregates, trace, runs, sums))
            agent_rows += [account.row(trace_id) for account in _accounts(runs)]
    if not rows:
        return
    if lock_sequence is not None:
        lock_sequence()
    seq = int(tx.rows("SELECT COALESCE(MAX(seq), 0) FROM runs")[0][0])
    numbered = [(*row, seq + number) for number, row in enumerate(rows, 1)]
    tx.store_rows("runs", f"{RUN_COLUMNS}, seq", ("trace_id",), numbered)
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        tx.execute(f"DELETE FROM run_agents WHERE trace_id IN ({_marks(len(chunk))})", chunk)
    tx.store_rows("run_agents", AGENT_COLUMNS, ("trace_id", "agent"), agent_rows)
