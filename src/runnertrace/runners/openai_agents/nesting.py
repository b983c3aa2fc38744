"""Nested-agent discovery: which SDK run is an agent run as a tool of a traced run.

``Agent.as_tool()`` runs the inner agent with ``Runner.run`` (or ``run_streamed``,
given ``on_stream``) from inside the tool, handing it the outer run's ``RunConfig``
and no hooks: nothing of ours reaches the inner run but that config. So a traced
run registers its (observed, copied) config here, and the SDK's default agent
runner, wrapped at the first traced run (``adapter._NestingAgentRunner``), asks
:func:`agent_tool_of` about each run it starts: a run with a registered config and
hooks other than the traced run's own is that run's agent tool. The kit's
:class:`~runnertrace.runners._kit.nesting.NestedAgentRun` runs the rest of its life
(``adapter._AgentTool``), including a streamed agent tool, whose run ends in its
loop task's done-callback, possibly after the tool that started it.

A registration goes when the run ends (``_Run.close``, or the agent tool's end).
These functions are called from the install step and from guarded adapter code.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Origin(NamedTuple):
    """A traced run's config, as an agent tool of that run receives it."""

    config: Any  # the observed copy the run was given (what ``as_tool`` passes on)
    declared: Any  # the user's own run config, which the agent tool's run starts from
    keep_sdk_tracing: bool
    hooks: Any  # the hooks the traced run was given: that run's own calls carry them


_origins: dict[int, Origin] = {}
"""Registered configs by ``id``; the entry holds the config, so the id stays its own."""


def register(config: Any, declared: Any, keep_sdk_tracing: bool, hooks: Any) -> None:
    """A traced run runs with ``config`` and ``hooks``: an SDK run started with that
    config and other hooks is one of its agent tools."""
    _origins[id(config)] = Origin(config, declared, keep_sdk_tracing, hooks)


def forget(config: Any) -> None:
    """The run that registered ``config`` ended (nothing registered: nothing to do)."""
    _origins.pop(id(config), None)


def agent_tool_of(kwargs: dict[str, Any]) -> Origin | None:
    """The traced run whose agent tool an SDK run started with ``kwargs`` is, or ``None``
    (any other run: the traced run itself, an untraced run, a user's own run)."""
    config = kwargs.get("run_config")
    origin = _origins.get(id(config))
    if origin is None or origin.config is not config or kwargs.get("hooks") is origin.hooks:
        return None
    return origin
