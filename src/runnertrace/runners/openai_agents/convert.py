"""Input and reply conversion: the run's requests as SDK input, the SDK's result as a reply.

- **Input**: all requests of a run become one user message. Text is ``input_text``;
  images are ``input_image`` data URLs; files are ``input_file`` data URLs with their
  name; structured input is its JSON as ``input_text``.
- **Reply**: the run's ``final_output`` (text, a model or any JSON value), with the
  last image the hosted image-generation tool made, when the output is text.
"""

from __future__ import annotations

import json
from typing import Any

from agents.result import RunResultBase  # the package's __init__ names the extra if missing

from runnertrace.core.models import AgentReply, AgentRequest
from runnertrace.runners._kit.skeleton import reply_of


def field(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]``: SDK items are pydantic models or TypedDicts."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


# -- requests -> native input ----------------------------------------------------------------------
def _data_url(mime_type: str, data: str) -> str:
    """A base64 payload as a data URL; a payload that already is one is kept."""
    return data if data.startswith("data:") else f"data:{mime_type};base64,{data}"


def _content_part(request: AgentRequest) -> dict[str, Any]:
    if request.type == "text":
        return {"type": "input_text", "text": request.prompt}
    if request.type == "image":
        return {
            "type": "input_image",
            "image_url": _data_url(request.mime_type, request.image_data),
            "detail": "auto",
        }
    if request.type == "file":
        return {
            "type": "input_file",
            "file_data": _data_url(request.mime_type, request.file_data),
            "filename": request.name or "file",
        }
    return {"type": "input_text", "text": json.dumps(request.content, default=str)}


def native_input(requests: list[AgentRequest]) -> list[dict[str, Any]]:
    """The run's requests as one SDK user message (a one-item input list)."""
    if not requests:
        raise ValueError("a run needs at least one request")
    return [{"role": "user", "content": [_content_part(r) for r in requests]}]


# -- native output -> reply ------------------------------------------------------------------------
def _generated_image(result: RunResultBase) -> str | None:
    """The last image the run's hosted image-generation tool produced, base64."""
    image: str | None = None
    for item in result.new_items:
        raw = getattr(item, "raw_item", None)
        if field(raw, "type") == "image_generation_call" and field(raw, "result"):
            image = field(raw, "result")
    return image


def agent_reply(result: RunResultBase, prompt: str) -> AgentReply:
    """The reply of a finished SDK run (an agent run as a tool's too)."""
    final = result.final_output
    image = _generated_image(result) if final is None or isinstance(final, str) else None
    # A non-object output type travels as {"response": ...} in the SDK's own schema.
    return reply_of(final, prompt, image=image, wrap_key="response")
