"""A new user's first hour (issue 14): honest messages, a store found from anywhere, quiet
defaults. Apps and the CLI run as a user runs them: the installed ``runnertrace`` script or
``python app.py`` in a subprocess, in a directory of their own, configured by
``runnertrace.yaml`` only.
"""

from __future__ import annotations

import logging
import re
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests import backends
from tests.otlp_receiver import refused_port
from tests.test_cli import ANSWERS, clean_env

from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.tracing.config import load_settings

RUNNERTRACE = Path(sys.executable).parent / "runnertrace"
QUESTION = "What is 1234 * 5678, plus 17?"
ANSWER = "The answer is 7006669."
SPANS_PER_RUN = 9  # run, 3 steps, 3 chats, 2 tool calls

# An app with no tracing code: runnertrace.yaml alone switches tracing on. After its
# runs it notes the time; an atexit hook registered before any tracer provider
# exists runs after their shutdown and prints how long the exit took.
APP = textwrap.dedent(
    """
    import asyncio, atexit, sys, time

    ended = []
    atexit.register(
        lambda: print(f"exit took {time.monotonic() - ended[0]:.2f}s", file=sys.stderr)
    )

    from runnertrace.core import Runtime
    from runnertrace.core.models import AgentRequestText
    from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator


    async def main() -> None:
        runtime = Runtime()
        NativeModule([Agent(ScriptedLlm(), tools=[calculator], name="math")], runtime=runtime)
        agent = runtime.agents().get("math")
        for number in range(int(sys.argv[1])):
            session = runtime.sessions().new(f"s{number}")
            reply = await runtime.run(agent, session, [AgentRequestText(prompt=QUESTION)])
            print(reply)


    asyncio.run(main())
    ended.append(time.monotonic())
    """
).replace("QUESTION", repr(QUESTION))
EXIT_TOOK = re.compile(r"exit took ([\d.]+)s")


def env_for(home: Path) -> dict[str, str]:
    return {**clean_env(), "XDG_DATA_HOME": str(home / "user-data")}


def user_store(home: Path) -> Path:
    return home / "user-data" / "runnertrace" / "traces.db"


def runnertrace(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user types it."""
    return subprocess.run(
        [str(RUNNERTRACE), *args],
        cwd=cwd,
        env=env or env_for(cwd),
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_app(
    cwd: Path, config: str, runs: int = 1, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "runnertrace.yaml").write_text(textwrap.dedent(config))
    (cwd / "app.py").write_text(APP)
    return subprocess.run(
        [sys.executable, "app.py", str(runs)],
        cwd=cwd,
        env=env or env_for(cwd),
        capture_output=True,
        text=True,
        timeout=120,
    )


def lost_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "lost so far" in line]


@pytest.fixture
def hung_collector() -> Iterator[int]:
    """A real listener that accepts every connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (connections are refused), kept from any other server."""
    return refused_port()


# -- 1. failed exports are never silent --------------------------------------------------------
def otlp_config(port: int, flush_timeout_s: float = 1.0) -> str:
    return f"""
        trace:
          enabled: true
          type: otlp
          flush_timeout_s: {flush_timeout_s}
          otlp:
            endpoint: http://127.0.0.1:{port}/v1/traces
        """


def test_a_hung_collector_costs_one_warning_with_the_count_and_at_most_the_flush_timeout(
    tmp_path: Path, hung_collector: int
) -> None:
    result = run_app(tmp_path, otlp_config(hung_collector, flush_timeout_s=1.0))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ANSWER
    lines = lost_lines(result.stderr)
    assert lines and f"{SPANS_PER_RUN} spans lost so far for otlp" in lines[-1], result.stderr
    # What to do (the export's own timeout or our shutdown deadline may come first).
    assert "runnertrace doctor" in lines[-1] or "trace.flush_timeout_s" in lines[-1]
    exit_took = float(EXIT_TOOK.search(result.stderr).group(1))  # type: ignore[union-attr]
    assert exit_took <= 1.0 + 0.5, result.stderr  # the configured bound, plus shutdown slack
    assert "Traceback" not in result.stderr


def test_a_refused_collector_is_one_warning_and_no_retry_noise(
    tmp_path: Path, closed_port: int
) -> None:
    result = run_app(tmp_path, otlp_config(closed_port), runs=2)
    assert result.returncode == 0, result.stderr
    lines = lost_lines(result.stderr)
    assert lines and f"{2 * SPANS_PER_RUN} spans lost so far for otlp" in lines[-1], result.stderr
    # The OTLP exporter's own retry chatter is folded into our line.
    assert "Transient error" not in result.stderr
    assert "HTTPConnectionPool" not in result.stderr.replace(lines[-1], "")


def test_the_demo_does_not_claim_delivery_when_every_span_was_dropped(
    tmp_path: Path, closed_port: int
) -> None:
    (tmp_path / "runnertrace.yaml").write_text(textwrap.dedent(otlp_config(closed_port)))
    result = runnertrace("demo", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Spans went to" not in result.stdout
    assert "could not be delivered to otlp" in result.stdout


# -- 2. a locked store --------------------------------------------------------------------------
@pytest.fixture
def locked_store(tmp_path: Path) -> Iterator[Path]:
    """A store file another connection holds with ``BEGIN EXCLUSIVE``."""
    db = tmp_path / "locked" / "traces.db"
    db.parent.mkdir()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE held (x)")
    holder.execute("BEGIN EXCLUSIVE")
    yield db
    holder.execute("ROLLBACK")
    holder.close()


def test_the_demo_on_a_locked_store_counts_every_span_and_says_what_to_do(
    tmp_path: Path, locked_store: Path
) -> None:
    # The same demo on a free store: how many spans its three runs make.
    free = runnertrace("demo", cwd=tmp_path)
    assert free.returncode == 0, free.stderr
    produced = sum(1 for _ in sqlite3.connect(user_store(tmp_path)).execute("SELECT 1 FROM spans"))
    assert produced > SPANS_PER_RUN  # three runs (one answers without a tool)

    env = {**env_for(tmp_path), "RUNNERTRACE_TRACE__LOCAL__PATH": str(locked_store)}
    result = runnertrace("demo", cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "see the log" not in result.stdout
    told = re.findall(r"(\d+) span\(s\) could not be delivered to local", result.stdout)
    assert [int(n) for n in told][-1] == produced, result.stdout
    assert "trace.local.path" in result.stdout
    warnings = lost_lines(result.stderr)
    assert warnings and f"{produced} spans lost so far for local" in warnings[-1], result.stderr
    assert "database is locked" in warnings[-1] and "close it" in warnings[-1]


def test_an_app_on_a_locked_store_exits_within_the_flush_timeout_with_the_exact_count(
    tmp_path: Path, locked_store: Path
) -> None:
    config = f"""
        trace:
          enabled: true
          flush_timeout_s: 2
          local:
            path: {locked_store}
        """
    result = run_app(tmp_path / "app", config, runs=2)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [ANSWER, ANSWER]
    lines = lost_lines(result.stderr)
    assert lines and f"{2 * SPANS_PER_RUN} spans lost so far for local" in lines[-1]
    exit_took = float(EXIT_TOOK.search(result.stderr).group(1))  # type: ignore[union-attr]
    assert exit_took <= 2.0, result.stderr


# -- 3. configuration mistakes ------------------------------------------------------------------
def test_missing_langfuse_keys_are_one_config_error_naming_both_keys(tmp_path: Path) -> None:
    config = """
        trace:
          enabled: true
          type: langfuse
          langfuse:
            host: http://127.0.0.1:9
        """
    result = run_app(tmp_path, config, runs=3)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [ANSWER] * 3  # the runs go on, untraced
    errors = [line for line in result.stderr.splitlines() if "tracing is off" in line]
    assert len(errors) == 1, result.stderr  # once per process, not per run
    assert "trace.langfuse.public_key" in result.stderr
    assert "trace.langfuse.secret_key" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize(
    ("key", "config"),
    [
        ("trace.redact", "trace:\n  enabled: true\n  redact: no_such_module.scrub\n"),
        ("trace.type", "trace:\n  enabled: true\n  type: no_such_module.Backend\n"),
    ],
)
def test_every_dotted_path_fails_the_same_way_when_the_config_loads(
    tmp_path: Path, key: str, config: str
) -> None:
    expected = f"{key}: invalid value 'no_such_module."
    (tmp_path / "runnertrace.yaml").write_text(config)
    doctor = runnertrace("doctor", cwd=tmp_path)
    assert doctor.returncode == 2, doctor.stdout
    assert expected in doctor.stderr and "cannot load" in doctor.stderr
    assert "All checks passed" not in doctor.stdout
    # The app itself keeps running (untraced), with the same message once.
    app = run_app(tmp_path, config)
    assert app.returncode == 0 and app.stdout.strip() == ANSWER, app.stderr
    assert app.stderr.count(expected) == 1 and "Traceback" not in app.stderr


def test_a_malformed_config_neither_crashes_the_app_nor_blocks_the_viewers(
    tmp_path: Path,
) -> None:
    demo = runnertrace("demo", cwd=tmp_path)  # a store with three runs
    assert demo.returncode == 0, demo.stderr
    broken = tmp_path / "broken"
    app = run_app(broken, "trace:\n  enabled: false\n  type: [local\n", env=env_for(tmp_path))
    assert app.returncode == 0 and app.stdout.strip() == ANSWER, app.stderr
    assert "cannot parse" in app.stderr and "Traceback" not in app.stderr
    traces = runnertrace("traces", cwd=broken, env=env_for(tmp_path))
    assert traces.returncode == 0, traces.stderr
    assert traces.stdout.count(" demo ") == len(ANSWERS)
    assert "cannot parse" in traces.stderr and "--db" in traces.stderr


def test_a_runnertrace_variable_that_sets_nothing_is_named_with_the_nearest_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    monkeypatch.setenv("RUNNERTRACE_TRACE_ENABLED", "true")
    monkeypatch.setenv("RUNNERTRACE_TRACE__LOCAL__PATH", "x.db")  # a real key: no warning
    assert load_settings().trace.enabled is False
    (warning,) = [r.getMessage() for r in caplog.records if "matches no" in r.getMessage()]
    assert "RUNNERTRACE_TRACE_ENABLED" in warning
    assert "did you mean RUNNERTRACE_TRACE__ENABLED?" in warning


def test_trace_type_from_the_environment_takes_a_comma_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUNNERTRACE_TRACE__TYPE", "local, console")
    assert load_settings().trace.types == ["local", "console"]


# -- 4. execution.mode: stream ------------------------------------------------------------------
async def test_execution_mode_stream_drives_stream_and_returns_the_same_reply() -> None:
    def runtime(mode: str) -> tuple[Runtime, Agent]:
        settings = load_settings(
            execution={"mode": mode},
            trace={"enabled": True, "type": "tests.backends.MemoryBackend"},
        )
        rt = Runtime(settings=settings)
        native = Agent(ScriptedLlm(), tools=[calculator], name="math")
        return rt, NativeModule([native], runtime=rt).get(native)

    replies = {}
    for mode in ("sync", "stream"):
        backends.MEMORY.clear()
        rt, agent = runtime(mode)
        replies[mode] = await rt.run(agent, Session(mode), [AgentRequestText(prompt=QUESTION)])
        from runnertrace.tracing import get_tracing_setup

        get_tracing_setup(rt.settings.trace).flush()
        [run] = [s for s in backends.MEMORY.get_finished_spans() if s.parent is None]
        assert run.attributes is not None
        assert run.attributes["runnertrace.mode"] == ("stream" if mode == "stream" else "run")
    assert replies["stream"] == replies["sync"]
    assert str(replies["stream"]) == ANSWER


# -- 5. a store found from anywhere -------------------------------------------------------------
def test_the_store_is_found_from_any_directory_and_every_viewer_takes_db(
    tmp_path: Path,
) -> None:
    home = tmp_path
    (here := tmp_path / "project").mkdir()
    (elsewhere := tmp_path / "elsewhere").mkdir()
    demo = runnertrace("demo", cwd=here, env=env_for(home))
    assert demo.returncode == 0, demo.stderr
    assert str(user_store(home)) in demo.stdout  # the demo says where the store is
    listed = runnertrace("traces", cwd=elsewhere, env=env_for(home))
    assert listed.returncode == 0 and listed.stdout.count(" demo ") == len(ANSWERS)
    doctor = runnertrace("doctor", cwd=elsewhere, env=env_for(home))
    assert str(user_store(home)) in doctor.stdout

    # --db on every viewer, from a directory with no store of its own.
    moved = tmp_path / "moved.db"
    user_store(home).rename(moved)
    other = env_for(tmp_path / "nobody")
    for args in (["traces"], ["show"], ["report", "-o", "r.html"]):
        result = runnertrace(*args, "--db", str(moved), cwd=elsewhere, env=other)
        assert result.returncode == 0, (args, result.stderr)
    assert (elsewhere / "r.html").is_file()


def test_the_demo_in_an_unwritable_place_says_where_and_how_to_choose(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where a directory should be")
    env = {**env_for(tmp_path), "RUNNERTRACE_TRACE__LOCAL__PATH": "blocker/traces.db"}
    result = runnertrace("demo", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "blocker" in result.stderr and "RUNNERTRACE_TRACE__LOCAL__PATH" in result.stderr
    assert "run `runnertrace demo`" not in result.stderr


# -- 6. quiet defaults --------------------------------------------------------------------------
def test_console_backend_draws_a_compact_tree_on_stderr(tmp_path: Path) -> None:
    result = run_app(tmp_path, "trace:\n  enabled: true\n  type: console\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ANSWER  # the app's stdout is the app's
    assert "invoke_agent math" in result.stderr and "execute_tool calculator" in result.stderr
    assert '"trace_id"' not in result.stderr
    assert len(result.stderr.splitlines()) < 20


def test_console_json_format_prints_the_raw_spans_on_stderr(tmp_path: Path) -> None:
    config = "trace:\n  enabled: true\n  type: console\n  console:\n    format: json\n"
    result = run_app(tmp_path, config)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ANSWER
    assert result.stderr.count('"trace_id"') == SPANS_PER_RUN


# -- 8. small things ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", ["0", "-1"])
def test_traces_n_below_one_is_an_error_not_an_empty_store(tmp_path: Path, n: str) -> None:
    result = runnertrace("traces", "-n", n, cwd=tmp_path)
    assert result.returncode == 2
    assert "expected a whole number, 1 or more" in result.stderr
    assert "No traces" not in result.stdout


def test_report_defaults_to_the_last_trace(tmp_path: Path) -> None:
    assert runnertrace("demo", cwd=tmp_path).returncode == 0
    result = runnertrace("report", "-o", "last.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "last.html").read_text(encoding="utf-8")
    assert "invoke_agent demo" in html
    # One status vocabulary: the span panel's pill uses the header's words (ok, error,
    # cancelled), never the raw OTel status code ("unset" for a span that went fine).
    assert "span.status_code.toLowerCase()" not in html
    assert '"cancelled" : "ok"' in html


def test_doctor_says_the_config_disables_tracing_but_code_can_wrap(tmp_path: Path) -> None:
    result = runnertrace("doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "off in the configuration" in result.stdout
    assert "traced()" in result.stdout


def test_every_subcommand_describes_itself_in_help(tmp_path: Path) -> None:
    top = runnertrace("--help", cwd=tmp_path).stdout
    lines = top.splitlines()
    for command in ("demo", "traces", "show", "report", "doctor", "dashboards"):
        at = next(i for i, s in enumerate(lines) if s.strip().startswith(command))
        # A description beside the name (argparse moves it below a long name).
        assert len((lines[at] + " " + lines[at + 1]).split()) > 3, lines[at]
        own = runnertrace(command, "--help", cwd=tmp_path).stdout
        assert own.split("\n\n")[1].strip().endswith("."), own  # its own description


def test_the_readme_quick_tour_is_the_runnable_example(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    script = (root / "examples" / "quick_tour.py").read_text(encoding="utf-8")
    tour = readme.split("## Quick tour", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "await " not in tour.replace("await runtime.run", "") or "async def main" in tour
    assert tour.strip().splitlines()[-1] == "asyncio.run(main())"
    assert (
        "async def main() -> None:" in script
        and tour.split("async def main")[1].split("\n\n\n")[0] in script
    )
    assert ".venv/bin/runnertrace" in readme
    # Run it as the README says.
    (tmp_path / "quick_tour.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "quick_tour.py"],
        cwd=tmp_path,
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == ANSWER, done.stderr
    assert user_store(tmp_path).is_file()


def test_each_example_names_the_extra_it_needs() -> None:
    examples = Path(__file__).resolve().parent.parent / "examples"
    for path in [*examples.glob("*.py"), examples / "yaml_config" / "app.py"]:
        header = path.read_text(encoding="utf-8").split('"""')[1]
        assert "Needs" in header and "pip install" in header, path
