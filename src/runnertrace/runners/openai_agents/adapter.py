"""The framework adapter: what the SDK calls of ours, each class ``@guarded``.

- :class:`_Hooks` is an observed run's ``RunHooks``, composed with the user's declared
  ``hooks=`` (:class:`_ComposedHooks`: each of the user's callbacks fires exactly
  once). It also backs the two ``RunConfig`` callables :func:`observed_options` puts
  in: the tool error formatter (a function tool that raised, whose exception the SDK
  turns into a message for the model by its default ``failure_error_function``,
  reaches it; ours records the exception for the call's result and hands over to the
  user's formatter) and a retry policy in front of the agent's own (the agent's
  still decides).
- :class:`_NestingAgentRunner` is the SDK's default agent runner, wrapped at the first
  traced run, so that an agent run as a tool (``Agent.as_tool()``, which the SDK
  starts with the outer run's config and no hooks) is traced as an ``invoke_agent``
  run of its own, under the tool's ``execute_tool`` span, with its own steps, chat
  and tool spans (:class:`_AgentTool`, on the kit's nested-run lifecycle; which run
  is an agent tool is ``nesting.py``'s to say).

The methods that call into the SDK (a user's hooks, the agent's retry policy, the
inner runner) are ``@passes_through`` and keep ours in the kit's bracket: the SDK's
own exceptions propagate unchanged.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agents import ModelRetrySettings, ModelSettings, RunConfig, RunHooks
from agents.lifecycle import RunHooksBase
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner

from runnertrace.core.models import AgentRequestText
from runnertrace.core.observer import can_nest_runs
from runnertrace.runners._kit.adapter import (
    bracket,
    bracket_sync,
    fault_returns,
    guarded,
    passes_through,
)
from runnertrace.runners._kit.nesting import NestedAgentRun
from runnertrace.runners.openai_agents.convert import agent_reply
from runnertrace.runners.openai_agents.mapper import _BOUNDARY, _Mapper
from runnertrace.runners.openai_agents.nesting import Origin, agent_tool_of, forget, register
from runnertrace.runners.openai_agents.quiet import quiet_framework_telemetry


async def _done() -> None:
    return None


def _finished(*args: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
    """What a hook hands the SDK, after a fault too: a coroutine it can await."""
    return _done()


@guarded(_BOUNDARY)
class _Hooks(RunHooks[Any]):
    """An observed run's ``RunHooks``: each callback hands its call to the mapper.

    Each does its work when the SDK *calls* it, in the SDK's own task, and returns an
    already-finished coroutine: the SDK calls ``on_llm_start`` right before it sends
    the request and ``on_tool_start`` in the task that then runs the tool, so the
    scopes entered there are current for the model's HTTP call and the tool's body
    (an ``async def`` callback would run in a task of its own, where a scope reaches
    nothing).
    """

    def __init__(self, mapper: _Mapper) -> None:
        self.mapper = mapper

    @fault_returns(_finished)
    def on_llm_start(
        self, context: Any, agent: Any, system_prompt: Any, input_items: Any
    ) -> Coroutine[Any, Any, None]:
        self.mapper.llm_start(agent, system_prompt, input_items)
        return _done()

    @fault_returns(_finished)
    def on_llm_end(self, context: Any, agent: Any, response: Any) -> Coroutine[Any, Any, None]:
        self.mapper.llm_end(response)
        return _done()

    @fault_returns(_finished)
    def on_tool_start(self, context: Any, agent: Any, tool: Any) -> Coroutine[Any, Any, None]:
        self.mapper.tool_start(getattr(context, "tool_call_id", None), agent, tool)
        return _done()

    @fault_returns(_finished)
    def on_tool_end(
        self, context: Any, agent: Any, tool: Any, result: Any
    ) -> Coroutine[Any, Any, None]:
        self.mapper.tool_end(getattr(context, "tool_call_id", None), tool.name, result)
        return _done()

    @fault_returns(_finished)
    def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> Coroutine[Any, Any, None]:
        self.mapper.handoff(from_agent, to_agent)
        return _done()

    def format_tool_error(self, args: Any) -> None:
        """``RunConfig.tool_error_formatter``, ours first (the user's then decides the text)."""
        self.mapper.tool_error(args)

    @passes_through
    async def retry_policy(self, context: Any) -> Any:
        """The SDK's retry policy for model calls: the agent's own decides; the mapper
        hears the decision (a retried attempt ends its chat span with its error)."""
        mapper = self.mapper
        policy = mapper.policy_of(mapper.requesting_agent())
        if policy is None:
            return False
        return await bracket(
            _BOUNDARY,
            lambda: _decided(policy, context),
            done=lambda _, decision: mapper.retried(decision, context.error),
        )


async def _decided(policy: Callable[[Any], Any], context: Any) -> Any:
    decision = policy(context)
    if inspect.isawaitable(decision):
        decision = await decision
    return decision


def _fan_out(name: str) -> Callable[..., Any]:
    def call_each(self: _ComposedHooks, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
        # Called now, in order (ours does its work here); the user's run when awaited.
        return _await_all([getattr(hooks, name)(*args, **kwargs) for hooks in self.hooks])

    call_each.__name__ = name
    return passes_through(call_each)  # it calls the user's hooks: theirs raise as theirs


async def _await_all(awaitables: list[Awaitable[Any]]) -> None:
    for awaitable in awaitables:
        await awaitable


@guarded(_BOUNDARY)
class _ComposedHooks(RunHooks[Any]):
    """Ours, then the user's: the SDK takes one ``hooks=`` object, so we pass both.

    Every ``on_*`` callback of the installed SDK is forwarded (built from
    ``RunHooksBase`` at import), so callbacks added by later SDK versions still
    reach the user's hooks. Ours are guarded where they are defined (:class:`_Hooks`).
    """

    def __init__(self, *hooks: RunHooksBase[Any, Any]) -> None:
        self.hooks = hooks


for _name, _ in inspect.getmembers(RunHooksBase, inspect.iscoroutinefunction):
    if _name.startswith("on_"):
        setattr(_ComposedHooks, _name, _fan_out(_name))
del _name


def _compose(ours: RunHooksBase[Any, Any], declared: Any) -> Any:
    if declared is None:
        return ours
    if not isinstance(declared, RunHooksBase):
        return declared  # let the SDK reject it with its own message
    return _ComposedHooks(ours, declared)


@guarded(_BOUNDARY)
class HooksLink:
    """What an observed run's two ``RunConfig`` callables reach: its hooks, until the run ends.

    The SDK copies model settings, our retry policy among them, into what it keeps (a
    model's record of its calls, a response's settings, a result the user holds on to),
    and a copied function is the same function. A policy that held the hooks would keep
    a finished run's mapper, builder and span templates alive as long as any copy lives:
    3,000 traced OpenAI Agents runs grew the memory by 40.5 MB against 13.0 MB untraced.
    Released when the run ends, the callables fall back to what they stand in front of:
    the user's formatter and the starting agent's own policy.
    """

    __slots__ = ("hooks",)

    def __init__(self, hooks: _Hooks) -> None:
        self.hooks: _Hooks | None = hooks

    def release(self) -> None:
        self.hooks = None


def observed_options(options: dict[str, Any], link: HooksLink) -> dict[str, Any]:
    """The run options of an observed run: ``link``'s hooks composed with the user's, our
    tool error formatter in front of theirs, our retry policy in front of the agent's. The
    user's ``RunConfig`` is copied, never changed (the copy is what the traced run's
    agent tools are handed: ``nesting.py``)."""
    hooks = link.hooks
    assert hooks is not None  # a link is released only once its run has ended
    declared = options.get("run_config")
    config = declared if isinstance(declared, RunConfig) else RunConfig(**(declared or {}))
    theirs = config.tool_error_formatter
    # What the SDK reads off a policy itself (e.g. which errors it retries) is the
    # starting agent's policy's: copied over, so transports decide as they would.
    mapper = hooks.mapper
    starting = mapper.policy_of(mapper.starting_agent)

    def formatter(args: Any) -> Any:
        live = link.hooks
        if live is not None:
            live.format_tool_error(args)
        return theirs(args) if theirs is not None else None

    def policy(context: Any) -> Any:
        # a plain function: the SDK deep-copies model settings, and copies functions as is
        live = link.hooks
        if live is None:  # the run has ended: the agent's own policy decides, unobserved
            return starting(context) if starting is not None else False
        return live.retry_policy(context)

    policy.__dict__.update(getattr(starting, "__dict__", {}))
    retry = ModelSettings(retry=ModelRetrySettings(policy=policy))
    # A shallow copy: ``dataclasses.replace`` would rebuild every field's default
    # and costs more than the rest of the observation together.
    observed = copy.copy(config)
    observed.tool_error_formatter = formatter
    # Merged only onto settings the user declared: ``ModelSettings().resolve(retry)`` is
    # ``retry`` field for field, at five times the cost (a validated copy per run).
    settings = config.model_settings
    observed.model_settings = retry if settings is None else settings.resolve(retry)
    return {**options, "hooks": _compose(hooks, options.get("hooks")), "run_config": observed}


# -- agents run as tools ---------------------------------------------------------------
@guarded(_BOUNDARY)
class _AgentTool:
    """One agent run as a tool of a traced run: its nested run (the kit's lifecycle, which
    ends it once), its mapper, and the observed options its SDK run is started with."""

    def __init__(
        self, run: NestedAgentRun, origin: Origin, agent: Any, kwargs: dict[str, Any], prompt: str
    ) -> None:
        self.run = run
        self.prompt = prompt
        self.mapper = _Mapper(run.builder, origin.declared, agent, streaming=False)
        self.link = HooksLink(_Hooks(self.mapper))
        options = observed_options({**kwargs, "run_config": origin.declared}, self.link)
        self.config = options["run_config"]
        if not origin.keep_sdk_tracing:
            quiet_framework_telemetry(self.config)
        register(self.config, origin.declared, origin.keep_sdk_tracing, options["hooks"])
        self.options = options
        self.result: Any = None

    def end(self, result: Any) -> None:
        """The inner run answered: its last step, then its run span, with the reply."""
        try:
            self.mapper.finish()
            self.run.end(agent_reply(result, self.prompt))
        finally:  # a fault of ours above costs telemetry only, never a leaked registration
            self._release()

    def _release(self) -> None:
        """The run is over: its registration goes, and its ``RunConfig`` callables let go
        of its hooks (see :class:`HooksLink`)."""
        forget(self.config)
        self.link.release()

    def fail(self, error: BaseException) -> None:
        """The inner run failed: the call that was running ends with ``error``, then the run."""
        try:
            self.mapper.fail(error)
            self.run.fail(error)
        finally:
            self._release()

    def cancel(self) -> None:
        """The inner run was cancelled: it ends cancelled."""
        try:
            self.mapper.exit_model_scope()
            self.run.cancel()
        finally:
            self._release()

    def streaming(self, result: Any) -> None:
        """``run_streamed`` returned: the hooks carry the inner run, and its loop task's
        end is the run's end (the tool that started it may have ended before)."""
        task = result.run_loop_task
        if task is None:  # no loop to wait for: nothing more will come
            try:
                self.mapper.finish()
                self.run.end()
            finally:
                self._release()
            return
        self.result = result
        task.add_done_callback(self.ended)

    def ended(self, task: Any) -> None:
        """The streamed inner run's loop task is done: it ended, failed or was cancelled."""
        if task.cancelled():
            self.cancel()
            return
        # The SDK keeps a run's error on the result (no public name for it).
        error = task.exception() or getattr(self.result, "_stored_exception", None)
        if error is not None:
            self.fail(error)
        else:
            self.end(self.result)


@guarded(_BOUNDARY)
class _NestingAgentRunner(AgentRunner):
    """The SDK's default runner, with one addition: a run started inside a tool of a
    traced run, with that run's config and no hooks of its own (what ``Agent.as_tool()``
    does), is traced as a run of its own nested under the tool's ``execute_tool`` span.

    ``Agent.as_tool()`` calls ``Runner.run`` without our hooks, and nothing else of ours
    reaches the inner run but the config; the SDK's ``set_default_agent_runner`` is the
    one place a run can be observed from. It is installed at the first traced run
    (:meth:`watch`) and delegates everything else to the runner it replaced: outside a
    traced run it only passes each call on. A runner the user sets later replaces it
    (the agent tool then shows as its tool span only).
    """

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    @classmethod
    def watch(cls, declared: Any, options: dict[str, Any], keep_sdk_tracing: bool) -> None:
        """A traced run starts with ``options``: its agent tools are traced as nested runs
        (a fault here costs their telemetry only)."""
        current = get_default_agent_runner()
        if not isinstance(current, cls):
            set_default_agent_runner(cls(current))
        register(options["run_config"], declared, keep_sdk_tracing, options["hooks"])

    def agent_tool(self, starting_agent: Any, input: Any, kwargs: dict[str, Any]) -> Any:
        """The :class:`_AgentTool` of a run that is an agent tool of a traced run (its
        nested run open), or ``None`` for any other run."""
        origin = agent_tool_of(kwargs)
        if origin is None:
            return None
        prompt = input if isinstance(input, str) else ""
        requests = [AgentRequestText(prompt=input)] if isinstance(input, str) else None
        name = getattr(starting_agent, "name", None) or "agent"
        run = NestedAgentRun.open(_BOUNDARY, name, mode="run", requests=requests)
        if run is None:
            return None
        try:
            return _AgentTool(run, origin, starting_agent, kwargs, prompt)
        except BaseException:
            run.cancel()  # opened for nothing: the inner agent runs untraced
            raise

    @passes_through
    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        tool = self.agent_tool(starting_agent, input, kwargs) if can_nest_runs() else None
        if tool is None:
            return await self.inner.run(starting_agent, input, **kwargs)
        return await bracket(
            _BOUNDARY,
            lambda: self.inner.run(starting_agent, input, **tool.options),
            done=lambda _, result: tool.end(result),
            failed=lambda _, error: tool.fail(error),
            cancelled=lambda _tool, _error: tool.cancel(),
        )

    @passes_through
    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        tool = self.agent_tool(starting_agent, input, kwargs) if can_nest_runs() else None
        if tool is None:
            return self.inner.run_streamed(starting_agent, input, **kwargs)
        return bracket_sync(
            _BOUNDARY,
            lambda: self.inner.run_streamed(starting_agent, input, **tool.options),
            done=lambda _, result: tool.streaming(result),
            failed=lambda _, error: tool.fail(error),
            cancelled=lambda _tool, _error: tool.cancel(),
        )

    @passes_through
    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **kwargs)
