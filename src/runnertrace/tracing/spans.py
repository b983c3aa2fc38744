"""A lean span implementation for the providers runnertrace owns.

The SDK's ``Tracer.start_span`` costs about 20 µs for a bare span on a modest
machine and about 1.5 µs more per attribute (each value is re-validated under a
lock, then the whole span is copied into a ``ReadableSpan`` at ``end()``). A
traced agent run makes ~10 spans of ~11 attributes, so on a fast agent the SDK
alone would double the run time. :class:`LeanTracer` produces the very same
``ReadableSpan`` objects for the same processors, at a fraction of the cost:

* the span *is* its own ``ReadableSpan`` (frozen at ``end()``: every mutator
  becomes a no-op), so nothing is copied;
* attribute values of the plain types (``str``, ``bool``, ``int``, ``float``)
  are stored directly; anything else goes through the SDK's own cleaning, so
  the stored values are exactly what the SDK would store;
* the provider's sampler, id generator, resource, span limits and span
  processors are used as they are (``on_start``, ``_on_ending``, ``on_end``,
  in the SDK's order). The sampler is skipped only where its answer is fixed:
  under a ``ParentBased`` sampler whose local-sampled-parent branch is
  ``ALWAYS_ON``, for a child of a sampled local span, and for a root when the
  root sampler samples everything (``sample_rate: 1``). The processors are
  called from the provider's multi-processor tuple directly, and ``_on_ending``
  is skipped while every processor has the SDK's no-op version of it;
* a run's child spans take an unchecked path (:meth:`LeanTracer.start_child`)
  whose preconditions ``RunTracer`` checks once per run.

Measured on a 2-core VM (``benchmarks/overhead.py``): a bare span costs about
20 µs through the SDK's tracer and about 4 µs here with 11 attributes.

It is only used on a private provider that :mod:`runnertrace.tracing.setup`
built (or that ``runnertrace.testing`` built). When the application installed
its own SDK provider, its processors may rely on SDK internals, so the SDK's
tracer is used there, unchanged. Both paths are tested to export identical
spans.

Thread-safety: a span is written by the one task that runs the agent; code
elsewhere that finds it as the current span (a tool setting an attribute) only
performs single dict operations, which are atomic in CPython.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanLimits,
    SpanProcessor,
    SynchronousMultiSpanProcessor,
    TracerProvider,
)
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util import types

from runnertrace.tracing.otelctx import current_span

__all__ = ["LeanSpan", "LeanTracer", "lean_tracer_for"]

logger = logging.getLogger("runnertrace")

_PLAIN = frozenset({str, bool, int, float})
_UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SAMPLED_RANDOM = TraceFlags(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_NO_STATE = trace_api.DEFAULT_TRACE_STATE  # what SpanContext stores for None

try:  # the SDK's own value cleaning, so non-plain values are stored as it would
    from opentelemetry.attributes import _clean_attribute_value as _sdk_clean
except ImportError:  # pragma: no cover - older or newer SDK layout

    def _sdk_clean(value: Any, max_len: int | None) -> Any:  # type: ignore[no-redef]
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            return tuple(value)
        return value


def _clean(value: Any, max_len: int | None) -> Any:
    """One attribute value as the SDK would store it (``None``: drop it)."""
    kind = type(value)
    if kind in _PLAIN:
        if max_len is not None and kind is str and len(value) > max_len:
            return value[:max_len]
        return value
    return _sdk_clean(value, max_len)


def _context_factory() -> Any:
    """A fast ``SpanContext`` constructor for ids known to be valid, if the layout allows.

    ``SpanContext`` is a tuple subclass whose ``__new__`` re-checks both ids and
    the flags (about 0.5 µs, a tenth of a lean span); ids from the provider's id
    generator are valid by contract, so only ``is_valid`` is computed here. The
    tuple layout is checked once against the real constructor: if an API version
    ever changes it, the real constructor is used.
    """
    make = tuple.__new__

    def fast(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
        return make(SpanContext, (trace_id, span_id, False, flags, state, trace_id != 0 != span_id))

    def checked(trace_id: int, span_id: int, flags: TraceFlags, state: TraceState) -> SpanContext:
        return SpanContext(trace_id, span_id, False, flags, state)

    sample_flags = TraceFlags(TraceFlags.SAMPLED)
    sample = fast(3, 5, sample_flags, _NO_STATE)
    real = SpanContext(3, 5, False, sample_flags, _NO_STATE)
    same = tuple(sample) == tuple(real) and sample.is_valid and sample.span_id == 5
    return fast if same and type(sample) is type(real) else checked


_span_context = _context_factory()


class LeanSpan(trace_api.Span, ReadableSpan):
    """A recording span that is also the ``ReadableSpan`` its processors receive."""

    def __init__(
        self,
        tracer: LeanTracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: Sequence[Link],
        start_time: int,
    ) -> None:
        # ReadableSpan's fields, set directly (its __init__ would build a Resource);
        # the ones that rarely change are class attributes until they do.
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        if links:
            self._links = tuple(links)
        self._start_time = start_time
        self._tracer = tracer
        self._resource = tracer.resource
        self._instrumentation_scope = tracer.scope

    _instrumentation_info = None
    _events: Sequence[Event] = ()
    _links: tuple[Link, ...] = ()
    _status = _UNSET
    _end_time: int | None = None
    _dropped_attributes = 0
    _dropped_events = 0

    # -- ReadableSpan ----------------------------------------------------------------------
    @property
    def dropped_attributes(self) -> int:
        return self._dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._dropped_events

    # -- trace_api.Span ----------------------------------------------------------------------
    def get_span_context(self) -> SpanContext:
        return self._context  # type: ignore[return-value]  # always set here

    def is_recording(self) -> bool:
        return self._end_time is None

    def _frozen(self, what: str) -> bool:
        if self._end_time is None:
            return False
        logger.warning("runnertrace: %s on ended span %r ignored", what, self._name)
        return True

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        if self._frozen("set_attribute"):
            return
        self._put(key, value)

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        if self._frozen("set_attributes"):
            return
        for key, value in attributes.items():
            self._put(key, value)

    def _put(self, key: str, value: Any) -> None:
        if not key or type(key) is not str:
            logger.warning("runnertrace: invalid attribute key %r dropped", key)
            return
        value = _clean(value, self._tracer.max_value_length)
        if value is None:
            return
        attributes: dict[str, Any] = self._attributes  # type: ignore[assignment]
        if key in attributes:
            del attributes[key]  # as in the SDK: a re-set key becomes the newest
        elif len(attributes) >= self._tracer.max_attributes:
            # As the SDK does: the oldest attribute makes room.
            del attributes[next(iter(attributes))]
            self._dropped_attributes += 1
        attributes[key] = value

    def set_trusted(self, attributes: dict[str, Any]) -> None:
        """Merge attributes whose values are already valid (runnertrace's own)."""
        if self._end_time is not None:
            return
        own: dict[str, Any] = self._attributes  # type: ignore[assignment]
        if len(own) + len(attributes) > self._tracer.max_attributes:
            for key, value in attributes.items():  # near the limit: the SDK's order
                self._put(key, value)
            return
        own.update(attributes)

    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        if self._frozen("add_event"):
            return
        tracer = self._tracer
        events = self._events
        if not isinstance(events, list):
            events = self._events = []
        elif len(events) >= tracer.max_events:
            del events[0]  # as the SDK's bounded list does: the oldest goes
            self._dropped_events += 1
        cleaned: types.Attributes
        if attributes and (
            tracer.max_event_value_length is not None
            or len(attributes) > tracer.max_event_attributes
        ):
            cleaned = BoundedAttributes(
                tracer.max_event_attributes,
                attributes,
                immutable=True,
                max_value_len=tracer.max_event_value_length,
            )
        else:
            cleaned = {}
            for key, value in (attributes or {}).items():
                value = _clean(value, None)
                if value is not None and key and type(key) is str:
                    cleaned[key] = value
        events.append(Event(name, cleaned, timestamp if timestamp is not None else time.time_ns()))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if self._frozen("add_link") or not context.is_valid:
            return
        self._links = (*self._links, Link(context, attributes))

    def update_name(self, name: str) -> None:
        if not self._frozen("update_name"):
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # The SDK's rules: OK is final, UNSET never overrides.
        if self._frozen("set_status") or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        kind = type(exception)
        module = kind.__module__
        event: dict[str, Any] = {
            "exception.type": f"{module}.{kind.__qualname__}"
            if module and module != "builtins"
            else kind.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(
                traceback.format_exception(kind, exception, exception.__traceback__)
            ),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            self._frozen("end")
            return
        self._end_time = end_time if end_time is not None else time.time_ns()
        tracer = self._tracer
        processors = tracer.processor._span_processors
        if tracer.on_ending is not None and processors is not tracer.without_ending:
            tracer.ending(self, processors)
        for processor in processors:
            processor.on_end(self)

    def __repr__(self) -> str:
        return f"LeanSpan(name={self._name!r}, context={self._context!r})"


class LeanTracer(trace_api.Tracer):
    """A tracer over an SDK ``TracerProvider``'s parts that makes :class:`LeanSpan`s."""

    def __init__(self, provider: TracerProvider, name: str, version: str) -> None:
        # The provider's own multi-processor: every processor added to it, in order.
        self.processor: Any = provider._active_span_processor  # we own this provider
        # Processors are called from its tuple directly (added ones join a new tuple).
        self.on_ending = getattr(self.processor, "_on_ending", None)  # newer SDKs only
        # The last processor tuple found to have no _on_ending hook of its own.
        self.without_ending: tuple[SpanProcessor, ...] | None = None
        self.sampler = provider.sampler
        self.ids = provider.id_generator
        self.new_span_id = self.ids.generate_span_id
        # The SDK's default generator draws from ``random.getrandbits``; a draw of 0
        # (invalid) falls back to the generator itself, which redraws.
        self.quick_span_id: Callable[[int], int] = (
            random.getrandbits if type(self.ids) is RandomIdGenerator else _no_quick_id
        )
        self.resource = provider.resource
        self.scope = InstrumentationScope(name, version)
        limits: SpanLimits = provider._span_limits
        self.max_attributes = _limit(limits.max_span_attributes)
        self.max_events = _limit(limits.max_events)
        self.max_value_length: int | None = limits.max_span_attribute_length
        self.max_event_attributes = _limit(limits.max_event_attributes)
        self.max_event_value_length: int | None = limits.max_attribute_length
        is_random = getattr(self.ids, "is_trace_id_random", None)
        self.root_flags = _SAMPLED_RANDOM if is_random is not None and is_random() else _SAMPLED
        # Children of our own (always sampled) spans can skip the sampler only if
        # it would say "sample" anyway, which a ParentBased default does.
        self.inherit = (
            isinstance(self.sampler, ParentBased)
            and getattr(self.sampler, "_local_parent_sampled", None) is ALWAYS_ON
        )
        # Roots may skip the sampler when it samples every root (sample_rate 1).
        root = getattr(self.sampler, "_root", None)
        self.root_always = self.inherit and (
            root is ALWAYS_ON or (isinstance(root, TraceIdRatioBased) and root.rate >= 1.0)
        )
        # Our own attributes may skip cleaning unless a value-length limit applies.
        self.trusting = self.inherit and self.max_value_length is None

    def ending(self, span: LeanSpan, processors: tuple[SpanProcessor, ...]) -> None:
        """Call the processors' ``_on_ending`` hooks, unless none of them has one."""
        if all(getattr(type(p), "_on_ending", None) in _NO_ENDINGS for p in processors):
            self.without_ending = processors
            return
        assert self.on_ending is not None
        self.on_ending(span)

    def start_child(
        self,
        name: str,
        parent: LeanSpan,
        kind: SpanKind,
        attributes: dict[str, Any],
        start_time: int,
    ) -> LeanSpan:
        """A child of ``parent`` with runnertrace's own (valid) ``attributes``, taken over.

        The hot path of a traced run, so it checks nothing itself. The caller
        (``RunTracer``, once per run) guarantees what makes this the exact SDK
        result: ``trusting`` is set (the sampler samples a sampled local
        parent's children, and no value-length limit applies), ``parent`` is a
        sampled span of this tracer, and ``attributes`` fits the count limit.
        """
        up: Any = parent._context
        span_id = self.quick_span_id(64) or self.new_span_id()
        span = LeanSpan(
            self,
            name,
            _span_context(up.trace_id, span_id, up.trace_flags, up.trace_state),
            up,
            kind,
            attributes,
            (),
            start_time,
        )
        for processor in self.processor._span_processors:
            processor.on_start(span, parent_context=None)
        return span

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        return self._start(name, context, kind, attributes, links, start_time, trusted=False)

    def start_trusted(
        self,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        start_time: int,
    ) -> trace_api.Span:
        """``start_span`` for runnertrace's own (valid) attributes: the dict is taken over."""
        return self._start(name, context, kind, attributes, (), start_time, trusted=self.trusting)

    def _start(
        self,
        name: str,
        context: Context | None,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link] | None,
        start_time: int | None,
        *,
        trusted: bool,
    ) -> trace_api.Span:
        parent_span = current_span(context)
        parent: SpanContext | None = parent_span.get_span_context()
        links = links or ()
        trace_state: TraceState | None
        source: types.Attributes = attributes
        if parent is None or not parent.is_valid:
            parent = None
        if parent is None and self.root_always:
            # What the sampler would answer: sample, no trace state.
            trace_id = self.ids.generate_trace_id()
            flags = self.root_flags
            trace_state = None
        elif (
            parent is not None
            and self.inherit
            and parent.trace_flags.sampled
            and not parent.is_remote
        ):
            # A sampled local parent under ParentBased: ALWAYS_ON keeps its state.
            trace_id = parent.trace_id
            flags = _SAMPLED_RANDOM if parent.trace_flags.random_trace_id else _SAMPLED
            trace_state = parent.trace_state
        else:
            trace_id = self.ids.generate_trace_id() if parent is None else parent.trace_id
            result = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
            trace_state = result.trace_state
            if parent is None:
                flags = self.root_flags
            else:
                flags = _SAMPLED_RANDOM if parent.trace_flags.random_trace_id else _SAMPLED
            decision: Any = result.decision  # (the SDK's Decision methods are untyped)
            if not decision.is_sampled():
                flags = TraceFlags(flags & ~TraceFlags.SAMPLED)
            if not decision.is_recording():
                span_context = SpanContext(
                    trace_id, self.ids.generate_span_id(), False, flags, trace_state
                )
                return trace_api.NonRecordingSpan(span_context)
            source = result.attributes  # the SDK records what the sampler returns
        if trace_state is None:
            trace_state = _NO_STATE
        span_context = _span_context(trace_id, self.new_span_id(), flags, trace_state)
        cleaned: dict[str, Any]
        if trusted and type(attributes) is dict and (source is attributes or source == attributes):
            cleaned = attributes
        else:
            cleaned = {}
            max_len = self.max_value_length
            for key, value in (source or {}).items():
                value = _clean(value, max_len)
                if value is not None and key and type(key) is str:
                    cleaned[key] = value
        span = LeanSpan(
            self,
            name,
            span_context,
            parent,
            kind,
            cleaned,
            links,
            start_time if start_time is not None else time.time_ns(),
        )
        if len(cleaned) > self.max_attributes:
            span._dropped_attributes = len(cleaned) - self.max_attributes
            for key in list(cleaned)[: span._dropped_attributes]:
                del cleaned[key]
        for processor in self.processor._span_processors:
            processor.on_start(span, parent_context=context)
        return span

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace_api.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace_api.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


def _no_quick_id(bits: int) -> int:
    """No shortcut for a custom id generator: 0 sends ``start_child`` to the generator."""
    return 0


# The SDK's own no-op ``_on_ending`` hooks: a processor with one of these needs no call.
_NO_ENDINGS = frozenset(
    hook
    for hook in (
        getattr(SpanProcessor, "_on_ending", None),
        getattr(SimpleSpanProcessor, "_on_ending", None),
        getattr(BatchSpanProcessor, "_on_ending", None),
    )
    if hook is not None
)


def _limit(value: int | None) -> int:
    return value if value is not None else 1 << 62


def lean_tracer_for(provider: object, name: str, version: str) -> LeanTracer | None:
    """A :class:`LeanTracer` for a plain SDK provider, or ``None`` (use the SDK's)."""
    if type(provider) is not TracerProvider:
        return None  # a subclass may change span creation; respect it
    if getattr(provider, "_disabled", False):
        return None
    needed = ("_active_span_processor", "_span_limits", "sampler", "id_generator")
    if not all(hasattr(provider, attr) for attr in needed):
        return None  # an SDK whose internals moved: fall back to its own tracer
    if type(provider._active_span_processor) is not SynchronousMultiSpanProcessor:
        return None  # e.g. a concurrent one: its own way of calling processors stands
    return LeanTracer(provider, name, version)
