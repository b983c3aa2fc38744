"""Every runner, as the contract suite (tests/contract/test_runner_contract.py) drives it.

A case builds one agent on its framework's own offline fake model: the model asks
for ``multiply(6, 7)``, the tool runs, the model answers. It also says how to
declare a hook of the framework's own (one a user would write) and which mapping
function to break for the fault-injection tests. A new runner gets the whole
contract by being added to :data:`CASES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from runnertrace.core.agent import Agent

Fired = list[str]
"""Where a declared hook records each time it fires."""


@dataclass(frozen=True)
class RunnerCase:
    """One runner under the contract.

    ``make(runner_wrapper, fired)`` returns a fresh agent whose runner is
    ``runner_wrapper(<the framework runner>)``; with ``fired`` it also declares a
    user hook (a run option or the native agent's own) that appends to it.
    ``fires`` is how often that hook fires in one run. ``fault`` names the mapping
    function the fault tests break: ``(module path, attribute path)``, a function
    the mapping calls once per model call in a traced run.
    """

    name: str
    module: str
    make: Callable[[Callable[[Any], Any], Fired | None], Agent]
    fires: int
    fault: tuple[str, str]
    needs: str = ""  # the framework a case skips without (each extra's venv has its own)
    untraced_installs_nothing: bool = True
    # The framework runs in a worker thread that finishes its step after a consumer
    # stops: an event it reports between the tracing layer ending the run and the
    # runner closing is flagged by the tracing layer (tracing/state.py) as late.
    worker_thread: bool = False

    def runner_module(self) -> ModuleType:
        if self.needs:
            pytest.importorskip(self.needs)
        return importlib.import_module(self.module)


# -- native ----------------------------------------------------------------------------------
def _native(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from runnertrace.runners.native import Agent as NativeAgent
    from runnertrace.runners.native import NativeRunner
    from runnertrace.runners.native.scripted import ScriptedLlm

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        left, op, right = expression.split()
        return str(int(left) * int(right)) if op == "*" else "unsupported"

    native = NativeAgent(ScriptedLlm(), tools=[calculator], name="calc")
    agent = Agent("calc", wrap(NativeRunner()), native)
    if fired is not None:
        agent.declare_run_options(max_steps=5)  # its one run option; no hooks to declare
    return agent


# -- Pydantic AI -----------------------------------------------------------------------------
def _pydantic_ai(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.capabilities import Hooks
    from pydantic_ai.models.test import TestModel

    from runnertrace.runners.pydantic_ai import PydanticAIRunner

    def multiply(a: int, b: int) -> int:
        """Multiply two whole numbers."""
        return a * b

    model = TestModel(custom_output_text="6 x 7 = 42")
    native = PydanticAgent(model, name="calc", tools=[multiply])
    agent = Agent("calc", wrap(PydanticAIRunner()), native)
    if fired is not None:
        hooks: Hooks[Any] = Hooks()

        @hooks.on.before_model_request
        async def before_model(ctx: Any, request_context: Any) -> Any:
            fired.append("model")
            return request_context

        agent.declare_run_options(capabilities=[hooks])
    return agent


# -- OpenAI Agents ---------------------------------------------------------------------------
def _openai_agents(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from agents import Agent as SdkAgent
    from agents import RunHooks, function_tool
    from agents.testing import ModelStep, assistant_message, function_call

    from runnertrace.runners.openai_agents import OpenAIRunner
    from runnertrace.runners.openai_agents.testing import FakeModel

    @function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two numbers."""
        return a * b

    steps = [
        ModelStep(output=[function_call("multiply", {"a": 6, "b": 7}, call_id="call_1")]),
        ModelStep(output=[assistant_message("6 x 7 = 42", item_id="msg_1")]),
    ]
    native = SdkAgent(name="calc", model=FakeModel(steps), tools=[multiply])
    agent = Agent("calc", wrap(OpenAIRunner()), native)
    if fired is not None:

        class Counting(RunHooks[Any]):
            async def on_llm_start(self, *args: Any) -> None:
                fired.append("model")

        agent.declare_run_options(hooks=Counting())
    return agent


# -- LangGraph -------------------------------------------------------------------------------
def _langgraph(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    from runnertrace.runners.langgraph import LangGraphRunner
    from runnertrace.runners.langgraph.testing import ScriptedChatModel

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    turns = [
        AIMessage(
            content="", tool_calls=[{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "c1"}]
        ),
        AIMessage(content="6 x 7 = 42"),
    ]
    graph = create_react_agent(ScriptedChatModel(responses=turns), [multiply], name="calc")
    agent = Agent("calc", wrap(LangGraphRunner()), graph)
    if fired is not None:

        class Counting(BaseCallbackHandler):
            run_inline = True

            def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
                fired.append("model")

        agent.declare_run_options(config={"callbacks": [Counting()]})
    return agent


# -- Google ADK ------------------------------------------------------------------------------
def _adk(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from google.adk.agents import LlmAgent
    from google.adk.plugins import BasePlugin

    from runnertrace.runners.adk import GoogleADKRunner
    from runnertrace.runners.adk.testing import ScriptedAdkLlm, answer, call

    def multiply(a: int, b: int) -> int:
        """Multiply two whole numbers."""
        return a * b

    script = [call("multiply", {"a": 6, "b": 7}, "call_1"), answer("6 x 7 = 42")]
    native = LlmAgent(
        name="calc", model=ScriptedAdkLlm(model="fake-llm", script=script), tools=[multiply]
    )
    agent = Agent("calc", wrap(GoogleADKRunner()), native)
    if fired is not None:

        class Counting(BasePlugin):
            async def before_model_callback(self, **kwargs: Any) -> None:
                fired.append("model")

        agent.declare_run_options(plugins=[Counting("counting")])
    return agent


# -- Microsoft Agent Framework ---------------------------------------------------------------
def _maf(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from agent_framework import Agent as MAFAgent
    from agent_framework import chat_middleware, tool

    from runnertrace.runners.maf import MAFRunner
    from runnertrace.runners.maf.testing import ScriptedChatClient, call, say

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two whole numbers."""
        return a * b

    client = ScriptedChatClient([call(("call_1", "multiply", {"a": 6, "b": 7})), say("6 x 7 = 42")])
    native = MAFAgent(client, "Be exact.", name="calc", tools=[multiply])
    agent = Agent("calc", wrap(MAFRunner()), native)
    if fired is not None:

        @chat_middleware
        async def counting(context: Any, call_next: Any) -> None:
            fired.append("model")
            await call_next()

        agent.declare_run_options(middleware=[counting])
    return agent


# -- smolagents ------------------------------------------------------------------------------
def _smolagents(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from smolagents import ToolCallingAgent, tool

    from runnertrace.runners.smolagents import SmolagentsRunner
    from runnertrace.runners.smolagents.testing import ScriptedModel, calls

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two whole numbers.

        Args:
            a: the first factor
            b: the second factor
        """
        return a * b

    turns = [
        calls(("multiply", {"a": 6, "b": 7})),
        calls(("final_answer", {"answer": "6 x 7 = 42"}), prefix="fin"),
    ]
    callbacks = [lambda step, **kw: fired.append("step")] if fired is not None else None
    native = ToolCallingAgent(
        tools=[multiply], model=ScriptedModel(turns), name="calc", step_callbacks=callbacks
    )
    return Agent("calc", wrap(SmolagentsRunner()), native)


# -- CrewAI ----------------------------------------------------------------------------------
def _crewai(wrap: Callable[[Any], Any], fired: Fired | None) -> Agent:
    from crewai import Agent as CrewAgent
    from crewai.tools import tool

    from runnertrace.runners.crewai import CrewAIRunner
    from runnertrace.runners.crewai.testing import ScriptedLLM, action, final

    @tool("multiply")
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    native = CrewAgent(
        role="calc",
        goal="Answer arithmetic questions.",
        backstory="You are precise.",
        llm=ScriptedLLM([action("multiply", a=6, b=7), final("6 x 7 = 42")]),
        tools=[multiply],
    )
    agent = Agent("calc", wrap(CrewAIRunner()), native)
    if fired is not None:

        def counting(inputs: Any) -> Any:
            fired.append("kickoff")
            return inputs

        agent.declare_run_options(before_kickoff_callbacks=[counting])
    return agent


CASES = [
    RunnerCase(
        "native",
        "runnertrace.runners.native.runner",
        make=_native,
        fires=0,
        fault=("runnertrace.runners.native.agent", "_semconv_message"),
        untraced_installs_nothing=False,  # the loop is ours: it makes events either way
    ),
    RunnerCase(
        "pydantic_ai",
        "runnertrace.runners.pydantic_ai",
        needs="pydantic_ai",
        make=_pydantic_ai,
        fires=2,
        fault=("runnertrace.runners.pydantic_ai.mapper", "request_fields"),
    ),
    RunnerCase(
        "openai_agents",
        "runnertrace.runners.openai_agents",
        needs="agents",
        make=_openai_agents,
        fires=2,
        fault=("runnertrace.runners.openai_agents.mapper", "request_fields"),
    ),
    RunnerCase(
        "langgraph",
        "runnertrace.runners.langgraph",
        needs="langgraph",
        make=_langgraph,
        fires=2,
        fault=("runnertrace.runners.langgraph.mapper", "request_fields"),
    ),
    RunnerCase(
        "adk",
        "runnertrace.runners.adk",
        needs="google.adk",
        make=_adk,
        fires=2,
        fault=("runnertrace.runners.adk.mapper", "request_fields"),
    ),
    RunnerCase(
        "maf",
        "runnertrace.runners.maf",
        needs="agent_framework",
        make=_maf,
        fires=2,
        fault=("runnertrace.runners.maf.mapper", "request_fields"),
    ),
    RunnerCase(
        "smolagents",
        "runnertrace.runners.smolagents",
        needs="smolagents",
        make=_smolagents,
        fires=2,
        fault=("runnertrace.runners.smolagents.mapper", "request_fields"),
        worker_thread=True,
    ),
    RunnerCase(
        "crewai",
        "runnertrace.runners.crewai",
        make=_crewai,
        fires=1,
        fault=("runnertrace.runners.crewai.mapper", "request_fields"),
        worker_thread=True,
        needs="crewai",
    ),
]
"""Every runner the contract covers; add a runner here and it gets the whole suite."""
