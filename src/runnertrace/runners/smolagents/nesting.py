"""Managed agents: which inner agents a smolagents run can run, and when one does.

smolagents runs a managed agent itself: the manager calls it as a tool
(``member(task)``, which calls ``member.run``), with no runner of ours in between,
so the tracing layer cannot nest that run by itself. This module is the discovery:

- :func:`members_of`: the agents a run can call (an agent's ``managed_agents``);
  the install step replaces each one's ``run`` for the run (``adapter``), and a
  member's own members are found the same way when it runs;
- :func:`open_member_run`: a member's ``run`` was called, in its manager's tool
  scope: its nested run opens there, with a mapper of its own, kept by the
  manager's mapper so that a cancelled run ends it too.

The rest of a nested run's life (its builder, its end with the answer or the
error, or cancelled when the manager's run ends first, once) is the kit's
:class:`~runnertrace.runners._kit.nesting.NestedRuns`, one per manager's mapper.
Both functions are called from the install step or from guarded code only.
"""

from __future__ import annotations

from smolagents import MultiStepAgent

from runnertrace.core.models import AgentRequestText
from runnertrace.runners.smolagents.mapper import _Mapper

__all__ = ["members_of", "open_member_run"]


def members_of(native: MultiStepAgent) -> list[MultiStepAgent]:
    """The managed agents ``native`` can call as tools (each one's own are its own)."""
    return list(native.managed_agents.values())


def open_member_run(manager: _Mapper, member: MultiStepAgent, task: str) -> _Mapper | None:
    """The mapper of ``member``'s run for ``task``, called in ``manager``'s current
    tool scope: it reports to a nested run of its own, opened there (an
    ``invoke_agent`` span under the manager's ``execute_tool``); ``None`` when
    nothing traces here or the manager's run was cancelled."""
    name = str(member.name)
    with manager.lock:  # the manager's tool threads open their members one at a time
        if manager.closed:
            return None
        key = next(manager.member_keys)
        # The member is driven as a stream (see adapter._MemberRun), whatever the mode.
        nested = manager.members.open(
            key, name, mode="stream", requests=[AgentRequestText(prompt=task)]
        )
        if nested is None:
            return None
        child = _Mapper(nested.builder, name, member, manager, key)
        manager.children.append(child)
        return child
