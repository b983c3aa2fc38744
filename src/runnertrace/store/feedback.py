"""Feedback: thumbs up or down, and a note, on a run or on one of its spans.

Why one row per target (the run, or one span of it), the latest kept: a thumb is a
judgement of that run or span, and changing one's mind replaces it, as every
peer's thumbs do; a note goes with its thumb. The run's own feedback has the span
id ``''`` (a key column cannot be NULL on both engines alike).

Why it lives beside the spans, not in them: spans are immutable once exported
(and may be in other backends already); feedback comes later, from a person or a
program judging the result. So it is stored with the trace, in the store's
``feedback`` table: pruned with its trace, copied with it, and exported with it by
the dashboard (the runs CSV, each run's JSON, and the trace's OTLP/JSON file);
it is never sent to an OTLP backend.

Bad input (a score not in :data:`SCORES`, a note over :data:`MAX_COMMENT`
characters, a trace or span the store does not hold) is a :class:`FeedbackError`,
a ``ValueError`` saying what is wrong in one line, and nothing is written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from runnertrace.store.errors import StoreError, StoreUnavailableError, TraceNotFoundError
from runnertrace.store.schema import FEEDBACK_COLUMNS

if TYPE_CHECKING:
    from runnertrace.store.store import SpanStore

__all__ = [
    "FILTERS",
    "MAX_COMMENT",
    "SCORES",
    "SOURCES",
    "Feedback",
    "FeedbackError",
    "FeedbackSummary",
    "FeedbackTargetError",
    "check",
    "parse_score",
]

SCORES: Mapping[object, int] = {"up": 1, "down": -1, 1: 1, -1: -1}
"""What a score may be given as, and what is stored: 1 (thumbs up) or -1 (thumbs down)."""
SCORE_NAMES = {1: "up", -1: "down"}
MAX_COMMENT = 2000
"""Characters of a note: a judgement in a few sentences, not a document."""
SOURCES = ("ui", "python")
FILTERS = ("up", "down", "any", "none")
"""The runs list's ``feedback=`` values: a thumbs up (or down) on the run or any of its spans,
any feedback at all, none."""
_HEX = frozenset("0123456789abcdef")


class FeedbackError(ValueError):
    """Feedback that cannot be stored; the message says why, in one line."""


class FeedbackTargetError(FeedbackError):
    """The trace, or the span, the feedback is for is not in the store."""


@dataclass(frozen=True)
class Feedback:
    """One judgement: of the run (``span_id`` None) or of one of its spans."""

    trace_id: str
    span_id: str | None
    score: str
    """``up`` or ``down``."""
    comment: str | None
    source: str
    """Where it was given: ``ui`` or ``python``."""
    created_ns: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Feedback:
        trace_id, span_id, score, comment, source, created_ns = row
        return cls(
            str(trace_id),
            str(span_id) or None,
            SCORE_NAMES[int(score)],
            comment,
            str(source),
            int(created_ns),
        )


@dataclass(frozen=True)
class FeedbackSummary:
    """A run's feedback as the runs list shows it: the run's own thumb and note, and how
    many thumbs up and down the run and its spans got in all."""

    score: str | None = None
    comment: str | None = None
    up: int = 0
    down: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_score(score: object) -> int:
    """``up``/``down`` (or 1/-1) as the stored 1 or -1; FeedbackError otherwise."""
    key = score.strip().lower() if isinstance(score, str) else score
    if isinstance(key, bool) or key not in SCORES:
        raise FeedbackError(f"score {score!r} is not 'up' or 'down' (1 or -1): a thumbs up or down")
    return SCORES[key]


def _hex_id(value: object, what: str, digits: int) -> str:
    text = value.strip().lower().removeprefix("0x") if isinstance(value, str) else None
    if text is None or len(text) != digits or not set(text) <= _HEX:
        raise FeedbackError(f"{what} {value!r} is not a {what} ({digits} hex digits)")
    return text


def trace_ref(trace_id: object) -> str:
    """A trace reference as :meth:`SpanStore.resolve` takes it: ``last``, a full id or a
    unique prefix (text), or a trace id as OpenTelemetry's span context holds it (an int)."""
    if isinstance(trace_id, int) and not isinstance(trace_id, bool) and trace_id > 0:
        return format(trace_id, "032x")
    if not isinstance(trace_id, str) or not trace_id.strip():
        raise FeedbackError(
            f"trace id {trace_id!r} is not a trace id: 'last', 1-32 hex digits, or an int"
        )
    return trace_id.strip()


def check(
    score: object, comment: object = None, span_id: object = None
) -> tuple[str, int, str | None]:
    """The feedback's fields, checked: (span id or '', score, note or None)."""
    span = "" if span_id in (None, "") else _hex_id(span_id, "span id", 16)
    value = parse_score(score)
    if comment is not None and not isinstance(comment, str):
        raise FeedbackError(f"comment must be text, not {type(comment).__name__}")
    note = comment.strip() if comment else None
    if note and len(note) > MAX_COMMENT:
        raise FeedbackError(
            f"comment is {len(note)} characters, over the {MAX_COMMENT}-character limit"
        )
    if note is not None and not note.encode("utf-8", "replace").decode() == note:
        raise FeedbackError("comment is not valid Unicode text (it holds a lone surrogate)")
    if note is not None and "\x00" in note:
        raise FeedbackError("comment holds a NUL character, which the store cannot hold")
    return span, value, note or None


def give(
    store: SpanStore,
    trace_id: object,
    score: object,
    comment: object = None,
    span_id: object = None,
    *,
    source: str = "python",
) -> Feedback:
    """Store one judgement, over the target's previous one; the feedback as stored.

    ``trace_id``: ``last``, a full id or a unique prefix, or an int (:func:`trace_ref`).
    The trace (and the span) must be in the store: checked in the write's
    transaction, so a prune that removes the trace meanwhile cannot leave feedback
    behind it.
    """
    if source not in SOURCES:
        raise FeedbackError(f"source {source!r} is not one of {', '.join(SOURCES)}")
    span, value, note = check(score, comment, span_id)
    try:
        trace = store.resolve(trace_ref(trace_id))
    except TraceNotFoundError as exc:
        raise FeedbackTargetError(str(exc)) from None
    created = time.time_ns()
    head, tail = store.dialect.upsert("feedback", FEEDBACK_COLUMNS, ("trace_id", "span_id"))
    with store.engine.writing([trace]) as tx:
        if not tx.rows("SELECT 1 FROM runs WHERE trace_id = ?", (trace,)):
            raise FeedbackTargetError(f"no trace {trace} in {store.location}")
        if span and not tx.rows(
            "SELECT 1 FROM spans WHERE trace_id = ? AND span_id = ?", (trace, span)
        ):
            raise FeedbackTargetError(f"trace {trace} has no span {span} in {store.location}")
        tx.execute(head + "(?, ?, ?, ?, ?, ?)" + tail, (trace, span, value, note, source, created))
        # The run changed for its viewers: a new seq puts it on the live feed, thumbs and all.
        tx.lock_sequence()
        tx.execute(
            "UPDATE runs SET seq = (SELECT MAX(seq) FROM runs) + 1 WHERE trace_id = ?", (trace,)
        )
    return Feedback(trace, span or None, SCORE_NAMES[value], note, source, created)


def of_trace(store: SpanStore, trace_id: str) -> list[Feedback]:
    """The trace's feedback: the run's first, then its spans', oldest first."""
    rows = store.read(
        f"SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE trace_id = ? "
        "ORDER BY span_id <> '', created_ns, span_id",
        (trace_id,),
    )
    return [Feedback.from_row(row) for row in rows]


def summaries(store: SpanStore, trace_ids: Sequence[str]) -> dict[str, FeedbackSummary]:
    """Each of ``trace_ids``' feedback, summed for the runs list (runs without: absent)."""
    if not trace_ids:
        return {}
    rows = store.read(
        f"SELECT trace_id, span_id, score, comment FROM feedback "
        f"WHERE trace_id IN ({', '.join('?' * len(trace_ids))})",
        list(trace_ids),
    )
    found: dict[str, dict[str, Any]] = {}
    for trace_id, span_id, score, comment in rows:
        entry = found.setdefault(trace_id, {"up": 0, "down": 0})
        entry["up" if int(score) > 0 else "down"] += 1
        if not span_id:
            entry["score"], entry["comment"] = SCORE_NAMES[int(score)], comment
    return {trace_id: FeedbackSummary(**entry) for trace_id, entry in found.items()}


def filter_clause(value: str) -> tuple[str, list[object]]:
    """The runs-list condition for ``feedback=value`` (one of :data:`FILTERS`)."""
    exists = "EXISTS (SELECT 1 FROM feedback f WHERE f.trace_id = runs.trace_id{})"
    if value == "none":
        return "NOT " + exists.format(""), []
    if value == "any":
        return exists.format(""), []
    return exists.format(" AND f.score = ?"), [SCORES[value]]


def feedback(
    trace_id: str | int,
    score: str | int,
    comment: str | None = None,
    *,
    span_id: str | None = None,
    store: str | os.PathLike[str] | None = None,
    url: str | None = None,
    token: str | None = None,
) -> Feedback:
    """Give a run (or one of its spans) a thumbs up or down, with an optional note.

    ``trace_id``: the run's trace id (hex, or the int OpenTelemetry's span context
    holds), a unique prefix of one, or ``last`` (the newest run). ``score``: ``up``
    or ``down`` (1 or -1). ``span_id``: one span of the trace instead of the run.

    Where it goes: the store ``store`` names (a SQLite path or a PostgreSQL URL),
    else, with ``url``, the ``runnertrace ui`` at that address (an app exporting
    OTLP to the dashboard, whose store it may not reach: ``POST {url}/api/feedback``,
    with ``token`` or ``RUNNERTRACE_UI_TOKEN`` when the dashboard has one), else the
    configured ``trace.local.path``. A run's spans reach the store when they are
    exported: flush first (``runner.setup.flush()``) to judge a run just ended.

    Bad input (a score not up or down, a note over :data:`MAX_COMMENT`
    characters, a trace or span not in the store) raises :class:`FeedbackError`
    (a ``ValueError``) and stores nothing; a store or dashboard that cannot be
    reached raises :class:`~runnertrace.store.StoreError`.
    """
    if store is not None and url is not None:
        raise FeedbackError("give store= or url=, not both: the feedback goes to one place")
    if url is not None:
        span, _, _ = check(score, comment, span_id)
        return _post(url, trace_ref(trace_id), score, comment, span or None, token)
    from runnertrace.store.store import SpanStore

    if store is None:
        from runnertrace.tracing.config import load_settings

        store = load_settings().trace.local.path
    target = SpanStore(store)
    try:
        return give(target, trace_id, score, comment, span_id, source="python")
    finally:
        target.close()


def _post(
    url: str,
    trace_id: str,
    score: object,
    comment: str | None,
    span_id: str | None,
    token: str | None,
) -> Feedback:
    """``POST /api/feedback`` to a ``runnertrace ui``; its refusal raised as ours, in its
    words (the dashboard checks the trace and the span against its store)."""
    import json
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise FeedbackError(f"url {url!r} is not a dashboard's http:// or https:// address")
    body: dict[str, object] = {"trace_id": trace_id, "score": SCORE_NAMES[parse_score(score)]}
    if comment is not None:
        body["comment"] = comment
    if span_id is not None:
        body["span_id"] = span_id
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    secret = token or os.environ.get(UI_TOKEN_ENV, "").strip()
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    request = urllib.request.Request(
        url.rstrip("/") + "/api/feedback",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=_POST_TIMEOUT_S) as answer:
            stored = json.loads(answer.read())["feedback"]
    except urllib.error.HTTPError as exc:
        reason = _reason(exc)
        if exc.code == 404:
            raise FeedbackTargetError(reason) from None
        if exc.code in (400, 413, 415):
            raise FeedbackError(reason) from None
        raise StoreError(f"the dashboard at {url} refused the feedback: {reason}") from None
    except (OSError, ValueError) as exc:
        raise StoreUnavailableError(f"cannot reach the dashboard at {url}: {exc}") from None
    return Feedback(**stored)


UI_TOKEN_ENV = "RUNNERTRACE_UI_TOKEN"
"""The dashboard's token (:mod:`runnertrace.ui.auth` reads the same variable)."""
_POST_TIMEOUT_S = 10.0


def _reason(error: Any) -> str:
    """The dashboard's one-line ``{"error": ...}``, else the HTTP status line."""
    import json

    try:
        return str(json.loads(error.read())["error"])
    except (ValueError, KeyError, TypeError, OSError):
        return f"HTTP {error.code} {error.reason}"
