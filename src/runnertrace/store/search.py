"""Content search on SQLite: a trigram FTS5 index kept beside the store file.

Why: a search is a substring match over every span's name and attributes.
Without an index, a word that only one run in 100k holds means reading every
span of the store (two seconds). SQLite's FTS5 with the ``trigram``
tokenizer answers ``LIKE '%word%'`` from an index, with the same meaning
(case-insensitive substrings) as the scan it replaces.

Why a file of its own (``<store>.search``): the store belongs to the traced
app's writer, and a viewer never takes its write lock. The dashboard keeps
this side file itself, from a background thread that follows the runs
table's ``seq`` (every run written or updated bumps it), so a new run is
indexed a moment after it is stored. Until then, and for any run the index
has not reached yet, the query falls back to the scan for those runs only:
a result is never missing a run because the index was behind.

A PostgreSQL store needs none of this: a trigram index inside the database,
kept by the writers' own inserts and deletes, answers the same ``ILIKE``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from runnertrace.store.errors import StoreError, StoreNotFoundError
from runnertrace.store.store import SpanStore

__all__ = ["FEW", "SearchIndex"]

logger = logging.getLogger("runnertrace.ui")

FEW = 500  # more matches than this: walking runs newest first finds a page faster
BATCH = 500  # runs indexed per transaction
_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(body, tokenize='trigram');
-- doc is the search row's rowid: a match is mapped to its trace through this key
CREATE TABLE IF NOT EXISTS documents (doc INTEGER PRIMARY KEY, trace_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS progress (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER);
"""


class SearchIndex:
    """The side index of one store: :meth:`follow` fills it, :meth:`matches` reads it."""

    def __init__(self, store_path: Path, poll_s: float = 1.0) -> None:
        self.store_path = store_path
        self.path = store_path.with_name(store_path.name + ".search")
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.indexed_seq = 0  # every run with seq <= this is in the index
        self.caught_up = threading.Event()
        self.broken: str | None = None

    # -- the follower thread ------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="runnertrace-ui-search")
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=10.0, check_same_thread=False, isolation_level=None
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT seq FROM progress WHERE id = 1").fetchone()
            self.indexed_seq = int(row[0]) if row and row[0] is not None else 0
            self._conn = conn
        return self._conn

    def _follow(self) -> None:
        reader = SpanStore(self.store_path, read_only=True)
        try:
            while not self._stop.is_set():
                try:
                    more = self.step(reader)
                except StoreNotFoundError:
                    more = False
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) and "busy" not in str(exc):
                        self._give_up(exc)
                        return
                    # another dashboard on this store is indexing: try again next time
                    more = False
                except (StoreError, sqlite3.Error, OSError) as exc:
                    self._give_up(exc)
                    return
                if not more:
                    self.caught_up.set()
                    self._stop.wait(self.poll_s)
        finally:
            reader.close()

    def _give_up(self, exc: BaseException) -> None:
        # One line, then the dashboard searches by scanning, as it did before the index.
        self.broken = f"content search index {self.path} is off: {exc}"
        logger.warning("%s", self.broken)

    def step(self, reader: SpanStore) -> bool:
        """Index the next runs written since the last step; ``False`` when there were none."""
        if not self.store_path.is_file():  # nothing traced yet: make no file beside it
            return False
        with self._lock:
            conn = self._connection()
            after = self.indexed_seq
        changed = reader.read(
            "SELECT trace_id, seq FROM runs WHERE seq > ? ORDER BY seq LIMIT ?", (after, BATCH)
        )
        if not changed:
            return False
        ids = [row[0] for row in changed]
        bodies = reader.read(
            "SELECT trace_id, group_concat(name || ' ' || attributes, char(10)) FROM spans "
            f"WHERE trace_id IN ({', '.join('?' * len(ids))}) GROUP BY trace_id",
            ids,
        )
        with self._lock:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for trace_id, body in bodies:
                    old = conn.execute(
                        "SELECT doc FROM documents WHERE trace_id = ?", (trace_id,)
                    ).fetchone()
                    if old is not None:
                        conn.execute("DELETE FROM search WHERE rowid = ?", (old[0],))
                        conn.execute("DELETE FROM documents WHERE doc = ?", (old[0],))
                    doc = conn.execute("INSERT INTO search (body) VALUES (?)", (body,)).lastrowid
                    conn.execute(
                        "INSERT INTO documents (doc, trace_id) VALUES (?, ?)", (doc, trace_id)
                    )
                last = int(changed[-1][1])
                conn.execute("INSERT OR REPLACE INTO progress (id, seq) VALUES (1, ?)", (last,))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self.indexed_seq = last
        return True

    # -- queries ------------------------------------------------------------------------
    def matches(self, text: str) -> tuple[list[str], int] | None:
        """Trace ids whose content holds ``text`` (any case), and the seq they cover.

        ``None`` when the index cannot answer: it is off, the text is too short for
        trigrams (under 3 characters), or more than :data:`FEW` runs match (then the
        newest-first walk finds a page of them sooner than reading every match).
        A quoted phrase is a substring match under the trigram tokenizer, with ``%``
        and ``_`` literal, as the scan's escaped ``LIKE`` has them.
        """
        if self.broken is not None or len(text) < 3:
            return None
        phrase = '"' + text.replace('"', '""') + '"'
        with self._lock:
            if self._conn is None:
                return None
            covered = self.indexed_seq
            rows = self._conn.execute(
                "SELECT d.trace_id FROM search s JOIN documents d ON d.doc = s.rowid "
                "WHERE search MATCH ? LIMIT ?",
                (phrase, FEW + 1),
            ).fetchall()
        if len(rows) > FEW:
            return None
        return [row[0] for row in rows], covered
