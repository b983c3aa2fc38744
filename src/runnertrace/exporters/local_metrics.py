"""The ``local`` backend's metrics: each export interval's data points as rows of the store.

Why rows of delta points: a dashboard over the store (``runnertrace ui``) sums
and buckets them per time range with plain SQL, and a restart of the traced
process loses nothing already written (cumulative points would reset).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)

from runnertrace.store import SpanStore, StoredMetricPoint, StoreError, StoreUrl
from runnertrace.tracing.drops import metric_export_failed
from runnertrace.tracing.metrics import delta_temporality, our_points

__all__ = ["SqliteMetricExporter", "StoreMetricExporter", "stored_points"]


def stored_points(data: MetricsData) -> list[StoredMetricPoint]:
    """Our data points in ``data`` as store rows (sums and explicit-bucket histograms)."""
    points: list[StoredMetricPoint] = []
    for metric, point in our_points(data):
        common: dict[str, Any] = {
            "time_ns": point.time_unix_nano,
            "start_ns": point.start_time_unix_nano,
            "name": metric.name,
            "unit": metric.unit or "",
            "attributes": dict(point.attributes or {}),
        }
        if isinstance(point, HistogramDataPoint):
            points.append(
                StoredMetricPoint(
                    **common,
                    kind="histogram",
                    value=float(point.sum),
                    count=int(point.count),
                    min=float(point.min),
                    max=float(point.max),
                    bounds=[float(b) for b in point.explicit_bounds],
                    bucket_counts=[int(c) for c in point.bucket_counts],
                )
            )
        else:
            points.append(StoredMetricPoint(**common, kind="sum", value=float(point.value)))
    return points


class StoreMetricExporter(MetricExporter):
    """Appends our metric points to the store's ``metric_points`` table (either engine);
    never raises."""

    def __init__(
        self, path: str | os.PathLike[str] | StoreUrl, *, busy_timeout_s: float = 10.0
    ) -> None:
        super().__init__(preferred_temporality=delta_temporality())
        self.store = SpanStore(path, busy_timeout_s=busy_timeout_s)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        try:
            self.store.write_metric_points(stored_points(metrics_data))
        except (sqlite3.Error, StoreError, OSError) as exc:
            # Said in the local backend's loss report, not on a line of its own.
            metric_export_failed("local", f"cannot write metrics to {self.store.location}: {exc}")
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True  # every export commits before it returns

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.store.close()


SqliteMetricExporter = StoreMetricExporter
"""The exporter's name from when SQLite was the only engine."""
