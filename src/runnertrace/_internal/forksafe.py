"""Locks that a forked child gets new: ``os.fork()`` keeps a lock held by a thread that is gone.

Only the forking thread survives a fork. A lock that another thread held at
that moment stays held in the child for good, and the child's first use of it
hangs (a web server's preloaded worker, a ``multiprocessing`` fork ``Pool``).
Every lock of ours that a worker thread can hold is registered here and
re-made in the child, before anything of ours runs there.

Python's own import locks are such locks too, and no hook re-makes them: a
module that a worker thread was importing at the fork stays locked in the
child, and the child's first import of it hangs. So a worker thread of ours
imports nothing: :func:`import_before_threads` names what the code it runs
would import lazily (a dependency's function-level imports), and imports it on
the thread that builds the worker.
"""

from __future__ import annotations

import importlib
import os
import threading
import weakref
from collections.abc import Callable

__all__ = ["import_before_threads", "relock_after_fork"]

LockFactory = Callable[[], object]

# owner -> {attribute: factory}; weak, so an exporter nobody uses is collected.
_owners: weakref.WeakKeyDictionary[object, dict[str, LockFactory]] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def relock_after_fork(owner: object, **locks: LockFactory) -> None:
    """In each forked child, set ``owner.<name> = factory()`` for each of ``locks``.

    ``owner`` is an object or a module (``sys.modules[__name__]``), held weakly;
    e.g. ``relock_after_fork(self, _lock=threading.Lock)``.
    """
    with _guard:
        _owners.setdefault(owner, {}).update(locks)


def import_before_threads(*modules: str) -> None:
    """Import ``modules`` now, so that no worker thread of ours imports them later.

    For the modules a dependency imports inside a function that our worker
    threads call (``requests`` imports ``netrc`` on a session's first request).
    A missing module is left to the code that needs it, which says so itself.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # the dependency handles its own absence where it imports it


def _after_fork_in_child() -> None:
    global _guard
    _guard = threading.Lock()
    for owner, locks in list(_owners.items()):
        for name, factory in locks.items():
            setattr(owner, name, factory())


if hasattr(os, "register_at_fork"):  # not on Windows, where there is no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
