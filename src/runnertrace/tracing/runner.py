"""``TracingRunner``: wraps any runner and turns its events into spans.

It delegates ``run()`` and ``stream()`` to the base runner and changes nothing
the caller sees: the same reply object, the same event objects in the same
order, the same exception object. Run options, hooks and attributes of the base
runner pass through untouched (``__getattr__`` delegates).

* **Stream mode**: each event is recorded *before* it is yielded onward, so a
  consumer that stops right after an event still finds that event's span ended.
* **Run mode**: the base reports events through the observer channel
  (:mod:`runnertrace.core.observer`); a runner that reports nothing still gets
  its run span.
* The run span is made the OTel current span only while the base runs, and
  only within one step of our code at a time (attach and detach never straddle
  a ``yield``), so spans a framework emits itself nest under ours and no context
  token is ever detached in the wrong context.
* A nested traced run (agent-as-tool) finds the outer run through a context
  variable and nests under the outer run's open tool span.
* An inner agent that the framework runs by itself, with no runner of ours called
  for it (Agent Framework's ``agent.as_tool()``), gets its run from
  :func:`~runnertrace.core.observer.open_nested_run`: while a traced run is in
  progress we offer a nested run with this runner's settings, under the span
  current where it is opened (the tool's, inside the tool's scope).
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.context import attach, detach

from runnertrace._internal.errors import handle_internal_errors, report_internal_error
from runnertrace.core.observer import (
    end_nesting_runs,
    enter_traced_run,
    exit_traced_run,
    install_observer,
    nesting_runs,
    uninstall_observer,
)
from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.content import ContentPolicy
from runnertrace.tracing.mcp_client import propagate_from_runs
from runnertrace.tracing.setup import TracingSetup, get_tracing_setup, setup_key
from runnertrace.tracing.state import RunTracer, active_run

__all__ = ["TracingRunner", "traced"]

_active_run = active_run
_setup_override: contextvars.ContextVar[TracingSetup | None] = contextvars.ContextVar(
    "runnertrace_setup_override", default=None
)


class TracingRunner:
    """Wraps ``base`` (anything with the runner's ``run``/``stream``) and traces it.

    ``settings`` is the ``trace`` config section (defaults to a fresh
    :class:`TraceConfig`); keyword overrides are applied on top, e.g.
    ``TracingRunner(base, capture_content=True, type="console")``.
    """

    is_tracing_runner = True

    def __init__(self, base: Any, settings: TraceConfig | None = None, **overrides: Any) -> None:
        if not callable(getattr(base, "run", None)):
            raise TypeError(f"{base!r} has no run() method to trace")
        config = settings if settings is not None else TraceConfig()
        if overrides:
            config = config.model_copy(update=overrides)
            config = TraceConfig.model_validate(config.model_dump())
        self.base = base
        self.settings = config
        self.policy = ContentPolicy.from_config(config)
        self._deltas_as_events = config.deltas == "events"
        self._legacy_keys = config.semconv_version == 1
        self._lambda = bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))
        self._setup_key = setup_key(config)
        self._framework = _framework_name(base)

    def __repr__(self) -> str:
        return f"TracingRunner({self.base!r})"

    def __getattr__(self, name: str) -> Any:
        # Everything else (framework, RESERVED_RUN_OPTIONS, validate_run_options,
        # adapter-specific helpers) is the base runner's.
        return getattr(self.base, name)

    @property
    def supports_streaming(self) -> bool:
        return bool(getattr(self.base, "supports_streaming", True))

    @property
    def setup(self) -> TracingSetup:
        override = _setup_override.get()
        if override is not None:
            return override
        return get_tracing_setup(self.settings, self._setup_key)

    # -- span bookkeeping (all guarded) -------------------------------------------------------
    def _begin(self, agent: Any, session: Any, requests: Any, mode: str) -> RunTracer | None:
        # The boundary of handle_internal_errors, inline: this runs once per run.
        try:
            propagate_from_runs()  # MCP clients carry the trace (once mcp is imported)
            outer = _active_run.get()
            policy = self.policy
            return self._tracer(
                agent_name=str(getattr(agent, "name", None) or type(agent).__name__),
                session_id=getattr(session, "id", None),
                mode=mode,
                parent=outer.nesting_context() if outer is not None else None,
                requests=requests,
                instructions=_instructions(agent) if policy.capture else None,
                parent_run=outer,
            )
        except Exception as exc:  # noqa: BLE001 - telemetry boundary
            report_internal_error("starting the run span", exc)
        return None

    def _tracer(self, **run: Any) -> RunTracer | None:
        """A run's tracer with this runner's settings (``None`` when tracing is off);
        ``run`` holds what differs between a run of ours and a nested one."""
        setup = self.setup
        if setup.disabled:
            return None
        return RunTracer(
            setup.tracer,
            self.policy,
            framework=self._framework,
            user_id=self.settings.user_id,
            deltas_as_events=self._deltas_as_events,
            legacy_keys=self._legacy_keys,
            **run,
        )

    def _end(self, run: RunTracer, **outcome: Any) -> None:
        run.finish(**outcome)
        if self._lambda:
            with handle_internal_errors("flush after run (AWS Lambda)"):
                self.setup.flush()

    def _nested(self, agent_name: str, mode: str, requests: Any = None) -> RunTracer | None:
        """A run for an inner agent the framework runs inside a tool (see the module
        docstring): this runner's settings, under the current span, in the outer run's
        conversation; ``requests`` is what the inner agent was asked."""
        try:
            outer = _active_run.get()
            return self._tracer(
                agent_name=agent_name,
                session_id=outer.common.get(A.CONVERSATION_ID) if outer is not None else None,
                mode=mode,
                parent=None,
                requests=requests,
                parent_run=outer,
            )
        except Exception as exc:  # noqa: BLE001 - telemetry boundary
            report_internal_error("starting a nested run span", exc)
        return None

    # -- run mode ---------------------------------------------------------------------------
    async def run(self, agent: Any, session: Any, requests: Any) -> Any:
        run = self._begin(agent, session, requests, "run")
        if run is None:
            return await self.base.run(agent, session, requests)
        active = _active_run.set(run)
        marked = enter_traced_run()
        nesting = nesting_runs(self._nested)
        token = attach(run.run.context())
        sink = install_observer(run)
        try:
            reply = await self.base.run(agent, session, requests)
        except BaseException as exc:
            self._end(run, error=exc, cancelled=_is_cancellation(exc))
            raise
        finally:
            uninstall_observer(sink)
            end_nesting_runs(nesting)
            detach(token)
            exit_traced_run(marked)
            _active_run.reset(active)
        self._end(run, reply=reply)
        return reply

    # -- stream mode ----------------------------------------------------------------------------
    async def stream(self, agent: Any, session: Any, requests: Any) -> AsyncIterator[Any]:
        run = self._begin(agent, session, requests, "stream")
        if run is None:
            async for event in self.base.stream(agent, session, requests):
                yield event
            return
        try:
            events = self.base.stream(agent, session, requests).__aiter__()
        except BaseException as exc:
            self._end(run, error=exc)
            raise
        exhausted = False
        next_event, handle, run_context = events.__anext__, run.handle, run.run.context()
        set_run, reset_run = _active_run.set, _active_run.reset
        opener = self._nested
        # The observer is offered in the first step only: a runner of ours takes it
        # there (core.observer.stream_observer) and reports each event itself, as it
        # makes it; a foreign runner does not, and we read its events as they pass.
        sink: Any = install_observer(run)
        try:
            while True:
                # Make our run current only while the base produces the next event;
                # set and reset happen in this same step, whatever the consumer does.
                active = set_run(run)
                marked = enter_traced_run()
                nesting = nesting_runs(opener)
                token = attach(run_context)
                try:
                    event = await next_event()
                except StopAsyncIteration:
                    exhausted = True
                    break
                finally:
                    detach(token)
                    end_nesting_runs(nesting)
                    exit_traced_run(marked)
                    reset_run(active)
                    if sink is not None:
                        uninstall_observer(sink)
                        sink = None
                if not run.claimed:
                    handle(event)
                yield event
        except GeneratorExit:
            # The consumer stopped early (aclose, break, or the loop finalising an
            # abandoned stream): not an error, but nothing may stay open.
            self._end(run, cancelled=True)
            raise
        except BaseException as exc:
            self._end(run, error=exc, cancelled=_is_cancellation(exc))
            raise
        else:
            self._end(run)
        finally:
            if not exhausted:
                await _close(events)


def _framework_name(base: Any) -> str:
    """The framework a runner declares (``framework``, else ``name``), else its class name."""
    for attr in ("framework", "name"):
        value = getattr(base, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(base).__name__


def _instructions(agent: Any) -> str | None:
    """The system instructions of a native agent (captured with content only).

    Only text: a framework's ``instructions`` may be a method or a callable (Pydantic
    AI, OpenAI Agents), whose repr says nothing; the chat spans carry the rendered text.
    """
    value = getattr(getattr(agent, "native", None), "instructions", None)
    return value if isinstance(value, str) and value else None


def _is_cancellation(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, asyncio.CancelledError)


async def _close(events: Any) -> None:
    # A fault in the base's own cleanup is the base's, not ours: it propagates,
    # exactly as it would to a consumer closing the base stream directly.
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


def traced(runner: Any, settings: TraceConfig | None = None, **overrides: Any) -> TracingRunner:
    """Wrap ``runner`` for tracing; returns it unchanged if it is already traced."""
    if getattr(runner, "is_tracing_runner", False):
        return runner  # type: ignore[no-any-return]
    return TracingRunner(runner, settings, **overrides)
