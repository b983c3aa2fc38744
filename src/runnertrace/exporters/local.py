"""``local``: the default backend, a SQLite file read by ``runnertrace traces/show/report``.

It needs no account and no network, so tracing works on a fresh clone. Spans
reach the file through the standard bounded batch processor, so a slow disk
adds no latency to runs and a full queue drops (and counts) spans instead of
growing without bound.
"""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter
from pydantic import Field

from runnertrace.exporters.local_store import SpanStore, SqliteSpanExporter, StoreError
from runnertrace.tracing.backend import Backend, BackendSettings, Check
from runnertrace.tracing.config_env import default_store_path

__all__ = ["LocalBackend", "LocalConfig"]


class LocalConfig(BackendSettings):
    """``trace.local``: the embedded store."""

    path: str = Field(default_factory=default_store_path)
    """Default: one store per user in the platform's data directory (see ``doctor``)."""
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
    def path(self) -> Path:
        """The store file, resolved against the working directory now."""
        return SpanStore(self.settings.path).path

    def exporter(self) -> SpanExporter:
        # Half the flush budget: a locked store fails the batch (counted, explained)
        # before a flush that waits for it gives up.
        return SqliteSpanExporter(self.path, busy_timeout_s=self.trace_config.flush_timeout_s / 2)

    def max_queue_size(self) -> int:
        return self.settings.max_queue_size

    def metric_exporter(self) -> MetricExporter:
        from runnertrace.exporters.local_metrics import SqliteMetricExporter

        return SqliteMetricExporter(self.path, busy_timeout_s=self.trace_config.flush_timeout_s / 4)

    def check(self) -> list[Check]:
        path = self.path
        checks = [writable(path)]
        if path.is_file():
            try:
                spans, traces = SpanStore(path).count()
            except StoreError as exc:
                checks.append(
                    Check(
                        self.name,
                        "store",
                        "fail",
                        str(exc),
                        fix=f"move {path} aside; runnertrace creates a new store on the next run",
                    )
                )
            else:
                checks.append(
                    Check(self.name, "store", "ok", f"{traces} traces, {spans} spans in {path}")
                )
        return checks


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
