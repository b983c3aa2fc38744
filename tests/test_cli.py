"""The ``runnertrace`` command, run as a user would: a subprocess in a fresh directory."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from runnertrace.cli import main
from runnertrace.exporters.local_store import SpanStore

ANSWERS = (
    "The answer is 7006669.",
    "The calculator reported an error: ZeroDivisionError: division by zero",
    'I am a scripted offline model. You said: "Hello! What can you do?"',
)
REPORT_LINE = re.compile(r"^report (\S*report-([0-9a-f]{8})\.html)$", re.MULTILINE)


def clean_env() -> dict[str, str]:
    """The caller's environment without any runnertrace, OTel or vendor settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("RUNNERTRACE_", "OTEL_", "LANGFUSE_", "LOGFIRE_", "TRACELOOP_", "AWS_")
        )
        and k != "OPENAI_API_KEY"
    }
    env["COLUMNS"] = "200"
    # Start-up speed only: logfire's pydantic plugin costs ~0.7 s per process and
    # plays no part in the CLI (tests/test_imports.py covers it).
    env["PYDANTIC_DISABLE_PLUGINS"] = "logfire-plugin"
    return env


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runnertrace.cli", *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process calls: tables wide enough that no cell wraps mid-phrase."""
    monkeypatch.setenv("COLUMNS", "250")


@dataclass
class Demo:
    cwd: Path
    env: dict[str, str]
    result: subprocess.CompletedProcess[str]

    @property
    def db(self) -> Path:
        """The per-user store (the user data directory is ``data/`` in the demo's directory)."""
        return self.cwd / "data" / "runnertrace" / "traces.db"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """One ``runnertrace demo`` in an empty directory: no config, no store, its own user dir."""
    cwd = tmp_path_factory.mktemp("fresh-clone")
    env = {**clean_env(), "XDG_DATA_HOME": str(cwd / "data")}
    return Demo(cwd, env, cli("demo", cwd=cwd, env=env))


def test_demo_prints_each_answer_then_its_tree_then_its_report(demo: Demo) -> None:
    out = demo.result.stdout
    assert demo.result.returncode == 0, demo.result.stderr
    assert "Traceback" not in demo.result.stderr
    reports = list(REPORT_LINE.finditer(out))
    assert len(reports) == len(ANSWERS)
    position = 0
    for answer, report in zip(ANSWERS, reports, strict=True):
        answer_at = out.index(answer, position)
        tree_at = out.index("invoke_agent demo", answer_at)
        assert answer_at < tree_at < report.start()
        position = report.end()
        html = (demo.cwd / report.group(1)).read_text(encoding="utf-8")
        assert report.group(2) in html  # the page is the report of that trace
    assert "execute_tool calculator" in out and "chat scripted-1" in out
    assert "✗ error" in out  # the division by zero shows as a failed tool span
    assert demo.db.is_file()  # the per-user store, not one per working directory
    assert not (demo.cwd / ".runnertrace").exists()


def test_demo_captures_its_scripted_content_says_so_and_says_what_next(demo: Demo) -> None:
    """A first dashboard with content: the demo's data is scripted, there is nothing to hide."""
    out = demo.result.stdout
    header = " ".join(out.split("\u2500")[0].split())  # the line(s) before the first rule
    assert "content captured" in header
    store = SpanStore(demo.db)
    try:
        run = store.list_runs(1)[0]
        chats = [s for s in store.get_trace(run.trace_id) if s.span_type == "message"]
    finally:
        store.close()
    assert chats and all("gen_ai.input.messages" in s.attributes for s in chats)
    assert "runnertrace ui" in out
    # the install step only where the dashboard is not installed
    has_ui = all(importlib.util.find_spec(name) for name in ("starlette", "uvicorn"))
    assert ("pip install 'runnertrace[ui]'" in out) is not has_ui
    assert "http://127.0.0.1:7341/" in out
    assert "RUNNERTRACE_TRACE__CAPTURE_CONTENT=true" in out


def test_demo_stream_mode(tmp_path: Path) -> None:
    result = cli("demo", "--stream", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for answer in ANSWERS:
        assert answer in result.stdout
    assert "[calculator → 7006652]" in result.stdout  # tool calls shown as they stream
    assert result.stdout.count("native · stream") == len(ANSWERS)
    assert len(REPORT_LINE.findall(result.stdout)) == len(ANSWERS)


def test_traces_lists_the_demo_runs(demo: Demo) -> None:
    result = cli("traces", cwd=demo.cwd, env=demo.env)
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if " demo " in line]
    assert len(rows) == len(ANSWERS)
    assert all("native" in row for row in rows)
    for short_id in (m.group(2) for m in REPORT_LINE.finditer(demo.result.stdout)):
        assert short_id in result.stdout
    assert "ok (1 err)" in result.stdout  # the tool error, while the run itself succeeded


def test_traces_limit_in_process(demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traces", "-n", "1", "--db", str(demo.db)]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if " demo " in line]) == 1


def test_show_last_and_show_by_prefix(demo: Demo) -> None:
    last = cli("show", "last", cwd=demo.cwd, env=demo.env)
    assert last.returncode == 0, last.stderr
    assert "invoke_agent demo" in last.stdout and "chat scripted-1" in last.stdout
    assert "execute_tool" not in last.stdout  # the last task needed no tool


def test_show_by_prefix_in_process(demo: Demo, capsys: pytest.CaptureFixture[str]) -> None:
    first_id = REPORT_LINE.search(demo.result.stdout).group(2)  # type: ignore[union-attr]
    db = str(demo.db)
    assert main(["show", first_id[:6], "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.count("execute_tool calculator") == 2
    assert re.search(r"chat scripted-1\s+[\d.]+ .s\s+7→3 tok", out)


def test_report_last_writes_a_page(demo: Demo) -> None:
    (demo.cwd / "out").mkdir(exist_ok=True)
    result = cli("report", "last", "-o", "out/run.html", cwd=demo.cwd, env=demo.env)
    assert result.returncode == 0, result.stderr
    page = demo.cwd / "out" / "run.html"
    assert str(page) in result.stdout
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "invoke_agent demo" in html


def test_doctor_reports_the_local_store(demo: Demo) -> None:
    result = cli("doctor", cwd=demo.cwd, env=demo.env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local" in result.stdout and "traces.db" in result.stdout
    assert "3 traces" in result.stdout


def test_missing_store_or_trace_is_a_clear_error(
    demo: Demo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "last"]) == 1  # this test's user directory has no store
    assert "no trace store at" in capsys.readouterr().err
    assert main(["show", "ffffffff", "--db", str(demo.db)]) == 1
    assert "no trace id starts with" in capsys.readouterr().err


def test_bad_config_file_exits_2_in_a_subprocess(tmp_path: Path) -> None:
    (tmp_path / "runnertrace.yaml").write_text("trace:\n  type: bogus\n")
    result = cli("demo", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "trace.type" in result.stderr and "bogus" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("trace:\n  type: bogus\n", "trace.type"),
        ("trace:\n  sample_rate: 3\n", "trace.sample_rate"),
        ("trace: [unclosed\n", "cannot parse runnertrace.yaml"),
        ("- just\n- a list\n", "the top level is a list; expected a mapping of sections"),
    ],
)
def test_bad_config_file_exits_2_with_the_message(
    config: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("runnertrace.yaml").write_text(config)  # conftest put us in an empty directory
    for command in (["doctor"], ["demo"]):
        assert main(command) == 2, command
        assert expected in capsys.readouterr().err
    # The viewers still read (here: the default store, which does not exist yet).
    assert main(["traces"]) == 1
    err = capsys.readouterr().err
    assert expected in err and "reading the default store" in err


def test_doctor_fails_for_an_unwritable_store(capsys: pytest.CaptureFixture[str]) -> None:
    Path("blocker").write_text("a file, not a directory")
    Path("runnertrace.yaml").write_text("trace:\n  local:\n    path: blocker/traces.db\n")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "fail" in out and "not a directory" in out


def test_doctor_never_prints_secrets(tmp_path: Path) -> None:
    (tmp_path / "runnertrace.yaml").write_text(
        "trace:\n"
        "  type: [local, langfuse, otlp]\n"
        "  langfuse:\n"
        "    public_key: pk-lf-public-1234\n"
        "    secret_key: sk-lf-SUPERSECRET-5678\n"
        "    host: http://127.0.0.1:9\n"
        "  otlp:\n"
        "    endpoint: http://127.0.0.1:9/v1/traces\n"
        "    headers:\n"
        "      authorization: Bearer TOPSECRET-abcdef\n"
    )
    result = cli("doctor", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert "langfuse" in result.stdout and "otlp" in result.stdout
    for secret in ("SUPERSECRET", "TOPSECRET"):
        assert secret not in result.stdout + result.stderr


def test_dashboards_cloudwatch_deploys_through_the_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command end to end, against moto's CloudWatch API on 127.0.0.1."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        Path("runnertrace.yaml").write_text(
            f"trace:\n  cloudwatch:\n    region: eu-west-1\n    metrics_endpoint: {endpoint}\n"
        )
        assert main(["dashboards", "cloudwatch", "--name", "rt-agents"]) == 0
        assert "Deployed CloudWatch dashboard rt-agents" in capsys.readouterr().out
        client = boto3.client("cloudwatch", region_name="eu-west-1", endpoint_url=endpoint)
        assert client.get_dashboard(DashboardName="rt-agents")["DashboardBody"]
        # a bad name is a configuration error: exit 2, the message, no traceback
        assert main(["dashboards", "cloudwatch", "--name", "bad name!"]) == 2
        assert "dashboard name" in capsys.readouterr().err
    finally:
        server.stop()


# -- bad stores: one line, the real cause, nothing written (issue 22) -----------------------------
def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` and its bytes: what a read-only command must not change.

    Reading a WAL-mode file (the truncated store) makes SQLite add its empty ``-wal``
    and its ``-shm`` index beside it, as any reader does; those are not the store.
    """
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


@pytest.fixture(params=["empty", "random-bytes", "truncated"])
def bad_store(request: pytest.FixtureRequest, demo: Demo, tmp_path: Path) -> Path:
    """A ``traces.db`` that is not a readable store, alone in a directory of its own."""
    db = tmp_path / "bad" / "traces.db"
    db.parent.mkdir()
    if request.param == "empty":
        db.write_bytes(b"")
    elif request.param == "random-bytes":
        db.write_bytes(os.urandom(8192))
    else:  # a real store cut short: its header is fine, its pages are not all there
        whole = demo.db.read_bytes()
        db.write_bytes(whole[: len(whole) // 3])
    return db


def test_viewers_on_a_bad_store_say_why_in_one_line_and_write_nothing(
    bad_store: Path, tmp_path: Path
) -> None:
    before = _snapshot(bad_store.parent)
    (tmp_path / "out").mkdir()
    for command in (
        ["traces"],
        ["show", "last"],
        ["report", "last", "-o", str(tmp_path / "out" / "r.html")],
        ["ui", "--no-open"],
    ):
        result = cli(*command, "--db", str(bad_store), cwd=tmp_path)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert result.stdout == "", command  # ui: no URL printed, no server started
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (command, result.stderr)
        assert str(bad_store) in lines[0]
        assert lines[0].endswith(
            f"move {bad_store} aside; runnertrace creates a new store on the next run"
        ), command
        assert _snapshot(bad_store.parent) == before, command
    assert not (tmp_path / "out" / "r.html").exists()


def test_ui_on_a_bad_store_gives_doctors_message_and_fix(bad_store: Path, tmp_path: Path) -> None:
    env = {**clean_env(), "RUNNERTRACE_TRACE__LOCAL__PATH": str(bad_store), "COLUMNS": "1000"}
    doctor = cli("doctor", cwd=tmp_path, env=env)
    assert doctor.returncode == 1
    finding = next(line for line in doctor.stdout.splitlines() if "│ store" in line)
    detail, fix = (cell.strip() for cell in finding.split("│")[4:6])
    assert fix == f"move {bad_store} aside; runnertrace creates a new store on the next run"
    ui = cli("ui", "--no-open", cwd=tmp_path, env=env)
    assert ui.returncode == 1 and ui.stdout == ""
    assert ui.stderr.strip() == f"error: {detail}; {fix}"


def test_the_demo_into_a_bad_store_names_the_cause_and_leaves_it_alone(
    bad_store: Path, tmp_path: Path
) -> None:
    before = _snapshot(bad_store.parent)
    result = cli("demo", "--db", str(bad_store), cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "locked" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad_store) in lines[0] and "aside" in lines[0], result.stderr
    assert "task 1/3" not in result.stdout  # refused before any run
    assert _snapshot(bad_store.parent) == before


def test_read_only_commands_never_create_a_store(tmp_path: Path) -> None:
    db = tmp_path / "nowhere" / "traces.db"
    for command in (["traces"], ["show", "last"], ["report", "last"]):
        result = cli(*command, "--db", str(db), cwd=tmp_path)
        assert result.returncode == 1 and "no trace store at" in result.stderr, command
    env = {**clean_env(), "RUNNERTRACE_TRACE__LOCAL__PATH": str(db)}
    assert cli("doctor", cwd=tmp_path, env=env).returncode == 0
    assert not db.parent.exists()


def test_the_demo_traces_into_the_store_db_names(tmp_path: Path) -> None:
    db = tmp_path / "chosen" / "traces.db"
    result = cli("demo", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(SpanStore(db, read_only=True).list_runs(10)) == len(ANSWERS)
    assert f"local ({db})" in result.stdout or "local (chosen/traces.db)" in result.stdout


def test_report_into_a_missing_directory_is_an_error_naming_it(demo: Demo, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.html"
    result = cli("report", "-o", str(target), "--db", str(demo.db), cwd=tmp_path)
    assert result.returncode == 1
    assert f"the directory {target.parent} does not exist" in result.stderr
    assert not (tmp_path / "no").exists()


# -- a missing extra: one line in the CLI, one warning in an app (issue 22) ----------------------
BLOCK_BOTO3 = "import sys; sys.modules['boto3'] = None; from runnertrace.cli import main; "


def test_a_missing_extra_is_one_line_in_the_cli(tmp_path: Path) -> None:
    env = {**clean_env(), "RUNNERTRACE_TRACE__TYPE": "cloudwatch", "AWS_REGION": "eu-west-1"}
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_BOTO3 + "sys.exit(main(['demo']))"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: 'boto3' is not installed; install it with: pip install 'runnertrace[cloudwatch]'"
    ]


def test_a_missing_extra_is_one_warning_in_an_app_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from runnertrace.core import Runtime
    from runnertrace.core.models import AgentRequestText
    from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm
    from runnertrace.tracing import reset_tracing_setups, traced
    from runnertrace.tracing.config import TraceConfig

    monkeypatch.setitem(sys.modules, "boto3", None)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    reset_tracing_setups()
    runtime = Runtime()
    NativeModule([Agent(ScriptedLlm(), name="m")], runtime=runtime)
    agent = runtime.agents().get("m")
    agent.runner = traced(agent.runner, TraceConfig(type="cloudwatch"))
    with caplog.at_level("WARNING", logger="runnertrace"):
        for _ in range(2):
            reply = asyncio.run(
                runtime.run(agent, runtime.sessions().new("s"), [AgentRequestText(prompt="hi")])
            )
            assert str(reply) == 'I am a scripted offline model. You said: "hi"'
    reset_tracing_setups()
    records = [r for r in caplog.records if r.name == "runnertrace"]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelname == "WARNING" and records[0].exc_info is None
    assert "pip install 'runnertrace[cloudwatch]'" in records[0].getMessage()


# -- a run's numbers: the root span's, with honest cost, and per agent (issue 28) -------------
@pytest.fixture(scope="module")
def team_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ui_fixtures import build_team_store

    return build_team_store(tmp_path_factory.mktemp("team") / "traces.db")


def _row(out: str, name: str) -> list[str]:
    """The cells of the table row whose first text cell is ``name``."""
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if name in cells[:2]:
            return cells
    raise AssertionError(f"no row {name!r} in:\n{out}")


def test_traces_shows_each_runs_cost_partial_or_unpriced(
    team_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["traces", "--db", str(team_db)]) == 0
    out = capsys.readouterr().out
    runs = {r.agent: r for r in SpanStore(team_db, read_only=True).list_runs()}
    planner, recursive = _row(out, "planner"), _row(out, "recursive")
    assert "$0.006 (partial: 2 calls unpriced)" in planner
    assert str(runs["planner"].tokens) in planner  # the root span's tokens: 2,968
    assert "unpriced" in recursive and str(runs["recursive"].tokens) in recursive


def test_show_prints_the_run_totals_and_a_table_per_agent(
    team_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SpanStore(team_db, read_only=True)
    planner = next(r for r in store.list_runs() if r.agent == "planner")
    assert main(["show", planner.trace_id[:10], "--db", str(team_db)]) == 0
    out = capsys.readouterr().out
    (totals,) = [line for line in out.splitlines() if line.startswith("totals ")]
    assert totals.startswith("totals 2,900 in / 68 out tokens · cost $0.006 (partial: 2 calls")
    assert "4 model calls, 2 tool calls" in totals and "1 nested run" in totals
    # own / with what it started, where they differ
    assert _row(out, "planner")[1:4] == ["1", "2 / 4", "2,200 / 2,900"]
    assert _row(out, "researcher")[1:4] == ["1", "2", "700"]
