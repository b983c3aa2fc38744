"""The framework-agnostic agent: a native agent paired with its runner."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from runnertrace.core.context import current_agent
from runnertrace.core.hooks import PostHook, PreHook
from runnertrace.core.models import AgentRequest

if TYPE_CHECKING:
    from runnertrace.core.runner import RunnerLike
    from runnertrace.core.session import Session

__all__ = ["Agent", "RunOptionsFactory"]

RunOptionsFactory: TypeAlias = Callable[
    ["Agent", "Session", list[AgentRequest]],
    Mapping[str, Any] | Awaitable[Mapping[str, Any]],
]


class Agent:
    """A named agent: the framework-native object, its runner, hooks and run options.

    ``run_options`` is the declared static dict; it is read on every run and
    never persisted. :meth:`resolve_run_options` computes one run's options.
    """

    def __init__(
        self,
        name: str,
        runner: RunnerLike,
        native: Any = None,
        *,
        description: str = "",
        pre_hooks: list[PreHook] | None = None,
        post_hooks: list[PostHook] | None = None,
    ) -> None:
        if not name:
            raise ValueError("an agent needs a non-empty name")
        self.name = name
        self.runner = runner
        self.native = native
        self.description = description
        self.pre_hooks: list[PreHook] = list(pre_hooks or [])
        self.post_hooks: list[PostHook] = list(post_hooks or [])
        self.run_options: dict[str, Any] = {}
        self.run_options_factory: RunOptionsFactory | None = None

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, runner={type(self.runner).__name__})"

    @property
    def framework(self) -> str:
        return getattr(self.runner, "framework", "custom")

    def _validate(self, options: Mapping[str, Any]) -> None:
        validate = getattr(self.runner, "validate_run_options", None)
        if validate is not None:
            validate(options)

    def declare_run_options(self, factory: RunOptionsFactory | None = None, **options: Any) -> None:
        """Merge ``options`` into the declared ones (later wins per key).

        Reserved keys are rejected here, at declaration, with a ``ValueError``.
        A ``factory`` replaces any earlier one.
        """
        self._validate(options)
        if factory is not None:
            if not callable(factory):
                raise TypeError(f"a run-options factory must be callable, got {factory!r}")
            self.run_options_factory = factory
        self.run_options.update(options)

    async def resolve_run_options(
        self, session: Session, requests: list[AgentRequest]
    ) -> dict[str, Any]:
        """One run's options: the static dict, then the factory's result on top.

        The runner writes the keys it owns after this, so they always win.
        """
        options = dict(self.run_options)
        factory = self.run_options_factory
        if factory is None:
            return options
        produced = factory(self, session, requests)
        if inspect.isawaitable(produced):
            produced = await produced
        if not isinstance(produced, Mapping):
            raise TypeError(
                f"run-options factory for agent {self.name!r} returned "
                f"{type(produced).__name__}, expected a mapping"
            )
        self._validate(produced)
        options.update(produced)
        return options

    @classmethod
    def current(cls) -> Agent:
        """The agent of the run in progress; ``RuntimeError`` outside a run."""
        agent = current_agent.get()
        if agent is None:
            raise RuntimeError("Agent.current() called outside of an agent run")
        return agent
