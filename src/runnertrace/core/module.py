"""Modules register a framework's native agents with the runtime, paired with a runner."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Self

from runnertrace.core.agent import Agent, RunOptionsFactory
from runnertrace.core.hooks import PostHook, PreHook
from runnertrace.core.runner import Runner

if TYPE_CHECKING:
    from runnertrace.core.runtime import Runtime

__all__ = ["Module"]


class Module:
    """Base for ``NativeModule``, ``OpenAIModule``, ``LangGraphModule``, ...

    Subclasses set ``runner_class`` and, where the native agent's name is not in
    its ``name`` attribute, override :meth:`agent_name`. Every method that
    configures an agent returns ``self`` so declarations chain.

    Any module takes a name of the user's for an agent, in place of the one the
    framework gives it: pass ``(name, native)`` pairs among ``agents``, or call
    ``add(native, name=...)``.
    """

    runner_class: ClassVar[type[Runner]]
    #: How a user names one of the framework's agents, for the error about a nameless
    #: one: ``("the pydantic_ai agent", "Agent(..., name='assistant')")``.
    naming: ClassVar[tuple[str, str] | None] = None

    def __init__(self, agents: Iterable[Any], runtime: Runtime | None = None) -> None:
        from runnertrace.core.runtime import Runtime

        self.runtime = runtime or Runtime.current()
        self._runner = self.make_runner()
        self._agents: dict[int, Agent] = {}
        self._names: dict[int, str] = {}  # the user's names, by native agent
        for native in agents:
            self.add(native)

    def make_runner(self) -> Runner:
        return self.runner_class()

    def agent_name(self, native: Any) -> str:
        """The framework's name for ``native`` (its ``name``); a subclass may read another
        attribute. A name the user gave at registration wins over both (:meth:`add`)."""
        name = getattr(native, "name", None)
        if not isinstance(name, str) or not name:
            if self.naming is None:
                raise ValueError(f"cannot register {native!r}: it has no usable 'name'")
            what, example = self.naming
            raise ValueError(f"cannot register {native!r}: give {what} a name ({example})")
        return name

    def add(self, native: Any, name: str | None = None) -> Agent:
        """Register ``native`` (or a ``(name, native)`` pair) under ``name`` if given,
        else under the framework's name for it."""
        if isinstance(native, tuple):
            name, native = native
        if name is not None:
            self._names[id(native)] = name
        named = self._names.get(id(native))
        agent = Agent(named or self.agent_name(native), self._runner, native)
        self._agents[id(native)] = agent
        self.runtime.agents().register(agent)
        return agent

    def get(self, agent: Any) -> Agent:
        """The registered :class:`Agent` for a native agent, an Agent, or a name."""
        if isinstance(agent, Agent):
            return agent
        if isinstance(agent, str):
            return self.runtime.agents().get(agent)
        found = self._agents.get(id(agent))
        if found is None:
            raise KeyError(f"{agent!r} is not registered with this module")
        return found

    @property
    def agents(self) -> list[Agent]:
        return list(self._agents.values())

    def run_options(
        self, agent: Any, factory: RunOptionsFactory | None = None, /, **options: Any
    ) -> Self:
        """Declare native run options for ``agent`` (chained; later calls win per key)."""
        self.get(agent).declare_run_options(factory, **options)
        return self

    def pre_hook(self, agent: Any, *hooks: PreHook) -> Self:
        self.get(agent).pre_hooks.extend(hooks)
        return self

    def post_hook(self, agent: Any, *hooks: PostHook) -> Self:
        self.get(agent).post_hooks.extend(hooks)
        return self
