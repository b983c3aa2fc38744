"""The embedded engine: one SQLite file, the default.

Why SQLite: it needs no server, no account and no network, survives process
restarts, and lets several processes (an app and ``runnertrace traces`` in
another terminal) share one file. WAL mode lets readers look while a writer
appends; a busy timeout serialises concurrent writers instead of failing them.

The file and its directory are created on the first write, never on reads (a
read of a missing store raises :class:`StoreNotFoundError`). A writer upgrades
an older schema on first open (one user, one file: nothing else could); a
viewer (``read_only``) opens it with ``mode=ro`` and never writes, so it never
delays the traced app's writer.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runnertrace.store.dialect import SQLITE
from runnertrace.store.engine import Engine, Transaction, _fork_guard, inherited_connections
from runnertrace.store.errors import StoreError, StoreNotFoundError, StoreVersionError
from runnertrace.store.schema import RUNS_ADDED, RUNS_ADDED_4, SCHEMA_VERSION, sqlite_schema
from runnertrace.store.url import StoreUrl

__all__ = ["SqliteEngine", "is_busy", "is_locked"]

# SQLite's default bound-variable limit before 3.32 (newer ones report their own).
_OLD_VARIABLE_LIMIT = 999
# How long SQLite itself sleeps for a lock before we try again. Short: its busy
# handler backs off to 100 ms polls, and a writer polling that slowly loses every
# race to writers in tight loops; our loop keeps trying until the write's deadline.
_LOCK_POLL_MS = 20
# Indexes whose columns changed since schema 2: dropped, then made anew.
_REBUILT_INDEXES: tuple[str, ...] = ()

_write_locks: dict[Path, threading.Lock] = {}
_write_locks_guard = threading.Lock()


def _write_lock_for(path: Path) -> threading.Lock:
    with _write_locks_guard:
        lock = _write_locks.get(path)
        if lock is None:
            lock = _write_locks[path] = threading.Lock()
        return lock


def _forget_write_locks() -> None:
    global _write_locks_guard
    _write_locks_guard = threading.Lock()
    _write_locks.clear()


_fork_guard.child_hooks.append(_forget_write_locks)


def is_locked(exc: BaseException) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def is_busy(error: BaseException | None) -> bool:
    """Is this SQLite error another connection holding the file (not a fault of the file)?"""
    return isinstance(error, sqlite3.Error) and getattr(error, "sqlite_errorname", "") in {
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
    }


def multi_row(
    max_params: int, head: str, width: int, rows: Sequence[Sequence[object]]
) -> Iterator[tuple[str, list[object]]]:
    """``head`` + ``VALUES`` for ``rows`` of ``width`` values, in as few statements as fit.

    Why not ``executemany``: the sqlite3 module releases the GIL around every
    row's step, and while the host keeps the CPU busy, each release can cost
    the export thread a whole GIL switch interval (5 ms) to get the GIL back.
    One statement per row means a wait per row; this way a batch waits a few
    times. The same holds for every statement a batch runs, which is why a
    batch's run summaries are computed in a few queries, not a few per trace.
    """
    per_statement = max(1, max_params // width)
    params_sql = f"({', '.join('?' * width)})"
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        params = [value for row in chunk for value in row]
        yield head + ", ".join([params_sql] * len(chunk)), params


class _SqliteTransaction(Transaction):
    dialect = SQLITE

    def __init__(self, engine: SqliteEngine, conn: sqlite3.Connection) -> None:
        self.engine = engine
        self.conn = conn
        getlimit = getattr(conn, "getlimit", None)  # Python 3.11+
        self.max_params = (
            getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if getlimit else _OLD_VARIABLE_LIMIT
        )

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        self.conn.execute(sql, params)

    def store_rows(
        self, table: str, columns: str, keys: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        head = (
            self.dialect.upsert(table, columns, keys)[0]
            if keys
            else f"INSERT INTO {table} ({columns}) VALUES "
        )
        width = len(columns.split(","))
        for sql, params in multi_row(self.max_params, head, width, rows):
            self.conn.execute(sql, params)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self.conn.execute("SAVEPOINT one_span")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK TO one_span")
            self.conn.execute("RELEASE one_span")
            raise
        self.conn.execute("RELEASE one_span")

    def lock_sequence(self) -> None:
        """One writer at a time already (``BEGIN IMMEDIATE``)."""

    def try_lock_prune(self) -> bool:
        return True  # the write lock is the prune lock too

    def has_table(self, name: str) -> bool:
        return bool(
            self.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
        )

    def restart(self) -> None:
        self.conn.execute("ROLLBACK")
        self.engine._begin(self.conn)  # noqa: SLF001 - its own engine


class SqliteEngine(Engine):
    """One SQLite file: thread-safe writes, per-process write turns, fork-safe."""

    dialect = SQLITE
    data_errors = (UnicodeError, OverflowError, sqlite3.InterfaceError, sqlite3.DataError)

    def __init__(self, url: StoreUrl, *, busy_timeout_s: float, read_only: bool) -> None:
        super().__init__(url, busy_timeout_s=busy_timeout_s, read_only=read_only)
        assert url.path is not None
        self.path: Path = url.path
        self._conn: sqlite3.Connection | None = None
        self._write_ready = False  # the connection polls for the lock (see _LOCK_POLL_MS)
        self._metrics_ready = False  # the metrics table exists (made on first use)
        # Writers of one file in this process (the span and the metric exporter) take
        # turns here rather than in SQLite: the busy timeout is then only ever spent
        # waiting for another process, and a store "found locked" means just that.
        self._write_lock = _write_lock_for(self.path)

    def write_locks(self) -> Iterator[threading.Lock]:
        yield self._write_lock

    # -- connection -------------------------------------------------------------------
    def _connection(self, *, create: bool) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_file():
            raise StoreNotFoundError(
                f"no trace store at {self.path}; run `runnertrace demo`, or enable tracing "
                "(trace.enabled: true, trace.type: local) and run an agent"
            )
        try:
            conn = sqlite3.connect(
                f"{self.path.as_uri()}?mode=ro" if self.read_only else self.path,
                timeout=self.busy_timeout_s,
                isolation_level=None,  # autocommit; transactions are explicit
                check_same_thread=False,  # guarded by self._lock
                uri=self.read_only,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open trace store {self.path}: {exc}") from exc
        if self.read_only:
            return self._check_read_only(conn)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"trace store {self.path} has schema version {version}, newer than this "
                    f"runnertrace understands ({SCHEMA_VERSION}); upgrade runnertrace"
                )
            if version < SCHEMA_VERSION:
                self._upgrade(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot use trace store {self.path}: {exc}") from exc
        except StoreError:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _check_read_only(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """Refuse, with the cause, a file a viewer cannot read as a store of this schema.

        Nothing is written: an empty file or another program's database stays as it
        is (a writer would turn it into a store), and so does an older store.
        """
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot read trace store {self.path}: {exc}") from exc
        if version == 0 and "spans" not in tables:
            conn.close()
            what = "an empty file" if not tables else "a SQLite file without a spans table"
            raise StoreError(f"{self.path} is not a runnertrace trace store ({what})")
        if version != SCHEMA_VERSION:
            conn.close()
            raise StoreVersionError(
                f"trace store {self.path} has schema version {version}, this runnertrace reads "
                f"{SCHEMA_VERSION}; "
                + (
                    "upgrade runnertrace"
                    if version > SCHEMA_VERSION
                    else f"run `runnertrace migrate --store {self.path}` (the next traced run "
                    "into it upgrades it too)"
                )
            )
        self._conn = conn
        return conn

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Create or upgrade the schema, back-filling ``runs`` and ``run_agents`` once.

        One transaction: two processes opening an old file at once serialise on
        BEGIN IMMEDIATE, and the loser sees the new version and does nothing.
        """
        from runnertrace.store.summary import refresh_runs

        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
                if have:  # an older runs table: the columns schemas 3 and 4 added
                    for column, declaration in (*RUNS_ADDED, *RUNS_ADDED_4):
                        if column not in have:
                            conn.execute(f"ALTER TABLE runs ADD COLUMN {column} {declaration}")
                for index in _REBUILT_INDEXES:
                    conn.execute(f"DROP INDEX IF EXISTS {index}")
                for statement in sqlite_schema():
                    conn.execute(statement)
                trace_ids = [row[0] for row in conn.execute("SELECT DISTINCT trace_id FROM spans")]
                refresh_runs(_SqliteTransaction(self, conn), trace_ids)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def version(self) -> int | None:
        if not self.path.is_file():
            return None
        conn = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read trace store {self.path}: {exc}") from exc
        finally:
            conn.close()

    def migrate(self) -> tuple[int, int]:
        before = self.version() or 0
        with self._write_lock, self._lock:
            self._connection(create=True)
        return before, SCHEMA_VERSION

    def exists(self) -> bool:
        return self.path.is_file()

    def vacuum(self) -> None:
        """Fold the WAL back into the file: the freed pages are reused by the next writes.

        Not ``VACUUM``: it rewrites the whole file under an exclusive lock, for as long
        as that takes, and every writer of the file waits.
        """
        with self._write_lock, self._lock:
            conn = self._connection(create=False)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def size_bytes(self) -> int | None:
        files = [self.path, self.path.with_name(self.path.name + "-wal")]
        return sum(p.stat().st_size for p in files if p.is_file())

    def close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._write_ready = False

    def forget_connection(self) -> None:
        if self._conn is not None:
            inherited_connections.append(self._conn)
            self._conn = None
            self._write_ready = False
        self._write_lock = _write_lock_for(self.path)

    # -- reading ----------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        with self._lock:
            conn = self._connection(create=False)
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read trace store {self.path}: {exc}") from exc

    # -- writing ----------------------------------------------------------------------
    @contextmanager
    def writing(self, keys: Sequence[str] = ()) -> Iterator[Transaction]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``, the driver's errors as :class:`StoreError`."""
        if self.read_only:
            raise StoreError(f"trace store {self.path} is open read-only (readonly)")
        with self._write_lock, self._lock:
            try:
                conn = self._connection(create=True)
                if not self._write_ready:
                    conn.execute(f"PRAGMA busy_timeout={_LOCK_POLL_MS}")
                    self._write_ready = True
                self._begin(conn)
            except sqlite3.Error as exc:
                raise StoreError(str(exc)) from exc
            tx = _SqliteTransaction(self, conn)
            try:
                yield tx
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error) and not isinstance(exc, self.data_errors):
                    raise StoreError(str(exc)) from exc
                raise

    def ensure_metrics(self, tx: Transaction) -> None:
        if not self._metrics_ready:
            for statement in sqlite_schema(metrics=True):
                tx.execute(statement)
            self._metrics_ready = True

    def _begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, trying again while another process writes, up to the deadline.

        Another writer holds the lock for one transaction at a time, so a live
        writer lets us in within milliseconds; only a store held locked for good
        (another program's open transaction) makes the write fail, after
        ``busy_timeout_s``.
        """
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not is_locked(exc) or time.monotonic() >= deadline:
                    raise
