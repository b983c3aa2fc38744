"""What tracing costs on each framework runner, as traced/untraced ratios from one run.

    python benchmarks/frameworks.py            # about 40-80 s on a busy 2-core machine
    python benchmarks/frameworks.py --quick    # a few-second smoke run

For each framework runner (OpenAI Agents SDK, LangGraph, Pydantic AI, smolagents,
Microsoft Agent Framework, ...) the same
two-step calculator run -- the model asks for ``multiply``, the tool runs, the
model answers -- is timed through ``TracingRunner(runner)`` and through the bare
runner, in run mode and in stream mode. The offline models come from the
examples, so each framework's own loop is the whole "framework" cost:

- OpenAI Agents SDK: ``OfflineModel`` from ``examples/openai_agents_agent.py``
  (the SDK's own tracing switched off, as in ``frameworks_openai_agents.py``);
- LangGraph: ``create_react_agent`` over the example's ``ScriptedChatModel``
  script, replayed in a loop (``_LoopingChatModel``) with an ``InMemorySaver``;
- Pydantic AI: the example's ``FunctionModel`` (``offline_reply`` /
  ``offline_stream``);
- smolagents: a ``ToolCallingAgent`` over ``ScriptedModel`` (skipped with a notice
  when smolagents is not installed); its own call is ``agent.run`` in a worker thread.
- Microsoft Agent Framework (imported lazily: skipped with a notice when the
  ``maf`` extra is not installed): the example's ``ScriptedChatClient`` turns in
  loop mode, Agent Framework's own instrumentation on (its default).
- CrewAI: ``ScriptedLLM`` (ReAct text) from ``runners.crewai.testing``, one
  callable turn that asks for the tool until the observation is back. CrewAI
  lives in a venv of its own (it pins ``openai<3``), so each framework is
  imported inside its scenario and skipped with a notice when it is missing.
  CrewAI's own call is a ``Crew`` of the agent and a task, ``kickoff_async``.

Each framework's own call (no runner, untraced) is the baseline of the "runner
untraced/framework" rows.
- Google ADK: an ``LlmAgent`` over the example's ``ScriptedAdkLlm`` turn
  (``examples/adk_agent.py``), imported only when ``google-adk`` is installed
  (a notice is printed otherwise). For ADK the untraced runner is also timed
  against ADK's own call (one ``Runner`` and ``run_async`` on a fresh session),
  the cost of the runner contract itself.

Runners are called directly (``CoreAgent(name, runner, native)`` plus a fresh
``Session`` per run, as the tests do), so no ``Runtime`` cost dilutes the ratio.
Traced runs export through ``overhead.DiscardBackend``: the full OTel span
lifecycle is counted, no exporter. Batches are interleaved
(``overhead._paired``); each ratio is the median of the per-round ratios, shown
with their range, because on a shared machine a single figure can mislead.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
os.environ.pop("OPENAI_API_KEY", None)  # offline, always

from overhead import DISCARD, Row, _paired  # noqa: E402

try:  # Pydantic AI reads the tool's (string) annotations in this module's globals
    from pydantic_ai import RunContext
except ImportError:  # another framework's venv: the scenario is skipped
    RunContext = None  # type: ignore[assignment,misc]

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.agent import Agent as CoreAgent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.core.runner import Runner  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402

PROMPT = "What is 6 times 7?"
REQUESTS = [AgentRequestText(prompt=PROMPT)]
AnyRunner = Runner | TracingRunner  # TracingRunner wraps a Runner without subclassing it
# A fresh session id per run: LangGraph's checkpointer keys threads by session id,
# and a reused thread would grow its history (and the run time) round after round.
_session_ids = itertools.count()


def _openai_agent(runner: AnyRunner) -> CoreAgent:
    from agents import Agent as OpenAIAgent
    from agents import set_tracing_disabled
    from openai_agents_agent import OfflineModel
    from openai_agents_agent import multiply as oa_multiply

    set_tracing_disabled(True)  # the Agents SDK's own tracing: not what is measured here
    native = OpenAIAgent(name="calculator", model=OfflineModel(), tools=[oa_multiply])
    return CoreAgent("calculator", runner, native)


def _openai_runner() -> Runner:
    from runnertrace.runners.openai_agents import OpenAIRunner

    return OpenAIRunner()


def _langgraph_agent(runner: AnyRunner) -> CoreAgent:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent
    from langgraph_agent import multiply as lg_multiply
    from langgraph_agent import scripted_model

    from runnertrace.runners.langgraph.testing import ScriptedChatModel

    class _LoopingChatModel(ScriptedChatModel):
        """The example's two-turn script, started over when used up, for thousands of runs."""

        def _next(self, messages: list[BaseMessage]) -> Any:
            if self._position >= len(self.responses):
                self._position = 0
                self._calls.clear()  # recorded inputs would otherwise pile up
            return super()._next(messages)

    model = _LoopingChatModel(responses=scripted_model().responses)
    with warnings.catch_warnings():
        # Deprecated in favour of langchain.agents.create_agent (needs full `langchain`).
        warnings.simplefilter("ignore", DeprecationWarning)
        graph = create_react_agent(
            model, [lg_multiply], checkpointer=InMemorySaver(), name="calculator"
        )
    return CoreAgent("calculator", runner, graph)


def _langgraph_runner() -> Runner:
    from runnertrace.runners.langgraph import LangGraphRunner

    return LangGraphRunner()


def _pydantic_ai_agent(runner: AnyRunner) -> CoreAgent:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai_agent import offline_reply, offline_stream

    model = FunctionModel(offline_reply, stream_function=offline_stream, model_name="offline")
    native: PydanticAgent[dict[str, Any], str] = PydanticAgent(
        model, name="calculator", deps_type=dict
    )

    @native.tool
    def multiply(ctx: RunContext[dict[str, Any]], a: int, b: int) -> int:
        """Multiply two whole numbers."""
        return a * b

    return CoreAgent("calculator", runner, native)


def _smolagents_native() -> Any:
    """A smolagents ``ToolCallingAgent`` over the scripted model, replayed in a loop.

    smolagents is imported here, not at the top: it may live in a venv of its own.
    """
    from smolagents import ToolCallingAgent, tool
    from smolagents.monitoring import LogLevel

    from runnertrace.runners.smolagents.testing import ScriptedModel, calls

    class Looping(ScriptedModel):  # type: ignore[misc]
        def _next(self, messages: list[Any]) -> Any:
            if len(self.received) >= len(self.turns):
                self.received.clear()
            return super()._next(messages)

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two whole numbers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        return a * b

    answer = calls(("final_answer", {"answer": "The product is 42."}), prefix="fin")
    model = Looping([calls(("multiply", {"a": 6, "b": 7})), answer], model_id="offline")
    return ToolCallingAgent(
        tools=[multiply], model=model, name="calculator", verbosity_level=LogLevel.OFF
    )


def _smolagents_agent(runner: AnyRunner) -> CoreAgent:
    return CoreAgent("calculator", runner, _smolagents_native())


def _smolagents_runner() -> Runner:
    from runnertrace.runners.smolagents import SmolagentsRunner

    return SmolagentsRunner()


def _maf_agent(runner: AnyRunner) -> CoreAgent:
    from agent_framework import Agent as MAFAgent
    from maf_agent import ask_for_the_tool, multiply, state_the_result

    from runnertrace.runners.maf.testing import ScriptedChatClient

    client = ScriptedChatClient([ask_for_the_tool, state_the_result], model="offline", loop=True)
    return CoreAgent("calculator", runner, MAFAgent(client, name="calculator", tools=[multiply]))


def _maf_runner() -> Runner:
    from runnertrace.runners.maf import MAFRunner  # the `maf` extra, maybe not installed

    return MAFRunner()


def _pydantic_ai_runner() -> Runner:
    from runnertrace.runners.pydantic_ai import PydanticAIRunner

    return PydanticAIRunner()


def _crewai_native() -> Any:
    """The calculator as a CrewAI agent whose ReAct model never runs out of turns."""
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    from crewai import Agent as CrewAgent
    from crewai.tools import tool

    from runnertrace.runners.crewai.testing import ScriptedLLM, action, final

    @tool("multiply")
    def multiply(a: int, b: int) -> int:
        """Multiply two whole numbers."""
        return a * b

    def turn(messages: Any) -> str:  # the tool's observation makes the list longer
        return final("6 times 7 is 42.") if len(messages) > 2 else action("multiply", a=6, b=7)

    return CrewAgent(
        role="calculator",
        goal="Answer arithmetic questions.",
        backstory="You are careful.",
        llm=ScriptedLLM([turn] * 1_000_000),
        tools=[multiply],
    )


def _crewai_agent(runner: AnyRunner) -> CoreAgent:
    return CoreAgent("calculator", runner, _crewai_native())


def _crewai_runner() -> Runner:
    from runnertrace.runners.crewai import CrewAIRunner

    return CrewAIRunner()


def _crewai_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    """CrewAI's own call per mode: what a user would write for one run without us."""
    from crewai import Crew, Task

    native = agent.native

    def crew(stream: bool) -> Any:
        task = Task(description=PROMPT, expected_output="The answer.", agent=native)
        return Crew(agents=[native], tasks=[task], verbose=False, stream=stream)

    async def run() -> None:
        await crew(False).kickoff_async()

    async def stream() -> None:
        async for _ in await crew(True).kickoff_async():
            pass

    return {"run": run, "stream": stream}


def _adk_native() -> Any:
    from adk_agent import multiply as adk_multiply
    from adk_agent import offline_turn
    from google.adk.agents import LlmAgent

    from runnertrace.runners.adk.testing import ScriptedAdkLlm

    model = ScriptedAdkLlm(model="offline", script=[offline_turn], loop=True)
    return LlmAgent(name="calculator", model=model, tools=[adk_multiply])


def _adk_agent(runner: AnyRunner) -> CoreAgent:
    return CoreAgent("calculator", runner, _adk_native())


def _adk_runner() -> Runner:
    from runnertrace.runners.adk import GoogleADKRunner

    return GoogleADKRunner()


def _adk_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    """ADK's own call, as an application without runnertrace makes it: one runner, the
    message built and a fresh session made per run, ``run_async`` (SSE for the stream)."""
    from google.adk.agents import RunConfig
    from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    adk = InMemoryRunner(agent=agent.native, app_name="calculator")

    def mode(config: Any) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            # per request, as an application turns what it was asked into ADK's message
            message = types.Content(role="user", parts=[types.Part(text=PROMPT)])
            session_id = f"s{next(_session_ids)}"
            await adk.session_service.create_session(
                app_name="calculator", user_id="u", session_id=session_id
            )
            stream = adk.run_async(
                user_id="u", session_id=session_id, new_message=message, run_config=config
            )
            async for _ in stream:
                pass

        return call

    return {"run": mode(RunConfig()), "stream": mode(RunConfig(streaming_mode=StreamingMode.SSE))}


FRAMEWORKS: list[tuple[str, Callable[[AnyRunner], CoreAgent], Callable[[], Runner]]] = [
    ("openai-agents", _openai_agent, _openai_runner),
    ("langgraph", _langgraph_agent, _langgraph_runner),
    ("pydantic-ai", _pydantic_ai_agent, _pydantic_ai_runner),
    ("smolagents", _smolagents_agent, _smolagents_runner),
    ("maf", _maf_agent, _maf_runner),
    ("crewai", _crewai_agent, _crewai_runner),
    ("google-adk", _adk_agent, _adk_runner),
]


# The framework's own call, untraced and without our runner: the baseline of the
# "runner untraced / framework" rows (issue 11 item 7: the goal is <= 1.03x).
def _openai_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    from agents import Runner as SdkRunner

    async def run() -> None:
        await SdkRunner.run(agent.native, PROMPT)

    async def stream() -> None:
        async for _ in SdkRunner.run_streamed(agent.native, PROMPT).stream_events():
            pass

    return {"run": run, "stream": stream}


def _langgraph_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    from langchain_core.messages import HumanMessage

    def call() -> tuple[dict[str, Any], dict[str, Any]]:
        config = {"configurable": {"thread_id": f"s{next(_session_ids)}"}}
        return {"messages": [HumanMessage(content=PROMPT)]}, config

    async def run() -> None:
        await agent.native.ainvoke(*call())

    async def stream() -> None:
        graph_input, config = call()
        modes = ["messages", "updates"]
        async for _ in agent.native.astream(graph_input, config, stream_mode=modes, subgraphs=True):
            pass

    return {"run": run, "stream": stream}


def _pydantic_ai_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    async def run() -> None:
        await agent.native.run(PROMPT, deps={})

    async def stream() -> None:
        async with agent.native.run_stream_events(PROMPT, deps={}) as events:
            async for _ in events:
                pass

    return {"run": run, "stream": stream}


def _smolagents_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    """smolagents' own ``agent.run`` in a worker thread, as the runner runs it (an async
    app must not block its loop on the synchronous call), with its Live display quiet."""
    from rich.console import Console
    from smolagents.monitoring import AgentLogger, LogLevel

    native = agent.native
    native.logger = AgentLogger(level=LogLevel.OFF, console=Console(quiet=True))

    async def run() -> None:
        native.stream_outputs = False
        await asyncio.to_thread(native.run, PROMPT)

    async def stream() -> None:
        native.stream_outputs = True
        await asyncio.to_thread(lambda: list(native.run(PROMPT, stream=True)))

    return {"run": run, "stream": stream}


def _maf_own(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    native = agent.native  # a fresh AgentSession per call, as the runner makes one per session

    async def run() -> None:
        await native.run(PROMPT, session=native.create_session())

    async def stream() -> None:
        async for _ in native.run(PROMPT, stream=True, session=native.create_session()):
            pass

    return {"run": run, "stream": stream}


OWN_CALLS: dict[str, Callable[[CoreAgent], dict[str, Callable[[], Awaitable[None]]]]] = {
    "openai-agents": _openai_own,
    "langgraph": _langgraph_own,
    "pydantic-ai": _pydantic_ai_own,
    "smolagents": _smolagents_own,
    "maf": _maf_own,
    "crewai": _crewai_own,
    "google-adk": _adk_own,
}


def _row(label: str, base: float, other: float, ratios: list[float]) -> Row:
    detail = (
        f"{base * 1e6:.0f} -> {other * 1e6:.0f} us/run ({(other - base) * 1e6:+.0f} us), "
        f"range {min(ratios):.2f}..{max(ratios):.2f} over {len(ratios)} rounds"
    )
    return Row(label, statistics.median(ratios), "x", detail)


async def _check(name: str, agent: CoreAgent) -> None:
    """Refuse to time a run that is not the two-step calculator run (a broken script is fast)."""
    reply = await agent.runner.run(agent, Session(f"s{next(_session_ids)}"), REQUESTS)
    if "42" not in str(reply):
        raise SystemExit(f"{name}: unexpected reply {reply!r}; the offline model is not working")


def _modes(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    """One run of ``agent`` per call, in each mode, each on a fresh session."""

    async def run() -> None:
        await agent.runner.run(agent, Session(f"s{next(_session_ids)}"), REQUESTS)

    async def stream() -> None:
        async for _ in agent.runner.stream(agent, Session(f"s{next(_session_ids)}"), REQUESTS):
            pass

    return {"run": run, "stream": stream}


async def measure(rounds: int, batch: int) -> list[Row]:
    rows: list[Row] = []
    for name, build, runner in FRAMEWORKS:
        try:
            plain_agent, traced_agent = build(runner()), build(TracingRunner(runner(), DISCARD))
        except ImportError as exc:
            print(f"({name}: skipped, not installed in this venv: {exc.name or exc})")
            continue
        await _check(name, plain_agent)
        await _check(name, traced_agent)
        plain, traced = _modes(plain_agent), _modes(traced_agent)
        own = OWN_CALLS[name](build(runner())) if name in OWN_CALLS else None
        for mode in ("run", "stream"):
            b, t, ratios = await _paired(plain[mode], traced[mode], rounds, batch)
            rows.append(_row(f"{name} traced/untraced, {mode}", b, t, ratios))
            if own is not None:
                b, t, ratios = await _paired(own[mode], plain[mode], rounds, batch)
                rows.append(_row(f"{name} runner untraced/framework, {mode}", b, t, ratios))
    return rows


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    rows = asyncio.run(measure(rounds=3 if quick else 9, batch=5 if quick else 20))
    width = max(len(r.label) for r in rows)
    print(f"runnertrace tracing overhead per framework (python {sys.version.split()[0]})")
    print(f"{'measure'.ljust(width)}  {'median':>7}  detail")
    print("-" * (width + 80))
    for row in rows:
        print(f"{row.label.ljust(width)}  {row.value:6.3f}{row.unit}  {row.detail}")
    print(f"\ntook {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
