"""A small client for the service's HTTP surface (httpx), sending the caller's trace context.

Each call puts the current OpenTelemetry context (and its baggage) in the
``traceparent``/``tracestate``/``baggage`` headers, so the service's span is a
child of the span current where the client is called.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic import TypeAdapter

from runnertrace._internal.imports import require
from runnertrace.core.models import AgentReply, AgentRequest, StreamChunk
from runnertrace.core.propagation import inject

__all__ = ["ServiceClient", "ServiceError"]

_REPLY: TypeAdapter[Any] = TypeAdapter(AgentReply)


class ServiceError(RuntimeError):
    """The service answered with an error (its status code and message)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.message = message


class ServiceClient:
    """``run`` and ``stream`` against a service at ``base_url`` (e.g. ``http://127.0.0.1:8000``)."""

    def __init__(self, base_url: str, *, timeout_s: float = 60.0, http: Any = None) -> None:
        httpx = require("httpx", "serve")
        self.base_url = base_url.rstrip("/")
        self._http = http or httpx.AsyncClient(timeout=timeout_s)
        self._owns = http is None
        self.session_id: str | None = None
        """The session of the last call: the next call continues it unless told otherwise."""

    async def __aenter__(self) -> ServiceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns:
            await self._http.aclose()

    def _body(
        self,
        prompt: str | None,
        requests: Sequence[AgentRequest] | None,
        agent: str | None,
        session_id: str | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if prompt is not None:
            body["prompt"] = prompt
        if requests:
            body["requests"] = [r.model_dump() for r in requests]
        if agent is not None:
            body["agent"] = agent
        session = session_id or self.session_id
        if session is not None:
            body["session_id"] = session
        return body

    async def run(
        self,
        prompt: str | None = None,
        *,
        requests: Sequence[AgentRequest] | None = None,
        agent: str | None = None,
        session_id: str | None = None,
    ) -> AgentReply:
        """``POST /run``: the reply; an error answer raises :class:`ServiceError`."""
        response = await self._http.post(
            f"{self.base_url}/run",
            json=self._body(prompt, requests, agent, session_id),
            headers=inject(),
        )
        data = response.json()
        if response.status_code != 200:
            raise ServiceError(response.status_code, str(data.get("error")))
        self.session_id = data.get("session_id")
        return _REPLY.validate_python(data["reply"])  # type: ignore[no-any-return]

    async def stream(
        self,
        prompt: str | None = None,
        *,
        requests: Sequence[AgentRequest] | None = None,
        agent: str | None = None,
        session_id: str | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """``POST /stream``: the chunks as they come; a run's failure is a chunk with ``error``."""
        async with self._http.stream(
            "POST",
            f"{self.base_url}/stream",
            json=self._body(prompt, requests, agent, session_id),
            headers=inject(),
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise ServiceError(response.status_code, str(response.json().get("error")))
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                chunk = StreamChunk.model_validate_json(line[5:].strip())
                if chunk.session_id:
                    self.session_id = chunk.session_id
                yield chunk
