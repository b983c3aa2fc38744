"""Our requests as Agent Framework input, and what Agent Framework hands back as ours.

Nothing here is telemetry: a fault in it is the run's (a request the framework cannot
take fails the run, as it would without us).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agent_framework import AgentResponse, Content, Message

from runnertrace.core.models import AgentRequest
from runnertrace.runners._kit.genai import as_text
from runnertrace.runners._kit.skeleton import is_url, media_bytes

CONTEXT_KEY = "runnertrace_context"
"""Where the framework context sits in the native session's ``state`` during a run."""

# -- requests -> native input ----------------------------------------------------------------------


def _media(data: str, mime_type: str, name: str | None) -> Content:
    """One image or file: a URL or ``data:`` URI stays a URI, anything else is base64 bytes."""
    if is_url(data) or data.startswith("data:"):
        return Content.from_uri(data, media_type=mime_type, name=name)
    return Content.from_data(media_bytes(data, mime_type, name), mime_type, name=name)


_REQUEST_CONTENTS: dict[str, Callable[[Any], Content]] = {
    "text": lambda r: Content.from_text(r.prompt),
    "image": lambda r: _media(r.image_data, r.mime_type, r.name),
    "file": lambda r: _media(r.file_data, r.mime_type, r.name),
    "any": lambda r: Content.from_text(as_text(r.content)),
}


def messages_of(requests: Sequence[AgentRequest]) -> list[Message]:
    """Our requests as one Agent Framework user message, contents in request order."""
    if not requests:
        raise ValueError("a run needs at least one request")
    return [Message(role="user", contents=[_REQUEST_CONTENTS[r.type](r) for r in requests])]


def listed(middleware: Any) -> list[Any]:
    """A ``middleware`` value (one middleware, a sequence, or ``None``) as a list: the
    caller's run option, or an agent's own list, that ours are appended to."""
    if middleware is None:
        return []
    return list(middleware) if isinstance(middleware, list | tuple) else [middleware]


# -- native output -> ours -------------------------------------------------------------------------


def result_value(result: Any) -> Any:
    """A tool result as Agent Framework hands it on: its text contents joined (what the
    model reads), anything else as given (:func:`as_text` renders it)."""
    contents = isinstance(result, list | tuple) and bool(result)
    if contents and all(isinstance(item, Content) for item in result):
        return "\n".join(item.text or "" for item in result if item.type == "text")
    return result


def reply_output(response: AgentResponse[Any]) -> Any:
    """The structured value when the run asked for one, else the text."""
    return response.value if response.value is not None else response.text
