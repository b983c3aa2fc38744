"""``runnertrace ui``: a local dashboard over the embedded span store.

It needs the ``ui`` extra (Starlette and uvicorn); importing this package
without it fails with the ``pip install 'runnertrace[ui]'`` line to run. The
server binds to 127.0.0.1 by default: it has no accounts, so anyone who can
reach the port can read every captured prompt.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import webbrowser
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from runnertrace._internal.imports import require

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["create_app", "is_loopback", "serve"]


def create_app(db: str | Path, **kwargs: Any) -> Starlette:
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


def serve(
    db: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    out: IO[str],
) -> int:
    """Serve the dashboard until interrupted; ``port=0`` picks a free port."""
    uvicorn = require("uvicorn", "ui")
    from runnertrace.ui.app import LOOPBACK_HOSTS

    loopback = is_loopback(host)
    if not loopback:
        out.write(
            f"warning: --host {host} is not a loopback address: anyone who can reach it can "
            "read every trace in the store, including captured prompts (there is no login)\n"
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
    url = f"http://{shown}:{bound}/"
    app = create_app(db, allowed_hosts=LOOPBACK_HOSTS if loopback else None)
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    out.write(f"runnertrace ui: {url}  (store {Path(db)}; Ctrl-C to stop)\n")
    out.flush()
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
