"""The framework adapter: the one ADK plugin through which a run's events are observed.

ADK calls a plugin's callbacks in order, and the first that returns a value answers
for the model or the tool (and skips the plugins and agent callbacks after it). Ours
is registered last on the per-run ADK runner and returns ``None`` from every
callback, so the user's plugins and the agent's callbacks still fire exactly once
and keep the last word. The class is guarded: a fault in a callback is a telemetry
fault, reported once, and the callback returns ``None``, as ADK needs to go on.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from runnertrace.runners._kit.adapter import guarded
from runnertrace.runners.adk.mapper import _BOUNDARY, _LaneKey, _Mapper
from runnertrace.runners.adk.nesting import calling_agent_tool

PLUGIN_NAME = "runnertrace"


def _lane_of(context: CallbackContext) -> _LaneKey:
    """The lane a callback belongs to: its ADK invocation and branch."""
    invocation = context._invocation_context  # noqa: SLF001 - ADK exposes no public branch
    return invocation.invocation_id, invocation.branch or ""


@guarded(_BOUNDARY)
class _ObserverPlugin(BasePlugin):
    """The one plugin through which a run's events are observed.

    ADK passes it down to an ``AgentTool``'s sub-runner, so it hears the agent runs
    the run starts too: each invocation's callbacks go to the mapping of its run
    (the first invocation is the run's own; one started inside an ``AgentTool``
    call is that call's nested run; any other is not ours to map).
    """

    def __init__(self, mapper: _Mapper) -> None:
        super().__init__(PLUGIN_NAME)
        self.mapper = mapper
        self._runs: dict[str, _Mapper] = {}  # invocation id -> the mapping of its run

    def _of(self, invocation_id: str) -> _Mapper | None:
        mapper = self._runs.get(invocation_id)
        return mapper if mapper is not None and not mapper.ended else None

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        invocation = invocation_context.invocation_id
        if self.mapper.root is None:
            self.mapper.run_started(invocation)
            self._runs[invocation] = self.mapper
            return
        caller = calling_agent_tool()
        if caller is not None:
            owner, call_id = caller
            child = owner.open_agent_run(call_id, invocation_context)
            if child is not None:
                self._runs[invocation] = child

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        mapper = self._of(invocation_context.invocation_id)
        if mapper is not None:
            mapper.run_ended(invocation_context.invocation_id)
            mapper.end_run()  # a nested run ends with its reply

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        mapper = self._of(invocation_context.invocation_id)
        if mapper is not None:
            mapper.end_run(error)  # a nested run ends with the error (ours: the runner's)

    async def after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> None:
        key = _lane_of(callback_context)
        mapper = self._of(key[0])
        if mapper is not None:
            mapper.agent_ended(key, agent.name)

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> None:
        key = _lane_of(callback_context)
        mapper = self._of(key[0])
        if mapper is not None:
            agent = callback_context._invocation_context.agent  # noqa: SLF001 - see _lane_of
            mapper.model_started(
                key,
                callback_context.agent_name,
                agent.root_agent if isinstance(agent, BaseAgent) else None,
                llm_request,
            )

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> None:
        key = _lane_of(callback_context)
        mapper = self._of(key[0])
        if mapper is not None:
            mapper.model_responded(key, llm_response)

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> None:
        key = _lane_of(callback_context)
        mapper = self._of(key[0])
        if mapper is not None:
            mapper.model_failed(key, error)

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> None:
        call_id = tool_context.function_call_id
        if call_id:
            key = _lane_of(tool_context)
            mapper = self._of(key[0])
            if mapper is not None:
                mapper.tool_started(key, call_id, tool)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> None:
        call_id = tool_context.function_call_id
        mapper = self._of(tool_context.invocation_id)
        if call_id and mapper is not None:
            mapper.tool_finished(call_id, tool.name, result)

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> None:
        call_id = tool_context.function_call_id
        mapper = self._of(tool_context.invocation_id)
        if call_id and mapper is not None:
            mapper.tool_failed(call_id, tool.name, error)

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> None:
        mapper = self._of(invocation_context.invocation_id)
        if mapper is not None:
            mapper.settle(event)
