"""``execute_tool`` spans time the tool in CrewAI (the other runners: test_tool_timing.py).

CrewAI lives in its own venv (.ci/extra-crewai). The ReAct model asks for ``weather``
once per city, one ``Action`` per turn, then answers; once promptly, once pausing
0.3 s after its streamed ``Action`` text. The tool's span must bracket the tool's
own run within 1 ms, sit under the agent's step, and end before it.
"""

from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # before CrewAI is imported
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")
pytest.importorskip("crewai", reason="the crewai extra lives in its own venv (.ci/extra-crewai)")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from crewai import Agent as CrewAgent  # noqa: E402
from crewai.tools import tool  # noqa: E402
from tests.fidelity_helpers import MODES, run  # noqa: E402
from tests.tool_timing_helpers import (  # noqa: E402
    CITIES,
    LINGERS,
    ToolClock,
    assert_tool_spans_time_the_tool,
)

from runnertrace import TracingRunner  # noqa: E402
from runnertrace.core import Session  # noqa: E402
from runnertrace.core.agent import Agent  # noqa: E402
from runnertrace.core.models import AgentRequestText  # noqa: E402
from runnertrace.runners.crewai import CrewAIRunner  # noqa: E402
from runnertrace.runners.crewai.testing import ScriptedLLM, action, final  # noqa: E402
from runnertrace.testing import CapturedSpans  # noqa: E402


@pytest.fixture(autouse=True)
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """CrewAI writes under $HOME and phones home unless told not to."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CREWAI_STORAGE_DIR", f"{tmp_path}/crewai")
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")


def planner(clock: ToolClock, linger: float) -> Agent:
    @tool("weather")
    def weather(city: str) -> str:
        """Look up the weather."""
        return clock.run(city)

    turns = [*(action("weather", city=city) for city in CITIES), final("Sunny.")]
    native = CrewAgent(
        role="planner",
        goal="Plan trips.",
        backstory="You plan trips.",
        llm=ScriptedLLM(turns, pause_after_tool_calls=linger),
        tools=[weather],
    )
    return Agent("planner", TracingRunner(CrewAIRunner(), capture_content=True), native)


@pytest.mark.parametrize("linger", LINGERS, ids=["prompt", "lingering"])
@pytest.mark.parametrize("mode", MODES)
async def test_execute_tool_spans_time_the_tool(
    mode: str, linger: float, captured_spans: CapturedSpans
) -> None:
    async def scenario(clock: ToolClock) -> None:
        await run(planner(clock, linger), mode)

    await assert_tool_spans_time_the_tool(captured_spans, scenario, step="planner")


async def test_a_slow_stream_consumer_does_not_move_the_tool_spans(
    captured_spans: CapturedSpans,
) -> None:
    """The crew runs in its own thread, ahead of a reader taking 2 ms over each event."""

    async def scenario(clock: ToolClock) -> None:
        agent = planner(clock, 0.0)
        requests = [AgentRequestText(prompt="Trip to Oslo?")]
        async for _ in agent.runner.stream(agent, Session("s1"), requests):
            await asyncio.sleep(0.002)

    await assert_tool_spans_time_the_tool(captured_spans, scenario, step="planner")
