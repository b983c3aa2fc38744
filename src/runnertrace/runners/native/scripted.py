"""``ScriptedLlm``: a deterministic, offline model for demos and tests.

What it can do, honestly:

* **Rule mode** (the default). It reads the latest user prompt and the tool
  results that followed it, and plans arithmetic chains: numbers joined by
  ``+ - * /`` or the words *plus, minus, times, multiplied by, divided by*. With a
  calculator-like tool (one that takes an ``expression`` argument) it calls the
  tool once per operation, feeding each result into the next call, so
  "What is 1234 * 5678, plus 17?" takes two tool steps and a final answer. When
  a tool returns an error it stops and reports the error. Any other prompt gets
  a short, fixed reply that quotes it. With an output schema it fills numeric
  fields with the result and string fields with the sentence.
* **Scripted mode**: ``ScriptedLlm(turns=[...])`` replays the given responses
  in order (each an :class:`LlmResponse`, a string, or a callable taking the
  request), for tests that need exact control.

What it cannot do: understand language. It has no knowledge, no reasoning, and
no way to choose among tools other than the calculator rule. Token counts are
whitespace word counts, not a real tokenizer's.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from runnertrace.runners.native.llm import LlmClient
from runnertrace.runners.native.types import (
    LlmRequest,
    LlmResponse,
    Message,
    StreamPart,
    TextPart,
    ToolCall,
    ToolCallPart,
    ToolResult,
    Usage,
    new_id,
)

__all__ = ["ScriptedLlm", "plan_arithmetic"]

Turn = LlmResponse | str | Callable[[LlmRequest], LlmResponse]

_NUMBER = r"-?\d+(?:\.\d+)?"
_OPERATORS: list[tuple[str, str]] = [
    (r"\+|\bplus\b|\badd(?:ed to)?\b", "+"),
    (r"(?<=\s)-(?=\s)|\bminus\b|\bsubtract(?:ed)?\b", "-"),
    (r"\*|\u00d7|\btimes\b|\bmultiplied by\b", "*"),
    (r"/|\u00f7|\bdivided by\b|\bover\b", "/"),
]
_TOKEN = re.compile(
    "|".join([f"(?P<num>{_NUMBER})"] + [f"(?P<op{i}>{p})" for i, (p, _) in enumerate(_OPERATORS)]),
    re.IGNORECASE,
)


def plan_arithmetic(prompt: str) -> tuple[str, list[tuple[str, str]]] | None:
    """Parse "a op b op c ..." into the first operand and (operator, operand) pairs."""
    first: str | None = None
    ops: list[tuple[str, str]] = []
    pending: str | None = None
    for match in _TOKEN.finditer(prompt.replace(",", " ")):
        if match.group("num") is not None:
            number = match.group("num")
            if first is None:
                first = number
            elif pending is not None:
                ops.append((pending, number))
                pending = None
            continue
        for i, (_, symbol) in enumerate(_OPERATORS):
            if match.group(f"op{i}") is not None and first is not None:
                pending = symbol
    if first is None or not ops:
        return None
    return first, ops


def _words(text: str) -> int:
    return len(text.split())


class ScriptedLlm(LlmClient):
    """A deterministic model; see the module docstring for what it can and cannot do."""

    provider = "runnertrace"

    def __init__(
        self,
        turns: Sequence[Turn] | None = None,
        *,
        model: str = "scripted-1",
        chunk_size: int = 1,
    ) -> None:
        self.model = model
        self._turns = list(turns) if turns is not None else None
        self._cursor = 0
        self.chunk_size = max(1, chunk_size)
        self.requests: list[LlmRequest] = []

    async def generate(self, request: LlmRequest) -> LlmResponse:
        self.requests.append(request)
        response = self._scripted(request) if self._turns is not None else self._rule(request)
        if not response.usage.input_tokens and not response.usage.output_tokens:
            response.usage = Usage(
                input_tokens=sum(_words(_text_of(c)) for c in request.contents),
                output_tokens=_words(response.text) + 3 * len(response.tool_calls),
            )
        response.model = response.model or self.model
        return response

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamPart]:
        """Stream the response word by word, and tool arguments in two pieces."""
        response = await self.generate(request)
        words = re.findall(r"\S+\s*", response.text)
        for i in range(0, len(words), self.chunk_size):
            yield TextPart("".join(words[i : i + self.chunk_size]))
        for index, call in enumerate(response.tool_calls):
            import json

            args = json.dumps(call.arguments)
            half = len(args) // 2
            yield ToolCallPart(index, args[:half], id=call.tool_call_id, name=call.name)
            yield ToolCallPart(index, args[half:])
        yield response

    # -- scripted mode -----------------------------------------------------------
    def _scripted(self, request: LlmRequest) -> LlmResponse:
        assert self._turns is not None
        if self._cursor >= len(self._turns):
            raise RuntimeError(f"ScriptedLlm ran out of turns after {len(self._turns)} responses")
        turn = self._turns[self._cursor]
        self._cursor += 1
        if isinstance(turn, str):
            return LlmResponse(content=[Message("assistant", turn)])
        if isinstance(turn, LlmResponse):
            # a fresh copy each time, so a replayed script does not share state
            return LlmResponse(
                content=list(turn.content),
                usage=Usage(turn.usage.input_tokens, turn.usage.output_tokens),
                finish_reason=turn.finish_reason,
                model=turn.model,
                reasoning=turn.reasoning,
            )
        return turn(request)

    # -- rule mode ---------------------------------------------------------------
    def _rule(self, request: LlmRequest) -> LlmResponse:
        prompt_index = max(
            (
                i
                for i, c in enumerate(request.contents)
                if isinstance(c, Message) and c.role == "user"
            ),
            default=None,
        )
        last_user = request.contents[prompt_index] if prompt_index is not None else None
        prompt = last_user.content if isinstance(last_user, Message) else ""
        results = [
            c for c in request.contents[(prompt_index or 0) + 1 :] if isinstance(c, ToolResult)
        ]
        calculator = next(
            (t for t in request.tools if "expression" in t.parameters.get("properties", {})),
            None,
        )
        plan = plan_arithmetic(prompt)
        if plan is None or calculator is None:
            return self._answer(
                request, f'I am a scripted offline model. You said: "{prompt}"', None
            )
        if results and results[-1].status == "error":
            return self._answer(
                request, f"The calculator reported an error: {results[-1].text}", None
            )
        value, ops = plan
        if results:
            value = results[-1].text
        if len(results) < len(ops):
            op, operand = ops[len(results)]
            call = ToolCall(
                new_id("call"), calculator.name, {"expression": f"{value} {op} {operand}"}
            )
            return LlmResponse(
                content=[ToolCall(call.tool_call_id, call.name, call.arguments)],
                finish_reason="tool_calls",
            )
        return self._answer(request, f"The answer is {value}.", value)

    def _answer(self, request: LlmRequest, sentence: str, value: str | None) -> LlmResponse:
        if request.output_schema is None:
            return LlmResponse(content=[Message("assistant", sentence)])
        import json

        filled: dict[str, Any] = {}
        for name, prop in request.output_schema.get("properties", {}).items():
            kind = prop.get("type")
            if kind in ("number", "integer") and value is not None:
                number = float(value)
                filled[name] = int(number) if kind == "integer" else number
            elif kind == "string":
                filled[name] = sentence
        return LlmResponse(content=[Message("assistant", json.dumps(filled))])


def _text_of(item: Any) -> str:
    if isinstance(item, Message):
        return item.content
    if isinstance(item, ToolResult):
        return item.text
    if isinstance(item, ToolCall):
        return " ".join(str(v) for v in item.arguments.values())
    return ""
