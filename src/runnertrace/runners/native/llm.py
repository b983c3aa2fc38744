"""The seam between the agent loop and a model."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from runnertrace.runners.native.types import (
    LlmRequest,
    LlmResponse,
    ReasoningPart,
    StreamPart,
    TextPart,
    ToolCall,
    ToolCallPart,
)

__all__ = ["LlmClient", "parts_of"]


def parts_of(response: LlmResponse) -> list[StreamPart]:
    """Present a whole response as stream parts (one chunk each), ending with itself."""
    parts: list[StreamPart] = []
    if response.reasoning:
        parts.append(ReasoningPart(response.reasoning))
    if response.text:
        parts.append(TextPart(response.text))
    for index, call in enumerate(c for c in response.content if isinstance(c, ToolCall)):
        parts.append(
            ToolCallPart(index, json.dumps(call.arguments), id=call.tool_call_id, name=call.name)
        )
    parts.append(response)
    return parts


class LlmClient(ABC):
    """A model. ``generate`` answers at once; ``stream`` answers in parts.

    ``model`` and ``provider`` name the model for tracing
    (``gen_ai.request.model``, ``gen_ai.provider.name``).
    """

    model: str = "unknown"
    provider: str = "unknown"

    @abstractmethod
    async def generate(self, request: LlmRequest) -> LlmResponse: ...

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamPart]:
        """Default: one part per kind, from ``generate``. Streaming clients override."""
        for part in parts_of(await self.generate(request)):
            yield part
