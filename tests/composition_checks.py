"""The totals every composition test checks (issue 28, SEMCONV.md "Totals and nesting").

At every ``invoke_agent`` span of ours, the aggregates on the span equal what the chat
and tool spans of its subtree add up to, and each model call is a chat span exactly
once. :func:`check_totals` asserts that over a list of finished spans and returns the
numbers per run span, for a test to pin the shape it expects (and a note to report).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from runnertrace.exporters.local_store import RunSummary, SpanStore
from runnertrace.tracing import attributes as A

__all__ = [
    "Level",
    "agent_figures",
    "assert_answered_once",
    "assert_no_anomalies",
    "check_store_rows",
    "check_totals",
]


@dataclass
class Level:
    """One run span and what its subtree holds."""

    agent: str
    depth: int  # nested runs above it
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    unpriced: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    nested_runs: int = 0
    own_model_calls: int = 0
    own_input_tokens: int = 0
    children: list[Level] = field(default_factory=list)

    def row(self) -> str:
        cost = "-" if self.cost is None else f"${self.cost:.7g}"
        return (
            f"{'  ' * self.depth}{self.agent}: {self.model_calls} calls "
            f"({self.own_model_calls} own), {self.input_tokens}/{self.output_tokens} tokens "
            f"({self.own_input_tokens} in own), {self.tool_calls} tools, cost {cost}"
        )


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _ours(span: ReadableSpan, kind: str) -> bool:
    return _attrs(span).get(A.SPAN_TYPE) == kind


def check_totals(spans: Iterable[ReadableSpan], model_calls: int | None = None) -> list[Level]:
    """Assert the totals of every run span of ours against its subtree, and that the
    local store's run row and per-agent rows say the same (:func:`check_store_rows`);
    return the levels, outermost first (depth-first). ``model_calls``: how many calls
    the fake models answered; then the trace must hold exactly that many chat spans, and
    no other span may carry a call's usage keys (a framework's own span counting it twice).
    """
    spans = list(spans)
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    children: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        if span.parent is not None and span.parent.span_id in by_id:
            children.setdefault(span.parent.span_id, []).append(span)

    def subtree(span: ReadableSpan) -> list[ReadableSpan]:
        out: list[ReadableSpan] = []
        stack = list(children.get(span.context.span_id, ()))
        while stack:
            item = stack.pop()
            out.append(item)
            stack.extend(children.get(item.context.span_id, ()))
        return out

    def own(span: ReadableSpan) -> list[ReadableSpan]:
        """The subtree without the subtrees of nested run spans."""
        out: list[ReadableSpan] = []
        stack = list(children.get(span.context.span_id, ()))
        while stack:
            item = stack.pop()
            if _ours(item, "run"):
                continue
            out.append(item)
            stack.extend(children.get(item.context.span_id, ()))
        return out

    levels: dict[int, Level] = {}
    for run in [s for s in spans if _ours(s, "run")]:
        below = subtree(run)
        chats = [s for s in below if _ours(s, "message")]
        tools = [s for s in below if _ours(s, "tool")]
        nested = [s for s in below if _ours(s, "run")]
        a = _attrs(run)
        name = str(a.get(A.AGENT_NAME))
        tokens_in = sum(int(_attrs(c).get(A.INPUT_TOKENS, 0)) for c in chats)
        tokens_out = sum(int(_attrs(c).get(A.OUTPUT_TOKENS, 0)) for c in chats)
        costs = [_attrs(c)[A.COST] for c in chats if A.COST in _attrs(c)]
        with_tokens = [
            c for c in chats if A.INPUT_TOKENS in _attrs(c) or A.OUTPUT_TOKENS in _attrs(c)
        ]
        errors = sum(1 for s in [*chats, *tools] if s.status.status_code is StatusCode.ERROR)
        where = f"invoke_agent {name}"
        assert a.get(A.AGG_MODEL_CALLS) == len(chats), (where, a.get(A.AGG_MODEL_CALLS), len(chats))
        assert a.get(A.AGG_TOOL_CALLS) == len(tools), (where, a.get(A.AGG_TOOL_CALLS), len(tools))
        assert a.get(A.AGG_ERRORS) == errors, (where, a.get(A.AGG_ERRORS), errors)
        assert a.get(A.AGG_INPUT_TOKENS, 0) == tokens_in, (
            where,
            a.get(A.AGG_INPUT_TOKENS),
            tokens_in,
        )
        assert a.get(A.AGG_OUTPUT_TOKENS, 0) == tokens_out, (where, tokens_out)
        if costs:
            assert math.isclose(a[A.AGG_COST], sum(costs), rel_tol=1e-9), (where, a[A.AGG_COST])
        else:
            assert A.AGG_COST not in a, where
        assert a.get(A.UNPRICED_CALLS, 0) == len(with_tokens) - len(costs), where
        assert a.get(A.NESTED_RUNS, 0) == len(nested), (where, a.get(A.NESTED_RUNS), len(nested))
        mine = own(run)
        own_chats = [s for s in mine if _ours(s, "message")]
        own_in = sum(int(_attrs(c).get(A.INPUT_TOKENS, 0)) for c in own_chats)
        if nested:
            assert a[A.OWN_MODEL_CALLS] == len(own_chats), where
            assert a[A.OWN_INPUT_TOKENS] == own_in, where
            assert a[A.OWN_TOOL_CALLS] == sum(1 for s in mine if _ours(s, "tool")), where
        else:
            assert A.OWN_MODEL_CALLS not in a, where
        levels[run.context.span_id] = Level(
            agent=name,
            depth=0,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost=sum(costs) if costs else None,
            unpriced=len(with_tokens) - len(costs),
            model_calls=len(chats),
            tool_calls=len(tools),
            errors=errors,
            nested_runs=len(nested),
            own_model_calls=len(own_chats),
            own_input_tokens=own_in,
        )

    if model_calls is not None:
        ours = [s for s in spans if _ours(s, "message")]
        assert len(ours) == model_calls, (len(ours), model_calls)
        doubles = [
            s.name
            for s in spans
            if not _ours(s, "message")
            and (A.INPUT_TOKENS in _attrs(s) or "llm.token_count.prompt" in _attrs(s))
        ]
        assert doubles == [], f"spans counting a model call a second time: {doubles}"

    # The levels as a tree: a run's parent level is its nearest run ancestor.
    roots: list[Level] = []
    for run_id, level in levels.items():
        parent = by_id[run_id].parent
        while parent is not None and parent.span_id in by_id and parent.span_id not in levels:
            parent = by_id[parent.span_id].parent
        if parent is not None and parent.span_id in levels:
            levels[parent.span_id].children.append(level)
        else:
            roots.append(level)

    ordered: list[Level] = []

    def walk(level: Level, depth: int) -> None:
        level.depth = depth
        ordered.append(level)
        for child in sorted(level.children, key=lambda c: c.agent):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    if levels:
        with tempfile.TemporaryDirectory() as folder:
            check_store_rows(spans, Path(folder) / "traces.db")
    return ordered


def rows(levels: Sequence[Level]) -> str:
    """The levels as text, one run per line (for a note, or an assertion message)."""
    return "\n".join(level.row() for level in levels)


def agent_figures(spans: Sequence[ReadableSpan]) -> dict[str, dict[str, tuple[int, int, int]]]:
    """Per agent, from the chat and tool spans alone, (model calls, tokens in, tool calls):
    ``own``, the calls whose nearest run is one of the agent's; ``total``, every call under
    one of its runs (each call once per agent, however often the agent is nested in itself)."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}

    def kind(span: ReadableSpan) -> object:
        return (span.attributes or {}).get(A.SPAN_TYPE)

    def agent(run: ReadableSpan) -> str:
        name = (run.attributes or {}).get(A.AGENT_NAME)
        return name if isinstance(name, str) and name else run.name

    out: dict[str, dict[str, list[int]]] = {}
    for span in spans:
        if kind(span) not in ("message", "tool"):
            continue
        runs: list[ReadableSpan] = []
        at = span.parent
        while at is not None and at.span_id in by_id:
            parent = by_id[at.span_id]
            if kind(parent) == "run":
                runs.append(parent)
            at = parent.parent
        if not runs:
            continue
        tokens = (span.attributes or {}).get(A.INPUT_TOKENS, 0)
        call = (
            [1, tokens if isinstance(tokens, int) else 0, 0]
            if kind(span) == "message"
            else [0, 0, 1]
        )
        for side, names in (("own", {agent(runs[0])}), ("total", {agent(r) for r in runs})):
            for name in names:
                figures = out.setdefault(name, {}).setdefault(side, [0, 0, 0])
                for i, value in enumerate(call):
                    figures[i] += value
    return {a: {k: (v[0], v[1], v[2]) for k, v in d.items()} for a, d in out.items()}


def check_store_rows(spans: Sequence[ReadableSpan], db: Path) -> list[RunSummary]:
    """Write ``spans`` into a new store at ``db`` and assert what it keeps: each trace's run
    row is its top run spans' totals (the root's, or the sum of the top runs under an
    application's root), not derived; its per-agent rows agree with :func:`agent_figures`.
    Returns the rows, newest first (for a test to pin more)."""
    store = SpanStore(db)
    store.write(list(spans))
    rows = store.list_runs(1000)
    figures = agent_figures(spans)
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for row in rows:
        trace = [s for s in spans if format(s.context.trace_id, "032x") == row.trace_id]
        tops: list[dict[str, Any]] = []
        for span in trace:
            if (span.attributes or {}).get(A.SPAN_TYPE) != "run":
                continue
            at, nested = span.parent, False
            while at is not None and at.span_id in by_id:
                parent = by_id[at.span_id]
                nested = nested or (parent.attributes or {}).get(A.SPAN_TYPE) == "run"
                at = parent.parent
            if not nested:
                tops.append(dict(span.attributes or {}))

        def total(key: str, tops: list[dict[str, Any]] = tops) -> int:
            return sum(int(t.get(key, 0)) for t in tops)

        if not tops:  # a trace with no run of ours (an untraced run's app span): foreign
            assert row.derived, row
            continue
        assert not row.derived, row
        assert (row.input_tokens, row.output_tokens) == (
            total(A.AGG_INPUT_TOKENS),
            total(A.AGG_OUTPUT_TOKENS),
        ), row
        assert (row.model_calls, row.tool_calls, row.errors) == (
            total(A.AGG_MODEL_CALLS),
            total(A.AGG_TOOL_CALLS),
            total(A.AGG_ERRORS),
        ), row
        assert row.unpriced_calls == total(A.UNPRICED_CALLS), row
        costs = [t[A.AGG_COST] for t in tops if A.AGG_COST in t]
        assert (row.cost is None) == (not costs), row
        if costs:
            assert row.cost is not None
            assert abs(row.cost - sum(costs)) <= 1e-12 * max(1.0, row.cost), row
        for account in store.agents(row.trace_id):
            own, all_of_it = account.own, account.total
            expected = figures.get(account.agent, {})  # an agent with no call of its own: none
            assert (own.model_calls, own.input_tokens, own.tool_calls) == expected.get(
                "own", (0, 0, 0)
            ), account
            assert (
                all_of_it.model_calls,
                all_of_it.input_tokens,
                all_of_it.tool_calls,
            ) == expected.get("total", (0, 0, 0)), account
    store.close()
    return rows


def assert_answered_once(spans: Iterable[ReadableSpan], answered: dict[str, Sequence[int]]) -> None:
    """Every call a fake model answered is one chat span of that model, its tokens once.
    ``answered``: per model name (``gen_ai.request.model``), the input tokens of each call
    it answered; a model that answered nothing is a broken scenario, not a pass."""
    chats = [s for s in spans if _attrs(s).get("gen_ai.operation.name") == "chat"]
    for model, calls in answered.items():
        mine = [s for s in chats if _attrs(s).get("gen_ai.request.model") == model]
        assert len(mine) == len(calls) > 0, model
    assert len(chats) == sum(len(calls) for calls in answered.values())
    reported = sum(sum(calls) for calls in answered.values())
    assert sum(_attrs(s)["gen_ai.usage.input_tokens"] for s in chats) == reported


def assert_no_anomalies(spans: Iterable[ReadableSpan], log_text: str) -> None:
    """No span ended incomplete, no stream anomaly was counted on a span or logged.
    (Not the open-span check of ``tracing_helpers.assert_nothing_left_open``: that one
    asks whether every span ended; this one whether each ended whole.)"""
    spans = list(spans)
    assert not [s.name for s in spans if _attrs(s).get(A.INCOMPLETE)]
    assert not [s.name for s in spans if A.MALFORMED in _attrs(s)]
    assert "malformed event stream" not in log_text
