"""``local``: the default backend, the span store read by ``runnertrace traces/show/report/ui``.

By default a SQLite file: it needs no account and no network, so tracing works
on a fresh clone. ``trace.local.path`` may instead be a ``postgresql://`` URL
(the ``postgres`` extra): one database that a team's processes write to and its
dashboards read. Spans reach the store through the standard bounded batch
processor, so a slow disk or database adds no latency to runs and a full queue
drops (and counts) spans instead of growing without bound.
"""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter
from pydantic import Field, field_validator

from runnertrace.store import (
    SpanStore,
    StoreError,
    StoreNotFoundError,
    StoreSpanExporter,
    StoreUrl,
    StoreVersionError,
)
from runnertrace.store.retention import parse_age
from runnertrace.store.sqlite import is_busy
from runnertrace.tracing.backend import Backend, BackendSettings, Check
from runnertrace.tracing.config_env import default_store_path

__all__ = [
    "LocalBackend",
    "LocalConfig",
    "is_busy",
    "reachable",
    "readable",
    "unreadable_fix",
    "writable",
]


class LocalConfig(BackendSettings):
    """``trace.local``: the span store (a SQLite file, or a PostgreSQL database)."""

    @field_validator("retention")
    @classmethod
    def _age(cls, value: str | None) -> str | None:
        if value is not None:
            parse_age(value)  # ValueError: pydantic names the key and says the form
        return value

    path: str = Field(default_factory=default_store_path)
    """Where the store is: a SQLite file (default: one per user in the platform's data
    directory, see ``doctor``), or a PostgreSQL URL such as
    ``postgresql://user@host:5432/traces`` (the ``postgres`` extra). The viewers
    (``traces``, ``show``, ``report``, ``ui``, ``doctor``) read the same store; their
    ``--store`` (or ``--db``) names another."""
    retention: str | None = None
    """Keep runs this long, then prune them: ``30d``, ``12h``, ``2w`` (default: keep all).
    The writer prunes a bounded step now and then; ``runnertrace prune --older-than``
    does it at once."""
    max_queue_size: int = Field(8192, ge=1)
    """Finished spans that may wait for the file. A disk stall (another program's
    fsync, a checkpoint) holds the writer for a moment; at a tight loop's
    3,000 spans/s this buffers about 3 s of it, where 2,048 dropped spans
    (measured: ``benchmarks/store_throughput.py``). Still a bound: never more."""


class LocalBackend(Backend):
    """Stores spans in ``trace.local.path`` (default: a per-user store, see ``doctor``)."""

    name = "local"
    config_model = LocalConfig

    @property
    def settings(self) -> LocalConfig:
        return self.trace_config.section(self.name, LocalConfig)

    @property
    def url(self) -> StoreUrl:
        """The store, a relative file path resolved against the working directory now."""
        return StoreUrl.parse(self.settings.path)

    @property
    def path(self) -> Path:
        """The store file (a PostgreSQL store has none: see :attr:`url`)."""
        url = self.url
        if url.path is None:
            raise StoreError(f"{url.shown} is a PostgreSQL store, not a file")
        return url.path

    def exporter(self) -> SpanExporter:
        # Half the flush budget: a locked store (or a database that does not answer)
        # fails the batch (counted, explained) before a flush that waits for it gives up.
        retention = self.settings.retention
        return StoreSpanExporter(
            self.url,
            busy_timeout_s=self.trace_config.flush_timeout_s / 2,
            retention_s=parse_age(retention) if retention else None,
        )

    def max_queue_size(self) -> int:
        return self.settings.max_queue_size

    def metric_exporter(self) -> MetricExporter:
        from runnertrace.exporters.local_metrics import StoreMetricExporter

        return StoreMetricExporter(self.url, busy_timeout_s=self.trace_config.flush_timeout_s / 4)

    def check(self) -> list[Check]:
        url = self.url
        if url.path is None:
            return [reachable(url)]
        path = url.path
        checks = [writable(path)]
        if path.is_file():
            checks.append(readable(path))
        return checks


def reachable(url: StoreUrl) -> Check:
    """Can the PostgreSQL store be reached and read? A viewer's connection: nothing is written.

    An empty database is fine (the first traced run creates the schema in it); a
    refused login, a missing database or a server that is down is a failure whose
    message names the cause and the fix.
    """
    store = SpanStore(url, read_only=True, busy_timeout_s=5.0)
    try:
        spans, traces = store.count()
    except StoreNotFoundError:
        return Check(
            "local", "store", "ok", f"{url.shown} is reachable; the first traced run creates it"
        )
    except (StoreError, ImportError) as exc:  # ImportError: the postgres extra is missing
        return Check("local", "store", "fail", str(exc), fix="see the message")
    finally:
        store.close()
    return Check("local", "store", "ok", f"{traces} traces, {spans} spans in {url.shown}")


def readable(path: Path) -> Check:
    """Can the existing store at ``path`` be read? Opened read-only: a check never writes.

    ``doctor`` lists it, and ``runnertrace ui`` and ``demo`` refuse a store that fails
    it with the same message and fix, before they start.
    """
    store = SpanStore(path, read_only=True, busy_timeout_s=1.0)
    try:
        spans, traces = store.count()
    except StoreVersionError as exc:  # the data is fine: the message says how to read it
        return Check("local", "store", "fail", str(exc), fix="see the message")
    except StoreError as exc:
        if is_busy(exc.__cause__):  # held by another program: nothing is wrong with it
            return Check(
                "local",
                "store",
                "warn",
                f"{path} is locked by another program: {exc.__cause__}",
                fix="close the program that holds it, or choose another store with "
                "trace.local.path",
            )
        return Check("local", "store", "fail", str(exc), fix=unreadable_fix(path))
    finally:
        store.close()
    return Check("local", "store", "ok", f"{traces} traces, {spans} spans in {path}")


def unreadable_fix(path: Path) -> str:
    """What to do with a file that is not a readable store (``doctor`` and the CLI say the same)."""
    return f"move {path} aside; runnertrace creates a new store on the next run"


def writable(path: Path) -> Check:
    """Can the store (and SQLite's -wal/-shm files beside it) be written, without creating it?"""
    if path.exists():
        if path.is_dir():
            return Check(
                "local",
                "path",
                "fail",
                f"{path} is a directory",
                fix="set trace.local.path to a file path, e.g. ~/traces.db",
            )
        if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
            return Check(
                "local",
                "path",
                "fail",
                f"{path} is not writable",
                fix=f"fix the permissions of {path} and its directory, or set trace.local.path",
            )
        return Check("local", "path", "ok", f"writing spans to {path}")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return Check(
            "local",
            "path",
            "fail",
            f"cannot create {path}: {ancestor} is not a directory",
            fix="set trace.local.path to a location under a writable directory",
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return Check(
            "local",
            "path",
            "fail",
            f"cannot create {path}: {ancestor} is not writable",
            fix="set trace.local.path to a location under a writable directory",
        )
    return Check("local", "path", "ok", f"{path} will be created on the first traced run")
