"""moto in server mode on 127.0.0.1, as a subprocess, for the AWS API tests.

The server is started once per test module (``moto_process``); the ``moto``
fixture hands it over with its state reset. Import both fixtures into a test
module to use them, and always stopped afterwards. Nothing here talks
to anything but 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(port: int) -> list[str]:
    script = Path(sys.executable).with_name("moto_server")
    if not script.exists():
        found = shutil.which("moto_server")
        if found is None:
            return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        script = Path(found)
    return [str(script), "-H", "127.0.0.1", "-p", str(port)]


@dataclass
class MotoServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def start_moto(timeout_s: float = 30.0) -> MotoServer:
    """Start ``moto_server`` on a free loopback port and wait until it answers."""
    port = free_port()
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
    process = subprocess.Popen(
        _command(port), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server = MotoServer(port, process)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{server.url}/moto-api/", timeout=1) as response:
                response.read()
            return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto_server did not answer within {timeout_s}s") from None
            time.sleep(0.05)


@pytest.fixture(scope="module", name="moto_process")
def moto_process_fixture() -> Iterator[MotoServer]:
    server = start_moto()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="moto")
def moto_fixture(moto_process: MotoServer) -> MotoServer:
    """A running moto server with empty state."""
    moto_process.reset()
    return moto_process
