"""The runner: ``OpenAIRunner`` (``start`` / ``install`` / ``quiet``), its per-run ``_Run``,
and ``OpenAIModule``.

- ``start`` is the SDK's own call, nothing of ours: what an untraced run mode runs.
- ``install`` (stream mode, or an observed run) makes the run's mapper; an observed
  run also gets our hooks and ``RunConfig`` callables (``adapter.observed_options``),
  and a traced one has its agent tools traced as nested runs (``nesting.py``).
- ``quiet`` (a traced run) switches the SDK's own tracing off (``quiet.py``).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any, ClassVar, cast

from agents import Agent
from agents import Runner as SdkRunner
from agents.result import RunResultBase, RunResultStreaming

from runnertrace.core.models import AgentReply
from runnertrace.core.module import Module
from runnertrace.core.observer import claim_observer, in_traced_run
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    save,
)
from runnertrace.runners.openai_agents.adapter import (
    HooksLink,
    _Hooks,
    _NestingAgentRunner,
    observed_options,
)
from runnertrace.runners.openai_agents.convert import agent_reply, native_input
from runnertrace.runners.openai_agents.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.openai_agents.nesting import forget
from runnertrace.runners.openai_agents.quiet import quiet_framework_telemetry

STATE_KEY = "openai"


class _Run(FrameworkRun[RunResultBase]):
    """One SDK run: ``Runner.run`` (run mode) or ``Runner.run_streamed`` (stream mode)."""

    def __init__(self, setup: RunSetup[Agent[Any]], sdk_input: list[Any]) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.sdk_input = sdk_input
        self.options = setup.prepared.options
        self.mapper: _Mapper | None = None  # the install step's
        self.observed_config: Any = None  # the RunConfig copy an observed run is given
        self.link: HooksLink | None = None  # what the observed run's RunConfig callables reach
        self.result: RunResultStreaming | None = None
        self.completed = False

    async def call(self) -> RunResultBase:
        context = self.setup.prepared.context
        return await SdkRunner.run(self.native, self.sdk_input, context=context, **self.options)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        # The SDK runs the loop in a task created right here; claiming the
        # observer around its creation hides any run-mode sink from the tools,
        # so a nested untraced run never reports into an outer run's trace.
        context = self.setup.prepared.context
        with claim_observer():
            self.result = SdkRunner.run_streamed(
                self.native, self.sdk_input, context=context, **self.options
            )
        # stream_events() is an async generator; typed as an iterator by the SDK.
        events = cast("AsyncGenerator[Any, None]", self.result.stream_events())
        async with aclosing(events):
            yield events

    def map(self, item: Any) -> None:
        if self.mapper is not None:
            self.mapper.on_stream_event(item)

    def fail(self, error: BaseException) -> None:
        if self.mapper is not None:
            self.mapper.fail(error)

    def complete(self) -> None:
        self.completed = True
        if self.mapper is not None:
            self.mapper.finish()

    def close(self) -> None:
        try:
            if self.mapper is not None:  # cancelled too: the caller's context never keeps it
                self.mapper.exit_model_scope()
            if self.result is not None and not self.completed:
                # The consumer stopped or the run failed: stop the SDK's background
                # loop instead of letting it run on unobserved.
                self.result.cancel()
        finally:
            if self.observed_config is not None:
                forget(self.observed_config)  # its agent tools are no longer this run's
            if self.link is not None:
                self.link.release()  # what the SDK copied of our callables outlives the run

    async def outcome(self) -> RunResultBase:
        assert self.result is not None  # set when the stream opened
        return self.result

    async def save(self, result: RunResultBase) -> None:
        # The context is the very object the tools mutated, in full (the fidelity table).
        setup = self.setup
        save(setup.session, STATE_KEY, result.to_input_list(mode="normalized"), setup.prepared)

    def reply(self, result: RunResultBase, prompt: str) -> AgentReply:
        return agent_reply(result, prompt)


class OpenAIRunner(FrameworkRunner[Agent[Any]]):
    """Runs an ``agents.Agent`` in run or stream mode.

    See the package docstring for session state, framework context, run options,
    observation and the SDK's own tracing.
    """

    framework: ClassVar[str] = "openai"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = Agent
    native_what: ClassVar[str] = "an agents.Agent"
    boundary: ClassVar[MappingBoundary] = _BOUNDARY
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "starting_agent": "the runner starts the registered agent",
        "input": "the runner builds the input from the session history and the requests",
        "session": (
            "the runner keeps the conversation in the runnertrace Session under 'openai'; "
            "an SDK session would replay the history twice"
        ),
        "context": (
            "the runner injects the session's framework context; "
            "set it with Session.set_framework_context()"
        ),
        "conversation_id": (
            "server-side conversation state would duplicate the history the runner replays"
        ),
        "previous_response_id": (
            "server-side response chaining would duplicate the history the runner replays"
        ),
        "auto_previous_response_id": (
            "server-side response chaining would duplicate the history the runner replays"
        ),
    }

    def __init__(self, *, keep_sdk_tracing: bool = False) -> None:
        self.keep_sdk_tracing = keep_sdk_tracing

    async def start(self, setup: RunSetup[Agent[Any]]) -> _Run:
        sdk_input = [*copy.deepcopy(setup.prepared.state or []), *native_input(setup.requests)]
        return _Run(setup, sdk_input)

    def install(self, setup: RunSetup[Agent[Any]], run: FrameworkRun[Any]) -> None:
        """The mapper (stream mode maps the stream, observed or not); an observed run's
        hooks and ``RunConfig`` callables; a traced run's agent tools watched."""
        assert isinstance(run, _Run)
        declared = run.options.get("run_config")
        run.mapper = _Mapper(setup.builder, declared, setup.native, streaming=setup.streaming)
        if not setup.observed:
            return  # an unobserved stream: the stream events carry it all
        run.link = HooksLink(_Hooks(run.mapper))
        run.options = observed_options(run.options, run.link)
        run.observed_config = run.options["run_config"]
        if in_traced_run():
            _NestingAgentRunner.watch(declared, run.options, self.keep_sdk_tracing)

    def quiet(self, setup: RunSetup[Agent[Any]], run: FrameworkRun[Any]) -> None:
        """The SDK's own tracing off for this run, unless kept (see ``quiet.py``)."""
        assert isinstance(run, _Run)
        if not self.keep_sdk_tracing and run.observed_config is not None:
            quiet_framework_telemetry(run.observed_config)


class OpenAIModule(Module):
    """Registers ``agents.Agent`` objects with the runtime, paired with an :class:`OpenAIRunner`."""

    runner_class = OpenAIRunner
