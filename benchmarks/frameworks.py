"""What tracing costs on each framework runner, as traced/untraced ratios from one run.

    python benchmarks/frameworks.py            # about 40-80 s on a busy 2-core machine
    python benchmarks/frameworks.py --quick    # a few-second smoke run

For each framework runner (OpenAI Agents SDK, LangGraph, Pydantic AI) the same
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
import importlib.util
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

from agents import Agent as OpenAIAgent  # noqa: E402
from agents import set_tracing_disabled  # noqa: E402
from langchain_core.messages import BaseMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph_agent import multiply as lg_multiply  # noqa: E402
from langgraph_agent import scripted_model  # noqa: E402
from openai_agents_agent import OfflineModel  # noqa: E402
from openai_agents_agent import multiply as oa_multiply  # noqa: E402
from overhead import DISCARD, Row, _paired  # noqa: E402
from pydantic_ai import Agent as PydanticAgent  # noqa: E402
from pydantic_ai import RunContext  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai_agent import offline_reply, offline_stream  # noqa: E402

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core.agent import Agent as CoreAgent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.core.runner import Runner  # noqa: E402
from runnertrace.core.session import Session  # noqa: E402
from runnertrace.runners.langgraph import LangGraphRunner  # noqa: E402
from runnertrace.runners.langgraph_testing import ScriptedChatModel  # noqa: E402
from runnertrace.runners.openai_agents import OpenAIRunner  # noqa: E402
from runnertrace.runners.pydantic_ai import PydanticAIRunner  # noqa: E402

PROMPT = "What is 6 times 7?"
REQUESTS = [AgentRequestText(prompt=PROMPT)]
AnyRunner = Runner | TracingRunner  # TracingRunner wraps a Runner without subclassing it
# A fresh session id per run: LangGraph's checkpointer keys threads by session id,
# and a reused thread would grow its history (and the run time) round after round.
_session_ids = itertools.count()


class _LoopingChatModel(ScriptedChatModel):
    """The example's two-turn script, started over when used up, for thousands of runs."""

    def _next(self, messages: list[BaseMessage]) -> Any:
        if self._position >= len(self.responses):
            self._position = 0
            self._calls.clear()  # recorded inputs would otherwise pile up for the whole benchmark
        return super()._next(messages)


def _openai_agent(runner: AnyRunner) -> CoreAgent:
    native = OpenAIAgent(name="calculator", model=OfflineModel(), tools=[oa_multiply])
    return CoreAgent("calculator", runner, native)


def _langgraph_agent(runner: AnyRunner) -> CoreAgent:
    model = _LoopingChatModel(responses=scripted_model().responses)
    with warnings.catch_warnings():
        # Deprecated in favour of langchain.agents.create_agent (needs full `langchain`).
        warnings.simplefilter("ignore", DeprecationWarning)
        graph = create_react_agent(
            model, [lg_multiply], checkpointer=InMemorySaver(), name="calculator"
        )
    return CoreAgent("calculator", runner, graph)


def _pydantic_ai_agent(runner: AnyRunner) -> CoreAgent:
    model = FunctionModel(offline_reply, stream_function=offline_stream, model_name="offline")
    native: PydanticAgent[dict[str, Any], str] = PydanticAgent(
        model, name="calculator", deps_type=dict
    )

    @native.tool
    def multiply(ctx: RunContext[dict[str, Any]], a: int, b: int) -> int:
        """Multiply two whole numbers."""
        return a * b

    return CoreAgent("calculator", runner, native)


def _adk_native() -> Any:
    from adk_agent import multiply as adk_multiply
    from adk_agent import offline_turn
    from google.adk.agents import LlmAgent

    from runnertrace.runners.adk_testing import ScriptedAdkLlm

    model = ScriptedAdkLlm(model="offline", script=[offline_turn], loop=True)
    return LlmAgent(name="calculator", model=model, tools=[adk_multiply])


def _adk_agent(runner: AnyRunner) -> CoreAgent:
    return CoreAgent("calculator", runner, _adk_native())


def _adk_runner() -> Runner:
    from runnertrace.runners.adk import GoogleADKRunner

    return GoogleADKRunner()


def _adk_own() -> dict[str, Callable[[], Awaitable[None]]]:
    """ADK's own call, as an application without runnertrace makes it: one runner, the
    message built and a fresh session made per run, ``run_async`` (SSE for the stream)."""
    from google.adk.agents import RunConfig
    from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    adk = InMemoryRunner(agent=_adk_native(), app_name="calculator")

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
    ("openai-agents", _openai_agent, OpenAIRunner),
    ("langgraph", _langgraph_agent, LangGraphRunner),
    ("pydantic-ai", _pydantic_ai_agent, PydanticAIRunner),
]
if importlib.util.find_spec("google.adk") is not None:
    FRAMEWORKS.append(("google-adk", _adk_agent, _adk_runner))
else:
    print("google-adk is not installed: its rows are skipped (pip install 'runnertrace[adk]')")


def _modes(agent: CoreAgent) -> dict[str, Callable[[], Awaitable[None]]]:
    """One run of ``agent`` per call, in each mode, each on a fresh session."""

    async def run() -> None:
        await agent.runner.run(agent, Session(f"s{next(_session_ids)}"), REQUESTS)

    async def stream() -> None:
        async for _ in agent.runner.stream(agent, Session(f"s{next(_session_ids)}"), REQUESTS):
            pass

    return {"run": run, "stream": stream}


async def _check(name: str, agent: CoreAgent) -> None:
    """Refuse to time a run that is not the two-step calculator run (a broken script is fast)."""
    reply = await agent.runner.run(agent, Session(f"s{next(_session_ids)}"), REQUESTS)
    if "42" not in str(reply):
        raise SystemExit(f"{name}: unexpected reply {reply!r}; the offline model is not working")


async def measure(rounds: int, batch: int) -> list[Row]:
    rows: list[Row] = []
    for name, build, runner in FRAMEWORKS:
        plain_agent, traced_agent = build(runner()), build(TracingRunner(runner(), DISCARD))
        await _check(name, plain_agent)
        await _check(name, traced_agent)
        plain, traced = _modes(plain_agent), _modes(traced_agent)
        for mode in ("run", "stream"):
            b, t, ratios = await _paired(plain[mode], traced[mode], rounds, batch)
            detail = (
                f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run ({(t - b) * 1e6:+.0f} us), "
                f"range {min(ratios):.2f}..{max(ratios):.2f} over {len(ratios)} rounds"
            )
            rows.append(
                Row(f"{name} traced/untraced, {mode}", statistics.median(ratios), "x", detail)
            )
        if name == "google-adk":
            own = _adk_own()
            for mode in ("run", "stream"):
                b, t, ratios = await _paired(own[mode], plain[mode], rounds, batch)
                detail = f"{b * 1e6:.0f} -> {t * 1e6:.0f} us/run, target <= 1.03x"
                label = f"{name} runner untraced / ADK's own call, {mode}"
                rows.append(Row(label, statistics.median(ratios), "x", detail))
    return rows


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)
    set_tracing_disabled(True)  # the Agents SDK's own tracing: not what is measured here
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
