"""Our requests as a CrewAI task, and what CrewAI reports as ours (reply, text, usage, errors).

A run's requests are text in the task's description, after the session's earlier
turns (CrewAI keeps no conversation between kickoffs). The reply is the crew
output's most structured form. On the way, a model's ReAct reply is split at
CrewAI's ``Final Answer:`` marker (:class:`ReActText`: the scaffolding is reasoning,
the answer is text, as CrewAI replies it), a completed call's usage is read in
either spelling, and a failure CrewAI reports only as text is given back as the
exception being handled (:func:`handled`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crewai.agents.constants import FINAL_ANSWER_ACTION

from runnertrace.core.models import AgentRequest
from runnertrace.runners._kit import genai

__all__ = [
    "EXPECTED_OUTPUT",
    "CrewAIReportedError",
    "ReActText",
    "handled",
    "reply_value",
    "task_description",
    "usage_of",
]

EXPECTED_OUTPUT = "A complete answer to the current request."


class CrewAIReportedError(Exception):
    """A failure CrewAI reported only as text (the exception itself was not in reach)."""


# Request type -> its text in the task description. A task is text: images and
# files have no place in it (a CrewAI tool can take them).
_REQUEST_TEXT: dict[str, Callable[[Any], str]] = {
    "text": lambda r: str(r.prompt),
    "any": lambda r: genai.as_text(r.content),
}


def _request_text(request: AgentRequest) -> str:
    convert = _REQUEST_TEXT.get(request.type)
    if convert is None:
        raise ValueError(
            f"CrewAIRunner takes 'text' and 'any' requests; got a {request.type!r} request "
            "(pass files to a CrewAI tool instead)"
        )
    return convert(request)


def task_description(requests: Sequence[AgentRequest], turns: Sequence[Mapping[str, str]]) -> str:
    """The task for this run: the earlier turns of the session, then the request."""
    request = "\n".join(_request_text(r) for r in requests)
    if not request:
        raise ValueError("a run needs at least one request")
    if turns:
        history = "\n".join(f"User: {t['request']}\nAssistant: {t['reply']}" for t in turns)
        request = f"The conversation so far:\n{history}\n\nThe current request:\n{request}"
    return request


def reply_value(output: Any) -> Any:
    """A CrewOutput's most structured form: its Pydantic model, its JSON, its text."""
    for value in (getattr(output, "pydantic", None), getattr(output, "json_dict", None)):
        if value is not None:
            return value
    return getattr(output, "raw", output)


def usage_of(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Token counts from a completed call (OpenAI or Anthropic spelling)."""
    usage = usage or {}
    return {
        "input_tokens": usage.get("prompt_tokens", usage.get("input_tokens")),
        "output_tokens": usage.get("completion_tokens", usage.get("output_tokens")),
        "cache_read_input_tokens": usage.get("cached_prompt_tokens"),
    }


def handled(text: str) -> BaseException:
    """The exception CrewAI is handling while it reports a failure as ``text``.

    The bus calls our sink synchronously inside CrewAI's ``except`` block, so the
    exception is the one being handled, when the reported text carries its message
    (CrewAI's providers prefix it: ``"OpenAI API call failed: <message>"``).
    """
    current = sys.exc_info()[1]
    if current is not None and str(current) in text:
        return current
    return CrewAIReportedError(text)


class ReActText:
    """Splits a ReAct reply, as it streams, at CrewAI's ``Final Answer:`` marker.

    What comes before the marker (and the marker) is reasoning, given on as it
    arrives except for a tail that may be the start of the marker; what comes
    after it is the answer, without the whitespace around it (CrewAI strips it).
    A reply without the marker (an action) is reasoning throughout.
    """

    __slots__ = ("answering", "held", "started")

    def __init__(self) -> None:
        self.held = ""
        self.answering = False
        self.started = False  # some of the answer was given

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        pieces: list[tuple[str, str]] = []
        if not self.answering:
            self.held += chunk
            at = self.held.find(FINAL_ANSWER_ACTION)
            if at < 0:
                safe = len(self.held) - _marker_start(self.held)
                if safe > 0:
                    pieces.append(("reasoning", self.held[:safe]))
                    self.held = self.held[safe:]
                return pieces
            end = at + len(FINAL_ANSWER_ACTION)
            pieces.append(("reasoning", self.held[:end]))
            chunk, self.held, self.answering = self.held[end:], "", True
        text = self.held + chunk
        if not self.started:
            text = text.lstrip()
        answer = text.rstrip()
        if answer:
            pieces.append(("text", answer))
            self.started = True
        self.held = text[len(answer) :]  # trailing whitespace: given if more text follows
        return pieces

    def finish(self) -> list[tuple[str, str]]:
        """The reply ended: a held tail of reasoning is given; an answer's is dropped."""
        held, self.held = self.held, ""
        return [("reasoning", held)] if held and not self.answering else []


def _marker_start(text: str) -> int:
    """The length of the longest end of ``text`` that begins the final-answer marker."""
    longest = min(len(text), len(FINAL_ANSWER_ACTION) - 1)
    return next((n for n in range(longest, 0, -1) if FINAL_ANSWER_ACTION.startswith(text[-n:])), 0)
