"""Many processes, one trace: a client, the REST/SSE service, an MCP server and an A2A agent.

The test process is the client (its span exported by OTLP like every other
process's); ``tests/service_process.py`` serves the ``planner`` agent, whose one
step calls ``add_remote`` (an MCP server over stdio, a process the service
starts) and ``ask_math`` (``tests/a2a_server_process.py``, a real ``a2a-sdk``
server the test starts). Every process exports to one loopback OTLP receiver;
the test reads back one trace, in run and in stream mode, and checks each
span's parent and that every call is there once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import pytest

pytest.importorskip("mcp")
pytest.importorskip("a2a")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.loopback_process import ServerProcess, child_env, free_port
from tests.otlp_fixtures import wait_until
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

from runnertrace.serve import ServiceClient

SERVER_KIND, CLIENT_KIND = 2, 3


def server_process(script: str, service_name: str, port: int, *args: str) -> ServerProcess:
    """A server process on a loopback port, its spans under ``service_name``."""
    env = child_env(OTEL_SERVICE_NAME=service_name)
    return ServerProcess(script, [str(port), *args], port, start_s=40, env=env)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def service(receiver: OtlpReceiver) -> Iterator[str]:
    a2a_port = free_port()
    a2a = server_process("a2a_server_process.py", "a2a-agent", a2a_port, receiver.traces_url)
    try:
        port = free_port()
        served = server_process(
            "service_process.py",
            "service",
            port,
            receiver.traces_url,
            f"http://127.0.0.1:{a2a_port}/",
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            served.stop()
    finally:
        a2a.stop()


class DrawnSpan(Protocol):
    """What drawing a tree needs of a span: a received one or one read from a store."""

    name: str
    span_id: str
    parent_span_id: str | None
    start_ns: int


def tree(spans: Sequence[DrawnSpan], root: DrawnSpan, depth: int = 0) -> list[str]:
    """The trace as indented lines (children in start order), for the README and failures."""
    lines = ["  " * depth + root.name]
    children = sorted(
        (s for s in spans if s.parent_span_id == root.span_id), key=lambda s: s.start_ns
    )
    for child in children:
        lines.extend(tree(spans, child, depth + 1))
    return lines


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_one_trace_across_four_processes(
    receiver: OtlpReceiver, service: str, mode: str
) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.traces_url)))
    with provider.get_tracer("client-app").start_as_current_span(f"client {mode}") as root:
        async with ServiceClient(service) as client:
            if mode == "run":
                reply = await client.run("plan it")
                text = str(reply)
            else:
                chunks = [c async for c in client.stream("plan it")]
                text = "".join(c.delta or "" for c in chunks)
                assert chunks[-1].done and not [c for c in chunks if c.error]
    provider.shutdown()
    assert text == "Both answered."
    trace_id = format(root.get_span_context().trace_id, "032x")

    def spans() -> list[ReceivedSpan]:
        return [s for s in receiver.spans if s.trace_id == trace_id]

    def names() -> list[str]:
        return [s.name for s in spans()]

    assert wait_until(
        lambda: (
            names().count("execute_tool calculator") == 2
            and "invoke_agent planner" in names()
            and "tools/call add" in names()
        ),
        timeout_s=30,
    ), names()
    found = spans()
    by_id = {s.span_id: s for s in found}
    (client_root,) = [s for s in found if s.parent_span_id is None]
    drawn = "\n".join(tree(found, client_root))
    # One trace: every span but the client's has its parent in it.
    assert all(s.parent_span_id in by_id for s in found if s is not client_root), drawn

    def one(name: str, kind: int | None = None) -> ReceivedSpan:
        matches = [s for s in found if s.name == name and (kind is None or s.kind == kind)]
        assert len(matches) == 1, f"{name}: {len(matches)}\n{drawn}"
        return matches[0]

    def parent(span: ReceivedSpan) -> ReceivedSpan:
        return by_id[span.parent_span_id or ""]

    route = "/run" if mode == "run" else "/stream"
    service_span = one(f"POST {route}", SERVER_KIND)
    assert parent(service_span) is client_root
    planner = one("invoke_agent planner")
    assert parent(planner) is service_span
    add_remote = one("execute_tool add_remote")
    ask_math = one("execute_tool ask_math")
    assert add_remote.attributes["mcp.method.name"] == "tools/call"
    assert add_remote.attributes["network.transport"] == "pipe"
    mcp_call = one("tools/call add", SERVER_KIND)
    assert parent(mcp_call) is add_remote
    a2a_client = one("SendMessage", CLIENT_KIND)
    assert parent(a2a_client) is ask_math
    a2a_server = one("SendMessage", SERVER_KIND)
    assert parent(a2a_server) is a2a_client
    math = one("invoke_agent math")
    assert parent(math) is a2a_server
    assert (
        math.attributes["gen_ai.conversation.id"] == a2a_client.attributes["gen_ai.conversation.id"]
    )
    # Four processes: the client's, the service's, the MCP server's, the A2A agent's.
    services = [s.resource.get("service.name") for s in (client_root, planner, mcp_call, math)]
    assert services == ["client", "service", "mcp-server", "a2a-agent"]
    # Each call once: the two tools, the MCP call, the A2A call, the remote run's tools.
    assert names().count("execute_tool calculator") == 2
    assert [s.attributes.get("mcp.method.name") for s in found].count("tools/call") == 2
    assert len([s for s in found if s.attributes.get("a2a.method.name")]) == 2
    print(f"\n{drawn}")
