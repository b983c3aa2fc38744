"""Pydantic AI's own OpenTelemetry spans: silenced in traced runs.

Pydantic AI instrumented (``agent.instrument``, ``Agent.instrument_all()``, an
``Instrumentation`` capability with the default or a custom ``id``, Logfire's
``instrument_pydantic_ai``) emits its own ``invoke_agent`` / ``chat`` /
``execute_tool`` spans, which OpenInference's Pydantic AI span processor only
re-labels. Nested under ours they would show every call twice and sum the tokens
twice. So during a traced run (``in_traced_run()``: the template calls
``PydanticAIRunner.quiet`` only there) the runner adds, for every
``Instrumentation`` id the run would use, a run-time ``Instrumentation`` of that id
with no-op providers, which takes that id's place for this run only (no global
state; untraced runs keep Pydantic AI's spans, and traced ones one vocabulary,
ours). A delegated run inside a traced run gets the same silencers
(:mod:`.nesting`). An ``Instrumentation`` with ``id=None`` has no id to take over
and emits.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities.abstract import AbstractCapability

__all__ = ["no_op_settings", "quiet_framework_telemetry"]


@cache
def no_op_settings() -> Any:
    """Instrumentation settings that record nothing (no-op tracer and meter providers).

    They serve twice: as the settings of the silencing ``Instrumentation``, and as
    Pydantic AI's own converter of its messages to GenAI semconv messages
    (:mod:`.request`).
    """
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider
    from pydantic_ai.models.instrumented import InstrumentationSettings

    return InstrumentationSettings(
        tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider()
    )


def quiet_framework_telemetry(
    native: AbstractAgent[Any, Any], options: Mapping[str, Any]
) -> list[AbstractCapability[Any]]:
    """The capabilities that silence Pydantic AI's own spans for one run of ``native``
    called with ``options`` (its ``agent.run`` / ``iter`` keywords): one no-op
    ``Instrumentation`` per id the run would use, in a stable order."""
    return [_silenced_instrumentation(i) for i in sorted(_instrumentation_ids(native, options))]


def _instrumentation_ids(native: AbstractAgent[Any, Any], options: Mapping[str, Any]) -> set[str]:
    """The ids of the ``Instrumentation`` capabilities Pydantic AI would use for this run.

    Checked so that silencers are added only when there is something to silence:
    even with no-op providers an ``Instrumentation`` serialises every message.
    """
    from pydantic_ai.capabilities.abstract import leaf_capabilities
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentedModel

    default = Instrumentation.id or "instrumentation"  # the class's one-off id
    ids: set[str] = set()
    if not isinstance(native, PydanticAgent):
        return {default}  # a wrapper agent hides its configuration: silence to be sure
    if isinstance(options.get("model") or native.model, InstrumentedModel):
        ids.add(default)
    setting = native.instrument
    if setting is None:
        # What Agent.instrument_all() set; if that attribute ever moves, assume on.
        setting = getattr(PydanticAgent, "_instrument_default", True)
    if setting:
        ids.add(default)
    capabilities: list[Any] = leaf_capabilities(native.root_capability)
    for declared in options.get("capabilities") or ():
        if isinstance(declared, AbstractCapability):
            capabilities.extend(leaf_capabilities(declared))
    ids.update(
        capability.id
        for capability in capabilities
        if isinstance(capability, Instrumentation) and capability.id is not None
    )
    return ids


@cache
def _silenced_instrumentation(capability_id: str) -> AbstractCapability[Any]:
    """An ``Instrumentation`` that records nothing; it takes the place of the one with
    ``capability_id`` for one run. One shared instance per id is enough: Pydantic AI
    copies it per run (``for_run``)."""
    from pydantic_ai.capabilities.instrumentation import Instrumentation

    return Instrumentation(settings=no_op_settings(), id=capability_id)
