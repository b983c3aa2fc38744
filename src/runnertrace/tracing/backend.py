"""The backend contract: config, exporter, attribute mapping and ``check()``.

A backend is found by name through the ``runnertrace.backends`` entry-point
group (see :mod:`runnertrace.tracing.backend_registry`) and owns the model of its
``trace.<name>`` section (:attr:`Backend.config_model`), so a third-party
backend gets validated settings exactly like a built-in one.

A backend maps our vendor-neutral spans onto what one vendor renders and ships
them. Mapping happens on a *copy* of each span at export time (see
:class:`~runnertrace.tracing.export.MappedSpanExporter`), so in a fan-out every
other backend still sees the plain span.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, TypeVar

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader

__all__ = ["Backend", "BackendConfig", "BackendSettings", "Check"]

SectionT = TypeVar("SectionT", bound=BaseModel)


class BackendConfig(Protocol):
    """What a backend reads of the tracing configuration: its own section, the flush
    timeout, and whether metrics are on. :class:`~runnertrace.tracing.config.TraceConfig`
    is one; naming those reads here keeps this module below the configuration, which
    looks backends up by name."""

    @property
    def flush_timeout_s(self) -> float: ...

    @property
    def metrics(self) -> bool: ...

    def section(self, name: str, model: type[SectionT]) -> SectionT: ...


class BackendSettings(BaseModel):
    """Base for a backend's ``trace.<name>`` section: unknown keys are errors, not ignored.

    Keep the subclass in a module that imports no vendor SDK: validating a
    configuration imports it. Every field needs a default, because a section
    that is not given is the model's defaults.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


@dataclass(frozen=True)
class Check:
    """One finding of ``runnertrace doctor``. ``fix`` says what to do; never holds secrets."""

    backend: str
    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str = ""


class Backend(ABC):
    """Base class for every backend (registered as an entry point, or named by a dotted path).

    Subclasses implement :meth:`exporter`; most also override
    :meth:`map_attributes` and :meth:`check`. Constructing a backend must not
    touch the network.
    """

    name: ClassVar[str] = "custom"
    """The name it is registered under; its settings are the ``trace.<name>`` section."""
    config_model: ClassVar[type[BaseModel]] = BackendSettings
    """Validates ``trace.<name>``; read it with ``self.trace_config.section(name, model)``."""
    dropped_attributes: ClassVar[frozenset[str]] = frozenset()
    """Keys removed from this backend's copy (a vendor that mangles them, e.g. scrubbing)."""

    def __init__(self, config: BackendConfig) -> None:
        self.trace_config = config

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming every problem of this backend's configuration.

        Called when the backend is built for a pipeline, so a missing key is a
        configuration error reported once, not a fault on every run.
        """
        return None

    @abstractmethod
    def exporter(self) -> SpanExporter:
        """The exporter that ships (already mapped) spans."""

    def map_attributes(self, span: ReadableSpan) -> Mapping[str, AttributeValue] | None:
        """Extra attributes for this backend's copy of ``span`` (``None``: no change)."""
        return None

    def resource_attributes(self) -> Mapping[str, AttributeValue]:
        """Extra resource attributes for this backend's copy of each span."""
        return {}

    def max_queue_size(self) -> int:
        """How many finished spans may wait for export before new ones are dropped."""
        return 2048

    def bind(self, provider: TracerProvider) -> None:
        """Called once our processors are on ``provider`` (e.g. to instrument onto it)."""
        return None

    def processors(self) -> list[SpanProcessor]:
        """The span processors to add to the provider: by default one bounded batch queue."""
        from runnertrace.tracing.export import BoundedBatchSpanProcessor, MappedSpanExporter

        exporter = self.exporter()
        if (
            type(self).map_attributes is not Backend.map_attributes
            or self.resource_attributes()
            or self.dropped_attributes
        ):
            exporter = MappedSpanExporter(exporter, self)
        return [
            BoundedBatchSpanProcessor(
                exporter,
                name=self.name,
                max_queue_size=self.max_queue_size(),
                export_timeout_s=self.trace_config.flush_timeout_s,
            )
        ]

    def metric_exporter(self) -> MetricExporter | None:
        """Where this backend sends the GenAI metrics (``None``: it takes none)."""
        return None

    def metric_readers(self) -> list[MetricReader]:
        """The metric readers to add: by default the SDK's periodic reader over the exporter."""
        from runnertrace.tracing.metrics import periodic_reader

        exporter = self.metric_exporter()
        if exporter is None:
            return []
        return [periodic_reader(exporter, timeout_s=self.trace_config.flush_timeout_s)]

    def check(self) -> list[Check]:
        """Diagnose configuration for ``runnertrace doctor``; must not print secrets."""
        return [Check(self.name, "configured", "ok", "no checks defined")]
