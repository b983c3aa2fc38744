"""Input and reply conversion: our requests -> Pydantic AI's ``user_prompt``, its result -> a reply.

* **Input.** Text requests become the ``user_prompt`` text; images and files
  become ``BinaryContent`` (base64 or ``data:`` URIs) or ``ImageUrl`` /
  ``DocumentUrl`` (``http(s)://`` URLs); structured requests become their JSON.
* **Replies.** ``str`` output gives :class:`~runnertrace.core.models.AgentReplyText`
  (or :class:`~runnertrace.core.models.AgentReplyImage` when the final response also
  carries an image, or the output is an image); anything else (a pydantic model, a
  dict, a dataclass, a list, ...) gives :class:`~runnertrace.core.models.AgentReplyAny`
  with its JSON form (a non-object value sits under ``"output"``).

The runner's own run and a delegated run (:mod:`.nesting`) reply the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai.messages import BinaryContent, DocumentUrl, ImageUrl, UserContent
from pydantic_ai.run import AgentRunResult

from runnertrace.core.models import AgentReply, AgentRequest
from runnertrace.runners._kit.genai import as_text
from runnertrace.runners._kit.skeleton import is_url, media_bytes, reply_of

__all__ = ["reply_of_run", "user_prompt_of"]


def _media(data: str, mime_type: str, name: str | None, url_type: type[Any]) -> UserContent:
    """One image or file: a URL stays a URL, anything else is base64 bytes."""
    if is_url(data):
        return url_type(url=data, media_type=mime_type)  # type: ignore[no-any-return]
    if data.startswith("data:"):
        return BinaryContent.from_data_uri(data)
    return BinaryContent(
        data=media_bytes(data, mime_type, name), media_type=mime_type, identifier=name
    )


_REQUEST_CONVERTERS: dict[str, Callable[[Any], UserContent]] = {
    "text": lambda r: r.prompt,
    "image": lambda r: _media(r.image_data, r.mime_type, r.name, ImageUrl),
    "file": lambda r: _media(r.file_data, r.mime_type, r.name, DocumentUrl),
    "any": lambda r: as_text(r.content),
}


def user_prompt_of(requests: Sequence[AgentRequest]) -> str | list[UserContent]:
    """Convert our requests into Pydantic AI's ``user_prompt``.

    A lone text request stays a plain string (what Pydantic AI shows best in its
    own UIs); anything else is a list of user content parts, in request order.
    """
    parts = [_REQUEST_CONVERTERS[request.type](request) for request in requests]
    if not parts:
        raise ValueError("a run needs at least one request")
    if len(parts) == 1 and isinstance(parts[0], str):
        return parts[0]
    return parts


def reply_of_run(result: AgentRunResult[Any], prompt: str) -> AgentReply:
    """The reply for a finished Pydantic AI run (see the module docstring)."""
    output = result.output
    if isinstance(output, BinaryContent) and output.is_image:
        return reply_of(result.response.text or "", prompt, image=output.base64)
    if isinstance(output, str):
        images = result.response.images
        return reply_of(output, prompt, image=images[0].base64 if images else None)
    return reply_of(output, prompt)
