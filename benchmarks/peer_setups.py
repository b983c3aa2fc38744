"""Each framework's peers for ``peers.py``: the instrumentation its users would pick instead of us.

Every setup returns a :class:`peer_kit.Variant` running the framework's own call
(``frameworks.OWN_CALLS``, the untraced baseline) with the peer switched on,
exporting with the SDK's batch processor and OTLP/HTTP to the same receiver as
ours (``Setting.provider``). A peer that is missing or cannot be set up raises
``Skip`` (or ``ImportError``) and the driver prints why and runs the rest.

Peers that patch something process-wide (OpenInference instrumentors, MLflow
autolog, Logfire's Agents SDK trace provider, the switched global provider of
ADK and Agent Framework) get ``on``/``off`` callables: ``instrument()`` before
each of their batches, ``uninstrument()`` after. Peers set per agent or per call
(Pydantic AI's ``agent.instrument``, Logfire's ``instrument_pydantic_ai(agent)``,
Langfuse's callback handler) need none.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from frameworks import OWN_CALLS, PROMPT, _session_ids
from opentelemetry.sdk.trace import TracerProvider
from peer_kit import CountingProcessor, ModeFn, Setting, Skip, Variant, batch_otlp

from runnertrace.core.agent import Agent as CoreAgent

NativeFactory = Callable[[], CoreAgent]  # a fresh agent of the framework, runner unused
PeerSetup = Callable[[Setting, NativeFactory, str], Variant]  # (setting, fresh agent, framework)


def _native(
    name: str,
    what: str,
    agent: CoreAgent,
    framework: str,
    provider: TracerProvider | None,
    tally: CountingProcessor | None,
    setting: Setting,
    **kw: Any,
) -> Variant:
    """The framework's own call on ``agent``, flushing ``provider`` and counting at the receiver."""
    modes = kw.pop("modes", None) or OWN_CALLS[framework](agent)
    if provider is not None:
        kw.setdefault("flush", provider.force_flush)
        kw.setdefault("close", provider.shutdown)
    return Variant(
        name,
        what,
        modes,
        spans=setting.sink_spans(),
        tally=tally.count if tally is not None else None,
        **kw,
    )


def _instrumentor(name: str, what: str, instrumentor: Any, **options: Any) -> PeerSetup:
    """A peer that is an OpenTelemetry ``BaseInstrumentor``: switched on for its batches only."""

    def setup(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
        provider, tally = setting.provider()
        inst = instrumentor()
        return _native(
            name,
            what,
            fresh(),
            framework,
            provider,
            tally,
            setting,
            on=lambda: inst.instrument(tracer_provider=provider, **options),
            off=inst.uninstrument,
        )

    return setup


# -- Pydantic AI -------------------------------------------------------------------------------
def pai_otel(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider, tally = setting.provider()
    agent = fresh()
    agent.native.instrument = InstrumentationSettings(tracer_provider=provider)
    what = "Pydantic AI instrumentation, OTLP batch"
    return _native("pai-otel", what, agent, framework, provider, tally, setting)


def pai_logfire(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    instance, tally = _logfire(setting, "peers-logfire-pai")
    agent = fresh()
    instance.instrument_pydantic_ai(agent.native)
    what = "logfire.instrument_pydantic_ai, OTLP batch"
    return _native(
        "logfire",
        what,
        agent,
        framework,
        None,
        tally,
        setting,
        flush=instance.force_flush,
        close=instance.shutdown,
    )


def _logfire(setting: Setting, service: str) -> tuple[Any, CountingProcessor]:
    """A Logfire instance with providers of its own (``local=True``: nothing global), no
    token (nothing leaves the machine), exporting with the same batch OTLP processor."""
    import logfire

    tally = CountingProcessor()
    instance = logfire.configure(
        local=True,
        send_to_logfire=False,
        console=False,
        inspect_arguments=False,
        service_name=service,
        additional_span_processors=[tally, batch_otlp(setting.sink)],
    )
    return instance, tally


def pai_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    try:
        from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor
    except ImportError as exc:
        raise Skip(f"not installed ({exc})") from None
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider()
    provider.add_span_processor(OpenInferenceSpanProcessor())  # rewrites attributes first
    tally = CountingProcessor()
    provider.add_span_processor(tally)
    provider.add_span_processor(batch_otlp(setting.sink))
    agent = fresh()
    agent.native.instrument = InstrumentationSettings(tracer_provider=provider)
    what = "OpenInference Pydantic AI processor, OTLP batch"
    return _native("openinference", what, agent, framework, provider, tally, setting)


# -- MLflow tracing autolog --------------------------------------------------------------------
def _mlflow(flavor: str) -> PeerSetup:
    """MLflow tracing's autolog for ``flavor``, exporting OTLP to the receiver.

    MLflow keeps a provider of its own (not the global one), whose only processor
    is its ``OtelSpanProcessor`` (a batch processor) when an OTLP traces
    endpoint is configured, so its tally is the receiver's count.
    """

    def setup(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
        os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = setting.sink.traces_url
        os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
        os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"
        try:
            import importlib

            module = importlib.import_module(f"mlflow.{flavor}")
            from mlflow.tracing.provider import provider as mlflow_provider
        except ImportError as exc:
            raise Skip(f"mlflow-tracing not installed ({exc})") from None

        def flush() -> None:
            provider = mlflow_provider.get()  # MLflow's own, made with its first span
            if provider is not None:
                provider.force_flush()

        return _native(
            "mlflow",
            f"mlflow.{flavor}.autolog, OTLP batch",
            fresh(),
            framework,
            None,
            None,
            setting,
            flush=flush,
            on=lambda: module.autolog(silent=True),
            off=lambda: module.autolog(disable=True, silent=True),
        )

    return setup


# -- OpenAI Agents SDK -------------------------------------------------------------------------
def _agents_tracing(enabled: bool, processors: list[Any] | None = None) -> None:
    """The Agents SDK's own tracing on or off (``frameworks.py`` runs everything with it
    off; the peers that read the SDK's traces need it on for their batches)."""
    from agents import set_trace_processors, set_tracing_disabled

    set_tracing_disabled(not enabled)
    if processors is not None:
        set_trace_processors(processors)


def oa_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    provider, tally = setting.provider()
    inst = OpenAIAgentsInstrumentor()

    def on() -> None:
        _agents_tracing(True)
        inst.instrument(tracer_provider=provider)  # exclusive: replaces the SDK's exporter

    def off() -> None:
        inst.uninstrument()
        _agents_tracing(False)

    what = "OpenInference OpenAI Agents instrumentor, OTLP batch"
    return _native(
        "openinference", what, fresh(), framework, provider, tally, setting, on=on, off=off
    )


def oa_logfire(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from agents.tracing import get_trace_provider, set_trace_provider
    from agents.tracing.processors import default_processor

    instance, tally = _logfire(setting, "peers-logfire-oa")
    original = get_trace_provider()

    def on() -> None:
        # The SDK's default exporter (to OpenAI, keyless here) taken out: logfire's cost only.
        _agents_tracing(True, processors=[])
        instance.instrument_openai_agents()  # wraps the SDK's global trace provider

    def off() -> None:
        set_trace_provider(original)  # logfire has no uninstrument for this one
        _agents_tracing(False, processors=[default_processor()])

    return _native(
        "logfire",
        "logfire.instrument_openai_agents, OTLP batch",
        fresh(),
        framework,
        None,
        tally,
        setting,
        flush=instance.force_flush,
        close=instance.shutdown,
        on=on,
        off=off,
    )


# -- LangGraph ---------------------------------------------------------------------------------
def lg_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    what = "OpenInference LangChain instrumentor, OTLP batch"
    return _instrumentor("openinference", what, LangChainInstrumentor)(setting, fresh, framework)


def lg_langfuse(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    """Langfuse's LangChain callback handler, passed per call as its docs show, on a
    Langfuse client with a provider of its own (not the global one) whose exporter
    posts OTLP to the receiver as if it were a Langfuse host."""
    from langchain_core.messages import HumanMessage
    from langfuse import Langfuse
    from langfuse.langchain import CallbackHandler

    provider = TracerProvider()
    tally = CountingProcessor()
    provider.add_span_processor(tally)
    host = setting.sink.traces_url.removesuffix("/v1/traces")
    client = Langfuse(
        public_key="pk-lf-peers",
        secret_key="sk-lf-peers",
        host=host,
        tracer_provider=provider,
        tracing_enabled=True,
    )
    handler = CallbackHandler(public_key="pk-lf-peers")
    agent = fresh()
    graph = agent.native

    def call() -> tuple[dict[str, Any], dict[str, Any]]:
        config = {
            "configurable": {"thread_id": f"s{next(_session_ids)}"},
            "callbacks": [handler],
        }
        return {"messages": [HumanMessage(content=PROMPT)]}, config

    async def run() -> None:
        await graph.ainvoke(*call())

    async def stream() -> None:
        graph_input, config = call()
        modes = ["messages", "updates"]
        async for _ in graph.astream(graph_input, config, stream_mode=modes, subgraphs=True):
            pass

    modes: dict[str, ModeFn] = {"run": run, "stream": stream}
    return _native(
        "langfuse",
        "Langfuse LangChain callback handler, its OTLP batch",
        agent,
        framework,
        None,
        tally,
        setting,
        modes=modes,
        flush=client.flush,
        close=client.shutdown,
    )


# -- Google ADK --------------------------------------------------------------------------------
def adk_otel(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    """ADK's built-in spans: what a user gets by installing an SDK provider globally."""
    switch = setting.switch
    if switch is None:
        raise Skip("needs the switched global provider")
    provider, tally = setting.provider()
    return _native(
        "adk-otel",
        "ADK built-in OTel (global provider), OTLP batch",
        fresh(),
        framework,
        provider,
        tally,
        setting,
        on=lambda: switch.switch(provider),
        off=lambda: switch.switch(None),
    )


def adk_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from openinference.instrumentation.google_adk import GoogleADKInstrumentor

    what = "OpenInference Google ADK instrumentor, OTLP batch"
    return _instrumentor("openinference", what, GoogleADKInstrumentor)(setting, fresh, framework)


# -- Microsoft Agent Framework -----------------------------------------------------------------
def _maf_switched(
    name: str, what: str, setting: Setting, fresh: NativeFactory, framework: str, first: Any
) -> Variant:
    switch = setting.switch
    if switch is None:
        raise Skip("needs the switched global provider")
    provider = TracerProvider()
    if first is not None:
        provider.add_span_processor(first)
    tally = CountingProcessor()
    provider.add_span_processor(tally)
    provider.add_span_processor(batch_otlp(setting.sink))
    return _native(
        name,
        what,
        fresh(),
        framework,
        provider,
        tally,
        setting,
        on=lambda: switch.switch(provider),
        off=lambda: switch.switch(None),
    )


def maf_otel(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    """Agent Framework's built-in instrumentation (on by default) into a global SDK provider."""
    what = "Agent Framework built-in OTel (global provider), OTLP batch"
    return _maf_switched("maf-otel", what, setting, fresh, framework, None)


def maf_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    """The built-in spans rewritten to OpenInference by its processor, as its docs set it up."""
    from openinference.instrumentation.agent_framework import (
        AgentFrameworkToOpenInferenceProcessor,
    )

    what = "OpenInference agent-framework processor, OTLP batch"
    first = AgentFrameworkToOpenInferenceProcessor()
    return _maf_switched("openinference", what, setting, fresh, framework, first)


# -- CrewAI and smolagents ---------------------------------------------------------------------
def crewai_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from openinference.instrumentation.crewai import CrewAIInstrumentor

    what = "OpenInference CrewAI instrumentor, OTLP batch"
    return _instrumentor("openinference", what, CrewAIInstrumentor)(setting, fresh, framework)


def smol_openinference(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    what = "OpenInference smolagents instrumentor, OTLP batch"
    return _instrumentor("openinference", what, SmolagentsInstrumentor)(setting, fresh, framework)


def _no_mlflow(reason: str) -> PeerSetup:
    def setup(setting: Setting, fresh: NativeFactory, framework: str) -> Variant:
        raise Skip(reason)

    return setup


# Per framework, (the variant's name, its setup), in the order they run.
PEERS: dict[str, list[tuple[str, PeerSetup]]] = {
    "pydantic-ai": [
        ("pai-otel", pai_otel),
        ("logfire", pai_logfire),
        ("openinference", pai_openinference),
        ("mlflow", _mlflow("pydantic_ai")),
    ],
    "openai-agents": [
        ("openinference", oa_openinference),
        ("logfire", oa_logfire),
        ("mlflow", _mlflow("openai")),
    ],
    "langgraph": [
        ("openinference", lg_openinference),
        ("langfuse", lg_langfuse),
        ("mlflow", _mlflow("langchain")),
    ],
    "google-adk": [
        ("adk-otel", adk_otel),
        ("openinference", adk_openinference),
        ("mlflow", _no_mlflow("mlflow-tracing has no autolog for Google ADK")),
    ],
    "maf": [
        ("maf-otel", maf_otel),
        ("openinference", maf_openinference),
        ("mlflow", _no_mlflow("mlflow-tracing has no autolog for Agent Framework")),
    ],
    "crewai": [("openinference", crewai_openinference), ("mlflow", _mlflow("crewai"))],
    "smolagents": [("openinference", smol_openinference), ("mlflow", _mlflow("smolagents"))],
}
# Frameworks whose built-in spans go to the global provider: their process gets the switch.
GLOBAL_SWITCH = frozenset({"google-adk", "maf"})
