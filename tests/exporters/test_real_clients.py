"""The fidelity matrix on each framework's real OpenAI client class, against a loopback server.

The scripted test models keep the per-framework matrices fast; this module keeps
the real paths covered: each runner drives its framework's own client class (real
HTTP underneath) against ``FakeOpenAIServer`` on 127.0.0.1, in run and stream mode.
The script is the one every matrix uses, cut to what a real client sends: the
model asks for the weather tool (whose body opens an app span), then answers. The
server thinks before each answer, so a streamed chat span's time to first chunk is
known; it counts the requests it served and the tokens it reported,
so "each call once" and "each token once" are checked against the wire, not
against our own spans. A failing call is an HTTP 500: the client's own exception
must reach the span.

The paths: the OpenAI Agents SDK's Chat Completions and Responses models, Pydantic
AI's ``OpenAIChatModel`` and ``OpenAIResponsesModel`` (an ``OpenAIProvider`` with a
loopback ``base_url``), smolagents' ``OpenAIModel``, ADK's ``Gemini`` over a
``google-genai`` client (the server speaks the Gemini API too), smolagents'
``LiteLLMModel`` and ADK's ``LiteLlm``, LangGraph with ``ChatOpenAI``, and the
native runner's ``OpenAICompatibleLlm``. Where a client asks a server other than
OpenAI's for streamed usage only when told (the Agents SDK, ``ChatOpenAI``), the
case tells it, as a user of such a server would.

Not covered here, and why:

* LangGraph with ``ChatOpenAI`` needs ``langchain-openai``, and the LiteLLM cases
  need ``litellm``; neither is in the dev extras, so those cases skip without them.
* MAF's clients: tests/runners/maf/test_maf_openai_clients.py. CrewAI's ``LLM``: its own venv.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from tests.fake_openai_server import FakeOpenAIServer, FakeToolCall, Reply
from tests.fidelity_helpers import MODES, parent_of, run

from runnertrace import TracingRunner
from runnertrace.core.agent import Agent as CoreAgent
from runnertrace.testing import CapturedSpans

pytest.importorskip("openai", reason="needs the openai extra: pip install -e '.[dev,openai]'")

PROMPT = "What is the weather in Paris?"
ARGUMENTS = {"city": "Paris"}
ANSWER = "Paris is sunny, 21C."
INSTRUCTIONS = "Answer briefly; use the weather tool."
THINK_S = 0.05
"""How long the server waits before each answer's first byte."""
APP_SPAN = "app.lookup weather"
RESULT = "Paris: sunny, 21C"

user: dict[str, trace_api.Tracer] = {}


@pytest.fixture(autouse=True)
def user_tracer(captured_spans: CapturedSpans) -> None:
    user["tracer"] = captured_spans.provider.get_tracer("user-code")


def weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city to look up.
    """
    with user["tracer"].start_as_current_span(APP_SPAN):
        return RESULT


# -- the client paths ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientPath:
    """One framework's real client class, as a runner drives it."""

    build: Callable[[FakeOpenAIServer], CoreAgent]
    """The agent (its runner traced, content captured) over a client on ``server``."""
    route: str
    """The API the client speaks (the server's path)."""
    error: str
    """The class of what the client raises on an HTTP 500 (``error.type`` on the span)."""
    streamed_route: str | None = None
    """The path a streamed call takes, where the API streams on a path of its own."""
    answers_with_tool: str | None = None
    """The tool the framework's agent answers through (smolagents' ``final_answer``)."""
    history_as_text: bool = False
    """The framework sends earlier tool calls and results as text (smolagents' memory)."""


def traced(runner: Any, native: Any) -> CoreAgent:
    return CoreAgent("forecaster", TracingRunner(runner, capture_content=True), native)


def async_openai(server: FakeOpenAIServer) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)


def openai_agents(model_class: str) -> Callable[[FakeOpenAIServer], CoreAgent]:
    def build(server: FakeOpenAIServer) -> CoreAgent:
        pytest.importorskip("agents")
        import agents

        from runnertrace.runners.openai_agents import OpenAIRunner

        model = getattr(agents, model_class)(model=server.model, openai_client=async_openai(server))
        native = agents.Agent(
            name="forecaster",
            instructions=INSTRUCTIONS,
            model=model,
            tools=[agents.function_tool(weather)],
            # the SDK asks a server other than OpenAI's for streamed usage only when told
            model_settings=agents.ModelSettings(include_usage=True),
        )
        return traced(OpenAIRunner(), native)

    return build


def pydantic_ai(model_class: str) -> Callable[[FakeOpenAIServer], CoreAgent]:
    def build(server: FakeOpenAIServer) -> CoreAgent:
        pytest.importorskip("pydantic_ai")
        import pydantic_ai.models.openai as models
        from pydantic_ai import Agent
        from pydantic_ai.providers.openai import OpenAIProvider

        from runnertrace.runners.pydantic_ai import PydanticAIRunner

        provider = OpenAIProvider(base_url=server.base_url, api_key="sk-test")
        model = getattr(models, model_class)(server.model, provider=provider)
        native: Any = Agent(model, name="forecaster", instructions=INSTRUCTIONS)
        native.tool_plain(weather)
        return traced(PydanticAIRunner(), native)

    return build


def smolagents_openai(server: FakeOpenAIServer) -> CoreAgent:
    pytest.importorskip("smolagents")
    from smolagents import OpenAIModel, ToolCallingAgent, tool
    from smolagents.monitoring import LogLevel

    from runnertrace.runners.smolagents import SmolagentsRunner

    model = OpenAIModel(
        server.model,
        api_base=server.base_url,
        api_key="sk-test",
        client_kwargs={"max_retries": 0},
    )
    native = ToolCallingAgent(
        tools=[tool(weather)],
        model=model,
        name="forecaster",
        instructions=INSTRUCTIONS,
        verbosity_level=LogLevel.OFF,
    )
    return traced(SmolagentsRunner(), native)


def litellm_model(server: FakeOpenAIServer) -> str:
    """LiteLLM's name for the server's model, after keeping LiteLLM on loopback."""
    # LiteLLM fetches its model cost map from the internet at import unless told not to
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytest.importorskip("litellm", reason="LiteLLM's clients need litellm, not installed here")
    return f"openai/{server.model}"


def smolagents_litellm(server: FakeOpenAIServer) -> CoreAgent:
    pytest.importorskip("smolagents")
    model_id = litellm_model(server)
    from smolagents import LiteLLMModel, ToolCallingAgent, tool
    from smolagents.monitoring import LogLevel

    from runnertrace.runners.smolagents import SmolagentsRunner

    model = LiteLLMModel(model_id, api_base=server.base_url, api_key="sk-test", num_retries=0)
    native = ToolCallingAgent(
        tools=[tool(weather)],
        model=model,
        name="forecaster",
        instructions=INSTRUCTIONS,
        verbosity_level=LogLevel.OFF,
    )
    return traced(SmolagentsRunner(), native)


def adk_litellm(server: FakeOpenAIServer) -> CoreAgent:
    pytest.importorskip("google.adk")
    model_id = litellm_model(server)
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm

    from runnertrace.runners.adk import GoogleADKRunner

    model = LiteLlm(model=model_id, api_base=server.base_url, api_key="sk-test", num_retries=0)
    native = LlmAgent(name="forecaster", model=model, instruction=INSTRUCTIONS, tools=[weather])
    return traced(GoogleADKRunner(), native)


def native_openai_compat(server: FakeOpenAIServer) -> CoreAgent:
    from runnertrace.runners.native import Agent, NativeRunner
    from runnertrace.runners.native.openai_compat import OpenAICompatibleLlm
    from runnertrace.runners.native.tools import tool

    llm = OpenAICompatibleLlm(server.model, client=async_openai(server))
    native = Agent(llm, tools=[tool(weather)], instructions=INSTRUCTIONS, name="forecaster")
    return traced(NativeRunner(), native)


def adk_gemini(server: FakeOpenAIServer) -> CoreAgent:
    pytest.importorskip("google.adk")
    from google import genai
    from google.adk.agents import LlmAgent
    from google.adk.models import Gemini
    from google.genai import types

    from runnertrace.runners.adk import GoogleADKRunner

    client = genai.Client(api_key="sk-test", http_options=types.HttpOptions(base_url=server.origin))
    native = LlmAgent(
        name="forecaster",
        model=Gemini(model=server.model, client=client),
        instruction=INSTRUCTIONS,
        tools=[weather],
    )
    return traced(GoogleADKRunner(), native)


def langgraph_chat_openai(server: FakeOpenAIServer) -> CoreAgent:
    pytest.importorskip("langgraph")
    pytest.importorskip(
        "langchain_openai", reason="ChatOpenAI needs langchain-openai, not installed here"
    )
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from runnertrace.runners.langgraph import LangGraphRunner

    tools = [tool(weather)]
    model = ChatOpenAI(
        model=server.model,
        base_url=server.base_url,
        api_key="sk-test",
        max_retries=0,
        stream_usage=True,  # off by default for a base_url other than OpenAI's
    ).bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        reply = await model.ainvoke([SystemMessage(INSTRUCTIONS), *state["messages"]])
        return {"messages": [reply]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return traced(LangGraphRunner(), graph.compile(name="forecaster"))


CHAT_COMPLETIONS = "/v1/chat/completions"
RESPONSES = "/v1/responses"
GEMINI = f"/v1beta/models/{FakeOpenAIServer.model}:generateContent"
GEMINI_STREAMED = f"/v1beta/models/{FakeOpenAIServer.model}:streamGenerateContent"

OPENAI_500 = "InternalServerError"
"""``openai``'s error for an HTTP 500."""
PYDANTIC_AI_500 = "ModelServerError"
"""Pydantic AI's: it turns the client's error into its own (the client's is the cause)."""

PATHS: dict[str, ClientPath] = {
    "openai_agents-chat_completions": ClientPath(
        openai_agents("OpenAIChatCompletionsModel"), CHAT_COMPLETIONS, OPENAI_500
    ),
    "openai_agents-responses": ClientPath(
        openai_agents("OpenAIResponsesModel"), RESPONSES, OPENAI_500
    ),
    "pydantic_ai-chat": ClientPath(
        pydantic_ai("OpenAIChatModel"), CHAT_COMPLETIONS, PYDANTIC_AI_500
    ),
    "pydantic_ai-responses": ClientPath(
        pydantic_ai("OpenAIResponsesModel"), RESPONSES, PYDANTIC_AI_500
    ),
    "smolagents-openai": ClientPath(  # the run raises smolagents' AgentGenerationError
        smolagents_openai,
        CHAT_COMPLETIONS,
        OPENAI_500,
        answers_with_tool="final_answer",
        history_as_text=True,
    ),
    "adk-gemini": ClientPath(
        adk_gemini,
        GEMINI,
        "ServerError",  # google-genai's error for a 5xx
        streamed_route=GEMINI_STREAMED,
    ),
    "smolagents-litellm": ClientPath(
        smolagents_litellm,
        CHAT_COMPLETIONS,
        "InternalServerError",  # LiteLLM's own class of that name
        answers_with_tool="final_answer",
        history_as_text=True,
    ),
    "adk-litellm": ClientPath(adk_litellm, CHAT_COMPLETIONS, "InternalServerError"),
    "native-openai_compat": ClientPath(native_openai_compat, CHAT_COMPLETIONS, OPENAI_500),
    "langgraph-chat_openai": ClientPath(  # an InternalServerError subclass of its own
        langgraph_chat_openai, CHAT_COMPLETIONS, "OpenAIAPIError"
    ),
}


@pytest.fixture(params=sorted(PATHS))
def path(request: pytest.FixtureRequest) -> ClientPath:
    return PATHS[request.param]


def script(path: ClientPath) -> list[Reply]:
    """The weather call, then the answer (as text, or through the answering tool)."""
    if path.answers_with_tool:
        answer = Reply(
            tool_calls=[FakeToolCall("call_2", path.answers_with_tool, {"answer": ANSWER})]
        )
    else:
        answer = Reply(text=ANSWER)
    answer.prompt_tokens, answer.completion_tokens, answer.delay_s = 20, 9, THINK_S
    return [
        Reply(tool_calls=[FakeToolCall("call_1", "weather", ARGUMENTS)], delay_s=THINK_S),
        answer,
    ]


def failing_script(path: ClientPath) -> list[Reply]:
    """The weather call, then an HTTP 500 where the answer was."""
    return [script(path)[0], Reply(status=500, text="the model is down")]


async def run_on(
    path: ClientPath, mode: str, replies: list[Reply], spans: CapturedSpans
) -> FakeOpenAIServer:
    spans.clear()
    with FakeOpenAIServer(replies) as server:
        await run(path.build(server), mode, PROMPT)
    return server


def chats(spans: CapturedSpans) -> list[ReadableSpan]:
    """The chat spans, in call order (LiteLLM's model names carry a provider prefix)."""
    found = [s for s in spans.spans if attr(s, "gen_ai.operation.name") == "chat"]
    assert all(s.name.endswith(FakeOpenAIServer.model) for s in found), [s.name for s in found]
    return sorted(found, key=lambda s: s.start_time or 0)


def attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def messages(span: ReadableSpan, key: str) -> list[dict[str, Any]]:
    value = attr(span, key)
    assert isinstance(value, str), f"{span.name} has no {key}"
    loaded: list[dict[str, Any]] = json.loads(value)
    return loaded


def parts(span: ReadableSpan, key: str, kind: str) -> list[dict[str, Any]]:
    return [p for m in messages(span, key) for p in m["parts"] if p["type"] == kind]


def text(span: ReadableSpan, key: str) -> str:
    return "".join(p["content"] for p in parts(span, key, "text"))


# -- the matrix ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_each_model_call_is_one_chat_span_with_the_servers_usage(
    path: ClientPath, mode: str, captured_spans: CapturedSpans
) -> None:
    server = await run_on(path, mode, script(path), captured_spans)
    route = path.streamed_route if mode == "stream" and path.streamed_route else path.route
    assert server.paths == [route] * 2  # the client's own API
    if path.streamed_route is None:  # streaming only when the runner streams
        assert [bool(r.get("stream")) for r in server.requests] == [mode == "stream"] * 2
    spans = chats(captured_spans)
    assert len(spans) == len(server.requests)
    assert sum(attr(s, "gen_ai.usage.input_tokens") for s in spans) == sum(
        r.prompt_tokens for r in server.served
    )
    assert sum(attr(s, "gen_ai.usage.output_tokens") for s in spans) == sum(
        r.completion_tokens for r in server.served
    )
    assert len(captured_spans.by_name("execute_tool weather")) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_the_spans_carry_the_messages_and_the_tool_arguments_once(
    path: ClientPath, mode: str, captured_spans: CapturedSpans
) -> None:
    server = await run_on(path, mode, script(path), captured_spans)
    first, second = chats(captured_spans)
    assert PROMPT in text(first, "gen_ai.input.messages")
    (call,) = parts(first, "gen_ai.output.messages", "tool_call")
    assert (call["id"], call["name"], call["arguments"]) == ("call_1", "weather", ARGUMENTS)
    sent = json.dumps(server.requests[1])
    if path.history_as_text:  # the framework sends the call and its result as text
        assert RESULT in sent and RESULT in text(second, "gen_ai.input.messages")
    else:
        (history_call,) = parts(second, "gen_ai.input.messages", "tool_call")
        assert (history_call["id"], history_call["arguments"]) == ("call_1", ARGUMENTS)
        (response,) = parts(second, "gen_ai.input.messages", "tool_call_response")
        assert response["id"] == "call_1" and RESULT in str(response["response"])
        # as the client sent it: ADK wraps a text result as {"result": ...}, which goes
        # on the wire as JSON (Gemini) or as that JSON's text (LiteLLM's tool message)
        as_sent = json.dumps(response["response"])
        assert as_sent in sent or json.dumps(as_sent) in sent
    (tool_span,) = captured_spans.by_name("execute_tool weather")
    assert json.loads(attr(tool_span, "gen_ai.tool.call.arguments")) == ARGUMENTS
    assert attr(tool_span, "gen_ai.tool.call.id") == "call_1"
    if path.answers_with_tool is None:
        assert text(second, "gen_ai.output.messages") == ANSWER
    (run_span,) = captured_spans.by_name("invoke_agent forecaster")
    assert text(run_span, "gen_ai.output.messages") == ANSWER


@pytest.mark.parametrize("mode", MODES)
async def test_an_app_span_opened_in_the_tool_nests_under_it(
    path: ClientPath, mode: str, captured_spans: CapturedSpans
) -> None:
    await run_on(path, mode, script(path), captured_spans)
    (app,) = captured_spans.by_name(APP_SPAN)
    assert parent_of(captured_spans, app).name == "execute_tool weather"


async def test_a_streamed_chat_span_knows_its_time_to_first_chunk(
    path: ClientPath, captured_spans: CapturedSpans
) -> None:
    await run_on(path, "stream", script(path), captured_spans)
    for chat in chats(captured_spans):
        first_chunk = attr(chat, "gen_ai.response.time_to_first_chunk")
        assert first_chunk is not None, chat.attributes
        duration = ((chat.end_time or 0) - (chat.start_time or 0)) / 1e9
        assert THINK_S <= first_chunk <= duration


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_500_is_the_clients_own_error_on_the_failed_call_and_its_step(
    path: ClientPath, mode: str, captured_spans: CapturedSpans
) -> None:
    with pytest.raises(Exception) as raised:
        await run_on(path, mode, failing_script(path), captured_spans)
    first, failed = chats(captured_spans)
    assert first.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    error_type = attr(failed, "error.type")
    # the SDK's class: the raised error, or the client error it wraps
    causes = {type(raised.value).__name__, type(raised.value.__cause__).__name__}
    assert error_type == path.error and error_type in causes, (error_type, causes)
    # the host sees what it sees untraced: the same class, the same message
    with FakeOpenAIServer(failing_script(path)) as server:
        traced_agent = path.build(server)
        untraced = CoreAgent("forecaster", traced_agent.runner.base, traced_agent.native)
        with pytest.raises(type(raised.value)) as untraced_raised:
            await run(untraced, mode, PROMPT)
    assert str(untraced_raised.value) == str(raised.value)
    step = parent_of(captured_spans, failed)
    assert step.name.startswith("agent_step")
    assert step.status.status_code is StatusCode.ERROR
    (run_span,) = captured_spans.by_name("invoke_agent forecaster")
    assert run_span.status.status_code is StatusCode.ERROR
