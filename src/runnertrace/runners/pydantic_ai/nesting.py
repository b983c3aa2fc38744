"""Nested-agent discovery: an agent that a traced run's tool runs (delegation).

Pydantic AI's multi-agent pattern, ``await other.run(..., usage=ctx.usage)`` inside
a tool, starts a run no runner of ours is called for, and that receives nothing of
the run that called it. So the first traced run installs one process-wide hook
(:func:`install_delegation_hook`, from ``PydanticAIRunner.install``): it wraps
``Agent.iter`` (every ``run``, ``run_sync``, ``run_stream``, ``run_stream_events``
and ``iter`` goes through it; Pydantic AI has no process-wide registry of
capabilities). The hook stays for the life of the process, by design: outside a
traced run's tool it reads one context variable (:data:`.mapper.IN_TRACED_TOOL`,
set in the tool scope) and calls the original, so untraced runs pay one lookup
(``benchmarks/pydantic_ai_delegation.py`` measures it).

Inside such a tool the hook discovers the delegate (:meth:`_Delegation.open`): a run
of this runner, traced or not, is left to the runner (its plain call carries the
:data:`OWN_RUN` marker); any other run is a nested run of its own
(:class:`~runnertrace.runners._kit.nesting.NestedAgentRun`: ``invoke_agent`` under
the tool's ``execute_tool``), mapped by this runner's own capability with the
silencers of :mod:`.quiet`: the same mapping as for the traced agent, each model
call once (from its own response: ``usage=ctx.usage`` makes Pydantic AI's run usage
cumulative, ours is not). A delegate's delegates nest the same way. The nested
run's mode is ``run`` (``iter`` cannot tell whether its caller streams), and it ends
as the delegate's ``iter`` block ends: with its reply, its error, or cancelled. No
registry of open nested runs is needed: each one lives inside the tool call that
started it, which ends (or is cancelled) before the outer run does.

Everything of ours in the hook runs in the runner's boundary (the class is
``@guarded``; ``around`` passes the delegate's own exceptions through unchanged).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities.abstract import AbstractCapability
from pydantic_ai.run import AgentRun

from runnertrace.core.models import AgentReply, AgentRequestText
from runnertrace.runners._kit.adapter import fault_returns, guarded, passes_through
from runnertrace.runners._kit.nesting import NestedAgentRun
from runnertrace.runners.pydantic_ai.adapter import _Observer
from runnertrace.runners.pydantic_ai.convert import reply_of_run
from runnertrace.runners.pydantic_ai.mapper import _BOUNDARY, IN_TRACED_TOOL, _Mapper
from runnertrace.runners.pydantic_ai.quiet import quiet_framework_telemetry

__all__ = ["OWN_RUN", "install_delegation_hook"]

_hook_installed = False
_hook_lock = threading.Lock()


@dataclass
class _OwnRun(AbstractCapability[Any]):
    """Marks a run of this runner inside a tool of a traced run: the runner decided how
    to trace it (or not), the delegation hook leaves it alone. It does nothing else."""

    _safe_at_runtime: ClassVar[bool] = True


OWN_RUN = _OwnRun()


@guarded(_BOUNDARY)  # a fault costs the nested runs their telemetry, not the run
def install_delegation_hook() -> None:
    """Wrap ``Agent.iter`` once per process (at the first traced run, never at import).

    ``Agent.iter`` is the one public method every run goes through (``run``,
    ``run_sync``, ``run_stream``, ``run_stream_events``, ``iter``), and a delegated
    run receives nothing of the run that called it: see the module.
    """
    global _hook_installed
    if _hook_installed:
        return
    with _hook_lock:  # first traced runs in two threads at once: one wrapper
        if _hook_installed:
            return
        PydanticAgent.iter = _delegation_hook(PydanticAgent.iter)  # type: ignore[method-assign]
        _hook_installed = True


def _delegation_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Agent.iter`` wrapped: one context-variable read, then the original, unless the
    call comes from inside a traced run's tool (then the delegate is a nested run)."""
    in_traced_tool = IN_TRACED_TOOL.get

    @functools.wraps(original)
    def iter(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not in_traced_tool():
            return original(self, *args, **kwargs)
        delegation = _Delegation.open(self, args, kwargs)
        if delegation is None:  # a run of this runner, or nothing traces here
            return original(self, *args, **kwargs)
        try:
            native = original(self, *args, **delegation.options(kwargs))
        except BaseException as error:  # arguments iter() refuses: the delegate's own error
            delegation.nested.fail(error)
            raise
        return delegation.around(native)

    return iter


@guarded(_BOUNDARY)
@dataclass
class _Delegation:
    """One delegated run: its nested run, the capabilities that map it, what it was asked."""

    nested: NestedAgentRun
    observer: _Observer
    capabilities: list[AbstractCapability[Any]]
    prompt: Any

    @classmethod
    def open(cls, agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Delegation | None:
        """The nested run of the delegate ``agent.iter(*args, **kwargs)`` starts, or
        ``None`` when it is a run of this runner or nothing traces here (observed
        without a tracing layer, say)."""
        if any(isinstance(capability, _OwnRun) for capability in kwargs.get("capabilities") or ()):
            return None  # a run of this runner: traced (or not) by it
        prompt = args[0] if args else kwargs.get("user_prompt")
        name = getattr(agent, "name", None) or "agent"
        # The framework's own spans are silenced for this run too: each call counts once.
        silencers = quiet_framework_telemetry(agent, kwargs)
        requests = [AgentRequestText(prompt=prompt)] if isinstance(prompt, str) else None
        nested = NestedAgentRun.open(_BOUNDARY, name, mode="run", requests=requests)
        if nested is None:
            return None
        observer = _Observer(_Mapper(nested.builder, name, detailed=True))
        return cls(nested, observer, [*silencers, observer], prompt)

    @fault_returns(lambda self, kwargs: kwargs)
    def options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The delegate's ``iter`` keywords, with the capabilities that map it added
        after its own (on a fault: its own keywords, unmapped)."""
        declared = list(kwargs.get("capabilities") or ())
        return {**kwargs, "capabilities": [*declared, *self.capabilities]}

    def finished(self, agent_run: AgentRun[Any, Any]) -> AgentReply | None:
        """The delegate's run succeeded: its last step ends; its reply (``None`` on a
        fault, and the nested run still ends: :meth:`around`)."""
        self.observer.mapper.run_ended()
        result = agent_run.result
        if result is None:
            return None
        return reply_of_run(result, self.prompt if isinstance(self.prompt, str) else "")

    @passes_through
    @asynccontextmanager
    async def around(
        self, native: AbstractAsyncContextManager[AgentRun[Any, Any]]
    ) -> AsyncIterator[AgentRun[Any, Any]]:
        """The delegate's own ``iter`` context; the nested run ends as it ends."""
        try:
            async with native as agent_run:
                yield agent_run
        except BaseException as error:
            self.nested.fail(error)  # the kit ends it in the boundary: cancelled, or with it
            raise
        else:
            self.nested.end(self.finished(agent_run))
