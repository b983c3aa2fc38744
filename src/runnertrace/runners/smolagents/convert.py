"""Input and reply conversion: requests to a smolagents task, outputs to a reply.

The requests become ``agent.run``'s ``task`` (text) and ``images``; the memory
steps a run leaves are made storable (smolagents' own errors do not pickle); the
final answer becomes the reply, and a ``final_answer`` call's arguments the text
the model answered with.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

from smolagents.memory import MemoryStep
from smolagents.utils import AgentError

from runnertrace.core.models import AgentReply, AgentRequest
from runnertrace.runners._kit import genai
from runnertrace.runners._kit.skeleton import reply_of

__all__ = ["StoredAgentError", "answer_text", "reply_for", "storable", "task_of"]


# -- requests -> native input ----------------------------------------------------------------------


def _image(request: Any) -> Any:
    from PIL import Image  # a smolagents dependency

    try:
        raw = base64.b64decode(request.image_data, validate=True)
        return Image.open(io.BytesIO(raw))
    except (binascii.Error, ValueError, OSError) as exc:
        label = f"{request.name!r} " if request.name else ""
        raise ValueError(
            f"image request {label}({request.mime_type}) is not base64 image data"
        ) from exc


def _no_files(request: Any) -> Any:
    raise ValueError(
        f"request type 'file' ({request.name or request.mime_type}) is not supported by "
        "SmolagentsRunner: smolagents tasks take text and images; pass the file's content "
        "as text or through session.set_framework_context()"
    )


# Request type -> (kind, converter): text parts join into the task, images go to images=.
_REQUESTS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "text": ("text", lambda r: r.prompt),
    "any": ("text", lambda r: r.content if isinstance(r.content, str) else json.dumps(r.content)),
    "image": ("image", _image),
    "file": ("text", _no_files),
}


def task_of(requests: Sequence[AgentRequest]) -> tuple[str, list[Any] | None]:
    """The task text (text requests joined by newlines) and the images, if any."""
    texts: list[str] = []
    images: list[Any] = []
    for request in requests:
        kind, convert = _REQUESTS[request.type]
        (texts if kind == "text" else images).append(convert(request))
    if not texts and not images:
        raise ValueError("a run needs at least one request")
    return "\n".join(texts), images or None


# -- session state ---------------------------------------------------------------------------------


class StoredAgentError(AgentError):  # type: ignore[misc]
    """A smolagents error kept in a stored memory step.

    smolagents' errors need a logger to be built (and log when they are), so they
    cannot be unpickled; this one keeps the class name and message, which is what
    the memory sends the model on the next run.
    """

    def __init__(self, message: str, error_type: str = "AgentError") -> None:
        Exception.__init__(self, message)
        self.message = message
        self.error_type = error_type

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.error_type))

    def dict(self) -> dict[str, str]:
        return {"type": self.error_type, "message": str(self.message)}


def storable(step: MemoryStep) -> MemoryStep:
    """``step`` as the session can store it: its smolagents error kept as a
    :class:`StoredAgentError`."""
    error = getattr(step, "error", None)
    if isinstance(error, AgentError) and not isinstance(error, StoredAgentError):
        return dataclasses.replace(
            step, error=StoredAgentError(str(error.message), type(error).__name__)
        )
    return step


# -- native output -> reply ------------------------------------------------------------------------


def _plain(output: Any) -> Any:
    """smolagents' ``AgentText`` is a ``str``; its other agent types go by their raw value."""
    if isinstance(output, str):
        return str(output)
    to_raw = getattr(output, "to_raw", None)
    return to_raw() if callable(to_raw) else output


def reply_for(output: Any, prompt: str) -> AgentReply:
    """The reply for an agent's final answer (a run's, or a managed agent's)."""
    return reply_of(_plain(output), prompt)


def answer_text(arguments: Any) -> str:
    """The text of a ``final_answer`` call: its ``answer`` argument (JSON unless text)."""
    parsed = genai.arguments_of(arguments)
    if isinstance(parsed, dict) and "answer" in parsed:
        return genai.as_text(parsed["answer"])
    return genai.as_text(parsed)
