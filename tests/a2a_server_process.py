"""A runnertrace-traced native agent behind a real ``a2a-sdk`` server, in a process of its own.

``python tests/a2a_server_process.py PORT ENDPOINT``: JSON-RPC on
``http://127.0.0.1:PORT/``, the agent card at the well-known path, the agent
``math`` (the native calculator agent) run through ``RuntimeAgentExecutor``,
its spans exported by OTLP to ``ENDPOINT``; they are flushed at exit (SIGTERM).
"""

from __future__ import annotations

import sys
from typing import Any

from runnertrace.core import Runtime
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.tracing import traced
from runnertrace.tracing.a2a import RuntimeAgentExecutor
from runnertrace.tracing.config import Settings, TraceConfig


def card(port: int) -> Any:
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

    return AgentCard(
        name="math",
        description="Does arithmetic.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="math", name="math", description="arithmetic", tags=["math"])],
    )


def app(port: int, endpoint: str) -> Any:
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
    from starlette.applications import Starlette

    trace = TraceConfig(type="otlp", otlp={"endpoint": endpoint})
    runtime = Runtime(settings=Settings(trace={"enabled": False}))
    NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
    agent = runtime.agents().get("math")
    agent.runner = traced(agent.runner, trace)
    the_card = card(port)
    handler = DefaultRequestHandler(
        agent_executor=RuntimeAgentExecutor(runtime, "math", card=the_card),
        task_store=InMemoryTaskStore(),
        agent_card=the_card,
    )
    routes = [*create_agent_card_routes(the_card), *create_jsonrpc_routes(handler, rpc_url="/")]
    return Starlette(routes=routes)


if __name__ == "__main__":
    import uvicorn

    port, endpoint = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(app(port, endpoint), host="127.0.0.1", port=port, log_level="warning")
