"""Serving agents: ``AgentService`` (run and stream a conversation), its HTTP app, a client.

``AgentService`` needs nothing beyond the core install; ``create_app`` needs
Starlette and ``ServiceClient`` httpx (``pip install 'runnertrace[serve]'``).
Run the app with any ASGI server, e.g. ``uvicorn.run(create_app(runtime))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runnertrace.serve.service import AgentService, HttpRoute

if TYPE_CHECKING:
    from runnertrace.serve.app import create_app
    from runnertrace.serve.client import ServiceClient, ServiceError

__all__ = ["AgentService", "HttpRoute", "ServiceClient", "ServiceError", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from runnertrace.serve.app import create_app

        return create_app
    if name in ("ServiceClient", "ServiceError"):
        from runnertrace.serve import client

        return getattr(client, name)
    raise AttributeError(f"module 'runnertrace.serve' has no attribute {name!r}")
