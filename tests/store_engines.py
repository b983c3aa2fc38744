"""Both store engines for the tests: a SQLite file, and a real PostgreSQL server.

The PostgreSQL server is a throwaway cluster, made once per test session:
``initdb`` into a temp directory and ``pg_ctl`` on a free loopback port, with
password login over TCP (so a wrong password is refused, as on a real server),
stopped at the end. ``initdb`` refuses to run as root, so as root the cluster
belongs to the unprivileged ``postgres`` user (``runuser``). With
``RUNNERTRACE_TEST_POSTGRES=postgresql://user:pass@host:port/db`` an existing
server is used instead (each test gets a database of its own on it: the user
needs CREATEDB).

Without either, the PostgreSQL tests skip, saying why and what to install; with
``CI=true`` they fail instead, so CI cannot pass without having run them.

Fixtures: ``engine`` ("sqlite" / "postgresql", the parameter of every suite
that runs once per engine), ``store_location`` (a new empty store of that
engine: a path, or a URL of a new database), ``postgres`` (the server).
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ENGINES = ("sqlite", "postgresql")
ENV = "RUNNERTRACE_TEST_POSTGRES"
# Read at import: the suite's autouse fixture clears every RUNNERTRACE_* variable per test.
GIVEN = os.environ.get(ENV, "").strip()
PASSWORD = "runnertrace-test"
INSTALL = (
    "install PostgreSQL's server (Debian: apt-get install postgresql-15, with pg_trgm) and "
    "pip install 'runnertrace[postgres]', or set RUNNERTRACE_TEST_POSTGRES=postgresql://..."
)
_counter = itertools.count()


def _unavailable(reason: str) -> None:
    message = f"PostgreSQL tests cannot run: {reason}; {INSTALL}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].parent if candidates else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Postgres:
    """A PostgreSQL server the tests may create databases on."""

    url: str
    """An admin URL (its database is the server's maintenance one)."""
    data_dir: Path | None = None
    bin_dir: Path | None = None
    owner: str | None = None
    port: int = 0
    log: Path | None = None

    def database_url(self, name: str) -> str:
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))

    def create_database(self, prefix: str = "rt") -> str:
        """A new, empty database; its URL."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def _ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.bin_dir is not None and self.data_dir is not None
        command = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args]
        return subprocess.run(
            _as(self.owner, command), capture_output=True, text=True, timeout=120, check=False
        )

    def stop(self) -> None:
        """Stop the server now (fast: open sessions are ended)."""
        done = self._ctl("-m", "fast", "-w", "stop")
        assert done.returncode == 0, done.stderr

    def start(self) -> None:
        assert self.log is not None
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        done = self._ctl("-o", options, "-l", str(self.log), "-w", "-t", "60", "start")
        assert done.returncode == 0, f"pg_ctl start failed: {done.stderr}\n{self.log_text()}"

    def log_text(self) -> str:
        return (
            self.log.read_text(errors="replace")[-3000:] if self.log and self.log.exists() else ""
        )


def _as(owner: str | None, command: list[str]) -> list[str]:
    return ["runuser", "-u", owner, "--", *command] if owner else command


def _start_cluster() -> Postgres:
    bin_dir = _bin_dir()
    if bin_dir is None:
        _unavailable("no initdb found (on PATH or under /usr/lib/postgresql/*/bin)")
    assert bin_dir is not None
    owner = "postgres" if os.geteuid() == 0 else None
    if owner is not None and shutil.which("runuser") is None:
        _unavailable("running as root, and no runuser to run initdb as the postgres user")
    base = Path(tempfile.mkdtemp(prefix="runnertrace-pg-"))
    data_dir = base / "data"
    data_dir.mkdir()
    password_file = base / "password"
    password_file.write_text(PASSWORD + "\n")
    if owner is not None:
        shutil.chown(base, owner)
        shutil.chown(data_dir, owner)
        shutil.chown(password_file, owner)
    done = subprocess.run(
        _as(
            owner,
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={password_file}",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed: {done.stderr or done.stdout}")
    port = free_port()
    server = Postgres(
        url=f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/postgres",
        data_dir=data_dir,
        bin_dir=bin_dir,
        owner=owner,
        port=port,
        log=base / "server.log",
    )
    if owner is not None:
        server.log.touch()  # type: ignore[union-attr]
        shutil.chown(server.log, owner)  # type: ignore[arg-type]
    server.start()
    return server


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """The PostgreSQL server of this test session (skips, or fails on CI, without one)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed")
    if GIVEN:
        yield Postgres(url=GIVEN)
        return
    server = _start_cluster()
    try:
        yield server
    finally:
        server._ctl("-m", "immediate", "-w", "stop")  # noqa: SLF001
        if server.data_dir is not None:
            shutil.rmtree(server.data_dir.parent, ignore_errors=True)


def wait_until(check: object, timeout_s: float = 30.0) -> None:
    """Poll ``check()`` until true (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s}s: {check}")
        time.sleep(0.05)


def new_location(engine: str, request: pytest.FixtureRequest, folder: Path) -> str | Path:
    """A new empty store of ``engine``: a file in ``folder``, or a new database."""
    if engine == "sqlite":
        return folder / "traces.db"
    server: Postgres = request.getfixturevalue("postgres")
    return server.create_database()


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_location(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    return new_location(engine, request, tmp_path)
