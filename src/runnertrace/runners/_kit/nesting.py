"""A run nested inside a tool of a traced run: an agent the framework itself calls.

Some frameworks run a second agent inside the first one's tool call with no runner
in between (smolagents' managed agents: the manager calls ``member(task)``, which
calls ``member.run``). Nothing there passes through a ``TracingRunner``, so the
member would get no run span of its own. :func:`nested_run` opens one, exactly as
a traced runner called inside the tool would: an ``invoke_agent`` span parented on
the OTel current span (the running tool's, inside its tool scope), reporting to a
tracer of its own that shares the outer run's OTel tracer, content policy,
session and mode. Its tokens are counted on its own run span, never the outer's.

The tracer offers the child run as ``nested_run(agent_name, requests)`` on the
observer; an observer without it (a plain sink, or nothing) gets no nested run, and
the member runs untraced, exactly as before. Nothing here imports the tracing layer.
"""

from __future__ import annotations

from typing import Any

from runnertrace.core.models import AgentReply, AgentRequestText
from runnertrace.core.observer import Observer

__all__ = ["NestedRun", "nested_run"]


class NestedRun:
    """An open nested run: report its events to ``observer``, then :meth:`finish` it."""

    __slots__ = ("observer",)

    def __init__(self, observer: Any) -> None:
        self.observer: Observer = observer

    def finish(
        self,
        reply: AgentReply | None = None,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        """End the run span (and whatever it left open), with its reply, its failure, or
        as cancelled (the outer run's consumer left). Only the first call counts."""
        self.observer.finish(  # type: ignore[attr-defined]
            reply=reply, error=error, cancelled=cancelled
        )


def nested_run(outer: Observer, agent_name: str, task: str) -> NestedRun | None:
    """A run span for ``agent_name`` under the current span, reporting like ``outer``'s
    run; ``None`` when ``outer`` is no tracer (untraced, or a foreign observer).

    Call it inside the outer call's tool scope, where the tool's span is current."""
    open_child = getattr(outer, "nested_run", None)
    tracer = open_child(agent_name, [AgentRequestText(prompt=task)]) if open_child else None
    return None if tracer is None else NestedRun(tracer)
