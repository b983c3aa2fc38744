"""Serving beyond loopback: the token (bearer, once in the URL then a cookie) and the Host check."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from starlette.testclient import TestClient

from runnertrace.cli import main
from runnertrace.ui import create_app
from runnertrace.ui.auth import COOKIE, TOKEN_ENV
from test_ui_otlp import Server, span_count
from ui_fixtures import hand_made_runs

TOKEN = "s3cret-token-for-the-tests"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    db = tmp_path / "t.db"
    hand_made_runs(db, 1_700_000_000 * 10**9, count=1)
    app = create_app(db, token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/"), ("GET", "/api/runs"), ("GET", "/api/live"), ("POST", "/v1/traces")],
)
def test_without_the_token_every_path_is_refused(
    client: TestClient, method: str, path: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == 401
    assert "needs its token" in response.json()["error"]
    wrong = client.request(method, path, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert client.request(method, path, params={"token": TOKEN[:-1]}).status_code == 401


def test_a_bearer_header_is_let_through(client: TestClient) -> None:
    response = client.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and len(response.json()["runs"]) == 1


def test_the_token_in_the_url_once_becomes_a_cookie(client: TestClient) -> None:
    entry = client.get("/", params={"token": TOKEN, "x": "1"})
    assert entry.status_code == 303
    assert entry.headers["location"] == "/?x=1"  # the token leaves the address bar
    cookie = entry.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN};") and "HttpOnly" in cookie
    # the client now holds the cookie: the page and its APIs load without the token
    assert client.get("/").status_code == 200
    assert client.get("/api/runs").status_code == 200
    client.cookies.clear()
    assert client.get("/api/runs").status_code == 401


def test_the_otlp_endpoint_takes_spans_only_with_the_token(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with Server(db, token=TOKEN) as url:
        for headers, expected in (({}, 0), ({"Authorization": f"Bearer {TOKEN}"}, 1)):
            provider = TracerProvider()
            exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", headers=headers)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            with provider.get_tracer("app").start_as_current_span("guarded"):
                pass
            provider.shutdown()
            assert span_count(db) == expected


def _serve(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    code = "import sys; from runnertrace.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, "ui", "--db", str(tmp_path / "t.db"), "--no-open", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def test_serving_on_all_addresses_prints_a_token_url_and_keeps_the_host_check(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    process = _serve(
        tmp_path, {**env}, "--host", "0.0.0.0", "--allow-host", "dash.example", "--port", "0"
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        text = "".join(lines)
        assert "is not a loopback address" in text
        name = re.escape(socket.gethostname())  # a wildcard is shown as the machine's name
        match = re.search(rf"http://{name}:(\d+)/\?token=([A-Za-z0-9_-]{{32}})", text)
        assert match, text
        port, token = match.groups()
        base = f"http://127.0.0.1:{port}"
        assert requests.get(base + "/api/runs", timeout=10).status_code == 401
        ok = requests.get(base + "/api/runs", params={"token": token}, timeout=10)
        assert ok.status_code == 200 and ok.url == base + "/api/runs"  # after the redirect
        bearer = {"Authorization": f"Bearer {token}"}
        hosts = (("evil.example", 400), ("dash.example", 200), (socket.gethostname(), 200))
        for host, status in hosts:
            response = requests.get(
                base + "/api/runs", headers={**bearer, "Host": host}, timeout=10
            )
            assert response.status_code == status, host
    finally:
        process.terminate()
        process.wait(10)


def test_the_token_can_be_set_and_a_bad_one_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    process = _serve(tmp_path, {TOKEN_ENV: TOKEN}, "--port", "0")
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert f"?token={TOKEN}" in first  # on loopback too, once set
    finally:
        process.terminate()
        process.wait(10)
    monkeypatch.setenv(TOKEN_ENV, "short; bad")
    assert main(["ui", "--db", str(tmp_path / "t.db"), "--no-open"]) == 1
    assert f"{TOKEN_ENV} must be 16 to 200 characters" in capsys.readouterr().err
