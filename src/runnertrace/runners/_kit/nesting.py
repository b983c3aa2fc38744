"""The lifecycle of an agent run that a framework starts by itself, inside a traced run.

When a tool of a traced run runs another agent through one of our runners, the
tracing layer nests that run by itself. When the *framework* runs the inner agent
(Agent Framework's ``agent.as_tool()``, a Pydantic AI agent awaited in a tool,
smolagents' managed agents, an OpenAI Agents ``agent.as_tool()``), no runner of
ours is called for it: the runner discovers the inner agent (its ``nesting``
module) and the kit runs the rest of its life, the same way in every runner:

- :meth:`NestedAgentRun.open` opens the nested run where the code runs now (under
  the calling tool's span), with an :class:`EventBuilder` of its own, or gives
  ``None`` when nothing traces here;
- the runner maps the inner agent's progress onto :attr:`NestedAgentRun.builder`
  (a runner whose mapping of the inner agent holds more, such as its open steps,
  sets :attr:`NestedAgentRun.closing`, so that mapping closes as the run ends);
- :meth:`NestedAgentRun.end` ends it once: with the reply, with the error (the open
  message or tool ends with it), or cancelled; after that nothing more reaches it,
  whatever the framework still reports;
- :class:`NestedRuns` keeps the open ones of a run by the framework's key, and ends
  those still open when the outer run ends (their totals then roll up into it).

Every step runs inside the runner's boundary: a fault costs the nested run's
telemetry, never the inner agent's run.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runnertrace.core.observer import NULL_OBSERVER, NestedRun, open_nested_run
from runnertrace.runners._kit.builder import EventBuilder

if TYPE_CHECKING:
    from runnertrace.runners._kit.skeleton import MappingBoundary

__all__ = ["NestedAgentRun", "NestedRuns"]

K = TypeVar("K", bound=Hashable)


class NestedAgentRun:
    """One agent run a framework started inside a traced run's tool; see the module."""

    __slots__ = ("boundary", "builder", "closing", "ended", "name", "run")

    def __init__(
        self,
        run: NestedRun,
        name: str,
        boundary: MappingBoundary,
        *,
        queue: bool,
        builder: Callable[[NestedRun], EventBuilder] | None = None,
    ) -> None:
        self.run = run
        self.name = name
        self.boundary = boundary
        self.builder = EventBuilder(run, queue=queue) if builder is None else builder(run)
        self.ended = False
        #: The runner's own mapping of the inner agent, when it holds more than the
        #: builder does (open steps, the runs it nests in turn): called once as the run
        #: ends, after a failure's open messages ended with the error and before the run
        #: span ends, with whether the run was cancelled, so what it holds ends inside
        #: the run. What it returns is the reply of a run ended with none given (the
        #: caller of :meth:`NestedRuns.end` may not know the inner agent's answer).
        self.closing: Callable[[bool], Any] | None = None

    @classmethod
    def open(
        cls,
        boundary: MappingBoundary,
        agent_name: str,
        *,
        mode: str = "run",
        requests: Any = None,
        queue: bool = False,
        builder: Callable[[NestedRun], EventBuilder] | None = None,
    ) -> NestedAgentRun | None:
        """The nested run of ``agent_name`` here, or ``None`` when nothing traces here
        (or opening it failed, which is reported). ``requests``: what the inner agent
        was asked; ``queue``: the builder also queues its events (a runner that
        forwards the inner agent's events into the outer stream); ``builder``: makes
        the run's builder from the nested run (its observer) instead, for a runner
        whose builder does more with each event (puts it on the outer stream at once,
        in the order the inner agents make them)."""
        with boundary:
            run = open_nested_run(agent_name, mode=mode, requests=requests)
            if run is not None:
                return cls(run, agent_name, boundary, queue=queue, builder=builder)
        return None

    def end(self, reply: Any = None) -> None:
        """The inner agent answered: close what is open, then its run span (once)."""
        self._finish(reply=reply)

    def fail(self, error: BaseException) -> None:
        """The inner agent failed with ``error``: it ends with it. A cancellation (a
        ``BaseException`` that is not an ``Exception``) ends it cancelled, without an
        error it did not raise: a branch cancelled because its sibling failed did not
        fail itself, and what it left open ends cancelled too."""
        if isinstance(error, Exception):
            self._finish(error=error)
        else:
            self._finish(cancelled=True)

    def cancel(self) -> None:
        """The inner agent's run was abandoned (its caller ended first)."""
        self._finish(cancelled=True)

    def _finish(
        self, reply: Any = None, error: BaseException | None = None, cancelled: bool = False
    ) -> None:
        if self.ended:
            return
        self.ended = True
        builder = self.builder
        try:
            with self.boundary:
                if error is not None:
                    builder.fail(error)
                if self.closing is not None:
                    reply = self._close_mapping(reply, error, cancelled)
                self.run.finish(reply=reply, error=error, cancelled=cancelled)
        finally:
            builder.observer = NULL_OBSERVER  # nothing more reaches the ended run

    def _close_mapping(self, reply: Any, error: BaseException | None, cancelled: bool) -> Any:
        """Run :attr:`closing` in a boundary of its own: a fault there still ends the run."""
        answer = None
        with self.boundary:
            answer = self.closing(cancelled) if self.closing is not None else None
        return answer if reply is None and error is None and not cancelled else reply


class NestedRuns(Generic[K]):
    """A run's open nested runs, by the key the framework gives each inner agent.

    Not thread-safe by itself: a runner whose framework reports from several
    threads keys by something each thread owns and calls from that thread.
    """

    __slots__ = ("_boundary", "_open")

    def __init__(self, boundary: MappingBoundary) -> None:
        self._boundary = boundary
        self._open: dict[K, NestedAgentRun] = {}

    def open(
        self,
        key: K,
        agent_name: str,
        *,
        mode: str = "run",
        requests: Any = None,
        queue: bool = False,
    ) -> NestedAgentRun | None:
        """Open (and keep) the nested run of ``agent_name`` under ``key``; see
        :meth:`NestedAgentRun.open`. A key already open is ended first, cancelled."""
        previous = self._open.pop(key, None)
        if previous is not None:
            previous.cancel()
        nested = NestedAgentRun.open(
            self._boundary, agent_name, mode=mode, requests=requests, queue=queue
        )
        if nested is not None:
            self._open[key] = nested
        return nested

    def get(self, key: K) -> NestedAgentRun | None:
        return self._open.get(key)

    def end(self, key: K, reply: Any = None, error: BaseException | None = None) -> bool:
        """End the nested run under ``key`` with its reply or error; whether one was open."""
        nested = self._open.pop(key, None)
        if nested is None:
            return False
        if error is None:
            nested.end(reply)
        else:
            nested.fail(error)
        return True

    def end_all(self) -> None:
        """The outer run ends: every nested run still open ends cancelled, newest first."""
        while self._open:
            _, nested = self._open.popitem()
            nested.cancel()

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._open))

    def __len__(self) -> int:
        return len(self._open)
