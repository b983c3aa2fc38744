"""A test server in a process of its own, listening on a loopback port.

The cross-process tests (``tests/across``) start the A2A agent, the MCP server over
HTTP and the REST/SSE service as child processes that export their spans by OTLP.
Starting one, waiting for its port, and stopping it with bounded waits is the same
for all of them, so it is written once here. The waits are bounds on a process
starting or ending (a hung child fails the test instead of hanging it), not
measurements.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def free_port() -> int:
    """A loopback port nothing listens on now (for a child to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child: our ``src`` and the test helpers first on
    its path, and its batch exporter flushing every 100 ms (so the test's waits are short)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(TESTS), env.get("PYTHONPATH", "")])
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    env.update(extra)
    return env


class ServerProcess:
    """``python <script> <args...>``, started and waited for until ``port`` accepts a
    connection (``start_s`` at most; a child that exits first raises with its stderr).
    ``python`` is this interpreter unless given (a server that needs another venv's)."""

    def __init__(
        self,
        script: str,
        args: list[str],
        port: int,
        *,
        start_s: float = 30.0,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.port = port
        self.process = subprocess.Popen(
            [python, str(TESTS / script), *args],
            env=env if env is not None else child_env(),
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    self.process.stderr.read().decode() if self.process.stderr else ""
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{script} did not listen within {start_s:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
