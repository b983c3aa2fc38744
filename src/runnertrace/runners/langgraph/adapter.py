"""The LangChain callback handler a run installs: what LangChain calls, handed to the mapper.

One handler per run, first in ``config["callbacks"]`` (LangChain hands it to every
callback manager of the run, subgraphs and tools included), turns LangChain's
callback signatures into the mapper's calls (:class:`~.mapper._Mapper`). It is
guarded whole: a fault in any ``on_*`` method is logged once and the run goes on.

Deliberately a *sync* handler that runs inline (``run_inline``): LangChain calls
it directly, in order, on the task (or tool worker thread) that raised the
callback, which is what lets the mapper enter a call's scope where the call runs.
An async handler would be driven from sync code through a worker thread running
a fresh event loop per callback. ``raise_error`` is set under pytest only, so that
a fault the boundary raises there (our bug) fails the test instead of being logged
by LangChain and swallowed.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from runnertrace._internal.errors import should_raise
from runnertrace.runners._kit.adapter import guarded
from runnertrace.runners.langgraph.mapper import _BOUNDARY, _Mapper


@guarded(_BOUNDARY)
class _Callbacks(BaseCallbackHandler):
    """The run's LangChain callback handler: each callback goes to the run's mapper."""

    run_inline = True

    def __init__(self, mapper: _Mapper) -> None:
        super().__init__()
        self.raise_error = should_raise()
        self.mapper = mapper

    # -- chains (graphs, nodes, the runnables inside them) --------------------------------
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "")
        self.mapper.chain_start(name, inputs, run_id, parent_run_id, tags, metadata)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.mapper.chain_end(outputs, run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.mapper.chain_error(error, run_id)

    # -- model calls ----------------------------------------------------------------------
    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        parent_run_id = kwargs.get("parent_run_id")
        self.mapper.model_start(messages, run_id, parent_run_id, metadata, invocation_params)

    def on_llm_new_token(
        self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any
    ) -> None:
        self.mapper.model_token(chunk, run_id)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self.mapper.model_end(response, run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.mapper.model_error(error, run_id)

    # -- tools ----------------------------------------------------------------------------
    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "unknown")
        call_id = str(kwargs.get("tool_call_id") or run_id)
        self.mapper.tool_start(name, call_id, run_id, kwargs.get("parent_run_id"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.mapper.tool_end(output, run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.mapper.tool_error(error, run_id)
