"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

It answers ``POST /v1/chat/completions`` with the next scripted :class:`Reply`,
as one JSON body or, when the request asks for ``stream``, as server-sent events
split into small deltas (tool-call arguments arrive in several pieces, keyed by
index, the way real servers send them). Every request body is recorded so tests
can assert what the client actually sent.
"""

from __future__ import annotations

import json
import threading
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
    chunk_size: int = 3
    """Characters per streamed text/argument delta."""


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeOpenAIServer:
    """Use as a context manager; ``base_url`` is the ``/v1`` URL to point a client at."""

    model = "fake-model-1"

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

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
                return Reply(status=500, text="the fake server ran out of scripted replies")
            return self.replies.pop(0)

    # -- rendering ------------------------------------------------------------------
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

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                reply = server._next(body, self.path)
                n = len(server.requests)
                if reply.status != 200:
                    error = {"message": reply.text, "type": "server_error", "code": None}
                    self._send_json(reply.status, {"error": error})
                    return
                if not body.get("stream"):
                    self._send_json(200, server.completion(reply, n))
                    return
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                # HTTP/1.0 response: the body ends when the connection closes.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                for item in server.chunks(reply, n, include_usage):
                    self.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler
