"""A2A: a native tool calls a remote agent through ``a2a-sdk``; the trace crosses.

The remote agent (``tests/a2a_server_process.py``: a real ``a2a-sdk`` JSON-RPC
server on loopback, in its own process, the traced native agent behind
``RuntimeAgentExecutor``) exports by OTLP to a receiver; the calling side is
captured in memory. The tool's ``traced_client`` call is the conventions' A2A
CLIENT span under ``execute_tool``; the server's A2A SERVER span is its child,
and the remote run is under that, with the A2A context id as its conversation.
No HTTP instrumentation is installed on either side.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("a2a")

from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_message_text, new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest
from opentelemetry.trace import SpanKind
from tests.loopback_process import TESTS, ServerProcess, free_port
from tests.otlp_fixtures import wait_until
from tests.otlp_receiver import OtlpReceiver

from runnertrace.core import Runtime
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import (
    Agent,
    LlmResponse,
    NativeModule,
    ScriptedLlm,
    ToolCall,
    tool,
)
from runnertrace.testing import capture_spans
from runnertrace.tracing import traced
from runnertrace.tracing.a2a import traced_client
from runnertrace.tracing.config import Settings

SERVER = TESTS / "a2a_server_process.py"
SERVER_KIND, CLIENT_KIND = 2, 3  # OTLP span kinds


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


class A2AServer(ServerProcess):
    """The A2A agent (``tests/a2a_server_process.py``), exporting to ``endpoint``."""

    def __init__(self, endpoint: str) -> None:
        port = free_port()
        super().__init__(SERVER.name, [str(port), endpoint], port)
        self.url = f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def server(receiver: OtlpReceiver) -> Iterator[A2AServer]:
    s = A2AServer(receiver.traces_url)
    yield s
    s.stop()


def ask_tool(url: str, streaming: bool, context_id: str) -> Any:
    @tool(name="ask_math")
    async def ask_math(question: str) -> str:
        """Asks the remote math agent."""
        client = await create_client(url, client_config=ClientConfig(streaming=streaming))
        async with traced_client(client) as remote:
            message = new_text_message(question, context_id=context_id, role=Role.ROLE_USER)
            texts = [
                get_message_text(event.message)
                async for event in remote.send_message(SendMessageRequest(message=message))
                if event.HasField("message")
            ]
        return "".join(texts)

    return ask_math


async def run_caller(url: str, mode: str, streaming: bool, context_id: str) -> str:
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    question = "What is 1234 * 5678, plus 17?"
    llm = ScriptedLlm(
        turns=[
            LlmResponse(
                content=[ToolCall("call_1", "ask_math", {"question": question})],
                finish_reason="tool_calls",
            ),
            "Relayed.",
        ]
    )
    NativeModule(
        [Agent(llm, tools=[ask_tool(url, streaming, context_id)], name="caller")], runtime=runtime
    )
    agent = runtime.agents().get("caller")
    agent.runner = traced(agent.runner)
    session = runtime.sessions().new("caller-session")
    requests = [AgentRequestText(prompt="ask the math agent")]
    if mode == "run":
        await runtime.run(agent, session, requests)
    else:
        async for _ in runtime.stream(agent, session, requests):
            pass
    (result,) = [c for c in llm.requests[1].contents if hasattr(c, "status")]
    return str(result.text)


@pytest.mark.parametrize(("mode", "streaming"), [("run", False), ("stream", True), ("run", True)])
async def test_a_tool_calling_a_remote_agent_carries_the_trace_into_its_run(
    receiver: OtlpReceiver, server: A2AServer, mode: str, streaming: bool
) -> None:
    context_id = f"ctx-{uuid.uuid4().hex[:8]}"
    with capture_spans(deterministic=False) as captured:
        answer = await run_caller(server.url, mode, streaming, context_id)
    assert answer == "The answer is 7006669."
    method = "SendStreamingMessage" if streaming else "SendMessage"
    (tool_span,) = captured.by_name("execute_tool ask_math")
    (client,) = captured.by_name(method)
    assert client.kind is SpanKind.CLIENT
    assert client.parent is not None and client.parent.span_id == tool_span.context.span_id
    attrs = client.attributes
    assert attrs["a2a.method.name"] == method
    assert attrs["gen_ai.conversation.id"] == context_id
    assert attrs["gen_ai.agent.name"] == "math"
    assert attrs["gen_ai.agent.version"] == "1.0.0"
    assert (attrs["server.address"], attrs["server.port"]) == ("127.0.0.1", server.port)
    assert attrs["a2a.message.id"]
    trace_id = format(client.context.trace_id, "032x")
    client_id = format(client.context.span_id, "016x")

    def remote() -> list[Any]:
        return [s for s in receiver.spans if s.trace_id == trace_id]

    assert wait_until(lambda: any(s.name == "invoke_agent math" for s in remote()), timeout_s=20)
    servers = [s for s in remote() if s.attributes.get("a2a.method.name")]
    assert len(servers) == 1
    (server_span,) = servers
    assert (server_span.name, server_span.kind, server_span.parent_span_id) == (
        method,
        SERVER_KIND,
        client_id,
    )
    assert server_span.attributes["gen_ai.conversation.id"] == context_id
    assert server_span.attributes["a2a.message.id"] == attrs["a2a.message.id"]
    (run,) = [s for s in remote() if s.name == "invoke_agent math"]
    assert run.parent_span_id == server_span.span_id
    assert {
        s.attributes.get("gen_ai.conversation.id") for s in remote() if s.scope == "runnertrace"
    } == {context_id}
    # The remote run is whole: its two calculator calls, each once, in this trace.
    assert [s.name for s in remote()].count("execute_tool calculator") == 2


async def test_without_the_wrapper_the_remote_run_is_a_trace_of_its_own(
    receiver: OtlpReceiver, server: A2AServer
) -> None:
    """The control: a2a-sdk alone sends no traceparent, so the server's span is a root."""
    context_id = f"ctx-{uuid.uuid4().hex[:8]}"
    client = await create_client(server.url, client_config=ClientConfig(streaming=False))
    async with client:
        message = new_text_message("What is 2 + 3?", context_id=context_id, role=Role.ROLE_USER)
        [e async for e in client.send_message(SendMessageRequest(message=message))]

    def ours() -> list[Any]:
        return [
            s
            for s in receiver.spans
            if s.attributes.get("gen_ai.conversation.id") == context_id
            and s.attributes.get("a2a.method.name")
        ]

    assert wait_until(lambda: len(ours()) == 1, timeout_s=20)
    assert ours()[0].parent_span_id is None
