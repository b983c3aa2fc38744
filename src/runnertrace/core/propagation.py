"""Trace context across processes: a W3C carrier in, the run's identity out of its baggage.

A *carrier* is a string mapping holding W3C Trace Context (``traceparent``,
``tracestate``) and W3C Baggage (``baggage``): HTTP headers, an MCP request's
``params._meta``, an A2A call's metadata. :func:`extract` turns one into an
:class:`Incoming`: the OpenTelemetry context to run under, and the session and
user ids the caller put in its baggage, under these keys:

* the session: ``session.id``, else ``gen_ai.conversation.id``
  (:data:`SESSION_KEYS`);
* the user: ``user.id`` (:data:`USER_KEY`).

A carrier with no valid ``traceparent`` (missing, malformed, all zeros) joins
nothing: the run starts a trace of its own (or, in process, stays under the
current span), :func:`extract` logs one debug line saying why, and nothing is
raised. The baggage of such a carrier still counts.

The propagators are OpenTelemetry's global ones (W3C Trace Context and Baggage
unless ``OTEL_PROPAGATORS`` says otherwise). OpenTelemetry is imported on first
use, so ``import runnertrace.core`` stays as light as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = [
    "SESSION_KEYS",
    "USER_KEY",
    "Incoming",
    "carrier_of",
    "extract",
    "inject",
    "joined",
]

SESSION_KEYS = ("session.id", "gen_ai.conversation.id")
"""Baggage keys read as the caller's session id, first found wins."""
USER_KEY = "user.id"
"""The baggage key read as the caller's user id."""
CARRIER_KEYS = ("traceparent", "tracestate", "baggage")

logger = logging.getLogger("runnertrace")


@dataclass(frozen=True)
class Incoming:
    """What an incoming carrier holds: the context to join and the caller's identity."""

    context: Context | None = None
    """What the carrier held (its baggage included), ``None`` when it held nothing."""
    joins: bool = False
    """Whether ``context`` names a valid remote parent: the run joins the caller's trace."""
    session_id: str | None = None
    user_id: str | None = None


NOTHING = Incoming()


def carrier_of(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C keys of ``headers`` (any capitalisation), as a plain carrier."""
    if not headers:
        return {}
    found: dict[str, str] = {}
    for key, value in headers.items():
        if isinstance(key, str) and isinstance(value, str):
            lowered = key.lower()
            if lowered in CARRIER_KEYS:
                found[lowered] = value
    return found


def extract(carrier: Mapping[str, Any] | None, *, source: str = "carrier") -> Incoming:
    """The context and identity in ``carrier``; never raises (see the module docstring).

    ``source`` names the carrier in the debug line (``"HTTP headers"``,
    ``"MCP params._meta"``).
    """
    try:
        return _extract(carrier, source)
    except Exception as exc:  # noqa: BLE001 - a caller's bad carrier must never fail a run
        logger.debug(
            "runnertrace: the incoming %s could not be read (%s): the run starts a new trace",
            source,
            type(exc).__name__,
        )
        return NOTHING


def _extract(carrier: Mapping[str, Any] | None, source: str) -> Incoming:
    plain = carrier_of(carrier)
    if not plain.get("traceparent") and not plain.get("baggage"):
        logger.debug(
            "runnertrace: the incoming %s has no traceparent: the run starts a new trace", source
        )
        return NOTHING
    from opentelemetry import baggage, propagate, trace

    context = propagate.extract(plain)
    entries = baggage.get_all(context)
    session_id = next(
        (str(entries[k]) for k in SESSION_KEYS if isinstance(entries.get(k), str) and entries[k]),
        None,
    )
    user = entries.get(USER_KEY)
    user_id = str(user) if isinstance(user, str) and user else None
    if trace.get_current_span(context).get_span_context().is_valid:
        return Incoming(context, True, session_id, user_id)
    logger.debug(
        "runnertrace: the incoming %s has no valid traceparent (%r): the run starts a new trace",
        source,
        plain.get("traceparent", "")[:64],
    )
    return Incoming(context, False, session_id, user_id)


def inject(carrier: MutableMapping[str, str] | None = None, context: Any = None) -> dict[str, str]:
    """Write the current (or the given) context into ``carrier``, a new dict if ``None``."""
    from opentelemetry import propagate

    out: dict[str, str] = {}
    propagate.inject(out, context=context)
    if carrier is not None:
        carrier.update(out)
    return out


@contextmanager
def joined(incoming: Incoming) -> Iterator[None]:
    """Make ``incoming``'s context current inside the block (nothing, when it joins none).

    Attach and detach happen in the caller's own step: never hold the block
    across a ``yield`` of an async generator.
    """
    if not incoming.joins or incoming.context is None:
        yield
        return
    from opentelemetry import context as otel_context

    token = otel_context.attach(incoming.context)
    try:
        yield
    finally:
        otel_context.detach(token)
