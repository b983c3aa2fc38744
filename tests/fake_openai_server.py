"""A scripted OpenAI-compatible server on 127.0.0.1, for tests.

It speaks both OpenAI APIs, so one script can drive either kind of client:

* ``POST /v1/chat/completions`` (Chat Completions): the next scripted :class:`Reply`
  as one JSON body or, when the request asks for ``stream``, as server-sent events
  split into small deltas (tool-call arguments arrive in several pieces, keyed by
  index, the way real servers send them);
* ``POST /v1/responses`` (the Responses API): the reply as one ``response`` object
  or, streamed, as the typed event sequence OpenAI sends: each output item is
  added, its text, reasoning or arguments arrive as deltas, then a ``.done`` event
  repeats the whole value (clients must not append it), then ``response.completed``
  carries the usage.

* ``POST /v1beta/models/{model}:generateContent`` (the Gemini API, for ADK and
  ``google-genai`` clients pointed here): the reply as one ``GenerateContentResponse``
  or, for ``:streamGenerateContent?alt=sse``, as server-sent chunks: the text in
  pieces, then the function calls whole (Gemini does not split arguments), the last
  chunk carrying the finish reason and the usage.

Any path answers the scripted ``status`` as an OpenAI-style error when it is not
200 (and 500 once the script runs out). Every request body is recorded, with its
path, so tests can assert what the client actually sent.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAIServer", "FakeToolCall", "Reply"]


@dataclass
class FakeToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | str
    """A dict is sent as JSON; a string is sent verbatim (to script malformed JSON)."""

    @property
    def raw_arguments(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Reply:
    """One scripted answer. ``status`` other than 200 sends an OpenAI-style error."""

    text: str = ""
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    reasoning: str | None = None
    status: int = 200
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str | None = None
    """Chat Completions only; the Responses API has none (clients derive it from the output)."""
    chunk_size: int = 3
    """Characters per streamed text/argument delta."""
    delay_s: float = 0.0
    """How long the server thinks before its first byte of the answer (a streamed
    answer sends its headers first), so a client's time to first chunk is known."""


_ROUTES = {"/v1/chat/completions": "chat_completions", "/v1/responses": "responses"}
_GEMINI_ROUTE = re.compile(r"^/v1beta/models/[^/:]+:(generateContent|streamGenerateContent)")
_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeOpenAIServer:
    """Use as a context manager; ``base_url`` is the ``/v1`` URL to point a client at."""

    model = "fake-model-1"

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.served: list[Reply] = []
        """Each request's reply, in order (usage sums are checked against these)."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def origin(self) -> str:
        """The server's root URL (a Gemini client adds ``/v1beta/...`` itself)."""
        return self.base_url.removesuffix("/v1")

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _next(self, body: dict[str, Any], path: str) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
            if not self.replies:
                reply = Reply(status=500, text="the fake server ran out of scripted replies")
            else:
                reply = self.replies.pop(0)
            self.served.append(reply)
            return reply

    # -- rendering: Chat Completions ----------------------------------------------------
    def completion(self, reply: Reply, n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for c in reply.tool_calls
            ]
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": self._usage(reply),
        }

    def chunks(self, reply: Reply, n: int, include_usage: bool) -> Iterator[dict[str, Any]]:
        base = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": self.model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**base, "choices": [choice]}

        yield chunk({"role": "assistant", "content": ""})
        for piece in _pieces(reply.reasoning or "", reply.chunk_size):
            yield chunk({"reasoning_content": piece})
        for piece in _pieces(reply.text, reply.chunk_size):
            yield chunk({"content": piece})
        for index, call in enumerate(reply.tool_calls):
            head = {"index": index, "id": call.id, "type": "function"}
            yield chunk(
                {"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]}
            )
            for piece in _pieces(call.raw_arguments, reply.chunk_size):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, self._finish(reply))
        if include_usage:
            yield {**base, "choices": [], "usage": self._usage(reply)}

    def _finish(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _usage(self, reply: Reply) -> dict[str, int]:
        return {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }

    # -- rendering: Responses API ----------------------------------------------------------
    def response(self, reply: Reply, n: int, status: str = "completed") -> dict[str, Any]:
        """The whole ``response`` object: reasoning, message, then function-call items."""
        done = status == "completed"
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1700000000,
            "model": self.model,
            "status": status,
            "output": [item for _, item, _ in self._output_items(reply, n)] if done else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": self._responses_usage(reply) if done else None,
        }

    def _output_items(self, reply: Reply, n: int) -> Iterator[tuple[str, dict[str, Any], str]]:
        """Each output item as ``(kind, finished item, streamed value)``."""
        if reply.reasoning:
            part = {"type": "reasoning_text", "text": reply.reasoning}
            item = {"type": "reasoning", "id": f"rs_{n}", "summary": [], "content": [part]}
            yield "reasoning", item, reply.reasoning
        if reply.text:
            part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
            item = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
            yield "message", item, reply.text
        for index, call in enumerate(reply.tool_calls):
            item = {
                "type": "function_call",
                "id": f"fc_{n}_{index}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.raw_arguments,
                "status": "completed",
            }
            yield "function_call", item, call.raw_arguments

    def response_events(self, reply: Reply, n: int) -> Iterator[dict[str, Any]]:
        """The streamed events, in OpenAI's order; every event has its sequence number."""
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": self.response(reply, n, "in_progress")},
            {"type": "response.in_progress", "response": self.response(reply, n, "in_progress")},
        ]
        for index, (kind, item, value) in enumerate(self._output_items(reply, n)):
            events.extend(self._item_events(kind, index, item, value, reply.chunk_size))
        events.append({"type": "response.completed", "response": self.response(reply, n)})
        for number, event in enumerate(events):
            yield {**event, "sequence_number": number}

    def _item_events(
        self, kind: str, index: int, item: dict[str, Any], value: str, size: int
    ) -> list[dict[str, Any]]:
        """One output item: added (empty), its value in deltas, the whole value again
        in the ``.done`` event(s), then the item done."""
        at = {"item_id": item["id"], "output_index": index}
        empty = {**item, "status": "in_progress"}
        events: list[dict[str, Any]] = []
        if kind == "function_call":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**empty, "arguments": ""},
                }
            )
            events += [
                {"type": "response.function_call_arguments.delta", **at, "delta": piece}
                for piece in _pieces(value, size)
            ]
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    **at,
                    "name": item["name"],
                    "arguments": value,
                }
            )
        else:
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**empty, "content": []},
                }
            )
            part = item["content"][0]
            text_kind = "output_text" if kind == "message" else "reasoning_text"
            extra: dict[str, Any] = {"logprobs": []} if kind == "message" else {}
            at_part = {**at, "content_index": 0}
            events.append(
                {"type": "response.content_part.added", **at_part, "part": {**part, "text": ""}}
            )
            events += [
                {"type": f"response.{text_kind}.delta", **at_part, "delta": piece, **extra}
                for piece in _pieces(value, size)
            ]
            events.append({"type": f"response.{text_kind}.done", **at_part, "text": value, **extra})
            events.append({"type": "response.content_part.done", **at_part, "part": part})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        return events

    def _responses_usage(self, reply: Reply) -> dict[str, Any]:
        return {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }

    # -- rendering: the Gemini API ----------------------------------------------------------
    def gemini_response(
        self, reply: Reply, n: int, parts: list[dict[str, Any]], *, last: bool = True
    ) -> dict[str, Any]:
        """One ``GenerateContentResponse`` holding ``parts``; the last one is finished."""
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        response: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": self.model,
            "responseId": f"gemini-{n}",
        }
        if last:
            candidate["finishReason"] = "MAX_TOKENS" if reply.finish_reason == "length" else "STOP"
            response["usageMetadata"] = {
                "promptTokenCount": reply.prompt_tokens,
                "candidatesTokenCount": reply.completion_tokens,
                "totalTokenCount": reply.prompt_tokens + reply.completion_tokens,
            }
        return response

    def _gemini_calls(self, reply: Reply) -> list[dict[str, Any]]:
        return [
            {"functionCall": {"id": c.id, "name": c.name, "args": json.loads(c.raw_arguments)}}
            for c in reply.tool_calls
        ]

    def gemini_whole(self, reply: Reply, n: int) -> dict[str, Any]:
        text = [{"text": reply.text}] if reply.text else []
        thought = [{"text": reply.reasoning, "thought": True}] if reply.reasoning else []
        return self.gemini_response(reply, n, thought + text + self._gemini_calls(reply))

    def gemini_chunks(self, reply: Reply, n: int) -> Iterator[dict[str, Any]]:
        for piece in _pieces(reply.reasoning or "", reply.chunk_size):
            yield self.gemini_response(reply, n, [{"text": piece, "thought": True}], last=False)
        for piece in _pieces(reply.text, reply.chunk_size):
            yield self.gemini_response(reply, n, [{"text": piece}], last=False)
        yield self.gemini_response(reply, n, self._gemini_calls(reply))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output clean."""

            def _send_json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-should-retry", "false")
                self.end_headers()
                self.wfile.write(data)

            def _send_events(
                self, items: Iterator[dict[str, Any]], *, done: bool, delay_s: float = 0.0
            ) -> None:
                # HTTP/1.0 response: the body ends when the connection closes.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                self.wfile.flush()
                time.sleep(delay_s)
                for item in items:
                    kind = item.get("type")
                    head = f"event: {kind}\n" if isinstance(kind, str) else ""  # Responses
                    self.wfile.write(f"{head}data: {json.dumps(item)}\n\n".encode())
                    self.wfile.flush()
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()

            def _gemini(self, body: dict[str, Any], method: str) -> None:
                reply = server._next(body, self.path.split("?")[0])
                n = len(server.requests)
                if reply.status != 200:
                    status = _GEMINI_STATUS.get(reply.status, "INTERNAL")
                    error = {"code": reply.status, "message": reply.text, "status": status}
                    self._send_json(reply.status, {"error": error})
                elif method == "generateContent":
                    time.sleep(reply.delay_s)
                    self._send_json(200, server.gemini_whole(reply, n))
                else:
                    chunks = server.gemini_chunks(reply, n)
                    self._send_events(chunks, done=False, delay_s=reply.delay_s)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                gemini = _GEMINI_ROUTE.match(self.path)
                if gemini:
                    self._gemini(body, gemini.group(1))
                    return
                if self.path not in _ROUTES:
                    self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                reply = server._next(body, self.path)
                n = len(server.requests)
                if reply.status != 200:
                    error = {"message": reply.text, "type": "server_error", "code": None}
                    self._send_json(reply.status, {"error": error})
                    return
                responses = _ROUTES[self.path] == "responses"
                if not body.get("stream"):
                    time.sleep(reply.delay_s)
                    render = server.response if responses else server.completion
                    self._send_json(200, render(reply, n))
                elif responses:  # the Responses API sends no [DONE]
                    events = server.response_events(reply, n)
                    self._send_events(events, done=False, delay_s=reply.delay_s)
                else:
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    chunks = server.chunks(reply, n, include_usage)
                    self._send_events(chunks, done=True, delay_s=reply.delay_s)

        return Handler
