"""The dashboard's token: what stands between a non-loopback port and every captured prompt.

Why a token and not accounts: the dashboard is one person's view of one
store. A random token, printed once in the URL the server announces, is
enough to keep out whoever else can reach the port, and needs no setup.
A browser shows the token once (``?token=...``); the server answers with a
cookie and a redirect to the same page without it, so the token leaves the
address bar and the history. Programs (an OTLP exporter, curl) send it as
``Authorization: Bearer <token>``.

Why a separate ingest key: a service that sends spans must not be able to read
anyone's traces. ``RUNNERTRACE_INGEST_KEY`` opens the OTLP endpoints
(``/v1/traces``, ``/v1/metrics``, and OTLP/gRPC) and nothing else; the UI token
opens everything, OTLP included. Rotation: the variable takes several keys,
comma-separated, all valid at once (``new,old``): give the services the new
key, then drop the old one and restart. The UI token is rotated by restarting
with a new one; browsers then need the URL once more.

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

__all__ = [
    "COOKIE",
    "INGEST_KEY_ENV",
    "INGEST_PATHS",
    "TOKEN_ENV",
    "TokenMiddleware",
    "ingest_keys",
    "is_allowed",
    "ui_token",
]

TOKEN_ENV = "RUNNERTRACE_UI_TOKEN"
INGEST_KEY_ENV = "RUNNERTRACE_INGEST_KEY"
INGEST_PATHS = frozenset({"/v1/traces", "/v1/metrics"})
COOKIE = "runnertrace_ui_token"
_REFUSAL = (
    "this dashboard needs its token: open the URL `runnertrace ui` printed, "
    "or send Authorization: Bearer <token>"
)


_INGEST_REFUSAL = (
    "this dashboard needs its token, or an ingest key (RUNNERTRACE_INGEST_KEY), to take "
    "OTLP: send Authorization: Bearer <token or key>"
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


def ingest_keys() -> tuple[str, ...]:
    """The write-only keys in ``RUNNERTRACE_INGEST_KEY`` (comma-separated: during a rotation,
    the new and the old are both valid)."""
    keys = tuple(k.strip() for k in os.environ.get(INGEST_KEY_ENV, "").split(",") if k.strip())
    for key in keys:
        if not _TOKEN.fullmatch(key):
            raise ValueError(
                f"{INGEST_KEY_ENV} holds a key that is not 16 to 200 characters of A-Z, a-z, "
                "0-9 and . _ ~ - (keys are comma-separated)"
            )
    return keys


def _equal(candidate: str | None, secret: str) -> bool:
    return candidate is not None and hmac.compare_digest(candidate.encode(), secret.encode())


def is_allowed(
    bearer: str | None, *, ingest: bool, token: str | None, keys: tuple[str, ...]
) -> bool:
    """May a request with ``bearer`` in? ``ingest``: it is an OTLP export (the ingest keys
    open it, as the token does); anything else needs the token. What no secret guards
    (no token, and for ingest no key either) is open: a loopback dashboard."""
    if ingest:
        if token is None and not keys:
            return True
        return any(_equal(bearer, secret) for secret in (*keys, *([token] if token else [])))
    return token is None or _equal(bearer, token)


class TokenMiddleware:
    """Lets a request through only with the token: bearer header, cookie, or ``?token=``;
    an OTLP export also with an ingest key (bearer header only)."""

    def __init__(
        self, app: ASGIApp, *, token: str | None, ingest_keys: tuple[str, ...] = ()
    ) -> None:
        if token is not None and not token:
            raise ValueError("the dashboard token must not be empty")
        self.app = app
        self._token = token
        self._keys = ingest_keys

    def _matches(self, candidate: str | None) -> bool:
        return self._token is None or _equal(candidate, self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        bearer = headers.get("authorization", "")
        given = bearer[7:].strip() if bearer[:7].lower() == "bearer " else None
        if scope["path"] in INGEST_PATHS:
            if is_allowed(given, ingest=True, token=self._token, keys=self._keys):
                await self.app(scope, receive, send)
            else:
                await _refuse(send, _INGEST_REFUSAL)
            return
        if self._matches(given):
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
        await _refuse(send, _REFUSAL)

    async def _enter(self, scope: Scope, send: Send, rest: list[tuple[str, str]]) -> None:
        """The token came in the URL: keep it in a cookie and send the browser on without it."""
        location = scope.get("root_path", "") + scope["path"]
        if rest:
            location += "?" + urlencode(rest)
        cookie = f"{COOKIE}={self._token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000"
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


async def _refuse(send: Send, reason: str) -> None:
    body = json.dumps({"error": reason}).encode()
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
