"""Writing to a shared dashboard: the write-only ingest key, and OTLP/gRPC beside OTLP/HTTP.

Both run over either engine: what comes in through gRPC lands in the same store
(and the same run rows) as what comes in over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from runnertrace.store import SpanStore
from runnertrace.tracing.config import Settings
from runnertrace.tracing.config_env import unknown_env_vars
from runnertrace.ui import create_app

TOKEN = "ui-token-0123456789abcdef"
NEW_KEY = "ingest-key-new-0123456789"
OLD_KEY = "ingest-key-old-0123456789"
BASE = "http://127.0.0.1"


def test_the_token_and_ingest_key_variables_are_not_unknown_configuration() -> None:
    environ = {
        "RUNNERTRACE_UI_TOKEN": TOKEN,
        "RUNNERTRACE_INGEST_KEY": NEW_KEY,
        "RUNNERTRACE_TRACE__LOCAL__PATH": "postgresql://u@h/db",
        "RUNNERTRACE_UI_TOKN": "typo",
    }
    assert [name for name, _ in unknown_env_vars(Settings, environ)] == ["RUNNERTRACE_UI_TOKN"]


def _finished_spans() -> list[ReadableSpan]:
    """A small trace, finished, as the SDK hands it to an exporter: a run with a model call."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("svc")
    run = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}
    with tracer.start_as_current_span("invoke_agent helper", attributes=run):
        tracer.start_span("chat m", attributes={"gen_ai.operation.name": "chat"}).end()
    provider.shutdown()
    return list(memory.get_finished_spans())


def _otlp_body() -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return bytes(encode_spans(_finished_spans()).SerializeToString())


def _post(client: TestClient, key: str | None) -> int:
    headers = {"content-type": "application/x-protobuf"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    return client.post("/v1/traces", content=_otlp_body(), headers=headers).status_code


def test_an_ingest_key_writes_and_reads_nothing(store_location: Path) -> None:
    app = create_app(store_location, token=TOKEN, ingest_keys=(NEW_KEY, OLD_KEY))
    with TestClient(app, base_url=BASE) as client:
        assert _post(client, NEW_KEY) == 200
        assert _post(client, OLD_KEY) == 200  # rotating: the old key still works meanwhile
        assert _post(client, TOKEN) == 200  # the UI token opens everything, OTLP included
        assert _post(client, None) == 401
        assert _post(client, "not-the-key-0123456789") == 401
        for path in ("/api/runs", "/api/runs.csv", "/api/sessions", "/api/live", "/"):
            refused = client.get(path, headers={"authorization": f"Bearer {NEW_KEY}"})
            assert refused.status_code == 401, path
        runs = client.get("/api/runs", headers={"authorization": f"Bearer {TOKEN}"}).json()
        assert len(runs["runs"]) == 3  # one trace each, three sent with a valid secret


def test_on_loopback_without_a_token_the_key_still_guards_ingest(store_location: Path) -> None:
    app = create_app(store_location, ingest_keys=(NEW_KEY,))
    with TestClient(app, base_url=BASE) as client:
        assert _post(client, None) == 401
        assert _post(client, NEW_KEY) == 200
        assert client.get("/api/runs").status_code == 200  # the pages stay as they were


@pytest.fixture
def grpc_ingest(store_location: Path) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("grpc")
    from runnertrace.ui.grpc_ingest import start_grpc

    app = create_app(store_location, ingest_keys=(NEW_KEY,))
    with TestClient(app, base_url=BASE):
        server, port = start_grpc(
            app.state.ingest, host="127.0.0.1", port=0, token=None, ingest_keys=(NEW_KEY,)
        )
        try:
            yield f"127.0.0.1:{port}", store_location
        finally:
            server.stop(grace=1).wait()


def test_the_sdks_grpc_exporter_sends_as_it_is(grpc_ingest: tuple[str, Path]) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    endpoint, db = grpc_ingest
    refused = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=5)
    keyed = OTLPSpanExporter(
        endpoint=endpoint, insecure=True, headers=(("authorization", f"Bearer {NEW_KEY}"),)
    )
    spans = _finished_spans()
    assert refused.export(spans) == SpanExportResult.FAILURE  # no key: UNAUTHENTICATED
    assert keyed.export(spans) == SpanExportResult.SUCCESS
    store = SpanStore(db, read_only=True)
    try:
        [run] = store.list_runs()
        assert (run.agent, run.span_count, run.model_calls, run.status) == ("helper", 2, 1, "ok")
    finally:
        store.close()
    refused.shutdown()
    keyed.shutdown()


def test_runnertrace_ui_takes_otlp_grpc_with_its_ingest_key(store_location: Path) -> None:
    """The command as a user runs it: ``runnertrace ui --otlp-grpc-port`` with an ingest key."""
    pytest.importorskip("grpc")
    import os
    import re
    import subprocess
    import sys

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    code = "import sys; from runnertrace.cli import main; sys.exit(main(sys.argv[1:]))"
    server = subprocess.Popen(
        [sys.executable, "-c", code, "ui", "--store", str(store_location), "--no-open",
         "--otlp-grpc-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RUNNERTRACE_INGEST_KEY": NEW_KEY, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert server.stdout is not None
        lines = [server.stdout.readline() for _ in range(3)]
        found = [m for line in lines if (m := re.search(r"OTLP/gRPC in: (\S+)", line))]
        assert found, (lines, server.stderr.read() if server.poll() is not None else "")  # type: ignore[union-attr]
        assert any("ingest key" in line for line in lines), lines
        exporter = OTLPSpanExporter(
            endpoint=found[0].group(1),
            insecure=True,
            headers=(("authorization", f"Bearer {NEW_KEY}"),),
        )
        assert exporter.export(_finished_spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    finally:
        server.terminate()
        server.wait(30)
    store = SpanStore(store_location, read_only=True)
    try:
        assert [r.agent for r in store.list_runs()] == ["helper"]
    finally:
        store.close()
