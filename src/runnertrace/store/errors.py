"""What the store raises: one family, each message naming the store and the cause."""

from __future__ import annotations

__all__ = [
    "StoreError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "StoreVersionError",
    "TraceNotFoundError",
]


class StoreError(RuntimeError):
    """The store cannot be opened or read; the message names the file and the cause."""


class StoreNotFoundError(StoreError):
    """There is no store file yet (nothing has been traced to ``local``)."""


class StoreVersionError(StoreError):
    """The store is of another schema version than this runnertrace reads (its data is fine)."""


class TraceNotFoundError(LookupError):
    """``last`` or an id (prefix) matches no trace, or a prefix matches several."""


class StoreUnavailableError(StoreError):
    """The store's server cannot be reached or refused us (down, slow, wrong login).

    A writer counts the batch lost, as for a refused collector; the next batch tries
    again, so writing resumes by itself when the server is back.
    """
