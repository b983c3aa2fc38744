"""The dashboard's token: what stands between a non-loopback port and every captured prompt.

Why a token and not accounts: the dashboard is one person's view of one
store. A random token, printed once in the URL the server announces, is
enough to keep out whoever else can reach the port, and needs no setup.
A browser shows the token once (``?token=...``); the server answers with a
cookie and a redirect to the same page without it, so the token leaves the
address bar and the history. Programs (an OTLP exporter, curl) send it as
``Authorization: Bearer <token>``.

Why plain ASGI middleware: it must also guard the live feed's streaming
responses and the OTLP endpoint, before any handler runs.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["COOKIE", "TOKEN_ENV", "TokenMiddleware", "ui_token"]

TOKEN_ENV = "RUNNERTRACE_UI_TOKEN"
COOKIE = "runnertrace_ui_token"
_REFUSAL = (
    "this dashboard needs its token: open the URL `runnertrace ui` printed, "
    "or send Authorization: Bearer <token>"
)


_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,200}")


def ui_token() -> str:
    """``RUNNERTRACE_UI_TOKEN`` when set, else a new random token (32 url-safe characters)."""
    given = os.environ.get(TOKEN_ENV, "").strip()
    if not given:
        return secrets.token_urlsafe(24)
    if not _TOKEN.fullmatch(given):
        raise ValueError(
            f"{TOKEN_ENV} must be 16 to 200 characters of A-Z, a-z, 0-9 and . _ ~ - "
            "(it travels in a URL and a cookie)"
        )
    return given


class TokenMiddleware:
    """Lets a request through only with the token: bearer header, cookie, or ``?token=``."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        if not token:
            raise ValueError("the dashboard token must not be empty")
        self.app = app
        self._token = token.encode()

    def _matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        bearer = headers.get("authorization", "")
        if bearer[:7].lower() == "bearer " and self._matches(bearer[7:].strip()):
            await self.app(scope, receive, send)
            return
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed Cookie header is just no cookie
            cookie = SimpleCookie()
        morsel = cookie.get(COOKIE)
        if self._matches(morsel.value if morsel is not None else None):
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in query if k == "token"]
        if given and self._matches(given[-1]):
            await self._enter(scope, send, [(k, v) for k, v in query if k != "token"])
            return
        body = json.dumps({"error": _REFUSAL}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="runnertrace ui"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _enter(self, scope: Scope, send: Send, rest: list[tuple[str, str]]) -> None:
        """The token came in the URL: keep it in a cookie and send the browser on without it."""
        location = scope.get("root_path", "") + scope["path"]
        if rest:
            location += "?" + urlencode(rest)
        cookie = (
            f"{COOKIE}={self._token.decode()}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1")),
                    (b"set-cookie", cookie.encode("latin-1")),
                    (b"content-length", b"0"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})
