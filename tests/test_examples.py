"""Each example in ``examples/`` runs as a user would run it, and does what it says.

Every example runs in a subprocess (the same interpreter), from a copy in a
temporary directory that is also its working directory. The per-user trace
store it writes lives under this test's own ``XDG_DATA_HOME`` (conftest sets
one per test; the subprocess inherits it), so it is this test's alone. The
tests check the printed output and then read the store back.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
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
    # Content capture is off by default: no span has a content key, and no text
    # attribute holds the question (a number such as a duration is not text, and
    # may hold its digits by chance).
    from runnertrace.tracing import attributes as A

    content_keys = {
        A.INPUT_MESSAGES,
        A.OUTPUT_MESSAGES,
        A.SYSTEM_INSTRUCTIONS,
        A.TOOL_ARGUMENTS,
        A.TOOL_RESULT,
        A.INPUT_VALUE,
        A.OUTPUT_VALUE,
        A.STEP_CODE,
    }
    assert [k for s in spans for k in s.attributes if k in content_keys] == []
    assert not any(
        isinstance(v, str) and "1234 * 5678" in v for s in spans for v in s.attributes.values()
    )

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
        "        reasoning",  # a ReAct reply's scaffolding; the text is the final answer
        "      execute_tool multiply",
        "      chat scripted",
        "        reasoning",
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


# -- every example, one check: what it prints is what its spans hold (issue 22) -----------------
ALL_EXAMPLES = sorted(
    [path for path in EXAMPLES.glob("*.py") if not path.name.startswith("_")]
    + [path.parent for path in EXAMPLES.glob("*/app.py")]
)
TRACE_ID = re.compile(r"\b[0-9a-f]{32}\b")
SPAN_COUNT = re.compile(r"\b(\d+) spans?\b")
# Lines that state the agent's reply: "run:", "answer:", "agent:", "stream:" (a streamed
# reply may show its tool calls first, as "[tool -> 42] ").
REPLY_LINE = re.compile(r"^\s*(?:run|stream|answer|agent):\s+(?:\[[^\]]*\]\s+)*(.+)$")
# Which example made which session: two examples must never share one.
_SESSIONS: dict[str, str] = {}


def _missing_extra(example: Path) -> str | None:
    """The extra an example's docstring says it needs, when that extra is not installed here."""
    from packaging.requirements import Requirement

    script = example / "app.py" if example.is_dir() else example
    match = re.search(r"Needs the ``([\w-]+)`` extra", script.read_text(encoding="utf-8"))
    if match is None:
        return None
    extra = match.group(1)
    for line in importlib.metadata.requires("runnertrace") or []:
        requirement = Requirement(line)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue
        try:
            importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            return extra
    return None


def _stored_runs(workdir: Path) -> dict[str, tuple[SpanStore, list[StoredSpan]]]:
    """Every trace this example wrote, by id, from every store it could have written."""
    found: dict[str, tuple[SpanStore, list[StoredSpan]]] = {}
    for path in (user_store(), workdir / STORE):
        if path.is_file():
            store = SpanStore(path, read_only=True)
            for run in store.list_runs(100):
                found[run.trace_id] = (store, store.get_trace(run.trace_id))
    return found


@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=lambda path: path.stem or path.name)
def test_every_example_prints_what_its_spans_hold(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runnertrace.tracing.attributes import message_text

    extra = _missing_extra(example)
    if extra is not None:
        pytest.skip(f"the {extra} extra is not installed here")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # CrewAI writes under $HOME
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABLED", "true")
    monkeypatch.setenv("RUNNERTRACE_TRACE__CAPTURE_CONTENT", "true")
    workdir = tmp_path / "work"
    out = run_example(example, workdir)
    traces = _stored_runs(workdir)
    assert traces, f"{example.name} printed {out!r} but stored no trace"

    # The replies it prints are the replies its run spans recorded, and the other way round.
    run_spans = [
        next(s for s in spans if s.span_type == "run")
        for _, spans in traces.values()
        if any(s.span_type == "run" for s in spans)
    ]
    recorded = {message_text(s.attributes.get("gen_ai.output.messages")) for s in run_spans}
    printed = [m.group(1).strip() for m in map(REPLY_LINE.match, out.splitlines()) if m]
    if recorded != {None}:  # None: the example configures its own tracing, without content
        for reply in printed:
            assert reply in recorded, f"{example.name} printed {reply!r}; its spans hold {recorded}"
        for text in recorded:
            assert isinstance(text, str) and text in out, f"{example.name} never printed {text!r}"

    # Every trace id it prints is one it stored, with as many spans as it says.
    for line in out.splitlines():
        ids = TRACE_ID.findall(line)
        for trace_id in ids:
            assert trace_id in traces, f"{example.name} printed a trace it did not store: {line}"
        count = SPAN_COUNT.search(line)
        if count is not None:
            (trace_id,) = ids or list(traces)  # a count without an id: the one trace there is
            assert int(count.group(1)) == len(traces[trace_id][1]), line

    # A session of its own: its runs never land in another example's conversation.
    for _, spans in traces.values():
        session = next(s for s in spans if s.is_root).attributes.get("gen_ai.conversation.id")
        if isinstance(session, str):
            owner = _SESSIONS.setdefault(session, example.name)
            assert owner == example.name, f"{example.name} reuses {owner}'s session {session!r}"


# -- the README's "wrap your agent" table (issue 30) -------------------------------------------
README = EXAMPLES.parent / "README.md"
TABLE_LINK = re.compile(r"\[`examples/(\w+_agent\.py)`\]\(examples/\1\)")


def test_the_readme_table_links_every_framework_example_and_each_is_run_here() -> None:
    """A framework user finds their "wrap your agent" example, and the test above runs it."""
    section = README.read_text(encoding="utf-8").split("## Wrap your agent", 1)[1]
    table = "\n".join(line for line in section.split("\n## ", 1)[0].splitlines() if line[:1] == "|")
    linked = {m.group(1) for m in TABLE_LINK.finditer(table)}
    on_disk = {path.name for path in EXAMPLES.glob("*_agent.py")}
    assert linked == on_disk and len(linked) == 7, (linked, on_disk)
    assert {EXAMPLES / name for name in linked} <= set(ALL_EXAMPLES)
