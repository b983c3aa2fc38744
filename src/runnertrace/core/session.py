"""Sessions: per-conversation state that survives across runs.

A session holds each framework's native state under that framework's own key,
a volatile cache (cleared after every run), and the *framework context*: a
framework-agnostic dict that runners inject into the native call and write back
only after the call succeeded.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runnertrace._internal.forksafe import relock_after_fork
from runnertrace.core.context import current_runner_key, current_session

__all__ = ["InMemorySessionStore", "Session", "SessionStore", "SqliteSessionStore"]

FRAMEWORK_CONTEXT_KEY = "__framework_context__"


class Session:
    """One conversation's state. Construct with ``Session("id")``."""

    def __init__(self, id: str) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError(f"a session id must be a non-empty string, got {id!r}")
        self.id = id
        self._data: dict[str, Any] = {}
        self.cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    # -- persisted values -------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def keys(self) -> list[str]:
        return [k for k in self._data if k != FRAMEWORK_CONTEXT_KEY]

    def get_framework_session(self) -> Any:
        """The state of the framework whose runner is executing right now."""
        key = current_runner_key.get()
        if key is None:
            raise RuntimeError("get_framework_session() is only available during a run")
        return self._data.get(key)

    # -- framework context ------------------------------------------------------
    def set_framework_context(self, context: dict[str, Any] | None) -> None:
        if context is not None and not isinstance(context, dict):
            raise TypeError(f"framework context must be a dict, got {type(context).__name__}")
        if context is None:
            self._data.pop(FRAMEWORK_CONTEXT_KEY, None)
        else:
            self._data[FRAMEWORK_CONTEXT_KEY] = context

    def get_framework_context(self) -> dict[str, Any] | None:
        ctx = self._data.get(FRAMEWORK_CONTEXT_KEY)
        return ctx if isinstance(ctx, dict) else None

    def load_framework_context(self) -> dict[str, Any] | None:
        """A deep copy of the stored context, for a runner to inject natively."""
        ctx = self.get_framework_context()
        return copy.deepcopy(ctx) if ctx is not None else None

    def write_back_framework_context(
        self, loaded: Mapping[str, Any], produced: Mapping[str, Any]
    ) -> None:
        """Store ``produced`` shallow-merged over ``loaded``.

        Runners call this only after the native call succeeded, so a failed run
        leaves the previously stored context untouched.
        """
        merged = dict(loaded)
        merged.update(produced)
        self._data[FRAMEWORK_CONTEXT_KEY] = merged

    # -- run lifecycle ------------------------------------------------------------
    @classmethod
    def current(cls) -> Session:
        """The session of the run in progress; ``RuntimeError`` outside a run."""
        session = current_session.get()
        if session is None:
            raise RuntimeError("Session.current() called outside of an agent run")
        return session

    def end_run(self) -> None:
        self.cache.clear()

    def to_state(self) -> dict[str, Any]:
        return {"id": self.id, "data": self._data}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Session:
        session = cls(state["id"])
        session._data = dict(state["data"])
        return session


class SessionStore(ABC):
    """Where sessions live between runs. Each store also owns the per-session locks."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    @abstractmethod
    def load(self, session_id: str) -> Session | None: ...

    @abstractmethod
    def save(self, session: Session) -> None: ...

    def lock(self, session_id: str) -> asyncio.Lock:
        """The lock that serialises runs of one session."""
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock


class InMemorySessionStore(SessionStore):
    """The default: sessions live as objects in this process."""

    def __init__(self) -> None:
        super().__init__()
        self._sessions: dict[str, Session] = {}

    def load(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def save(self, session: Session) -> None:
        self._sessions[session.id] = session


class SqliteSessionStore(SessionStore):
    """Sessions pickled into a SQLite file, so they survive restarts.

    Pickle rather than JSON because framework states (LangGraph checkpoints,
    Pydantic AI message lists) are arbitrary Python objects. The file is trusted
    application storage, never user input.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db_lock = threading.Lock()
        relock_after_fork(self, _db_lock=threading.Lock)
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, state BLOB NOT NULL)"
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._db_lock:
            db = sqlite3.connect(self.path)
            try:
                with db:
                    yield db
            finally:
                db.close()

    def load(self, session_id: str) -> Session | None:
        with self._connect() as db:
            row = db.execute("SELECT state FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        return Session.from_state(pickle.loads(row[0]))

    def save(self, session: Session) -> None:
        blob = pickle.dumps(session.to_state())
        with self._connect() as db:
            db.execute(
                "INSERT INTO sessions (id, state) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET state = excluded.state",
                (session.id, blob),
            )
