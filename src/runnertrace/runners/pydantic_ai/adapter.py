"""The framework adapter: the run-time capability Pydantic AI calls for a traced run.

Events come from one capability (:class:`_Observer`) that the runner adds to a run's
capabilities. It only *wraps* hooks and calls each handler exactly once, returning
what the handler returned, so the agent's own capabilities, hooks and
``event_stream_handler`` fire exactly once, unchanged. It is outermost, so it sees
what the agent's own capabilities produce.

Each ``wrap_*`` hook calls into the framework through its ``handler``: the
handler's exceptions (the model's, the tool's, Pydantic AI's control flow) are the
agent's and must pass unchanged. So those hooks are ``@passes_through`` and put the
mapping around the call with :func:`~runnertrace.runners._kit.adapter.bracket`
(report the start, run in the model or tool scope, report the end) or pass the
native stream on with :func:`~runnertrace.runners._kit.adapter.mapped_stream`; the
kit runs each of our parts, the scopes included, inside the runner's boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic_ai.capabilities.abstract import (
    AbstractCapability,
    AgentNode,
    CapabilityOrdering,
    NodeResult,
    RawToolArgs,
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapNodeRunHandler,
    WrapToolExecuteHandler,
    WrapToolValidateHandler,
)
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    SkipToolExecution,
    SkipToolValidation,
)
from pydantic_ai.messages import AgentStreamEvent, ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext

from runnertrace.runners._kit.adapter import bracket, guarded, mapped_stream, passes_through
from runnertrace.runners.pydantic_ai.mapper import _BOUNDARY, _Mapper

# Not failures: the call is deferred, or Pydantic AI skips it on purpose.
_CONTROL_FLOW: tuple[type[BaseException], ...] = (
    CallDeferred,
    ApprovalRequired,
    SkipToolExecution,
    SkipToolValidation,
)


@guarded(_BOUNDARY)
@dataclass
class _Observer(AbstractCapability[Any]):
    """The run-time capability that reports a run's events without displacing anything
    (run mode, and an agent a traced run's tool runs): see the module."""

    mapper: _Mapper = field(repr=False, kw_only=False)

    # It adds no tools, toolsets or model wrappers, so a durable agent may take it per run.
    _safe_at_runtime: ClassVar[bool] = True

    def get_ordering(self) -> CapabilityOrdering:
        """Outermost (a fault here leaves Pydantic AI's default order: still mapped)."""
        return CapabilityOrdering(position="outermost")

    @passes_through
    async def wrap_node_run(
        self,
        ctx: RunContext[Any],
        *,
        node: AgentNode[Any],
        handler: WrapNodeRunHandler[Any],
    ) -> NodeResult[Any]:
        mapper = self.mapper
        return await bracket(
            _BOUNDARY,
            lambda: handler(node),
            start=lambda: mapper.node_started(ctx, node),
            done=lambda _, result: mapper.node_finished(ctx, node, result),
        )

    @passes_through
    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        mapper = self.mapper
        return await bracket(
            _BOUNDARY,
            lambda: handler(request_context),
            start=lambda: mapper.message_started(ctx, request_context),
            scope=mapper.builder.model_scope,
            done=lambda _, response: mapper.message_finished(response),
            failed=lambda _, error: mapper.message_finished(None, error),
        )

    @passes_through
    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        mapper = self.mapper
        return await bracket(
            _BOUNDARY,
            lambda: handler(args),
            failed=lambda _, error: mapper.tool_failed(call, error),
            control=_CONTROL_FLOW,
        )

    @passes_through
    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        mapper = self.mapper
        return await bracket(
            _BOUNDARY,
            lambda: handler(args),
            scope=lambda _: mapper.tool_scope(call, tool_def),
            done=lambda _, result: mapper.tool_returned(call, result),
            failed=lambda _, error: mapper.tool_failed(call, error),
            control=_CONTROL_FLOW,
        )


@guarded(_BOUNDARY)
@dataclass
class _StreamObserver(_Observer):
    """Stream mode: also maps the native event stream, in order with the hooks.

    Overriding ``wrap_run_event_stream`` makes Pydantic AI stream a node even
    without an ``event_stream_handler``, which is why run mode uses the plain
    :class:`_Observer`: a run-mode call keeps its non-streaming model path.
    """

    @passes_through
    def wrap_run_event_stream(
        self,
        ctx: RunContext[Any],
        *,
        stream: AsyncIterable[AgentStreamEvent],
    ) -> AsyncIterator[AgentStreamEvent]:
        mapper = self.mapper
        return mapped_stream(_BOUNDARY, stream, mapper.native, failed=mapper.stream_failed)


@guarded(_BOUNDARY)
@dataclass
class _UntracedStream(_StreamObserver):
    """Stream mode with nobody observing: no tool hooks (there is no scope to enter
    and no span to put an exception on); tool results come off the native stream.
    The two hooks only call their handler, as Pydantic AI's defaults do."""

    @passes_through
    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        return await handler(args)

    @passes_through
    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        return await handler(args)
