"""The dashboard's reads: every query ``runnertrace ui`` makes, over either engine, read-only.

Why read-only connections: a viewer must never take the store's write lock,
so a traced app writing to the same file is never delayed by the dashboard
(in WAL mode readers and the writer proceed side by side); on PostgreSQL the
server itself refuses a viewer's writes.

Why the ``runs`` table: every list, filter and page below reads one indexed
summary row per run, kept by the store's writer, never a group-by over all
spans; the queries are keyset-paged on ``(start_ns, trace_id)`` so page 500
costs what page 1 does.

Each thread (the server runs handlers on a thread pool) gets its own
connection: a connection is not meant to be shared across threads without a
lock, and a lock would serialise the dashboard's requests.

Each query is written once, in SQLite's SQL with the phrases the engines spell
differently taken from the store's dialect (:mod:`runnertrace.store.dialect`).
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runnertrace.store import feedback as feedback_store
from runnertrace.store.dialect import SQLITE, Dialect
from runnertrace.store.errors import StoreNotFoundError
from runnertrace.store.records import RunSummary, agent_account, cost_status, run_summary, span_tree
from runnertrace.store.schema import RUN_COLUMNS
from runnertrace.store.search import FEW, SearchIndex
from runnertrace.store.store import SpanStore
from runnertrace.store.summary import COST
from runnertrace.store.url import StoreUrl
from runnertrace.tracing import attributes as attr

__all__ = [
    "GROUPINGS",
    "MAX_NS",
    "MAX_PAGE",
    "SORTS",
    "STATUSES",
    "UNKNOWN_PROJECT",
    "Dashboard",
    "QueryError",
    "RunFilter",
    "float_param",
    "int_param",
    "percentile",
    "run_json",
    "text_param",
]

STATUSES = ("ok", "error", "cancelled", "incomplete")
UNKNOWN_PROJECT = "(unknown)"
"""The project of runs whose spans named no app (``project=(unknown)`` lists them)."""
GROUPINGS = ("agent", "model", "tool")
MAX_PAGE = 200
MAX_SERIES = 12  # chart lines (the page's palette has 14 distinct colours); the rest: "other"
MAX_NS = (1 << 63) - 1  # what a SQLite INTEGER (and an epoch-nanosecond column) holds
MAX_TEXT = 1000  # a filter or search value longer than this is a mistake, not a query
TRIGRAM_MS = 50  # how long PostgreSQL's trigram index may take to answer a search
_IS_RUN = "span_type = 'run'"
_CANCELLED = "status = 'cancelled'"
# One meaning for "failed" wherever a rate or a count of runs shows (the charts' tiles and
# lines, the sessions' totals): the run ended in error, as its status in the runs list says.
_FAILED_RUN = "status = 'error'"
# A run that ended ok with a span in error under it (a tool that failed, a nested agent that
# failed or was cancelled, and the run went on): counted apart, never in the error rate.
# The runs list marks the same runs "ok · N err".
_RECOVERED_RUN = "status = 'ok' AND error_count > 0"
_ANY_ERROR = "(status = 'error' OR error_count > 0)"
_ERROR_FILTERS = {"any": _ANY_ERROR, "recovered": f"({_RECOVERED_RUN})"}
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_DIGITS = re.compile(r"-?[0-9]+")


# The distinct values of an indexed column by hopping from one value to the next in
# the index: a few lookups per value instead of reading every run's entry.
_DISTINCT = (
    "WITH RECURSIVE v(x) AS (SELECT MIN({column}) FROM runs UNION ALL "
    "SELECT (SELECT MIN({column}) FROM runs WHERE {column} > v.x) FROM v WHERE v.x IS NOT NULL) "
    "SELECT x FROM v WHERE x IS NOT NULL"
)


_DISTINCT_AGENTS = (
    "WITH RECURSIVE v(x) AS (SELECT MIN(agent) FROM run_agents UNION ALL "
    "SELECT (SELECT MIN(agent) FROM run_agents WHERE agent > v.x) FROM v WHERE v.x IS NOT NULL) "
    "SELECT x FROM v WHERE x IS NOT NULL"
)


def _agent_sums(d: Dialect, traces: str) -> str:
    """One agent's rows of several traces summed into one (a session's per-agent table)."""
    return (
        "SELECT agent, MIN(start_ns), SUM(runs), SUM(cancelled), SUM(failed), MIN(depth), "
        f"{d.group_concat('started_by')}, SUM(own_input_tokens), SUM(own_output_tokens), "
        "SUM(own_cost), SUM(own_unpriced_calls), SUM(own_model_calls), SUM(own_tool_calls), "
        "SUM(own_errors), SUM(own_ns), SUM(input_tokens), SUM(output_tokens), SUM(cost), "
        "SUM(unpriced_calls), SUM(model_calls), SUM(tool_calls), SUM(errors), SUM(total_ns), "
        f"{d.group_concat('unpriced_models')} "
        f"FROM run_agents WHERE trace_id IN ({traces}) GROUP BY agent "
        "ORDER BY MIN(start_ns), agent"
    )


class QueryError(ValueError):
    """A request parameter is invalid; the message names it, its value and what is allowed."""


def int_param(
    value: str | None, key: str, *, default: int, low: int, high: int, unit: str = ""
) -> int:
    """``value`` as an integer in ``low..high``, or a :class:`QueryError` naming ``key``.

    Why a pattern before ``int()``: Python parses thousands of digits (slowly, and
    then fails further down with an ``OverflowError`` in SQLite); 19 digits cover
    every value a column holds, and anything longer is a malformed request.
    """
    text = (value or "").strip()
    if not text:
        return default
    shown = text if len(text) <= 24 else text[:20] + "..."
    what = f" ({unit})" if unit else ""
    if not _DIGITS.fullmatch(text):
        raise QueryError(f"{key}={shown!r} is not an integer{what}")
    number = int(text) if _INTEGER.fullmatch(text) else None
    if number is None or not low <= number <= high:
        raise QueryError(f"{key}={shown} is out of range: {low} to {high}{what}")
    return number


def text_param(params: Mapping[str, str], key: str) -> str | None:
    """A free-text parameter, stripped; ``None`` when empty; too long is a 400."""
    value = params.get(key, "").strip()
    if len(value) > MAX_TEXT:
        raise QueryError(f"{key} is {len(value)} characters long: at most {MAX_TEXT}")
    return value or None


def attribute_param(text: str | None) -> tuple[str, str | None] | None:
    """The attribute filter's text, ``key = value`` or ``key exists`` (a bare ``key`` too),
    as (key, value or None); a key holding a double quote is a 400 (no attribute has one,
    and SQLite's JSON path would read it as the key's end)."""
    if text is None:
        return None
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals:
        bare = key.removesuffix(" exists").strip() if key.endswith(" exists") else key
        key, found = bare, None
    else:
        found = value.strip()
    if not key or '"' in key or " " in key:
        raise QueryError(
            f"attr={text[:40]!r} is not 'key = value' or 'key exists' (a key has no spaces "
            "or double quotes)"
        )
    return key, found


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def float_param(params: Mapping[str, str], key: str) -> float | None:
    """A non-negative finite number (a cost in USD), or ``None`` when absent."""
    text = text_param(params, key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"{key}={text[:24]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise QueryError(f"{key}={text[:24]} is out of range: 0 or more")
    return value


# Sortable columns of the runs list: name -> SQL expression (indexed where it matters).
SORTS = {
    "start": "start_ns",
    "duration": "(end_ns - start_ns)",
    "tokens": "(input_tokens + output_tokens)",
    "cost": "COALESCE(cost, -1)",
    "spans": "span_count",
}
# Where a run's tags are kept, by the conventions that have them.
TAG_KEYS = ("tag.tags", "langfuse.trace.tags", "runnertrace.tags")
_MAX_MS = 10**12


@dataclass(frozen=True)
class RunFilter:
    """The runs list's filters; every field optional. Times are epoch nanoseconds.

    ``session`` matches by prefix (an id is long; its start is what a user
    remembers). ``model``, ``provider`` and ``tag`` look into the run's spans,
    through the spans' primary key, one run at a time, newest first.
    """

    agent: str | None = None
    any_agent: str | None = None
    """Runs with this agent anywhere in their tree (the top run, or one nested in it)."""
    framework: str | None = None
    status: str | None = None
    session: str | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    search: str | None = None
    user: str | None = None
    model: str | None = None
    provider: str | None = None
    tag: str | None = None
    attribute: tuple[str, str | None] | None = None
    """A span attribute any span of the run has: (key, value as text), or (key, None) for
    "the key exists" (the URL's ``attr=key = value`` or ``attr=key exists``)."""
    errors: str | None = None
    """``any``: runs with any span in error; ``recovered``: runs that ended ok with one."""
    min_ms: int | None = None
    max_ms: int | None = None
    min_cost: float | None = None
    max_cost: float | None = None
    feedback: str | None = None
    """``up``/``down``: a thumb so on the run or any of its spans; ``any``; ``none``."""
    project: str | None = None
    """The app (``service.name``) the runs came from; :data:`UNKNOWN_PROJECT`: none said."""

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> RunFilter:
        def text(key: str) -> str | None:
            return text_param(params, key)

        status = text("status")
        if status is not None and status not in STATUSES:
            raise QueryError(f"status={status!r} is not one of {', '.join(STATUSES)}")
        errors = text("errors")
        if errors is not None and errors not in _ERROR_FILTERS:
            raise QueryError(
                f"errors={errors!r} is not 'any' (runs with any span in error) or 'recovered' "
                "(runs that ended ok with a span in error)"
            )

        feedback = text("feedback")
        if feedback is not None and feedback not in feedback_store.FILTERS:
            raise QueryError(
                f"feedback={feedback!r} is not one of {', '.join(feedback_store.FILTERS)}"
            )

        def ms(key: str) -> int | None:
            value = int_param(params.get(key), key, default=-1, low=0, high=_MAX_MS, unit="ms")
            return None if value < 0 else value

        return cls(
            agent=text("agent"),
            any_agent=text("any_agent"),
            framework=text("framework"),
            status=status,
            session=text("session"),
            since_ns=_int_param(params, "since"),
            until_ns=_int_param(params, "until"),
            search=text("q"),
            user=text("user"),
            model=text("model"),
            provider=text("provider"),
            tag=text("tag"),
            attribute=attribute_param(text("attr")),
            errors=errors,
            min_ms=ms("min_ms"),
            max_ms=ms("max_ms"),
            min_cost=float_param(params, "min_cost"),
            max_cost=float_param(params, "max_cost"),
            feedback=feedback,
            project=text("project"),
        )

    def ranges_only(self) -> bool:
        """Only cost/latency ranges narrow the list (no indexed equality, no search).

        Then the walk newest first is best done on the charts' covering index, which
        holds start, end and cost: a run is read from the table only once it matches.
        """
        ranged = (self.min_ms, self.max_ms, self.min_cost, self.max_cost)
        others = (
            self.agent,
            self.any_agent,
            self.framework,
            self.status,
            self.session,
            self.search,
            self.project,
        )
        return any(v is not None for v in ranged) and all(v is None for v in others)

    def where(
        self, found: tuple[Sequence[str], int] | None = None, dialect: Dialect = SQLITE
    ) -> tuple[list[str], list[object]]:
        """SQL conditions on ``runs``; ``found`` is the search index's answer, if it had one."""
        d = dialect
        clauses: list[str] = []
        params: list[object] = []
        for column, value in (
            ("agent", self.agent),
            ("framework", self.framework),
            ("status", self.status),
            ("user_id", self.user),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.project == UNKNOWN_PROJECT:
            clauses.append("service_name IS NULL")
        elif self.project is not None:
            clauses.append("service_name = ?")
            params.append(self.project)
        if self.feedback is not None:
            condition, values = feedback_store.filter_clause(self.feedback)
            clauses.append(condition)
            params.extend(values)
        if self.any_agent is not None:
            # The agent's traces from the per-agent table's agent index.
            clauses.append("trace_id IN (SELECT trace_id FROM run_agents WHERE agent = ?)")
            params.append(self.any_agent)
        if self.session is not None:
            # A range on the session index: every id starting with the prefix sorts here.
            clauses.append("session_id >= ? AND session_id < ?")
            params.extend([self.session, self.session + "\U0010ffff"])
        if self.errors is not None:
            clauses.append(_ERROR_FILTERS[self.errors])
        if self.min_ms is not None:
            clauses.append("end_ns - start_ns >= ?")
            params.append(self.min_ms * 1_000_000)
        if self.max_ms is not None:
            clauses.append("end_ns - start_ns <= ?")
            params.append(self.max_ms * 1_000_000)
        if self.min_cost is not None:
            clauses.append("cost >= ?")
            params.append(self.min_cost)
        if self.max_cost is not None:
            clauses.append("cost <= ?")
            params.append(self.max_cost)
        for keys, value in (
            ((attr.REQUEST_MODEL, attr.RESPONSE_MODEL), self.model),
            ((attr.PROVIDER, attr.SYSTEM), self.provider),
        ):
            if value is not None:
                matches = " OR ".join(f"{d.text('s.attributes', k)} = ?" for k in keys)
                clauses.append(
                    "EXISTS (SELECT 1 FROM spans s WHERE s.trace_id = runs.trace_id "
                    f"AND {d.noindex('s.span_type')} = 'message' AND ({matches}))"
                )
                params.extend([value] * len(keys))
        if self.tag is not None:
            clauses.append(
                "EXISTS (SELECT 1 FROM spans s WHERE s.trace_id = runs.trace_id "
                f"AND (s.is_root = 1 OR {d.noindex('s.span_type')} = 'run') "
                f"AND {d.tag_match(TAG_KEYS, 's')})"
            )
            params.append(self.tag)
        if self.attribute is not None:
            key, value = self.attribute
            condition, times = d.attribute_match("s", exists=value is None)
            clauses.append(
                "EXISTS (SELECT 1 FROM spans s WHERE s.trace_id = runs.trace_id "
                f"AND {condition}{d.per_row})"
            )
            params.extend([d.attribute_key(key)] * times)
            if value is not None:
                params.append(value)
        if self.since_ns is not None:
            clauses.append("start_ns >= ?")
            params.append(self.since_ns)
        if self.until_ns is not None:
            clauses.append("start_ns < ?")
            params.append(self.until_ns)
        if self.search is not None:
            # Runs are walked newest first and each is probed through the spans'
            # primary key, so a common word stops after one page of matches.
            pattern = _like(self.search)
            content, times = d.content_match("s")

            def scan(table: str) -> str:
                return (
                    f"({table}.name {d.like} ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM spans s "
                    f"WHERE s.trace_id = {table}.trace_id AND {content}{d.per_row}))"
                )

            patterns = [pattern] * (1 + times)
            if found is None:
                clauses.append(scan("runs"))
                params.extend(patterns)
            else:
                # The index's matches, plus a scan of only the runs it has not reached yet
                # (through the seq index): a candidate list the primary key looks up.
                ids, covered = found
                clauses.append(
                    f"runs.trace_id IN ({d.json_list()} UNION ALL "
                    f"SELECT r.trace_id FROM runs r WHERE r.seq > ? AND {scan('r')})"
                )
                params.extend([json.dumps(list(ids)), covered, *patterns])
        return clauses, params


def _int_param(params: Mapping[str, str], key: str) -> int | None:
    value = int_param(params.get(key), key, default=-1, low=0, high=MAX_NS, unit="epoch ns")
    return None if value < 0 else value


_CURSOR = re.compile(r"([0-9]{1,19}):([0-9a-f]{32})")


_NO_FEEDBACK = feedback_store.FeedbackSummary()


def _cursor(value: str | None) -> tuple[int, str] | None:
    """``<start_ns>:<trace_id>`` of the last run of the previous page."""
    if not value:
        return None
    match = _CURSOR.fullmatch(value)
    if match is None or int(match.group(1)) > MAX_NS:
        shown = value if len(value) <= 60 else value[:56] + "..."
        raise QueryError(f"cursor={shown!r} is not of the form <start_ns>:<trace_id>")
    return int(match.group(1)), match.group(2)


def run_json(run: RunSummary) -> dict[str, Any]:
    """A run for the page: its row, its duration and token sum, and whether its cost is
    ``priced``, ``partial`` (some calls unpriced), ``unpriced`` or ``None``."""
    data = asdict(run)
    data["duration_ns"] = run.duration_ns
    data["tokens"] = run.tokens
    data["cost_status"] = run.cost_status
    return data


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (what the charts plot)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(values)))
    return float(values[rank - 1])


PREVIEW_CHARS = 160


def _preview(value: object) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "\u2026"


def _message_text(value: object, *, last: bool = False) -> str | None:
    """The text parts of a ``gen_ai.*.messages`` attribute (a JSON string), joined.

    ``last``: only the last message's (a run's reply, not the history before it).
    """
    if not isinstance(value, str):
        return None
    try:
        messages = json.loads(value)
    except ValueError:
        return value
    if last and isinstance(messages, list) and messages:
        messages = messages[-1:]
    texts: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        parts = message.get("parts", []) if isinstance(message, dict) else []
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("content", "")))
    return "\n".join(texts) if texts else None


class Dashboard:
    """The dashboard's queries over one store, each on a per-thread read-only connection.

    ``location``: a SQLite file (then content search keeps its FTS5 side file, see
    :mod:`runnertrace.store.search`) or a PostgreSQL URL (its trigram index answers).
    """

    def __init__(self, location: str | Path | StoreUrl, *, search_index: bool = True) -> None:
        self.url = StoreUrl.parse(location)
        self._local = threading.local()
        self._stores: list[SpanStore] = []
        self._stores_lock = threading.Lock()
        self.dialect: Dialect = self.store().dialect
        self.search = (
            SearchIndex(self.url.path) if search_index and self.url.path is not None else None
        )

    @property
    def path(self) -> Path:
        """The SQLite file (a PostgreSQL store has none)."""
        return self.store().path

    def prepare(self) -> None:
        """Nothing to write: a viewer never creates or migrates a store (``runnertrace
        migrate`` does). Kept as the server's start hook."""

    def store(self) -> SpanStore:
        store: SpanStore | None = getattr(self._local, "store", None)
        if store is None:
            store = SpanStore(self.url, read_only=True)
            self._local.store = store
            with self._stores_lock:
                self._stores.append(store)
        return store

    def start(self) -> None:
        """Start following the store into the search index (the server's lifespan calls it)."""
        if self.search is not None:
            self.search.start()

    def close(self) -> None:
        if self.search is not None:
            self.search.stop()
        with self._stores_lock:
            for store in self._stores:
                store.close()
            self._stores.clear()

    def _read(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        return self.store().read(sql, params)

    def _has_chart_index(self) -> bool:
        # Asked of the store itself: an index hint naming a missing index is an error.
        known: bool | None = getattr(self._local, "chart_index", None)
        if known is None and self.dialect.name != "sqlite":
            known = self._local.chart_index = False  # an index hint is SQLite's alone
        if known is None:
            known = bool(
                self._read(
                    "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'runs_for_charts'"
                )
            )
            self._local.chart_index = known
        return known

    def _where(self, filters: RunFilter) -> tuple[list[str], list[object]]:
        found = None
        if filters.search is not None and self.search is not None:
            found = self.search.matches(filters.search)
        elif filters.search is not None and self.dialect.name == "postgresql":
            found = self._trigram_matches(filters.search)
        return filters.where(found, self.dialect)

    def _trigram_matches(self, text: str) -> tuple[list[str], int] | None:
        """PostgreSQL's answer to "which traces hold ``text``", from its trigram index, with
        SQLite's side index's rule: ``None`` (walk the runs newest first instead) when the
        text is too short for trigrams or more than :data:`FEW` traces hold it. The index is
        the database's own, always current: it covers every ``seq``."""
        if len(text) < 3:
            return None
        content, times = self.dialect.content_match("s")
        # A common text makes the index gather every span that holds it before it answers
        # (670 ms for a word in most of 100k runs); those are the texts the walk finds a
        # page of at once, so the index gets a moment and the walk takes what it leaves.
        rows = self.store().engine.query_within(  # type: ignore[attr-defined]
            f"SELECT DISTINCT s.trace_id FROM spans s WHERE {content} LIMIT ?",
            [*([_like(text)] * times), FEW + 1],
            TRIGRAM_MS,
        )
        if rows is None or len(rows) > FEW:
            return None
        return [row[0] for row in rows], MAX_NS

    # -- runs ---------------------------------------------------------------------------
    def runs(
        self,
        filters: RunFilter,
        *,
        cursor: str | None = None,
        limit: int = 50,
        sort: str = "start",
        descending: bool = True,
    ) -> dict[str, Any]:
        if not 1 <= limit <= MAX_PAGE:
            raise QueryError(f"limit={limit} is out of range: 1 to {MAX_PAGE}")
        if sort not in SORTS:
            raise QueryError(f"sort={sort!r} is not one of {', '.join(SORTS)}")
        if sort != "start" or not descending:
            return self._sorted_runs(filters, cursor, limit, sort, descending)
        clauses, params = self._where(filters)
        after = _cursor(cursor)
        if after is not None:
            clauses.append("(start_ns, trace_id) < (?, ?)")
            params.extend(after)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        hint = (
            "INDEXED BY runs_for_charts"
            if filters.ranges_only() and self._has_chart_index()
            else ""
        )
        try:
            rows = self._read(
                f"SELECT {RUN_COLUMNS} FROM runs {hint} {where} "
                "ORDER BY start_ns DESC, trace_id DESC LIMIT ?",
                [*params, limit + 1],
            )
        except StoreNotFoundError:
            return {"runs": [], "next": None, "store": False}
        runs = [run_summary(row) for row in rows[:limit]]
        more = len(rows) > limit
        last = runs[-1] if runs else None
        return {
            "runs": self._with_previews(runs),
            "next": f"{last.start_ns}:{last.trace_id}" if more and last else None,
            "store": True,
        }

    def _sorted_runs(
        self, filters: RunFilter, cursor: str | None, limit: int, sort: str, descending: bool
    ) -> dict[str, Any]:
        """Runs by another column: offset-paged (``cursor`` is ``o:<offset>``)."""
        offset = 0
        if cursor:
            if not cursor.startswith("o:"):
                raise QueryError(f"cursor={cursor[:60]!r} is not of the form o:<offset>")
            offset = int_param(cursor[2:], "cursor offset", default=0, low=0, high=10**7)
        clauses, params = self._where(filters)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "DESC" if descending else "ASC"
        try:
            rows = self._read(
                f"SELECT {RUN_COLUMNS} FROM runs {where} "
                f"ORDER BY {SORTS[sort]} {order}, start_ns DESC, trace_id DESC LIMIT ? OFFSET ?",
                [*params, limit + 1, offset],
            )
        except StoreNotFoundError:
            return {"runs": [], "next": None, "store": False}
        runs = [run_summary(row) for row in rows[:limit]]
        return {
            "runs": self._with_previews(runs),
            "next": f"o:{offset + limit}" if len(rows) > limit else None,
            "store": True,
        }

    def _with_previews(self, runs: Sequence[RunSummary]) -> list[dict[str, Any]]:
        """Each run's JSON with the start of its input and output (from its run span)."""
        ids = [r.trace_id for r in runs]
        found = self.previews(ids)
        judged = feedback_store.summaries(self.store(), ids)
        out = []
        for run in runs:
            data = run_json(run)
            data["input_preview"], data["output_preview"] = found.get(run.trace_id, (None, None))
            data["feedback"] = judged.get(run.trace_id, _NO_FEEDBACK).to_json()
            out.append(data)
        return out

    def feedback(self, trace_id: str) -> list[dict[str, Any]]:
        """The trace's feedback, the run's first (the trace page's list)."""
        return [f.to_json() for f in feedback_store.of_trace(self.store(), trace_id)]

    def projects(self) -> list[dict[str, Any]]:
        """Each app that sent runs, with how many (the project switcher), most runs first;
        runs that named none are the :data:`UNKNOWN_PROJECT`."""
        try:
            rows = self._read(
                "SELECT service_name, COUNT(*) FROM runs GROUP BY service_name "
                "ORDER BY COUNT(*) DESC, service_name"
            )
        except StoreNotFoundError:
            return []
        return [{"name": name or UNKNOWN_PROJECT, "runs": int(count)} for name, count in rows]

    def previews(self, trace_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """First input and last output text of each trace's run span (or its root)."""
        if not trace_ids:
            return {}
        d = self.dialect
        keys = (attr.INPUT_MESSAGES, attr.INPUT_VALUE, attr.OUTPUT_MESSAGES, attr.OUTPUT_VALUE)
        columns = ", ".join(d.text("attributes", k) for k in keys)
        rows = self._read(
            f"SELECT trace_id, {d.flag(_IS_RUN)}, {columns} FROM spans "
            f"WHERE trace_id IN ({', '.join('?' * len(trace_ids))}) "
            f"AND ({d.noindex('span_type')} = 'run' OR is_root = 1) ORDER BY start_ns",
            list(trace_ids),
        )
        chosen: dict[str, Sequence[Any]] = {}
        for row in rows:
            if row[0] not in chosen or (row[1] and not chosen[row[0]][1]):
                chosen[row[0]] = row
        return {
            trace_id: (
                _preview(_message_text(row[2]) or row[3]),
                _preview(_message_text(row[4], last=True) or row[5]),
            )
            for trace_id, row in chosen.items()
        }

    def facets(self) -> dict[str, list[str]]:
        """The values the filters offer: distinct agents (top runs' and any run's) and
        frameworks."""
        try:
            agents = self._read(_DISTINCT.format(column="agent"))
            frameworks = self._read(_DISTINCT.format(column="framework"))
            anywhere = self._read(_DISTINCT_AGENTS)
        except StoreNotFoundError:
            agents, frameworks, anywhere = [], [], []
        return {
            "agents": sorted(r[0] for r in agents),
            "agents_anywhere": sorted(r[0] for r in anywhere),
            "frameworks": sorted(r[0] for r in frameworks),
            "statuses": list(STATUSES),
            "projects": self.projects(),
        }

    def changes(self, after_seq: int, limit: int = 100) -> tuple[int, list[dict[str, Any]]]:
        """Runs written or updated since ``after_seq`` (the live feed), oldest change first."""
        try:
            rows = self._read(
                f"SELECT {RUN_COLUMNS}, seq FROM runs WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            )
        except StoreNotFoundError:
            return after_seq, []
        if not rows:
            return after_seq, []
        runs = [run_json(run_summary(row[:-1])) for row in rows]
        judged = feedback_store.summaries(self.store(), [run["trace_id"] for run in runs])
        for run in runs:
            run["feedback"] = judged.get(run["trace_id"], _NO_FEEDBACK).to_json()
        return int(rows[-1][-1]), runs

    def last_seq(self) -> int:
        try:
            return int(self._read("SELECT COALESCE(MAX(seq), 0) FROM runs")[0][0])
        except StoreNotFoundError:
            return 0

    # -- compare ------------------------------------------------------------------------
    def compare(self, first: str, second: str) -> dict[str, Any]:
        """Two runs side by side: each one's facts and timeline, and where they differ.

        Why spans are paired by name and occurrence: two turns of one agent run the
        same steps in the same order, so "the 2nd chat gpt-4o" of each is what a
        reader compares; a span only one run has gets a row of its own.
        """
        store = self.store()
        sides = [self._side(store, store.resolve(ref)) for ref in (first, second)]
        keys: list[str] = []
        for side in sides:
            for key in side["by_key"]:
                if key not in keys:
                    keys.append(key)
        timeline = [
            {"key": key, "a": sides[0]["by_key"].get(key), "b": sides[1]["by_key"].get(key)}
            for key in keys
        ]
        facts: list[tuple[str, object, object]] = [
            (name, sides[0]["facts"].get(name), sides[1]["facts"].get(name))
            for name in dict.fromkeys([*sides[0]["facts"], *sides[1]["facts"]])
        ]
        return {
            "a": sides[0]["run"],
            "b": sides[1]["run"],
            "scale_ns": max(sides[0]["run"]["duration_ns"], sides[1]["run"]["duration_ns"], 1),
            "differences": [
                {"field": name, "a": a, "b": b, "same": a == b} for name, a, b in facts
            ],
            "timeline": timeline,
        }

    def _side(self, store: SpanStore, trace_id: str) -> dict[str, Any]:
        run = store.get_run(trace_id)
        spans = store.get_trace(trace_id)
        start = min(s.start_ns for s in spans)
        seen: dict[str, int] = {}
        by_key: dict[str, dict[str, Any]] = {}
        models: list[str] = []
        params: dict[str, Any] = {}
        tools: dict[str, int] = {}
        for span, depth in span_tree(spans):
            count = seen[span.name] = seen.get(span.name, 0) + 1
            a = span.attributes
            model = a.get(attr.RESPONSE_MODEL) or a.get(attr.REQUEST_MODEL)
            if span.span_type == "message":
                if isinstance(model, str) and model not in models:
                    models.append(model)
                for key, value in a.items():
                    if key.startswith("gen_ai.request.") and key != attr.REQUEST_MODEL:
                        params.setdefault(key.removeprefix("gen_ai.request."), value)
            if span.span_type == "tool":
                name = str(a.get(attr.TOOL_NAME) or span.name)
                tools[name] = tools.get(name, 0) + 1
            by_key[f"{span.name} #{count}"] = {
                "name": span.name,
                "type": span.span_type,
                "depth": depth,
                "offset_ns": span.start_ns - start,
                "duration_ns": span.duration_ns,
                "error": span.is_error,
                "tokens": _tokens_of(a),
                "cost": _number(a.get(COST)),
            }
        previews = self.previews([trace_id]).get(trace_id, (None, None))
        data = run_json(run)
        data["input_preview"], data["output_preview"] = previews
        facts: dict[str, object] = {
            "agent": run.agent,
            "status": run.status,
            "models": ", ".join(models) or None,
            **{
                f"param {k}": json.dumps(v) if isinstance(v, list) else v for k, v in params.items()
            },
            "tools called": ", ".join(f"{k} x{v}" for k, v in sorted(tools.items())) or None,
            "tokens in": run.input_tokens,
            "tokens out": run.output_tokens,
            # The cost as shown, partial or unpriced: two runs differ when that does.
            "cost": run.cost_label,
            "model calls": run.model_calls,
            "tool calls": run.tool_calls,
            "errors": run.errors,
            "unpriced models": ", ".join(run.unpriced_models) or None,
            "latency_ns": run.duration_ns,
            "spans": run.span_count,
            "error spans": run.error_count,
            "input": previews[0],
            "output": previews[1],
        }
        return {"run": data, "facts": facts, "by_key": by_key}

    # -- sessions -----------------------------------------------------------------------
    def sessions(self, limit: int = 100) -> list[dict[str, Any]]:
        """The ``limit`` most recently active sessions, each summed over all its runs.

        Why two steps: grouping every run of the store by session costs a second
        at 100k runs. Walking runs newest first until ``limit`` distinct sessions
        are seen reads a few pages, then the session index sums just those.
        """
        try:
            recent: list[str] = []
            seen: set[str] = set()
            offset, page = 0, max(200, 4 * limit)
            while len(recent) < limit:
                rows = self._read(
                    "SELECT session_id FROM runs ORDER BY start_ns DESC, trace_id DESC "
                    "LIMIT ? OFFSET ?",
                    (page, offset),
                )
                for (session_id,) in rows:
                    if session_id is not None and session_id not in seen:
                        seen.add(session_id)
                        recent.append(session_id)
                if len(rows) < page:
                    break
                offset += page
            recent = recent[:limit]
            if not recent:
                return []
            marks = ", ".join("?" * len(recent))
            # The runs' own totals (the runs list's numbers), summed: failed runs and
            # recovered ones apart, as the charts count them.
            d = self.dialect
            rows = self._read(
                "SELECT session_id, COUNT(*), MIN(start_ns), MAX(end_ns), "
                f"SUM(input_tokens + output_tokens), SUM(cost), SUM({d.flag(_FAILED_RUN)}), "
                f"{d.group_concat('agent', distinct=True)}, SUM(unpriced_calls), "
                f"SUM(model_calls), SUM({d.flag(_CANCELLED)}), SUM({d.flag(_RECOVERED_RUN)}) "
                f"FROM runs WHERE session_id IN ({marks}) GROUP BY session_id",
                recent,
            )
            # Each session's first and last run (the one row with the least, the greatest start).
            source = f"FROM runs WHERE session_id IN ({marks})"
            ends = [
                row
                for last in (0, 1)
                for row in self._read(
                    d.first_per(
                        "session_id",
                        f"{last}, session_id, trace_id",
                        source,
                        "start_ns",
                        last=bool(last),
                    ),
                    recent,
                )
            ]
        except StoreNotFoundError:
            return []
        firsts = {r[1]: r[2] for r in ends if r[0] == 0}
        lasts = {r[1]: r[2] for r in ends if r[0] == 1}
        previews = self.previews(sorted({*firsts.values(), *lasts.values()}))
        order = {session_id: index for index, session_id in enumerate(recent)}
        rows.sort(key=lambda r: order[r[0]])
        return [
            {
                "session_id": r[0],
                "runs": r[1],
                "start_ns": r[2],
                "end_ns": r[3],
                "tokens": r[4] or 0,
                # A sum over runs of which some missed calls is partial too.
                "cost": r[5],
                "unpriced_calls": r[8] or 0,
                "cost_status": cost_status(r[5], r[8] or 0),
                "model_calls": r[9] or 0,
                "cancelled": r[10] or 0,
                "errors": r[6] or 0,
                "recovered": r[11] or 0,
                "agents": sorted((r[7] or "").split(",")) if r[7] else [],
                "first_input": previews.get(firsts.get(r[0], ""), (None, None))[0],
                "last_output": previews.get(lasts.get(r[0], ""), (None, None))[1],
            }
            for r in rows
        ]

    def session_agents(self, session_id: str) -> list[dict[str, Any]]:
        """The session's per-agent table: each agent's rows of every run in it, summed."""
        rows = self._read(
            _agent_sums(self.dialect, "SELECT trace_id FROM runs WHERE session_id = ?"),
            (session_id,),
        )
        return [agent_account(row).to_json() for row in rows]

    def trace_agents(self, trace_id: str) -> list[dict[str, Any]]:
        """The trace's per-agent table (the store's ``run_agents`` rows)."""
        return [account.to_json() for account in self.store().agents(trace_id)]

    def conversation(self, session_id: str) -> list[dict[str, Any]]:
        """The session's runs in order, each with its input and output text when captured."""
        rows = self._read(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? ORDER BY start_ns LIMIT 500",
            (session_id,),
        )
        turns = []
        for row in rows:
            run = run_summary(row)
            spans = self._read(
                "SELECT attributes FROM spans WHERE trace_id = ? "
                f"AND {self.dialect.noindex('span_type')} = 'run' "
                "ORDER BY start_ns LIMIT 1",
                (run.trace_id,),
            )
            attributes: dict[str, Any] = json.loads(spans[0][0]) if spans else {}
            turn = run_json(run)
            turn["input"] = _message_text(attributes.get(attr.INPUT_MESSAGES)) or attributes.get(
                attr.INPUT_VALUE
            )
            turn["output"] = _message_text(attributes.get(attr.OUTPUT_MESSAGES)) or attributes.get(
                attr.OUTPUT_VALUE
            )
            turn["error"] = self._first_error(run.trace_id) if run.error_count else None
            turns.append(turn)
        return turns

    def _first_error(self, trace_id: str) -> dict[str, Any] | None:
        """The first failed span of a trace: what a failed turn shows instead of a reply."""
        rows = self._read(
            f"SELECT name, status_description, {self.dialect.text('attributes', attr.ERROR_TYPE)}, "
            "span_type "
            "FROM spans WHERE trace_id = ? AND status_code = 'ERROR' ORDER BY start_ns LIMIT 1",
            (trace_id,),
        )
        if not rows:
            return None
        name, message, error_type, span_type = rows[0]
        return {"span": name, "message": message, "type": error_type, "span_type": span_type}

    # -- errors -------------------------------------------------------------------------
    def errors(self, since_ns: int | None = None) -> list[dict[str, Any]]:
        """Error spans grouped by ``error.type`` (the partial index holds only error spans)."""
        d = self.dialect
        error_type = d.text("attributes", attr.ERROR_TYPE)
        try:
            rows = self._read(
                f"SELECT COALESCE({error_type}, '(no error.type)') AS et, COUNT(*), "
                "COUNT(DISTINCT trace_id), MAX(start_ns), "
                f"{d.group_concat('span_type', distinct=True)} "
                "FROM spans WHERE status_code = 'ERROR' AND start_ns >= ? "
                "GROUP BY et ORDER BY COUNT(*) DESC",
                (since_ns or 0,),
            )
        except StoreNotFoundError:
            return []
        return [
            {
                "error_type": r[0],
                "spans": r[1],
                "traces": r[2],
                "last_ns": r[3],
                "span_types": sorted((r[4] or "").split(",")) if r[4] else [],
            }
            for r in rows
        ]

    def error_runs(self, error_type: str, limit: int = 100) -> list[dict[str, Any]]:
        """The runs holding an error span of ``error_type``, newest first, with its message."""
        expression = self.dialect.text("attributes", attr.ERROR_TYPE)
        if error_type == "(no error.type)":
            match, params = f"{expression} IS NULL", []
        else:
            match, params = f"{expression} = ?", [error_type]
        # Each trace's latest error span of the type, latest first.
        latest = self.dialect.first_per(
            "trace_id",
            "trace_id, name, status_description",
            f"FROM spans WHERE status_code = 'ERROR' AND {match}",
            "start_ns",
            last=True,
        )
        rows = self._read(
            f"SELECT * FROM ({latest}) AS e ORDER BY 4 DESC LIMIT ?", [*params, limit]
        )
        found = []
        store = self.store()
        for trace_id, span_name, description, _ in rows:
            run = run_json(store.get_run(trace_id))
            run.update(error_span=span_name, error_message=description)
            found.append(run)
        return found

    # -- charts -------------------------------------------------------------------------
    def metrics(
        self,
        by: str,
        *,
        since_ns: int | None = None,
        until_ns: int | None = None,
        buckets: int = 24,
    ) -> dict[str, Any]:
        """Latency p50/p95, tokens and cost per time bucket, one series per agent/model/tool.

        Per agent, the series group runs by their top agent (a run's totals: its nested
        agents' work included); ``agent_cost`` adds each agent's own cost, wherever it ran.
        """
        if by not in GROUPINGS:
            raise QueryError(f"by={by!r} is not one of {', '.join(GROUPINGS)}")
        if not 1 <= buckets <= 200:
            raise QueryError(f"buckets={buckets} is out of range: 1 to 200")
        rows = self._metric_rows(by, since_ns, until_ns)
        if not rows:
            empty: dict[str, Any] = {
                "by": by,
                "start_ns": since_ns,
                "bucket_ns": 0,
                "series": [],
                "summary": _summary([]),
            }
            if by == "agent":
                empty["agent_cost"] = []
            return empty
        start = since_ns if since_ns is not None else min(r[1] for r in rows)
        end = until_ns if until_ns is not None else max(r[1] for r in rows) + 1
        width = max(1, math.ceil((end - start) / buckets))
        series = _bucketed(rows, start, width, buckets)
        out = {
            "by": by,
            "start_ns": start,
            "bucket_ns": width,
            "series": series,
            "summary": _summary(rows),
        }
        if by == "agent":  # a nested agent starts after its trace: up to the range's end
            out["agent_cost"] = self._agent_cost(start, until_ns or MAX_NS, width, buckets)
        return out

    def _agent_cost(self, start: int, end: int, width: int, buckets: int) -> list[dict[str, Any]]:
        """Each agent's own cost per time bucket, nested agents included (``run_agents``):
        what an agent's own model calls cost, wherever in a tree it ran."""
        last = buckets - 1
        try:
            # Summed per agent and bucket in SQL, over the covering index: a few rows per
            # agent come back, not one per run.
            d = self.dialect
            bucket = d.least(d.greatest("(start_ns - ?) / ?", "0"), "?")
            rows = self._read(
                f"SELECT agent, {bucket} AS bucket, SUM(own_cost), "
                "COUNT(own_cost), SUM(own_unpriced_calls), COUNT(*) FROM run_agents "
                "WHERE start_ns >= ? AND start_ns < ? GROUP BY agent, bucket",
                (start, width, last, start, end),
            )
        except StoreNotFoundError:
            return []
        counts: dict[str, int] = {}
        for row in rows:
            counts[row[0]] = counts.get(row[0], 0) + row[5]
        kept = set(sorted(counts, key=lambda k: (-counts[k], k))[:MAX_SERIES])
        cells: dict[tuple[str, int], list[float]] = {}  # cost sum, priced rows, unpriced, rows
        for agent, index, cost, priced, unpriced, count in rows:
            cell = cells.setdefault((agent if agent in kept else "other", index), [0.0] * 4)
            cell[0] += cost or 0.0
            cell[1] += priced
            cell[2] += unpriced or 0
            cell[3] += count
        points: dict[str, list[dict[str, Any]]] = {}
        for (name, index), (cost, priced, unpriced, count) in sorted(
            cells.items(), key=lambda c: c[0][1]
        ):
            total = cost if priced else None
            points.setdefault(name, []).append(
                {
                    "t": start + index * width,
                    "count": int(count),
                    "cost": total,
                    "unpriced_calls": int(unpriced),
                    "cost_status": cost_status(total, int(unpriced)),
                }
            )
        order = sorted(points, key=lambda k: (k == "other", -counts.get(k, 0), k))
        return [{"name": name, "points": points[name]} for name in order]

    def _metric_rows(self, by: str, since_ns: int | None, until_ns: int | None) -> list[_MetricRow]:
        bounds = ["start_ns >= ?", "start_ns < ?"]
        params: list[object] = [since_ns or 0, until_ns or (1 << 63) - 1]
        d = self.dialect
        failed = d.flag("status_code = 'ERROR'")
        cost = d.number("attributes", COST)
        within = " AND ".join(bounds)
        chats = d.parsed(f"span_type = 'message' AND {within}")
        tools = d.parsed(f"span_type = 'tool' AND {within}")
        queries: dict[str, Callable[[], str]] = {
            "agent": lambda: (
                "SELECT COALESCE(agent, name), start_ns, end_ns - start_ns, "
                "input_tokens + output_tokens, cost, "
                f"{d.flag(_FAILED_RUN)}, "
                f"unpriced_calls, {d.flag(_RECOVERED_RUN)} FROM runs WHERE {' AND '.join(bounds)}"
            ),
            "model": lambda: (
                "SELECT COALESCE("
                f"{d.text('attributes', attr.RESPONSE_MODEL, attr.REQUEST_MODEL)}, "
                "'(unknown model)'), start_ns, end_ns - start_ns, input_tokens + output_tokens, "
                f"{cost}, {failed}, "
                f"{d.flag(f'input_tokens + output_tokens > 0 AND {cost} IS NULL')}, 0 "
                f"FROM {chats}"
            ),
            "tool": lambda: (
                "SELECT COALESCE("
                f"{d.text('attributes', attr.TOOL_NAME, attr.LEGACY_TOOL_NAME)}, name), "
                f"start_ns, end_ns - start_ns, 0, NULL, {failed}, 0, 0 "
                f"FROM {tools}"
            ),
        }
        try:
            rows = self._read(queries[by](), params)
        except StoreNotFoundError:
            return []
        # SQLite returns the right types already (text, integers, REAL or NULL cost); only a
        # cost stored as something else (a string from a foreign writer) is dropped.
        return [
            r if r[4] is None or type(r[4]) is float else (*r[:4], _number(r[4]), *r[5:])
            for r in rows
        ]


# series name, start_ns, duration, tokens, cost (None: unpriced or none), failed, unpriced,
# recovered (a run that ended ok with a span in error; a call is failed or not: 0)
_MetricRow = tuple[str, int, int, int, float | None, int, int, int]


def _bucketed(
    rows: Sequence[_MetricRow], start: int, width: int, buckets: int
) -> list[dict[str, Any]]:
    """Per series (the most frequent ``MAX_SERIES``, the rest "other") and time bucket:
    count, latency p50/p95, tokens, cost (with its unpriced calls) and errors."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row[0]] = counts.get(row[0], 0) + 1
    kept = set(sorted(counts, key=lambda k: (-counts[k], k))[:MAX_SERIES])
    # (series, bucket) -> durations, [token sum, cost sum, priced count, failed, unpriced,
    # recovered]
    cells: dict[tuple[str, int], tuple[list[int], list[float]]] = {}
    last = buckets - 1
    for name, start_ns, duration, tokens, cost, failed, unpriced, recovered in rows:
        index = (start_ns - start) // width
        key = (name if name in kept else "other", last if index > last else max(0, index))
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = ([], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        cell[0].append(duration)
        sums = cell[1]
        sums[0] += tokens or 0
        if cost is not None:
            sums[1] += cost
            sums[2] += 1
        if failed:
            sums[3] += 1
        sums[4] += unpriced or 0
        if recovered:
            sums[5] += 1
    series_points: dict[str, list[dict[str, Any]]] = {}
    for (name, index), (durations, sums) in sorted(cells.items(), key=lambda c: c[0][1]):
        durations.sort()
        cost = sums[1] if sums[2] else None
        series_points.setdefault(name, []).append(
            {
                "t": start + index * width,
                "count": len(durations),
                "p50_ms": percentile(durations, 0.5) / 1e6,
                "p95_ms": percentile(durations, 0.95) / 1e6,
                "tokens": int(sums[0]),
                "cost": cost,
                "unpriced_calls": int(sums[4]),
                "cost_status": cost_status(cost, int(sums[4])),
                "errors": int(sums[3]),
                "error_rate": sums[3] / len(durations),
                "recovered": int(sums[5]),
            }
        )
    order = sorted(series_points, key=lambda k: (k == "other", -counts.get(k, 0), k))
    return [{"name": name, "points": series_points[name]} for name in order]


def _summary(rows: Sequence[_MetricRow]) -> dict[str, Any]:
    """The tiles above the charts: count, error rate, p50/p95 latency, tokens and cost
    (partial when a run or call in it had unpriced calls).

    Per agent the error rate is of failed runs (status error, as the runs list says) and
    ``recovered`` counts the runs that ended ok with a span in error, apart; per model or
    tool it is of failed calls (a call recovers from nothing: ``recovered`` is 0)."""
    durations = sorted(r[2] for r in rows)
    costs = [r[4] for r in rows if r[4] is not None]
    failed = sum(1 for r in rows if r[5])
    unpriced = sum(r[6] or 0 for r in rows)
    recovered = sum(1 for r in rows if r[7])
    cost = sum(costs) if costs else None
    return {
        "count": len(rows),
        "errors": failed,
        "recovered": recovered,
        "error_rate": failed / len(rows) if rows else None,
        "p50_ms": percentile(durations, 0.5) / 1e6 if rows else None,
        "p95_ms": percentile(durations, 0.95) / 1e6 if rows else None,
        "tokens": sum(r[3] or 0 for r in rows),
        "cost": cost,
        "unpriced_calls": unpriced,
        "cost_status": cost_status(cost, unpriced),
    }


def _tokens_of(attributes: Mapping[str, Any]) -> int:
    total = 0
    for key in (attr.INPUT_TOKENS, attr.OUTPUT_TOKENS):
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None
