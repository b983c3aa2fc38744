"""Each example in ``examples/`` runs as a user would run it, and does what it says.

Every example runs in a subprocess (the same interpreter), from a copy in a
temporary directory that is also its working directory. The per-user trace
store it writes lives under this test's own ``XDG_DATA_HOME`` (conftest sets
one per test; the subprocess inherits it), so it is this test's alone. The
tests check the printed output and then read the store back.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from runnertrace.exporters.local_store import SpanStore, StoredSpan, span_tree

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STORE = Path(".runnertrace") / "traces.db"  # what yaml_config/runnertrace.yaml names


def user_store() -> Path:
    """The default, per-user store of this test (see conftest)."""
    return Path(os.environ["XDG_DATA_HOME"]) / "runnertrace" / "traces.db"


def run_example(
    source: Path, workdir: Path, script: str | None = None, args: list[str] | None = None
) -> str:
    """Copy ``source`` (a file or a directory) into ``workdir`` and run it there."""
    workdir.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(
            source, workdir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
        )
        target = workdir / (script or "app.py")
    else:
        target = workdir / source.name
        shutil.copy(source, target)
    done = subprocess.run(
        [sys.executable, str(target), *(args or [])],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{source.name} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def tree(spans: list[StoredSpan]) -> list[str]:
    """The span tree as indented names, children in start order."""
    return ["  " * depth + span.name for span, depth in span_tree(spans)]


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NATIVE_TWO_TOOL_STEPS = [
    "invoke_agent {agent}",
    "  agent_step {agent}",
    "    chat scripted-1",
    "    execute_tool calculator",
    "  agent_step {agent}",
    "    chat scripted-1",
    "    execute_tool calculator",
    "  agent_step {agent}",
    "    chat scripted-1",
]


def expected_native_tree(agent: str) -> list[str]:
    return [line.format(agent=agent) for line in NATIVE_TWO_TOOL_STEPS]


def test_quickstart_traces_the_native_agent_to_the_local_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_example(EXAMPLES / "quickstart.py", tmp_path)

    assert "answer:   The answer is 7006669." in out
    assert "runnertrace show last" in out
    store = SpanStore(user_store())
    runs = store.list_runs(10)
    assert len(runs) == 1
    run = runs[0]
    assert f"9 spans in trace {run.trace_id}" in out
    spans = store.get_trace(run.trace_id)
    assert tree(spans) == expected_native_tree("quickstart")
    assert all(s.status_code != "ERROR" for s in spans)
    assert (run.agent, run.framework, run.mode, run.status) == ("quickstart", "native", "run", "ok")
    tools = [s for s in spans if s.span_type == "tool"]
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == ["calculator", "calculator"]
    # Content capture is off by default: the question is not on any span.
    assert not any("1234" in str(s.attributes) for s in spans)

    # The hint it prints works: `runnertrace show last` draws this trace.
    from runnertrace.cli import main

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["show", "last"]) == 0
    shown = capsys.readouterr().out
    assert run.trace_id in shown
    assert "execute_tool calculator" in shown


def test_custom_runner_gets_full_spans_streaming_and_a_run_span_in_run_mode(
    tmp_path: Path,
) -> None:
    out = run_example(EXAMPLES / "custom_runner.py", tmp_path)

    answer = "span: one timed operation in a trace; trace: the tree of spans of one run"
    assert out.count(f"answer: {answer}") == 2  # the same answer in both modes
    store = SpanStore(user_store())
    runs = {run.mode: run for run in store.list_runs(10)}
    assert set(runs) == {"stream", "run"}
    assert all(run.framework == "glossary" and run.status == "ok" for run in runs.values())

    streamed = store.get_trace(runs["stream"].trace_id)
    assert tree(streamed) == [
        "invoke_agent glossary",
        "  agent_step explain",
        "    execute_tool glossary_lookup",
        "    chat glossary-1",
    ]
    message = next(s for s in streamed if s.span_type == "message")
    assert message.attributes["runnertrace.delta.count"] == len(answer.split(" "))
    assert message.attributes["gen_ai.request.model"] == "glossary-1"

    ran = store.get_trace(runs["run"].trace_id)
    assert tree(ran) == ["invoke_agent glossary"]
    assert ran[0].attributes["runnertrace.reply.type"] == "text"
    assert f"trace {runs['run'].trace_id} (run mode, 1 span):" in out


def test_yaml_config_turns_tracing_on_without_code(tmp_path: Path) -> None:
    with_config = tmp_path / "with_config"
    out = run_example(EXAMPLES / "yaml_config", with_config)

    assert "answer:   The answer is 400." in out
    assert "tracing:  on from the config, to local" in out
    store = SpanStore(with_config / STORE)
    runs = store.list_runs(10)
    assert len(runs) == 1  # written by the exit-time flush: the app never flushes
    assert tree(store.get_trace(runs[0].trace_id)) == expected_native_tree("yaml-app")

    # The same app without the config file runs untraced and writes no store.
    without = tmp_path / "without_config"
    out = run_example(EXAMPLES / "yaml_config" / "app.py", without)
    assert "answer:   The answer is 400." in out
    assert "tracing:  off" in out
    assert not (without / ".runnertrace").exists() and not user_store().exists()


def test_redaction_keeps_planted_secrets_out_of_the_store(tmp_path: Path) -> None:
    example = load_module(EXAMPLES / "redaction.py")
    planted = [example.API_KEY, example.EMAIL, example.CUSTOMER]

    out = run_example(EXAMPLES / "redaction.py", tmp_path)

    # The app's own reply still carries them (the model echoes the prompt),
    # so they really went through the traced run.
    reply_line = next(line for line in out.splitlines() if line.startswith("reply to the app"))
    assert all(value in reply_line for value in planted)
    for label in ("API key", "e-mail", "customer no."):
        assert f"{label} in the store: no" in out

    # Every column of every stored row, read raw from SQLite.
    with sqlite3.connect(user_store()) as db:
        rows = db.execute("SELECT * FROM spans").fetchall()
    assert len(rows) == 3
    dump = "\n".join(str(value) for row in rows for value in row)
    for value in planted:
        assert value not in dump
    # Content was captured (not just dropped) and came through the hook.
    for placeholder in ("[REDACTED_SECRET]", "[REDACTED_EMAIL]", "[REDACTED_CUSTOMER]"):
        assert placeholder in dump
    assert "Please remember my key" in dump


def test_smolagents_example_runs_offline_and_traces_both_modes(tmp_path: Path) -> None:
    out = run_example(EXAMPLES / "smolagents_agent.py", tmp_path)
    assert out.splitlines() == [
        "run:     The product is 42.",
        "stream:  [tool -> 42] The product is 42.",
        "memory:  6 steps kept in the session",
        "context: {'unit': 'cm'}",
    ]
    store = SpanStore(user_store())
    runs = sorted(store.list_runs(10), key=lambda r: r.mode)
    assert [(r.agent, r.framework, r.mode, r.status) for r in runs] == [
        ("calculator", "smolagents", "run", "ok"),
        ("calculator", "smolagents", "stream", "ok"),
    ]
    for run in runs:
        assert tree(store.get_trace(run.trace_id)) == [
            "invoke_agent calculator",
            "  agent_step calculator",
            "    chat scripted-smol",
            "    execute_tool multiply",
            "  agent_step calculator",
            "    chat scripted-smol",
        ]


def test_maf_agent_runs_offline_in_both_modes_and_traces_by_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [
        "run:     The product is 408.",
        "stream:  [tool -> 408] The product is 408.",
        "context: {'multiplications': 2}",
    ]
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABLED", "true")
    out = run_example(EXAMPLES / "maf_agent.py", tmp_path, args=["What is 12 times 34?"])
    assert out.splitlines() == expected
    store = SpanStore(user_store())
    runs = {run.mode: run for run in store.list_runs(10)}
    assert set(runs) == {"run", "stream"}
    assert all(
        (r.agent, r.framework, r.status) == ("calculator", "maf", "ok") for r in runs.values()
    )
    assert tree(store.get_trace(runs["stream"].trace_id)) == [
        "invoke_agent calculator",
        "  agent_step calculator",
        "    chat offline",
        "    execute_tool multiply",
        "  agent_step calculator",
        "    chat offline",
    ]


def test_crewai_agent_runs_offline_and_traces_the_crew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("crewai", reason="the crewai extra lives in its own venv")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # CrewAI writes under $HOME
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABLED", "true")
    out = run_example(EXAMPLES / "crewai_agent.py", tmp_path / "work")

    assert "agent: 6 times 7 is 42." in out
    (run,) = SpanStore(user_store()).list_runs(10)
    assert (run.agent, run.framework, run.status) == ("calculator", "crewai", "ok")
    assert tree(SpanStore(user_store()).get_trace(run.trace_id)) == [
        "invoke_agent calculator",
        "  agent_step task",
        "    agent_step calculator",
        "      chat scripted",
        "      execute_tool multiply",
        "      chat scripted",
    ]


def test_adk_agent_traces_run_and_stream_to_the_local_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABLED", "true")
    out = run_example(EXAMPLES / "adk_agent.py", tmp_path)

    assert out.splitlines() == [
        "run:     The product is 42.",
        "stream:  [tool -> 42] The product is 42.",
        "context: {'multiplications': 2}",
    ]
    store = SpanStore(user_store())
    runs = store.list_runs(10)
    assert sorted((r.framework, r.mode, r.status) for r in runs) == [
        ("google_adk", "run", "ok"),
        ("google_adk", "stream", "ok"),
    ]
    for run in runs:
        assert tree(store.get_trace(run.trace_id)) == [
            "invoke_agent calculator",
            "  agent_step calculator",
            "    chat offline",
            "    execute_tool multiply",
            "  agent_step calculator",
            "    chat offline",
        ]
