"""``runnertrace ui``: a local dashboard over the embedded span store.

It needs the ``ui`` extra (Starlette and uvicorn); importing this package
without it fails with the ``pip install 'runnertrace[ui]'`` line to run. The
server binds to 127.0.0.1 by default. It has no accounts: on any other
address it requires a token (printed in the URL it announces, or
``RUNNERTRACE_UI_TOKEN``), and the Host check stays on with the names it
can be reached by (the machine's names and addresses, plus ``--allow-host``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from runnertrace._internal.imports import require

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from runnertrace.store import StoreUrl

__all__ = ["create_app", "host_names", "is_loopback", "serve"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def create_app(db: str | Path | StoreUrl, **kwargs: Any) -> Starlette:
    """The dashboard's ASGI app over the store at ``db`` (see :mod:`runnertrace.ui.app`)."""
    require("starlette", "ui")
    from runnertrace.ui.app import create_app as build

    return build(db, **kwargs)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_names(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The Host header values a non-loopback server answers to.

    Why not every host: a DNS-rebinding page sends its own name in Host. The
    machine's own names and addresses (and the bound address) are what a
    colleague's browser sends; anything else must be named with ``--allow-host``.
    """
    names = {*LOOPBACK, *extra}
    bare = host.strip("[]")
    if bare not in ("0.0.0.0", "::", ""):
        names.add(bare)
    for name in {socket.gethostname(), socket.getfqdn()}:
        names.add(name)
        try:
            for info in socket.getaddrinfo(name, None):
                names.add(str(info[4][0]))
        except OSError:  # a name that does not resolve is still a name a user may type
            continue
    names.update(f"[{n}]" for n in list(names) if ":" in n)
    return sorted(names)


def serve(
    db: str | Path | StoreUrl,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    out: IO[str],
    allow_hosts: Sequence[str] = (),
    grpc_port: int | None = None,
) -> int:
    """Serve the dashboard until interrupted; ``port=0`` picks a free port. ``grpc_port``:
    OTLP/gRPC ingest on that port too (0: a free one; the ``grpc`` extra)."""
    uvicorn = require("uvicorn", "ui")
    from runnertrace.store import StoreUrl
    from runnertrace.ui.app import LOOPBACK_HOSTS
    from runnertrace.ui.auth import INGEST_KEY_ENV, TOKEN_ENV, ingest_keys, ui_token

    loopback = is_loopback(host)
    token = ui_token() if not loopback or os.environ.get(TOKEN_ENV) else None
    keys = ingest_keys()
    if not loopback:
        out.write(
            f"warning: --host {host} is not a loopback address: whoever can reach it and has "
            "the token can read every trace in the store, including captured prompts\n"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host.strip('[]')}]" if family == socket.AF_INET6 else host
    if host.strip("[]") in ("0.0.0.0", "::"):
        # A wildcard is no address to open (and no Host the check accepts): the machine's name is.
        shown = socket.gethostname()
    url = f"http://{shown}:{bound}/"
    allowed = [*LOOPBACK_HOSTS, *allow_hosts] if loopback else host_names(host, allow_hosts)
    app = create_app(db, allowed_hosts=allowed, token=token, ingest_keys=keys)
    grpc_server = None
    if grpc_port is not None:
        from runnertrace.ui.grpc_ingest import start_grpc

        try:
            grpc_server, bound_grpc = start_grpc(
                app.state.ingest,
                host=host.strip("[]"),
                port=grpc_port,
                token=token,
                ingest_keys=keys,
            )
        except BaseException:
            sock.close()
            raise
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    entry = f"{url}?token={token}" if token else url
    out.write(f"runnertrace ui: {entry}  (store {StoreUrl.parse(db).shown}; Ctrl-C to stop)\n")
    if token:
        out.write(
            f"  a token is required (from {TOKEN_ENV} or generated): open the URL above once, "
            f"or send Authorization: Bearer <token>; OTLP in: {url}v1/traces\n"
        )
    if keys:
        out.write(f"  OTLP in also takes the ingest key(s) in {INGEST_KEY_ENV} (write only)\n")
    if grpc_server is not None:
        out.write(f"  OTLP/gRPC in: {shown}:{bound_grpc}\n")
    out.flush()
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(entry,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if grpc_server is not None:
            grpc_server.stop(grace=2).wait()
    return 0
