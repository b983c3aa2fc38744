"""One model call's usage: what its chat span says, and what it adds to its run's totals.

Beside :mod:`runnertrace.tracing.totals`, which adds calls up per run and per subtree:
here a single call's tokens go on its span under the keys backends sum, its input and
output counts into the run's own :class:`~runnertrace.tracing.totals.RunTotals`, and
the call is priced (:func:`~runnertrace.tracing.cost.usage_cost`), or counted as
unpriced so the run's cost says it is partial. A count a foreign runner sent as a text
that is no number (see :mod:`runnertrace.tracing.normalize`) stays on the span as
written, and is neither summed nor priced.

A call whose price would wait for the table (:func:`waits_for_prices`) is priced later,
off the run's path, by the span state machine through
:func:`~runnertrace.tracing.cost.after_prices`, with the very same :func:`price_call`.
"""

from __future__ import annotations

from typing import Any

from runnertrace.tracing import attributes as A
from runnertrace.tracing.cost import UNPRICED_PROVIDERS, prices_pending, usage_cost
from runnertrace.tracing.normalize import MessageEndIn
from runnertrace.tracing.totals import RunTotals

__all__ = ["count_tokens", "price_call", "waits_for_prices"]


def count_tokens(event: MessageEndIn, attrs: dict[str, Any], own: RunTotals) -> None:
    """The call's token counts into ``attrs`` (its span's end attributes); its input and
    output counts into the run's ``own`` totals."""
    inputs, outputs = event.input_tokens, event.output_tokens
    if inputs is not None:
        attrs[A.INPUT_TOKENS] = inputs
        if type(inputs) is int:
            own.input_tokens += inputs
    if outputs is not None:
        attrs[A.OUTPUT_TOKENS] = outputs
        if type(outputs) is int:
            own.output_tokens += outputs
    if event.cache_read_input_tokens is not None:
        attrs[A.CACHE_READ_TOKENS] = event.cache_read_input_tokens
    if event.reasoning_output_tokens is not None:
        attrs[A.REASONING_TOKENS] = event.reasoning_output_tokens


def price_call(
    attrs: dict[str, Any], own: RunTotals, requested: str | None, provider: str | None
) -> None:
    """Price a call whose usage ``attrs`` hold a count by the model the response names,
    else (none named, or one with no price) by the model it asked for (``requested``).
    A call with no price is counted as such, so the run's cost says it is partial."""
    usage = (attrs.get(A.INPUT_TOKENS), attrs.get(A.OUTPUT_TOKENS))
    if not (_counted(usage[0]) or _counted(usage[1])):
        return
    response = attrs.get(A.RESPONSE_MODEL)
    cached = attrs.get(A.CACHE_READ_TOKENS)
    cost = usage_cost(response or requested, provider, *usage, cached)
    if cost is None and response and requested and response != requested:
        cost = usage_cost(requested, provider, *usage, cached)
    if cost is None:
        own.unpriced_call(response or requested, provider)
    else:
        attrs[A.COST] = cost
        own.priced(cost)


def waits_for_prices(attrs: dict[str, Any], provider: str | None) -> bool:
    """Whether pricing this call (its usage in ``attrs``) would wait for the price table
    now: it reports a count, its provider has list prices, and the table is not settled.
    Then its span's end is handed to :func:`~runnertrace.tracing.cost.after_prices`."""
    if not provider or provider in UNPRICED_PROVIDERS or not prices_pending():
        return False
    return _counted(attrs.get(A.INPUT_TOKENS)) or _counted(attrs.get(A.OUTPUT_TOKENS))


def _counted(value: Any) -> bool:
    """Whether a usage attribute is a count (a foreign text stays an attribute only)."""
    return type(value) is int or type(value) is float
