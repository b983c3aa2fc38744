"""Tokens to US dollars, from the price table bundled with ``genai-prices``.

Why ``genai-prices``: it is a maintained, versioned table of list prices per
provider and model (cache reads, tiers and price changes included), published
as a pure-Python package. We only read the table that ships inside it: its
``UpdatePrices`` fetcher, the one part that goes to the network, is never
started here, so pricing never leaves the machine.

Rules:

* A cost needs a model, a provider and both token counts. A provider or model
  the table does not know gives no cost at all (``None``), never an estimate:
  an absent cost is honest, a wrong one is not.
* Prices are looked up once per (model, provider). For a model with flat prices
  the cost is linear in each kind of token, so the per-token rates are taken
  from ``genai-prices`` itself once and reused; pricing a message is then a few
  multiplications (``genai-prices``' own calculation takes about a millisecond,
  too slow for the end of every model call). Models with tiered or
  time-dependent prices go through ``genai-prices`` on every call.
* Loading the table takes from a few hundred milliseconds to seconds (it is a
  large module). :func:`preload_prices` loads it on a daemon thread when a
  tracing pipeline is built, while the first model call is in flight.

Nothing on the run's path waits for the table. A model call that ends before it
is loaded hands the rest of its end (its price, its cost attributes and its
``span.end(end_time=...)`` at the time it really ended) to :func:`after_prices`,
and so does the end of every run whose totals depend on it; those actions run in
the order they were handed over, on the settling thread, as soon as the table is
ready: the spans are written exactly as they would have been had the table been
there, only later. The wait is bounded: ``LOAD_WAIT_S`` after the load started,
whatever is pending ends as a call with no known price does (no cost; its run's
cost is partial). A flush or shutdown of the pipeline settles first
(:func:`settle_prices`), so nothing pending is lost; a fork waits for it too.

Why deferring rather than pricing in the export thread: there, a cost written
after the span ended would need a copy of every finished span and a second
bookkeeping of each run's totals (whose spans may reach an exporter in separate
batches), and every in-process span processor would still see spans without
cost. Deferring keeps one code path writing each span, once, through the public
OTel API; what differs is only the order in which such spans reach processors.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runnertrace._internal.errors import (
    handle_internal_errors,
    internal_log,
    report_internal_error,
)
from runnertrace._internal.forksafe import relock_after_fork

__all__ = [
    "LOAD_WAIT_S",
    "UNPRICED_PROVIDERS",
    "after_prices",
    "preload_prices",
    "prices_pending",
    "settle_prices",
    "usage_cost",
    "when_deferring",
]

LOAD_WAIT_S = 3.0
"""How long a priced message may wait for the price table to finish loading."""

_PER = 1_000_000  # probe size: prices are quoted per million tokens

# Providers with no list price: their calls are never priced, so they never wait for the
# table either (the native agent's offline ScriptedLlm reports "runnertrace").
UNPRICED_PROVIDERS = frozenset({"runnertrace"})

# Semantic-convention provider names that genai-prices does not match by itself.
_PROVIDER_ALIASES = {
    "x_ai": "x-ai",
    "gcp.gen_ai": "google",
    "azure.ai.inference": "azure",
}


@dataclass(frozen=True)
class _Rates:
    """USD per token, for a model whose price is linear in each kind of token."""

    input: float
    output: float
    cache_read: float


class _Exact:
    """Marker: this model's price is tiered or time-dependent; ask genai-prices each time."""


_EXACT = _Exact()
_UNKNOWN = None

_rates: dict[tuple[str, str], _Rates | _Exact | None] = {}
_rates_lock = threading.Lock()
_loaded = threading.Event()
_load_state = {"started": False, "available": True}
_load_lock = threading.Lock()
# What waits for the table, in the order it was handed over; _settled: the queue has
# been run and is closed, so what comes after runs at once, on its own thread.
_pending: deque[Callable[[], None]] = deque()
_pending_lock = threading.Lock()
_drain_lock = threading.Lock()  # one drainer at a time, so the order holds
_draining = threading.local()  # set on the thread running the pending actions
_settled = threading.Event()
_deferring_hooks: list[Callable[[], None]] = []  # see when_deferring
_gave_up = threading.Event()  # the load outlasted LOAD_WAIT_S: nothing waits for it any more
relock_after_fork(
    sys.modules[__name__],
    _rates_lock=threading.Lock,
    _load_lock=threading.Lock,
    _pending_lock=threading.Lock,
    _drain_lock=threading.Lock,
)


def preload_prices() -> None:
    """Start loading the price table on a daemon thread (once per process), and the
    thread that runs what waits for it once it is loaded, or ``LOAD_WAIT_S`` later."""
    with _load_lock:
        if _load_state["started"]:
            return
        _load_state["started"] = True
    threading.Thread(target=_load, name="runnertrace-prices", daemon=True).start()
    threading.Thread(
        target=_settle_when_loaded, name="runnertrace-prices-settle", daemon=True
    ).start()


def prices_pending() -> bool:
    """Whether an action handed to :func:`after_prices` now would wait (the table is
    not settled yet): then whatever must follow it must be handed over too."""
    return not _settled.is_set()


def after_prices(action: Callable[[], None]) -> bool:
    """Run ``action`` once the price table is settled: at once (returns ``True``) if it
    is, else later on the settling thread, after every action handed over before it
    (returns ``False``). ``action`` must guard itself: a fault there is reported and
    the next action still runs."""
    with _pending_lock:
        if not _settled.is_set():
            _pending.append(action)
            queued = True
        else:
            queued = False
    if queued:
        preload_prices()
        for hook in _deferring_hooks:
            with handle_internal_errors("cost (deferring hook)"):
                hook()
        return False
    action()
    return True


def when_deferring(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever an action is handed to :func:`after_prices` to wait (only in
    a process's first calls, while the table loads). The pipeline uses it to reach an app
    provider installed after it was built, so that provider settles them too."""
    if hook not in _deferring_hooks:
        _deferring_hooks.append(hook)


def settle_prices(timeout_s: float | None = None) -> bool:
    """Run what waits for the price table (every flush and shutdown path calls it
    first, so no span is left pending): wait up to ``timeout_s`` (``LOAD_WAIT_S`` when
    ``None``) for the settling thread, then, if it has not settled, settle here: what
    is still pending then ends unpriced (its run counts it in
    ``runnertrace.usage.unpriced_calls``), never dropped. ``True`` if nothing was
    pending or it all ran."""
    if _settled.is_set():
        return True
    if getattr(_draining, "now", False):
        # A flush from inside a pending action (an app's processor that flushes as a
        # span ends): the drain it is part of goes on once it returns.
        return False
    with _pending_lock:
        if not _pending and not _load_state["started"]:
            return True  # nothing ever waited: nothing to settle (nor to load)
    if _settled.wait(LOAD_WAIT_S if timeout_s is None else timeout_s):
        return True
    if not _loaded.is_set():
        _gave_up.set()
    _settle()
    return _settled.is_set()


def _settle_when_loaded() -> None:
    if not _loaded.wait(LOAD_WAIT_S):
        internal_log.warning(
            "prices-slow",
            "runnertrace: the genai-prices table is still loading after %.0fs; "
            "cost is left off the model calls that ended until it is loaded",
            LOAD_WAIT_S,
        )
        _gave_up.set()
    _settle()


def _settle() -> None:
    """Run the pending actions in order (those handed over meanwhile too), then close
    the queue: from then on :func:`after_prices` runs its action at once."""
    with _drain_lock:
        while True:
            with _pending_lock:
                if not _pending:
                    _settled.set()
                    return
                action = _pending.popleft()
            _draining.now = True
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - one pending span must not lose the rest
                report_internal_error("cost (pending spans)", exc)
            finally:
                _draining.now = False


def _read_table() -> None:
    """Read the bundled table into memory (any lookup does). A seam: tests hold it."""
    from genai_prices import Usage, calc_price

    calc_price(Usage(input_tokens=0, output_tokens=0), "gpt-4o", provider_id="openai")


def _load() -> None:
    try:
        _read_table()
    except ImportError:
        _load_state["available"] = False
    except LookupError:
        pass  # a table without that model is still a loaded table
    except Exception as exc:  # noqa: BLE001 - a broken price package must not break tracing
        _load_state["available"] = False
        internal_log.warning("prices-load", "runnertrace: cannot load genai-prices: %r", exc)
    finally:
        _loaded.set()


def _before_fork() -> None:
    # The loader thread spends its life importing genai-prices. A fork in the middle
    # would leave that module's import lock held in the child for good, and the
    # child's own load would hang there: so a fork waits for the load to end, and for
    # the spans that waited on it to be ended (in the parent, which exports them).
    if _load_state["started"] and not _settled.is_set():
        _settled.wait(LOAD_WAIT_S + 1.0)


def _after_fork_in_child() -> None:
    # A load that outlasted the wait would never finish in the child: start it again there.
    if not _loaded.is_set():
        _load_state["started"] = False
    if not _settled.is_set():
        # The parent's pending spans are the parent's to end and export; the child's
        # settling thread (started with its load) serves the child's own.
        _pending.clear()
        if _loaded.is_set():
            _settled.set()


if hasattr(os, "register_at_fork"):  # not on Windows, where there is no fork
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def usage_cost(
    model: str | None,
    provider: str | None,
    input_tokens: object,
    output_tokens: object,
    cache_read_tokens: object = None,
) -> float | None:
    """The list price in USD of one model call, or ``None`` when it cannot be known.

    ``input_tokens`` counts every input token, cache reads included (as the
    GenAI conventions and genai-prices both count them); ``cache_read_tokens``
    of them are billed at the cache-read price where the model has one.
    """
    inputs, outputs = _count(input_tokens), _count(output_tokens)
    if not model or not provider or inputs is None or outputs is None:
        return None
    if provider in UNPRICED_PROVIDERS:
        return None
    cached = _count(cache_read_tokens) or 0
    try:
        rates = _rates_for(model, provider)
        if rates is None:
            return None
        if isinstance(rates, _Rates):
            cached = min(cached, inputs)
            return (
                (inputs - cached) * rates.input + cached * rates.cache_read + outputs * rates.output
            )
        return _exact(model, provider, inputs, outputs, cached)
    except Exception as exc:  # noqa: BLE001 - pricing never breaks a traced run
        report_internal_error("cost", exc)
        return None


def _rates_for(model: str, provider: str) -> _Rates | _Exact | None:
    key = (model, provider)
    if key in _rates:
        return _rates[key]
    if not _table_ready():
        return None  # not cached: a later call may still price this model
    rates = _lookup(model, _PROVIDER_ALIASES.get(provider, provider))
    with _rates_lock:
        if len(_rates) >= 4096:  # bounded: model names come from the traced app
            _rates.clear()
        _rates[key] = rates
    return rates


def _table_ready() -> bool:
    if _loaded.is_set():
        return bool(_load_state["available"])
    if _gave_up.is_set():
        return False  # the load outlasted LOAD_WAIT_S: tracing stopped waiting for it
    preload_prices()
    if not _loaded.wait(LOAD_WAIT_S):
        internal_log.warning(
            "prices-slow",
            "runnertrace: the genai-prices table is still loading after %.0fs; "
            "cost is left off this model call",
            LOAD_WAIT_S,
        )
        return False
    return bool(_load_state["available"])


def _price(model: str, provider: str, usage: dict[str, int]) -> Any:
    from genai_prices import Usage, calc_price

    return calc_price(Usage(**usage), model, provider_id=provider)


def _lookup(model: str, provider: str) -> _Rates | _Exact | None:
    from genai_prices.types import ModelPrice, TieredPrices

    try:
        probe = _price(model, provider, {"input_tokens": _PER, "output_tokens": 0})
    except LookupError:
        return _UNKNOWN
    flat = isinstance(probe.model.prices, ModelPrice) and not any(
        isinstance(value, TieredPrices) for value in vars(probe.model_price).values()
    )
    if not flat:
        return _EXACT
    output = _price(model, provider, {"input_tokens": 0, "output_tokens": _PER})
    cache = _price(
        model, provider, {"input_tokens": _PER, "cache_read_tokens": _PER, "output_tokens": 0}
    )
    return _Rates(
        input=float(probe.total_price) / _PER,
        output=float(output.total_price) / _PER,
        cache_read=float(cache.total_price) / _PER,
    )


def _exact(model: str, provider: str, inputs: int, outputs: int, cached: int) -> float:
    usage = {"input_tokens": inputs, "output_tokens": outputs}
    if cached:
        usage["cache_read_tokens"] = cached
    provider = _PROVIDER_ALIASES.get(provider, provider)
    return float(_price(model, provider, usage).total_price)
