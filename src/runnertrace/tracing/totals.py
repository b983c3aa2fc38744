"""A run's totals: what its model and tool calls add up to, its own and its subtree's.

One meaning everywhere (SEMCONV.md, "Totals and nesting"): the totals on an
``invoke_agent`` span cover everything that run caused, the runs nested in it
included. Each model call's usage stays on its chat span, under the keys backends
add up; the run span carries the sums under keys of their own
(:mod:`runnertrace.tracing.attributes`), so nothing is counted twice.

A :class:`RunTotals` is filled by one run's tracer on its own task; a nested run
hands its subtree's totals to its parent when it ends (:meth:`RunTotals.absorb`),
possibly from another thread, hence the lock there. The store, the UI, the report
and every backend read these numbers off the root span; none of them recomputes.
"""

from __future__ import annotations

import threading
from typing import Any

from runnertrace.tracing import attributes as A

__all__ = ["RunTotals"]

# Nested runs may end on other threads (CrewAI, smolagents): their roll-up is locked.
# Once per nested run, so one lock for all of them costs nothing measurable.
_ROLL_UP = threading.Lock()


class RunTotals:
    """Counts for one run's own calls, or for a whole subtree (see :meth:`absorb`)."""

    __slots__ = (
        "cost",
        "errors",
        "input_tokens",
        "model_calls",
        "nested_runs",
        "output_tokens",
        "tool_calls",
        "unpriced",
        "unpriced_models",
    )

    def __init__(self) -> None:
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost: float | None = None  # the priced calls' sum; None: no call was priced
        self.unpriced = 0  # calls that reported tokens but got no price
        self.unpriced_models: tuple[str, ...] = ()
        self.model_calls = 0
        self.tool_calls = 0
        self.errors = 0  # model and tool calls that ended in error
        self.nested_runs = 0

    # -- one run's own calls (the run's task only) ----------------------------------------
    def priced(self, cost: float) -> None:
        self.cost = cost if self.cost is None else self.cost + cost

    def unpriced_call(self, model: str | None, provider: str | None) -> None:
        self.unpriced += 1
        label = f"{provider}/{model}" if provider and model else model or provider or "unknown"
        if label not in self.unpriced_models and len(self.unpriced_models) < 16:
            self.unpriced_models = (*self.unpriced_models, label)

    # -- subtrees ---------------------------------------------------------------------------
    def absorb(self, other: RunTotals) -> None:
        """Add a nested run's subtree totals (``other`` is no longer changed). Called by
        the nested run as it ends, maybe on another thread than this run's."""
        with _ROLL_UP:
            self._add(other)
            self.nested_runs += other.nested_runs + 1

    def plus(self, nested: RunTotals) -> RunTotals:
        """A new object: these totals with ``nested`` (what the runs nested in this one
        have handed up so far) added."""
        total = RunTotals()
        total._add(self)
        with _ROLL_UP:
            total._add(nested)
            total.nested_runs = nested.nested_runs
        return total

    def _add(self, other: RunTotals) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.cost is not None:
            self.priced(other.cost)
        self.unpriced += other.unpriced
        for label in other.unpriced_models:
            if label not in self.unpriced_models and len(self.unpriced_models) < 16:
                self.unpriced_models = (*self.unpriced_models, label)
        self.model_calls += other.model_calls
        self.tool_calls += other.tool_calls
        self.errors += other.errors

    def attributes(self, own: RunTotals | None = None) -> dict[str, Any]:
        """The run span's total attributes; ``own``: the run's own work, when it had
        nested runs (written under the ``runnertrace.own.*`` keys)."""
        attrs: dict[str, Any] = {
            A.AGG_MODEL_CALLS: self.model_calls,
            A.AGG_TOOL_CALLS: self.tool_calls,
            A.AGG_ERRORS: self.errors,
        }
        if self.input_tokens or self.output_tokens:
            attrs[A.AGG_INPUT_TOKENS] = self.input_tokens
            attrs[A.AGG_OUTPUT_TOKENS] = self.output_tokens
        if self.cost is not None:
            attrs[A.AGG_COST] = self.cost
        if self.unpriced:
            attrs[A.UNPRICED_CALLS] = self.unpriced
            attrs[A.UNPRICED_MODELS] = self.unpriced_models
        if own is not None and self.nested_runs:
            attrs[A.NESTED_RUNS] = self.nested_runs
            attrs[A.OWN_INPUT_TOKENS] = own.input_tokens
            attrs[A.OWN_OUTPUT_TOKENS] = own.output_tokens
            if own.cost is not None:
                attrs[A.OWN_COST] = own.cost
            if own.unpriced:
                attrs[A.OWN_UNPRICED_CALLS] = own.unpriced
            attrs[A.OWN_MODEL_CALLS] = own.model_calls
            attrs[A.OWN_TOOL_CALLS] = own.tool_calls
            attrs[A.OWN_ERRORS] = own.errors
        return attrs
