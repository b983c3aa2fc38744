"""Many processes, one trace, by OTLP into ``runnertrace ui`` and read back from its store.

The same four processes as ``test_across_processes.py`` (this one the client,
the REST/SSE service, the MCP server it starts over stdio, an ``a2a-sdk``
agent), plus a ``runnertrace ui`` process started as a user starts it. Every
process exports by OTLP/HTTP to the dashboard's ``/v1/traces``; the test reads
the trace back from the dashboard's store, as ``runnertrace show`` and the UI
read it: one trace, the right parents, each call once, and one run in the
runs list whose numbers are its spans'.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")
pytest.importorskip("a2a")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.across.test_across_processes import server_process, tree
from tests.loopback_process import ServerProcess, free_port
from tests.otlp_fixtures import wait_until

from runnertrace.serve import ServiceClient
from runnertrace.store import SpanStore, StoredSpan

SERVER, CLIENT = "SERVER", "CLIENT"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    store = tmp_path_factory.mktemp("ui") / "traces.db"
    port = free_port()
    ui = ServerProcess("ui_process.py", [str(port), str(store)], port, start_s=40)
    try:
        yield f"http://127.0.0.1:{port}/v1/traces", store
    finally:
        ui.stop()


@pytest.fixture(scope="module")
def service(dashboard: tuple[str, Path]) -> Iterator[str]:
    traces_url = dashboard[0]
    a2a_port = free_port()
    a2a = server_process("a2a_server_process.py", "a2a-agent", a2a_port, traces_url)
    try:
        port = free_port()
        served = server_process(
            "service_process.py", "service", port, traces_url, f"http://127.0.0.1:{a2a_port}/"
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            served.stop()
    finally:
        a2a.stop()


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_one_trace_across_processes_read_back_from_the_dashboards_store(
    dashboard: tuple[str, Path], service: str, mode: str
) -> None:
    traces_url, store_path = dashboard
    provider = TracerProvider(resource=Resource.create({"service.name": "client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
    with provider.get_tracer("client-app").start_as_current_span(f"client {mode}") as root:
        async with ServiceClient(service) as client:
            if mode == "run":
                text = str(await client.run("plan it"))
            else:
                chunks = [c async for c in client.stream("plan it")]
                text = "".join(c.delta or "" for c in chunks)
    provider.shutdown()
    assert text == "Both answered."
    trace_id = format(root.get_span_context().trace_id, "032x")
    store = SpanStore(store_path)

    def names() -> list[str]:
        try:
            return [s.name for s in store.get_trace(trace_id)]
        except LookupError:
            return []  # not one span of it stored yet

    assert wait_until(
        lambda: (
            names().count("execute_tool calculator") == 2
            and "invoke_agent planner" in names()
            and "tools/call add" in names()
            and any(n.startswith("SendMessage") for n in names())
        ),
        timeout_s=30,
    ), names()
    found = store.get_trace(trace_id)
    by_id = {s.span_id: s for s in found}
    (client_root,) = [s for s in found if s.parent_span_id is None]
    drawn = "\n".join(tree(found, client_root))
    assert client_root.name == f"client {mode}", drawn
    assert all(s.parent_span_id in by_id for s in found if s is not client_root), drawn
    assert len({s.span_id for s in found}) == len(found), drawn  # each span stored once

    def one(name: str, kind: str | None = None) -> StoredSpan:
        matches = [s for s in found if s.name == name and (kind is None or s.kind == kind)]
        assert len(matches) == 1, f"{name}: {len(matches)}\n{drawn}"
        return matches[0]

    def parent(span: StoredSpan) -> StoredSpan:
        return by_id[span.parent_span_id or ""]

    service_span = one(f"POST {'/run' if mode == 'run' else '/stream'}", SERVER)
    assert parent(service_span) is client_root
    planner = one("invoke_agent planner")
    assert parent(planner) is service_span
    assert parent(one("tools/call add", SERVER)) is one("execute_tool add_remote")
    a2a_client = one("SendMessage", CLIENT)
    assert parent(a2a_client) is one("execute_tool ask_math")
    assert parent(one("SendMessage", SERVER)) is a2a_client
    # Each process's spans under its own service name, as the dashboard's projects read them.
    services = {s.resource.get("service.name") for s in found}
    assert {"client", "service", "a2a-agent"} <= services, services
    # The runs list shows the trace once, its run's tokens those of its model calls.
    run = store.get_run(trace_id)
    chats = [s for s in found if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert chats, drawn
    assert run.span_count == len(found)
    assert run.input_tokens == sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in chats)
