"""The Runner contract every framework adapter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from runnertrace.core.events import StreamEvent
from runnertrace.core.models import AgentReply, AgentRequest

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent
    from runnertrace.core.session import Session

__all__ = ["Runner", "RunnerLike"]


@runtime_checkable
class RunnerLike(Protocol):
    """What the Runtime and the tracing layer need of a runner: ``run`` and ``stream``.

    Our :class:`Runner` subclasses satisfy it, and so do wrappers such as
    ``TracingRunner`` and runners written without our base class.
    """

    async def run(self, agent: Any, session: Any, requests: Any) -> Any: ...

    def stream(self, agent: Any, session: Any, requests: Any) -> AsyncIterator[Any]: ...


class Runner(ABC):
    """Executes one framework's agents behind a common interface.

    ``run()`` returns an :data:`AgentReply`; ``stream()`` is an async iterator of
    :data:`StreamEvent`. A runner that cannot stream sets ``supports_streaming``
    to ``False`` and raises ``NotImplementedError`` from ``stream()``.

    Subclasses name the run-option keys they populate themselves in
    ``RESERVED_RUN_OPTIONS`` (key -> reason); declaring one is rejected.
    """

    framework: ClassVar[str] = "custom"
    RESERVED_RUN_OPTIONS: ClassVar[Mapping[str, str]] = {}

    @property
    def supports_streaming(self) -> bool:
        return True

    @abstractmethod
    async def run(self, agent: Agent, session: Session, requests: list[AgentRequest]) -> AgentReply:
        """Execute ``agent`` on ``requests`` within ``session``."""

    @abstractmethod
    def stream(
        self, agent: Agent, session: Session, requests: list[AgentRequest]
    ) -> AsyncIterator[StreamEvent]:
        """Yield the run's events as they happen."""

    @classmethod
    def validate_run_options(cls, options: Mapping[str, Any]) -> None:
        """Reject keys this runner owns. Adapters with extra rules extend this."""
        for key in options:
            reason = cls.RESERVED_RUN_OPTIONS.get(key)
            if reason is not None:
                raise ValueError(f"run option {key!r} is reserved by {cls.__name__}: {reason}")
