"""The team engine: one PostgreSQL database, written by many processes on many hosts.

Why PostgreSQL: it is what a team already runs (or can run without a vendor),
it takes many writers at once, and one server serves several dashboards. The
schema is SQLite's (:mod:`runnertrace.store.schema`), and so is every query
(:mod:`runnertrace.store.dialect`).

Many writers, one run row per trace. A trace's spans may come from several
processes (a service's, its caller's) in batches that commit side by side. A
batch first takes a transaction lock per trace it touches (in sorted order, so
two batches never wait on each other in a circle); a second batch of the same
trace then waits for the first to commit, and its summary reads see the
first's spans. Traces apart never wait on each other, except for a moment at
the end of each batch: ``seq`` (what the live feed follows) is handed out
under one transaction lock held until commit, so ``seq`` values become visible
in the order they were given, and a viewer that has seen ``seq`` N has seen
every run below it.

Down or slow: a writer connects with ``connect_timeout`` and runs with
``statement_timeout`` and ``lock_timeout`` of its busy timeout, so a server that
is gone or stuck fails the batch in bounded time (counted lost, as a refused
collector's); a broken connection is dropped and the next batch connects anew,
so writing resumes by itself when the server is back.

Read-only: a viewer's session has ``default_transaction_read_only`` on, so the
server itself refuses any write from it. Viewers never create or migrate the
schema (``runnertrace migrate`` does; a writer creates it in an empty database).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from runnertrace._internal.imports import require
from runnertrace.store.dialect import POSTGRES
from runnertrace.store.engine import Engine, Transaction, inherited_connections
from runnertrace.store.errors import (
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
    StoreVersionError,
)
from runnertrace.store.schema import (
    POSTGRES_BACKFILL,
    SCHEMA_VERSION,
    column_types,
    postgres_schema,
    postgres_upgrade,
)
from runnertrace.store.url import StoreUrl

__all__ = ["PostgresEngine"]

# Transaction locks (pg_advisory_xact_lock's two-key form, apart from the per-trace keys).
_LOCK_CLASS = 0x52545241  # "RTRA"
SEQUENCE_LOCK = 1
SCHEMA_LOCK = 2
PRUNE_LOCK = 3
_APPLICATION = "runnertrace"


def _psycopg() -> Any:
    return require("psycopg", "postgres")


def _statement(sql: str) -> str:
    """SQLite's ``?`` marks as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def trace_lock_keys(keys: Sequence[str]) -> list[int]:
    """A signed 64-bit lock key per trace id (its first 16 hex digits), sorted, unique."""
    found = set()
    for key in keys:
        try:
            number = int(key[:16], 16)
        except ValueError:
            number = hash(key) & 0xFFFFFFFFFFFFFFFF
        found.add(number - (1 << 64) if number >= 1 << 63 else number)
    return sorted(found)


class _PostgresTransaction(Transaction):
    dialect = POSTGRES

    def __init__(self, engine: PostgresEngine, conn: Any, keys: list[int]) -> None:
        self.engine = engine
        self.conn = conn
        self.keys = keys
        self._savepoints = 0

    def begin(self) -> None:
        self.conn.execute("BEGIN")
        if self.keys:
            self.conn.execute(
                "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS u(k)", (self.keys,)
            )

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        self.conn.execute(_statement(sql), params or None)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        rows: list[Any] = self.conn.execute(_statement(sql), params or None).fetchall()
        return rows

    def store_rows(
        self, table: str, columns: str, keys: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        """One statement for any number of rows: a typed array per column, ``unnest``ed.

        Why not one ``VALUES`` list: psycopg parses a statement's placeholders in Python,
        and a batch of 512 spans has 8,704 of them (half the write's time went there).
        With arrays the statement has one placeholder per column, and its text is the
        same for every batch (prepared once by the server).
        """
        if not rows:
            return
        names = [c.strip() for c in columns.split(",")]
        if keys:  # a row twice in one statement is an error for ON CONFLICT: the last wins
            at = [names.index(k) for k in keys]
            rows = list({tuple(row[i] for i in at): row for row in rows}.values())
        types = column_types(table)
        arrays = ", ".join(f"%s::{types[name]}[]" for name in names)
        tail = self.dialect.upsert(table, columns, keys)[1] if keys else ""
        statement = f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({arrays})"
        self.conn.execute(statement + tail, [list(column) for column in zip(*rows, strict=True)])

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self.conn.execute("SAVEPOINT one_span")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK TO SAVEPOINT one_span")
            self.conn.execute("RELEASE SAVEPOINT one_span")
            raise
        self.conn.execute("RELEASE SAVEPOINT one_span")

    def restart(self) -> None:
        self.conn.execute("ROLLBACK")
        self.begin()

    def lock_sequence(self) -> None:
        self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, SEQUENCE_LOCK))

    def try_lock_prune(self) -> bool:
        row = self.conn.execute(
            "SELECT pg_try_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, PRUNE_LOCK)
        ).fetchone()
        return bool(row[0])

    def has_table(self, name: str) -> bool:
        return bool(self.conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0])


class PostgresEngine(Engine):
    """One PostgreSQL database through one psycopg connection per store object."""

    dialect = POSTGRES

    def __init__(self, url: StoreUrl, *, busy_timeout_s: float, read_only: bool) -> None:
        psycopg = _psycopg()
        super().__init__(url, busy_timeout_s=busy_timeout_s, read_only=read_only)
        self._psycopg = psycopg
        self.data_errors = (UnicodeError, OverflowError, psycopg.DataError)
        self._conn: Any = None
        self.path = None

    # -- connection -------------------------------------------------------------------
    def _connect(self) -> Any:
        psycopg = self._psycopg
        options = ["-c default_transaction_read_only=on"] if self.read_only else []
        if not self.read_only:
            limit = max(1, int(self.busy_timeout_s * 1000))
            options += [f"-c statement_timeout={limit}", f"-c lock_timeout={limit}"]
        try:
            conn = psycopg.connect(
                self.url.conninfo,
                autocommit=True,
                connect_timeout=max(2, round(self.busy_timeout_s)),
                application_name=_APPLICATION + ("-viewer" if self.read_only else ""),
                options=" ".join(options),
            )
        except psycopg.Error as exc:
            raise StoreUnavailableError(self._connect_error(exc)) from exc
        _register_numbers(conn)
        return conn

    def _connect_error(self, exc: BaseException) -> str:
        """One line naming the cause and the fix, from libpq's message."""
        text = " ".join(str(exc).split())
        parts = urlsplit(self.url.conninfo)
        host = parts.hostname or "localhost"
        where = f"{host}:{parts.port or 5432}"
        user = parts.username or "(your login name)"
        database = self.url.database
        shown = self.url.shown
        if re.search(r'database "[^"]*" does not exist', text):
            return (
                f"store {shown}: database {database!r} does not exist on {where}; create it "
                f"(createdb -h {host} -p {parts.port or 5432} {database}) or fix the store URL"
            )
        if re.search(
            r"password authentication failed|role \"[^\"]*\" does not exist|no password supplied"
            r"|authentication failed|no pg_hba.conf entry",
            text,
        ):
            return (
                f"store {shown}: PostgreSQL at {where} refused the login of user {user!r} "
                f"({_reason(text)}); check the user and password (in the URL, PGPASSWORD or "
                "~/.pgpass) and the server's pg_hba.conf"
            )
        if re.search(r"Connection refused|timeout expired|could not translate host|No route", text):
            return (
                f"store {shown}: cannot reach PostgreSQL at {where} ({_reason(text)}); is the "
                "server running, and are the host and port in the store URL right?"
            )
        return f"store {shown}: cannot connect: {_reason(text)}"

    def _connection(self, *, create: bool) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn = self._connect()
        try:
            version = _schema_version(conn)
            if version is None and create and not self.read_only:
                _create_schema(conn, self.url.shown)
                version = SCHEMA_VERSION
        except BaseException:
            conn.close()
            raise
        if version is None:
            conn.close()
            raise StoreNotFoundError(
                f"no trace store in {self.url.shown} yet: trace into it (trace.local.path: "
                f"{self.url.shown}), or create it with `runnertrace migrate --store "
                f"{self.url.shown}`"
            )
        if version != SCHEMA_VERSION:
            conn.close()
            raise StoreVersionError(
                f"trace store {self.url.shown} has schema version {version}, this runnertrace "
                f"reads {SCHEMA_VERSION}; "
                + (
                    "upgrade runnertrace"
                    if version > SCHEMA_VERSION
                    else f"run `runnertrace migrate --store {self.url.shown}` once"
                )
            )
        self._conn = conn
        return conn

    def _fault(self, exc: BaseException, doing: str) -> StoreError:
        """A driver error as the store's: a lost connection is dropped (reconnect next time)."""
        psycopg = self._psycopg
        text = _reason(" ".join(str(exc).split()))
        if isinstance(exc, psycopg.OperationalError) or (
            self._conn is not None and self._conn.closed
        ):
            self._drop()
            return StoreUnavailableError(f"cannot {doing} {self.url.shown}: {text}")
        return StoreError(f"cannot {doing} {self.url.shown}: {text}")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()  # a broken connection closes without a word
            self._conn = None

    def version(self) -> int | None:
        conn = self._connect()
        try:
            return _schema_version(conn)
        finally:
            conn.close()

    def migrate(self) -> tuple[int, int]:
        conn = self._connect()
        try:
            before = _schema_version(conn)
            if before is None or before < SCHEMA_VERSION:
                _create_schema(conn, self.url.shown, before)
            elif before > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"trace store {self.url.shown} has schema version {before}, newer than "
                    f"this runnertrace understands ({SCHEMA_VERSION}); upgrade runnertrace"
                )
        finally:
            conn.close()
        return before or 0, SCHEMA_VERSION

    def exists(self) -> bool:
        try:
            return self.version() is not None
        except StoreError:
            return False

    def vacuum(self) -> None:
        """``VACUUM (ANALYZE, SKIP_LOCKED)`` of the store's tables: it blocks no reader or
        writer, skips a table another session holds, and stops at the writer's statement
        timeout (autovacuum finishes what it leaves)."""
        with self._lock:
            conn = self._connection(create=False)
            try:
                conn.execute(
                    "VACUUM (ANALYZE, SKIP_LOCKED) spans, run_agents, runs, feedback, metric_points"
                )
            except self._psycopg.errors.QueryCanceled:
                return  # bounded on purpose: the statement timeout ended it
            except self._psycopg.Error as exc:
                raise self._fault(exc, "vacuum") from exc

    def size_bytes(self) -> int | None:
        rows = self.query("SELECT pg_database_size(current_database())")
        return int(rows[0][0])

    def close_connection(self) -> None:
        self._drop()

    def forget_connection(self) -> None:
        if self._conn is not None:
            inherited_connections.append(self._conn)
            self._conn = None

    # -- reading ----------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        with self._lock:
            conn = self._connection(create=False)
            try:
                cursor = conn.execute(_statement(sql), params or None)
                rows: list[Any] = cursor.fetchall() if cursor.description is not None else []
                return rows
            except self._psycopg.Error as exc:
                raise self._fault(exc, "read the trace store") from exc

    def query_within(self, sql: str, params: Sequence[object], timeout_ms: int) -> list[Any] | None:
        """Rows of one read, or ``None`` when it takes longer than ``timeout_ms`` (stopped
        by the server then): for a question worth asking only if it is cheap."""
        with self._lock:
            conn = self._connection(create=False)
            try:
                conn.execute(f"SET statement_timeout = {int(timeout_ms)}")
                try:
                    rows: list[Any] = conn.execute(_statement(sql), params or None).fetchall()
                    return rows
                except self._psycopg.errors.QueryCanceled:
                    return None
                finally:
                    conn.execute("RESET statement_timeout")
            except self._psycopg.Error as exc:
                raise self._fault(exc, "read the trace store") from exc

    # -- writing ----------------------------------------------------------------------
    @contextmanager
    def writing(self, keys: Sequence[str] = ()) -> Iterator[Transaction]:
        if self.read_only:
            raise StoreError(f"trace store {self.url.shown} is open read-only (readonly)")
        psycopg = self._psycopg
        with self._lock:
            conn = self._connection(create=True)
            tx = _PostgresTransaction(self, conn, trace_lock_keys(keys))
            try:
                tx.begin()
                yield tx
                conn.execute("COMMIT")
            except BaseException as exc:
                if not conn.closed:
                    try:
                        conn.execute("ROLLBACK")
                    except psycopg.Error:
                        self._drop()
                if isinstance(exc, psycopg.Error) and not isinstance(exc, self.data_errors):
                    raise self._fault(exc, "write to") from exc  # names the store
                raise

    def ensure_metrics(self, tx: Transaction) -> None:
        """The metric points table is part of the schema on PostgreSQL."""


def _reason(text: str) -> str:
    """libpq's message without its "connection to server at ... failed:" preamble."""
    text = re.sub(r"^connection failed: ", "", text)
    text = re.sub(r'connection to server at "[^"]*"(?: \([^)]*\))?, port \d+ failed: ', "", text)
    return text.replace("FATAL: ", "").strip()


def _schema_version(conn: Any) -> int | None:
    """The schema version in the database (None: no runnertrace store there)."""
    found = conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]
    if not found:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else None


def _create_schema(conn: Any, shown: str, before: int | None = None) -> None:
    """Create (or complete, or upgrade from ``before``) the schema, once, however many
    writers start at once."""
    psycopg = _psycopg()
    try:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_CLASS, SCHEMA_LOCK))
        # An older store's runs get their new columns first (the new indexes are on them).
        # Only then: ALTER TABLE locks the table whole, even when it has the column, and a
        # writer creating an empty database's schema while others write must not.
        upgrade = postgres_upgrade() if before is not None and before < SCHEMA_VERSION else []
        for statement in [*upgrade, *postgres_schema()]:
            conn.execute(statement)
        if before is not None and before < 4:  # schema 3's runs: their app, from the spans
            conn.execute(POSTGRES_BACKFILL)
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (str(SCHEMA_VERSION),),
        )
        conn.execute("COMMIT")
    except psycopg.Error as exc:
        conn.execute("ROLLBACK")
        text = _reason(" ".join(str(exc).split()))
        fix = (
            "; ask the database's owner to run CREATE EXTENSION pg_trgm in it (it ships with "
            "PostgreSQL), or to grant CREATE on it"
            if "permission denied" in text or "pg_trgm" in text
            else ""
        )
        raise StoreError(f"cannot create the trace store schema in {shown}: {text}{fix}") from exc


def _register_numbers(conn: Any) -> None:
    """``numeric`` (what SUM of integers gives) as int or float, as SQLite gives them."""
    from psycopg.adapt import Loader

    class Number(Loader):
        def load(self, data: Any) -> int | float:
            text = bytes(data).decode()
            return float(text) if "." in text or "e" in text.lower() else int(text)

    conn.adapters.register_loader("numeric", Number)
