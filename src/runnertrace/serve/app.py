"""The HTTP surface of :class:`~runnertrace.serve.service.AgentService` (Starlette).

* ``POST /run``: JSON ``{"agent"?, "session_id"?, "requests"? | "prompt"?}`` ->
  ``{"session_id", "reply"}`` (the reply as its JSON model); a runner failure is
  500 with ``{"error", "session_id"}``, a bad body 400, an unknown agent 404.
* ``POST /stream``: the same body -> ``text/event-stream``, one
  ``data: <StreamChunk JSON>`` event per chunk, after the post-hooks; a failure is
  a last chunk with ``error`` set and ``done`` true.
* ``GET /agents``: the registered agent names.

The ``traceparent``/``tracestate``/``baggage`` headers are the carrier: the
service span (``POST /run``, ``POST /stream``) joins the caller's trace and the
run nests in it. The session is the body's ``session_id``, else the baggage's
``session.id`` (or ``gen_ai.conversation.id``), else a new one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runnertrace._internal.imports import require
from runnertrace.core.models import AgentRequest, AgentRequestText
from runnertrace.core.propagation import carrier_of, extract
from runnertrace.core.runtime import Runtime
from runnertrace.serve.service import AgentService, HttpRoute

__all__ = ["RunBody", "create_app"]


class RunBody(BaseModel):
    """What ``POST /run`` and ``POST /stream`` take."""

    model_config = ConfigDict(extra="forbid")

    agent: str | None = None
    session_id: str | None = None
    requests: list[AgentRequest] = Field(default_factory=list)
    prompt: str | None = None

    def all_requests(self) -> list[Any]:
        found: list[Any] = list(self.requests)
        if self.prompt is not None:
            found.append(AgentRequestText(prompt=self.prompt))
        return found


def create_app(runtime: Runtime | None = None) -> Any:
    """A Starlette app serving ``runtime``'s agents (the current runtime when ``None``)."""
    require("starlette", "serve")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    served = runtime or Runtime.current()

    async def parse(request: Request) -> tuple[RunBody, dict[str, str]] | Response:
        try:
            body = RunBody.model_validate_json(await request.body())
        except ValidationError as exc:
            return JSONResponse({"error": exc.errors(include_url=False)}, status_code=400)
        if not body.all_requests():
            return JSONResponse({"error": "give 'requests' or a 'prompt'"}, status_code=400)
        return body, carrier_of(dict(request.headers))

    def service_for(body: RunBody, carrier: dict[str, str]) -> AgentService | Response:
        session_id = body.session_id
        if session_id is None and carrier.get("baggage"):
            session_id = extract({"baggage": carrier["baggage"]}).session_id
        try:
            return AgentService(served).select(body.agent, session_id)
        except KeyError as exc:
            return JSONResponse({"error": str(exc.args[0] if exc.args else exc)}, status_code=404)

    async def run(request: Request) -> Response:
        parsed = await parse(request)
        if isinstance(parsed, Response):
            return parsed
        body, carrier = parsed
        service = service_for(body, carrier)
        if isinstance(service, Response):
            return service
        route = HttpRoute("POST", "/run", request.url.path)
        try:
            reply = await service.run_multi(body.all_requests(), carrier=carrier, http=route)
        except Exception as exc:  # noqa: BLE001 - the client gets the failure as JSON
            return JSONResponse(
                {"error": f"{type(exc).__name__}: {exc}", "session_id": service.session.id},
                status_code=500,
            )
        return JSONResponse({"session_id": service.session.id, "reply": reply.model_dump()})

    async def stream(request: Request) -> Response:
        parsed = await parse(request)
        if isinstance(parsed, Response):
            return parsed
        body, carrier = parsed
        service = service_for(body, carrier)
        if isinstance(service, Response):
            return service
        route = HttpRoute("POST", "/stream", request.url.path, status_code=200)

        async def events() -> AsyncIterator[str]:
            chunks = service.stream_multi(body.all_requests(), carrier=carrier, http=route)
            async for chunk in chunks:
                yield f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def agents(_: Request) -> Response:
        return JSONResponse({"agents": served.agents().names()})

    return Starlette(
        routes=[
            Route("/run", run, methods=["POST"]),
            Route("/stream", stream, methods=["POST"]),
            Route("/agents", agents, methods=["GET"]),
        ]
    )
