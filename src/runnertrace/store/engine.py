"""What an engine gives the store, and the one thing every engine must survive: ``fork()``.

An engine owns a connection (opened on first use, reopened after a fault) and
the transactions of a write; the queries themselves are the store's, written
once (:mod:`runnertrace.store.dialect`).
"""

from __future__ import annotations

import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from runnertrace.store.dialect import Dialect
from runnertrace.store.url import StoreUrl

__all__ = ["Engine", "Transaction"]


class Transaction(ABC):
    """One write transaction (see :class:`runnertrace.store.summary.Writing`)."""

    dialect: Dialect

    @abstractmethod
    def store_rows(
        self, table: str, columns: str, keys: Sequence[str], rows: Sequence[Sequence[object]]
    ) -> None:
        """Insert ``rows``, over the rows of the same ``keys`` (none: append)."""

    @abstractmethod
    def execute(self, sql: str, params: Sequence[object] = ()) -> None: ...

    @abstractmethod
    def rows(self, sql: str, params: Sequence[object] = ()) -> list[Any]: ...

    @abstractmethod
    def savepoint(self) -> AbstractContextManager[None]:
        """A nested transaction: a data error inside it undoes it alone, then propagates."""

    @abstractmethod
    def restart(self) -> None:
        """Undo everything so far and begin again (the batch's fast path failed)."""

    @abstractmethod
    def try_lock_prune(self) -> bool:
        """Become the one pruner until this commits; False: another is pruning."""

    @abstractmethod
    def has_table(self, name: str) -> bool: ...

    @abstractmethod
    def lock_sequence(self) -> None:
        """Hold other writers back from assigning ``seq`` until this commits (PostgreSQL;
        SQLite's write lock already does)."""


class Engine(ABC):
    """A connection to one store, its locks, and its errors mapped to the store's."""

    dialect: Dialect
    data_errors: tuple[type[BaseException], ...]
    """What the driver raises for a value the database cannot hold (one span's fault)."""

    def __init__(self, url: StoreUrl, *, busy_timeout_s: float, read_only: bool) -> None:
        self.url = url
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        self._lock = threading.Lock()
        _fork_guard.engines.add(self)

    @abstractmethod
    def query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """Rows of one read (StoreNotFoundError: no store there yet)."""

    @abstractmethod
    def writing(self, keys: Sequence[str] = ()) -> AbstractContextManager[Transaction]:
        """A write transaction, committed at the end; ``keys``: the traces it touches."""

    @abstractmethod
    def exists(self) -> bool:
        """Is there a store (with our schema) there yet?"""

    @abstractmethod
    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the schema: (version before, version after)."""

    @abstractmethod
    def version(self) -> int | None:
        """The schema version there (None: no store)."""

    @abstractmethod
    def ensure_metrics(self, tx: Transaction) -> None:
        """Make the metric points table, once (SQLite makes it on first use)."""

    @abstractmethod
    def close_connection(self) -> None:
        """Close the connection (the caller holds ``self._lock``); the next use reopens."""

    @abstractmethod
    def forget_connection(self) -> None:
        """In a forked child: drop the parent's connection without touching it."""

    def close(self) -> None:
        with self._lock:
            self.close_connection()

    def size_bytes(self) -> int | None:
        """The store's size on disk (benchmarks and ``doctor``)."""
        return None

    @abstractmethod
    def vacuum(self) -> None:
        """Let the room of deleted rows be reused, without holding writers back for long."""

    def _after_fork_in_child(self) -> None:
        self.forget_connection()
        self._lock = threading.Lock()

    def write_locks(self) -> Iterator[threading.Lock]:
        """The process-wide locks a write takes before ``self._lock`` (the fork guard's)."""
        return iter(())


class _ForkGuard:
    """No connection of ours is open when the process forks; the child gets new locks.

    Why close rather than reopen in the child: SQLite keeps per-process state for
    each open file (its locks, the shared-memory index of the WAL). A child that
    inherits it from a connection that was writing would see that connection's
    write lock as held by itself, for good, and never store a span; a child that
    closes an inherited connection could take the parent's WAL away. A PostgreSQL
    connection is a socket: a child that used or closed it would speak on, or end,
    the parent's session. So before a fork every store's connection is closed,
    after any write in progress has committed (the fork waits for it: one
    transaction, bounded by the busy timeout), and every store reopens on its next
    use, in the parent and the child alike.
    """

    def __init__(self) -> None:
        self.engines: weakref.WeakSet[Engine] = weakref.WeakSet()
        self._held: list[threading.Lock] = []
        self.child_hooks: list[Any] = []

    def before(self) -> None:
        engines = list(self.engines)
        # The engines' own locks, taken in their order (process-wide write locks first).
        write_locks = sorted({id(lock): lock for e in engines for lock in e.write_locks()}.items())
        for _, lock in write_locks:
            lock.acquire()
            self._held.append(lock)
        for engine in engines:
            engine._lock.acquire()  # noqa: SLF001 - the engine's protocol
            self._held.append(engine._lock)  # noqa: SLF001
            engine.close_connection()

    def after_in_parent(self) -> None:
        while self._held:
            self._held.pop().release()

    def after_in_child(self) -> None:
        self._held.clear()  # the parent's; the child makes its own
        for hook in self.child_hooks:
            hook()
        for engine in list(self.engines):
            engine._after_fork_in_child()  # noqa: SLF001


_fork_guard = _ForkGuard()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_fork_guard.before,
        after_in_parent=_fork_guard.after_in_parent,
        after_in_child=_fork_guard.after_in_child,
    )

# Connections a forked child found open anyway (the guard could not close one):
# never used again, and never closed (see _ForkGuard), so kept referenced here.
inherited_connections: list[object] = []
