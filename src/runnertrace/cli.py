"""The ``runnertrace`` command: a traced offline demo, the local trace viewer, and doctor.

Subcommands:

* ``demo [--stream] [--db PATH]``: runs the native agent on a few tasks, offline,
  traced to the configured backends (``local`` by default, into ``--db`` when
  given), then shows each run's span tree and writes an HTML report.
* ``traces``, ``show``, ``report``: read the ``local`` backend's store (a SQLite
  file, or a PostgreSQL database), opened read-only: a viewer never creates,
  upgrades or rewrites a store. ``--store`` (or ``--db``) names another one.
* ``migrate``: creates or upgrades a store's schema, the one command that does.
* ``prune --older-than 30d``: removes old runs, in bounded steps.
* ``copy FILE --store postgresql://...``: copies a SQLite store into PostgreSQL,
  resumable (an interrupted copy goes on where it stopped) and idempotent.
* ``doctor``: builds the configured backends and prints their ``check()`` findings.
* ``dashboards cloudwatch``: deploys the CloudWatch dashboard.
* ``ui``: serves the local dashboard over the store (the ``ui`` extra).

Exit codes: 0 success, 1 a failure (missing store or trace, a failing check),
2 invalid configuration (the message says which key and what is allowed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from runnertrace._internal.version import __version__
from runnertrace.exporters.trace_tree import STATUS_STYLES, format_duration, render_trace_tree
from runnertrace.tracing import drops
from runnertrace.tracing.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE, ConfigError

if TYPE_CHECKING:
    from runnertrace.store import AgentAccount, RunSummary, SpanStore
    from runnertrace.tracing.backend import Check
    from runnertrace.tracing.config import Settings

__all__ = ["main"]

DEMO_TASKS = (
    "What is 1234 * 5678, plus 17?",
    "What is 100 divided by 0?",
    "Hello! What can you do?",
)

DEFAULT_UI_PORT = 7341
"""``runnertrace ui``'s port: fixed, so bookmarks and an app's OTLP endpoint
(``http://127.0.0.1:7341/v1/traces``) survive a restart. Chosen apart from the
ports a user of this tool is likely running beside it: Phoenix 6006, OTLP
4317/4318, Jaeger 16686, Zipkin 9411, Langfuse and Grafana 3000, MLflow 5000."""

_CHECK_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red"}


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, exit code 1."""


# -- helpers -----------------------------------------------------------------------------------
def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped output (CI logs, files): wide enough for a full trace id column.
        console.width = 140
    return console


def load_cli_settings() -> Settings:
    """Load the configuration, turning every way a config file can be bad into ConfigError."""
    import yaml

    from runnertrace.tracing.config import load_settings

    source = os.environ.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE)
    try:
        return load_settings()
    except ConfigError:
        raise
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse {source}: {exc}") from None
    except ValueError as exc:  # e.g. a YAML file whose top level is not a mapping
        raise ConfigError(f"invalid runnertrace configuration in {source}: {exc}") from None


def _open_store(db: str | None) -> SpanStore:
    """The store ``--store``/``--db`` names, else ``trace.local.path``; a broken config is a
    warning here.

    Reading traces must keep working while the configuration is being fixed. The
    store is opened read-only: a viewer never creates, upgrades or rewrites a store.
    """
    from runnertrace.store import SpanStore

    return SpanStore(_store_path(db), read_only=True)


def _store_path(db: str | None) -> str:
    from runnertrace.tracing.config_env import default_store_path

    if db is not None:
        return db
    try:
        path: str = load_cli_settings().trace.local.path
    except ConfigError as exc:
        path = default_store_path()
        _console(stderr=True).print(
            Text(
                f"warning: {exc}\nreading the default store {path} "
                "(choose one with --store or --db)"
            ),
            style="yellow",
            soft_wrap=True,
        )
    return path


@contextmanager
def _reading(store: SpanStore) -> Iterator[None]:
    """A store that turns out unreadable while a viewer reads it: doctor's message and fix."""
    from runnertrace.exporters.local import is_busy, unreadable_fix
    from runnertrace.store import StoreError, StoreNotFoundError, StoreVersionError

    try:
        yield
    except (StoreNotFoundError, StoreVersionError):
        raise  # their messages say what to do
    except StoreError as exc:
        if is_busy(exc.__cause__) or not store.is_file:
            raise  # a database's message names its cause and fix already
        raise CommandError(f"{exc}; {unreadable_fix(store.path)}") from None


def _check_readable(store: SpanStore) -> None:
    """Refuse a store that cannot be read, with ``doctor``'s message and fix."""
    from runnertrace.exporters.local import reachable, readable

    if not store.is_file:
        check = reachable(store.url)
    elif store.path.is_file():
        check = readable(store.path)
    else:
        return
    if check.status == "fail":
        raise CommandError(
            check.detail if check.fix == "see the message" else f"{check.detail}; {check.fix}"
        )


def _shown(store: SpanStore) -> str:
    """Where ``store`` is, as the viewers print it."""
    return _display_path(store.path) if store.is_file else store.location


def _display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _runs_table(runs: Sequence[RunSummary], title: str) -> Table:
    table = Table(title=Text(title), title_justify="left", header_style="bold")
    table.add_column("time", no_wrap=True)
    table.add_column("agent")
    table.add_column("framework")
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("spans", justify="right")
    table.add_column("status", no_wrap=True)
    table.add_column("tokens", justify="right")
    table.add_column("cost", justify="right")
    table.add_column("trace id", no_wrap=True, style="dim")
    for run in runs:
        status = run.status
        if run.status == "ok" and run.error_count:
            status = f"ok ({run.error_count} err)"
        table.add_row(  # Text, not str: names from spans are not markup
            datetime.fromtimestamp(run.start_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S"),
            Text(run.agent or run.name),
            Text(run.framework or "-"),
            format_duration(run.duration_ns),
            str(run.span_count),
            Text(status, style=STATUS_STYLES.get(run.status, "")),
            str(run.tokens) if run.tokens else "-",
            _cost_text(run.cost_label, run.cost_status),
            run.trace_id,
        )
    return table


def _cost_text(label: str, status: str | None) -> Text:
    """A cost, in the warning colour when it misses unpriced calls."""
    return Text(label, style="yellow" if status in ("partial", "unpriced") else "")


def _totals_line(run: RunSummary) -> Text:
    """The run's numbers, as the root span carries them (nested runs included)."""
    line = Text("totals ", style="dim")
    line.append(f"{run.input_tokens:,} in / {run.output_tokens:,} out tokens")
    line.append(" · cost ", style="dim")
    line.append_text(_cost_text(run.cost_label, run.cost_status))
    if run.unpriced_models:
        line.append(f" (no price for {', '.join(run.unpriced_models)})", style="dim")
    line.append(" · ", style="dim")
    line.append(f"{_many(run.model_calls, 'model call')}, {_many(run.tool_calls, 'tool call')}")
    if run.errors:
        line.append(f", {run.errors} failed", style="red")
    if run.nested_runs:
        line.append(f" · {_many(run.nested_runs, 'nested run')}", style="dim")
    if run.derived and run.model_calls:
        line.append(" · summed from the model calls (the root span carries no totals)", "dim")
    return line


def _many(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _agents_table(accounts: Sequence[AgentAccount]) -> Table:
    """One row per agent: its own work, and with what it started."""
    table = Table(
        title=Text("per agent: own work / with what it started"),
        title_justify="left",
        header_style="bold",
    )
    table.add_column("agent")
    table.add_column("runs", justify="right")
    for name in ("model calls", "tokens in", "tokens out", "cost", "tool calls", "errors", "time"):
        table.add_column(name, justify="right")
    for account in accounts:
        own, total = account.own, account.total
        runs = str(account.runs)
        if account.cancelled:
            runs += f" ({account.cancelled} cancelled)"
        if account.failed:
            runs += f" ({account.failed} failed)"

        def pair(a: object, b: object) -> str:
            return str(a) if a == b else f"{a} / {b}"

        table.add_row(
            Text("  " * account.depth + account.agent),
            runs,
            pair(own.model_calls, total.model_calls),
            pair(f"{own.input_tokens:,}", f"{total.input_tokens:,}"),
            pair(f"{own.output_tokens:,}", f"{total.output_tokens:,}"),
            pair(own.cost_label, total.cost_label),
            pair(own.tool_calls, total.tool_calls),
            pair(own.errors, total.errors),
            pair(format_duration(own.duration_ns), format_duration(total.duration_ns)),
        )
    return table


# -- traces / show / report ------------------------------------------------------------------
def cmd_traces(args: argparse.Namespace, out: Console) -> int:
    store = _open_store(args.db)
    with _reading(store):
        runs = store.list_runs(args.n)
    if not runs:
        out.print(Text(f"No traces in {_shown(store)} yet."))
        return 0
    out.print(_runs_table(runs, f"Recent runs in {_shown(store)}"))
    return 0


def cmd_show(args: argparse.Namespace, out: Console) -> int:
    store = _open_store(args.db)
    with _reading(store):
        trace_id = store.resolve(args.trace)
        run = store.get_run(trace_id)
        tree = render_trace_tree(store.get_trace(trace_id), run)
        accounts = store.agents(trace_id)
    out.print(tree)
    out.print(_totals_line(run))
    if len(accounts) > 1 or run.nested_runs:
        out.print(_agents_table(accounts))
    return 0


def cmd_report(args: argparse.Namespace, out: Console) -> int:
    from runnertrace.report import write_report

    store = _open_store(args.db)
    with _reading(store):
        trace_id = store.resolve(args.trace)
    target = Path(args.output or f"report-{trace_id[:8]}.html")
    if not target.parent.is_dir():  # a typo in -o must not create directories
        raise CommandError(
            f"cannot write {target}: the directory {target.parent} does not exist; "
            "create it first, or choose another -o"
        )
    with _reading(store):
        path = write_report(store, trace_id, target)
    out.print(Text(f"Wrote {path.resolve()}"))
    return 0


# -- migrate -----------------------------------------------------------------------------------
def cmd_migrate(args: argparse.Namespace, out: Console) -> int:
    """Create or upgrade the store's schema: the one command that does (viewers never do)."""
    from runnertrace.store import SpanStore

    store = SpanStore(_store_path(args.db))
    try:
        before, after = store.migrate()
    finally:
        store.close()
    if before == after:
        out.print(Text(f"{_shown(store)} is at schema version {after}: nothing to do."))
    elif before == 0:
        out.print(Text(f"Created the trace store schema (version {after}) in {_shown(store)}."))
    else:
        out.print(Text(f"Upgraded {_shown(store)} from schema version {before} to {after}."))
    return 0


# -- prune / copy ------------------------------------------------------------------------------
def cmd_prune(args: argparse.Namespace, out: Console) -> int:
    """Remove the runs older than ``--older-than``, in bounded steps (either engine)."""
    from runnertrace.store import SpanStore
    from runnertrace.store.retention import parse_age, prune

    try:
        age = parse_age(args.older_than)
    except ValueError as exc:
        raise CommandError(f"--older-than: {exc}") from None
    store = SpanStore(_store_path(args.db))
    try:
        if not store.exists():
            raise CommandError(f"no trace store at {_shown(store)}: nothing to prune")
        result = prune(store, age, vacuum=not args.no_vacuum)
    finally:
        store.close()
    if result.busy:
        out.print(Text(f"Another process is pruning {_shown(store)}; left to it."))
        return 0
    out.print(
        Text(
            f"Pruned {_many(result.runs, 'run')} ({_many(result.spans, 'span')}, "
            f"{_many(result.metric_points, 'metric point')}) older than {args.older_than} "
            f"from {_shown(store)}."
        )
    )
    return 0


def cmd_copy(args: argparse.Namespace, out: Console) -> int:
    """Copy a SQLite store into the PostgreSQL store ``--store`` names; resumable."""
    from runnertrace.store import SpanStore
    from runnertrace.store.copy import CopyResult, copy_store

    source = SpanStore(args.source, read_only=True)
    target = SpanStore(_store_path(args.db))

    def progress(result: CopyResult) -> None:
        out.print(Text(f"copied {result.traces} traces ({result.spans} spans)"))
        out.file.flush()

    try:
        if not source.is_file:
            raise CommandError(f"copy reads a SQLite file; {source.location} is not one")
        if target.is_file:
            raise CommandError(
                f"copy writes to a PostgreSQL store: name it with --store postgresql://...; "
                f"{target.location} is a file"
            )
        with _reading(source):
            result = copy_store(
                source,
                target,
                batch=args.batch,
                max_batches=args.max_batches,
                progress=progress if args.progress else None,
            )
    finally:
        source.close()
        target.close()
    resumed = f" (resumed after trace {result.resumed_after})" if result.resumed_after else ""
    state = "done" if result.done else "stopped early: run the same command again to go on"
    out.print(
        Text(
            f"Copied {_many(result.traces, 'trace')} ({_many(result.spans, 'span')}, "
            f"{_many(result.metric_points, 'metric point')}) from {_shown(source)} to "
            f"{_shown(target)}{resumed}; {state}."
        )
    )
    return 0


# -- demo --------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace, out: Console) -> int:
    from runnertrace._internal.imports import MissingExtraError
    from runnertrace.tracing.setup import build_backends

    settings = load_cli_settings()
    settings.trace.enabled = True  # the demo exists to show a traced run
    # Its prompts and replies are scripted, so there is nothing to hide, and a first
    # dashboard with the conversation in it shows what the product is for.
    settings.trace.capture_content = True
    if args.db is not None:
        settings.trace.local.path = args.db
    try:  # what the run's tracing would only log: here it is the answer, in one line
        build_backends(settings.trace.model_copy(deep=True))
    except MissingExtraError as exc:  # its message names the extra to install
        raise CommandError(str(exc)) from None
    return asyncio.run(_demo(settings, stream=args.stream, out=out))


async def _demo(settings: Settings, *, stream: bool, out: Console) -> int:
    from runnertrace.core import Runtime, Session
    from runnertrace.core.models import AgentRequestText
    from runnertrace.report import write_report
    from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
    from runnertrace.tracing import get_tracing_setup
    from runnertrace.tracing.setup import sdk_disabled

    trace = settings.trace
    runtime = Runtime(settings=settings)
    native = Agent(
        ScriptedLlm(),
        tools=[calculator],
        instructions="Answer arithmetic questions with the calculator tool.",
        name="demo",
    )
    agent = NativeModule([native], runtime=runtime).get(native)
    setup = get_tracing_setup(trace)
    from runnertrace.store import SpanStore

    store = SpanStore(trace.local.path) if "local" in trace.types else None
    if store is not None:
        if store.is_file:
            _check_writable(store.path)
        _check_readable(store)
    session_id = f"demo-{uuid.uuid4().hex[:8]}"
    mode = "stream" if stream else "run"
    destination = ", ".join(trace.types)
    if store is not None:
        destination = destination.replace("local", f"local ({_shown(store)})", 1)
    out.print(
        Text.assemble(
            ("runnertrace demo", "bold"),
            f": the native agent with an offline scripted model, {mode} mode, traced to ",
            (destination, "bold"),
            ", content captured (the demo's data is scripted; your own runs capture none "
            "unless trace.capture_content is true)",
        )
    )
    if setup.disabled:
        why = "OTEL_SDK_DISABLED=true" if sdk_disabled() else "the error above"
        out.print(Text(f"Tracing is off ({why}), so no spans are recorded.", "yellow"))

    session = Session(session_id)
    for number, prompt in enumerate(DEMO_TASKS, 1):
        out.rule(f"task {number}/{len(DEMO_TASKS)}", style="dim")
        out.print(Text.assemble(("you   ", "bold cyan"), prompt))
        request = [AgentRequestText(prompt=prompt)]
        if stream:
            await _stream_task(runtime, agent, session, request, out)
        else:
            reply = await runtime.run(agent, session, request)
            out.print(Text.assemble(("agent ", "bold green"), str(reply)))
        if setup.disabled:
            continue
        setup.flush()
        if _report_lost(trace.types, out) or store is None:
            continue
        runs = [r for r in store.list_runs(50) if r.session_id == session_id]
        if len(runs) < number:
            out.print(
                f"[yellow]The run's spans have not reached {_shown(store)} within "
                f"trace.flush_timeout_s ({trace.flush_timeout_s:g}s).[/]"
            )
            continue
        run = runs[0]  # newest first: this task's run
        out.print(render_trace_tree(store.get_trace(run.trace_id), run))
        folder = store.path.parent if store.is_file else Path()
        report = write_report(store, run.trace_id, folder / f"report-{run.trace_id[:8]}.html")
        out.print(Text.assemble(("report ", "dim"), _display_path(report)))
    out.rule(style="dim")
    if store is not None and not setup.disabled:
        command = _command_name()
        for line in _next_lines(command):
            out.print(line, soft_wrap=True)
    elif not setup.disabled and not drops.lost_spans():
        out.print(Text(f"Spans went to {destination}; add local to trace.type to see trees here."))
    setup.flush()
    return 1 if drops.lost_spans() else 0


def _next_lines(command: str) -> list[Text]:
    """What a newcomer does after the demo: look at the runs, open the dashboard, trace their own.

    Why spelled out here: the demo is the first thing run on a fresh machine, and
    its last lines are the only documentation sure to be read.
    """
    import importlib.util

    # The install step only where the dashboard is missing (the README's first command has it).
    has_ui = all(importlib.util.find_spec(name) for name in ("starlette", "uvicorn"))
    install = () if has_ui else (("pip install 'runnertrace[ui]'", "bold"), ", then ")
    return [
        Text.assemble(
            "Next: ",
            (f"{command} traces", "bold"),
            " lists the runs, ",
            (f"{command} show last", "bold"),
            " draws the latest one (from any directory).",
        ),
        Text.assemble(
            "Dashboard: ",
            *install,
            (f"{command} ui", "bold"),
            f" (http://127.0.0.1:{DEFAULT_UI_PORT}/).",
        ),
        Text.assemble(
            "Your own app: ",
            ("RUNNERTRACE_TRACE__ENABLED=true RUNNERTRACE_TRACE__CAPTURE_CONTENT=true", "bold"),
            " traces it with prompts and replies (or trace.enabled and trace.capture_content "
            "in runnertrace.yaml).",
        ),
    ]


_LOST_FIX = {"local": "or choose another store with trace.local.path (or --db)"}


def _report_lost(types: Sequence[str], out: Console) -> bool:
    """Say plainly which backends lost spans so far (the demo must not claim delivery).

    The cause is not guessed here: the backend's own warning line above names it
    (a locked store, a refused export, ...).
    """
    from runnertrace.tracing import drops

    lost = {name: drops.lost_spans(name) for name in types}
    for name, count in lost.items():
        if count:
            out.print(
                Text(
                    f"{count} span(s) could not be delivered to {name}: the warning above says "
                    f"why; {_LOST_FIX.get(name, '`runnertrace doctor` checks each backend')}.",
                    "yellow",
                )
            )
    return any(lost.values())


async def _stream_task(
    runtime: Any, agent: Any, session: Any, request: list[Any], out: Console
) -> None:
    """Stream one task, printing text as it arrives and tool calls as they happen."""
    tools: dict[str, str] = {}
    out.print(Text("agent ", style="bold green"), end="")
    async for chunk in runtime.stream(agent, session, request):
        event = chunk.event
        if chunk.delta:
            out.print(Text(chunk.delta), end="", soft_wrap=True)
        elif event is not None and event.type == "tool_call_start":
            tools[event.tool_call_id] = event.tool_name
        elif event is not None and event.type == "tool_call_result":
            name = tools.get(event.tool_call_id, "tool")
            marker = "✗" if event.is_error else "→"
            out.print(Text(f"[{name} {marker} {event.content}] ", style="dim"), end="")
    out.print()


def _command_name() -> str:
    """How to type this command again: ``runnertrace`` if it is on PATH, else its path.

    A fresh clone has it in ``.venv/bin``, which is not on PATH until the venv is
    activated; the hint must work when pasted.
    """
    import shutil

    script = Path(sys.argv[0])
    found = shutil.which("runnertrace")
    if script.name != "runnertrace" or (found and Path(found).resolve() == script.resolve()):
        return "runnertrace"
    return _display_path(script.absolute())


def _check_writable(path: Path) -> None:
    """Fail early, naming the place, when the store cannot be created or written."""
    from runnertrace.exporters.local import writable

    check = writable(path)
    if check.status == "fail":
        raise CommandError(
            f"cannot write the trace store: {check.detail}. Choose another place with "
            "trace.local.path in runnertrace.yaml or RUNNERTRACE_TRACE__LOCAL__PATH=/some/traces.db"
        )


# -- doctor ------------------------------------------------------------------------------------
def cmd_doctor(args: argparse.Namespace, out: Console) -> int:
    from runnertrace.tracing.backend import Check

    settings = load_cli_settings()
    trace = settings.trace
    if args.db is not None:
        trace.local.path = args.db
    source = os.environ.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE)
    config_line = source if Path(source).is_file() else "none found (using defaults and env vars)"
    out.print(Text.assemble(("config file  ", "bold"), config_line))
    out.print(
        Text.assemble(
            ("tracing      ", "bold"),
            "enabled by the configuration"
            if trace.enabled
            else "off in the configuration (trace.enabled: false): set trace.enabled: true to "
            "trace every run; runners wrapped in code with traced() are traced either way",
        )
    )
    out.print(Text.assemble(("trace.type   ", "bold"), ", ".join(trace.types)))
    out.print(
        Text.assemble(
            ("trace store  ", "bold"), _shown_setting(trace.local.path), " (trace.local.path)"
        )
    )
    checks: list[Check] = []
    for name in trace.types:
        checks.extend(_backend_checks(name, trace))
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        checks.append(
            Check(
                "otel",
                "sdk",
                "warn",
                "OTEL_SDK_DISABLED=true: no spans are recorded",
                fix="unset OTEL_SDK_DISABLED",
            )
        )
    table = Table(header_style="bold")
    for column in ("backend", "check", "status", "detail", "fix"):
        table.add_column(column, overflow="fold")
    for check in checks:
        table.add_row(  # Text, not str: a "[...]" in a message is not markup
            Text(check.backend),
            Text(check.name),
            Text(check.status, style=_CHECK_STYLES.get(check.status, "")),
            Text(check.detail),
            Text(check.fix),
        )
    out.print(table)
    failed = sum(c.status == "fail" for c in checks)
    if failed:
        out.print(f"[bold red]{failed} check(s) failed.[/]")
        return 1
    out.print("[green]All checks passed.[/]")
    return 0


def _shown_setting(location: str) -> str:
    """A store setting as printed: a URL without its password."""
    from runnertrace.store import StoreError, StoreUrl

    try:
        return StoreUrl.parse(location).shown
    except StoreError:
        return location


def _backend_checks(name: str, trace: Any) -> list[Check]:
    """Build one backend and run its checks; a backend that cannot be built is a failed check."""
    from runnertrace.tracing.backend import Check
    from runnertrace.tracing.setup import build_backends

    try:
        backends = build_backends(trace.model_copy(update={"type": name}), validate=False)
    except (ConfigError, ImportError) as exc:
        return [
            Check(
                name,
                "load",
                "fail",
                str(exc),
                fix="see the message; fix trace.type or install the extra",
            )
        ]
    checks: list[Check] = []
    for backend in backends:
        try:
            checks.extend(backend.check())
        except Exception as exc:  # noqa: BLE001 - a crashing check is itself a finding
            checks.append(
                Check(backend.name, "check", "fail", f"check() raised {type(exc).__name__}: {exc}")
            )
    return checks


# -- dashboards --------------------------------------------------------------------------------
def cmd_dashboards(args: argparse.Namespace, out: Console) -> int:
    settings = load_cli_settings()
    try:
        from runnertrace.exporters import cloudwatch
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.startswith("runnertrace"):
            raise CommandError("CloudWatch support is not available in this build") from None
        raise CommandError(
            f"{exc.name} is not installed; install it with: pip install 'runnertrace[cloudwatch]'"
        ) from None
    except ImportError as exc:  # MissingExtraError: its message names the extra
        raise CommandError(str(exc)) from None
    deploy: Callable[..., Any] | None = getattr(cloudwatch, "deploy_dashboard", None)
    if deploy is None:
        raise CommandError("this build of runnertrace cannot deploy CloudWatch dashboards")
    try:
        result = deploy(args.name, settings.trace)
    except (ConfigError, CommandError):
        raise
    except Exception as exc:  # noqa: BLE001 - AWS errors are reported, not tracebacks
        raise CommandError(
            f"deploying dashboard {args.name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    out.print(Text.assemble("Deployed CloudWatch dashboard ", (args.name, "bold"), "."))
    messages = result.get("DashboardValidationMessages") if isinstance(result, dict) else None
    for message in messages or []:
        out.print(Text(f"warning: {message.get('Message', message)}", style="yellow"))
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, 1 or more; got {text!r}")
    return value


def cmd_ui(args: argparse.Namespace, out: Console) -> int:
    from runnertrace._internal.imports import MissingExtraError
    from runnertrace.ui import serve

    for flag, value in (("--port", args.port), ("--otlp-grpc-port", args.otlp_grpc_port or 0)):
        if not 0 <= value <= 65535:
            raise CommandError(f"{flag} {value} is out of range: 0 to 65535")
    store = _open_store(args.db)
    _check_readable(store)  # before a URL is printed or a server started
    try:
        return serve(
            store.url,
            host=args.host,
            port=args.port,
            open_browser=not args.no_open,
            out=out.file,
            allow_hosts=args.allow_host,
            grpc_port=args.otlp_grpc_port,
        )
    except (MissingExtraError, ValueError) as exc:  # a missing extra; a bad token setting
        raise CommandError(str(exc)) from None
    except OSError as exc:
        if not str(exc).startswith("cannot listen on"):
            raise
        # The port is taken (often by another dashboard): one line, naming the flag.
        raise CommandError(f"{exc}; choose another port with --port N (0: any free one)") from None


# -- entry point -------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runnertrace",
        description="Tracing for AI agent runners: demo, local trace viewer and diagnostics.",
    )
    parser.add_argument("--version", action="version", version=f"runnertrace {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, **kwargs: Any) -> argparse.ArgumentParser:
        # The same line in `runnertrace --help` and as the command's own description.
        return sub.add_parser(name, help=summary, description=summary + ".", **kwargs)

    # One --store (alias --db) for every command that reads the store.
    store_parent = argparse.ArgumentParser(add_help=False)
    store_parent.add_argument(
        "--store",
        "--db",
        dest="db",
        metavar="PATH|URL",
        help="the store to read: a SQLite file or a postgresql:// URL (default: "
        "trace.local.path, a per-user SQLite file)",
    )
    trace_help = "'last' (the default), a trace id, or a unique prefix of one"

    demo = command("demo", "run the native agent offline, traced, and show its spans")
    demo.add_argument("--stream", action="store_true", help="run in stream mode")
    demo.add_argument(
        "--store",
        "--db",
        dest="db",
        metavar="PATH|URL",
        help="the store to trace into: a SQLite file or a postgresql:// URL (default: "
        "trace.local.path, a per-user SQLite file)",
    )
    demo.set_defaults(func=cmd_demo)

    traces = command("traces", "list recent runs in the local store", parents=[store_parent])
    traces.add_argument(
        "-n", type=_positive_int, default=20, metavar="N", help="how many runs (default 20)"
    )
    traces.set_defaults(func=cmd_traces)

    show = command("show", "draw a trace's span tree", parents=[store_parent])
    show.add_argument("trace", nargs="?", default="last", help=trace_help)
    show.set_defaults(func=cmd_show)

    report = command(
        "report", "write a self-contained HTML waterfall of a trace", parents=[store_parent]
    )
    report.add_argument("trace", nargs="?", default="last", help=trace_help)
    report.add_argument("-o", "--output", help="the HTML file (default report-<id>.html)")
    report.set_defaults(func=cmd_report)

    migrate = command(
        "migrate",
        "create or upgrade the store's schema (the viewers never do)",
        parents=[store_parent],
    )
    migrate.set_defaults(func=cmd_migrate)

    prune_ = command(
        "prune", "remove the runs older than an age from the store", parents=[store_parent]
    )
    prune_.add_argument(
        "--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 2w (s m h d w)"
    )
    prune_.add_argument(
        "--no-vacuum", action="store_true", help="leave reclaiming the room to the database"
    )
    prune_.set_defaults(func=cmd_prune)

    copy = command(
        "copy",
        "copy a SQLite store into the PostgreSQL store --store names (resumable)",
        parents=[store_parent],
    )
    copy.add_argument("source", metavar="SQLITE_FILE", help="the SQLite store to copy")
    copy.add_argument(
        "--batch", type=_positive_int, default=200, metavar="N", help="traces per step"
    )
    copy.add_argument("--max-batches", type=_positive_int, metavar="N", help="stop after N steps")
    copy.add_argument("--progress", action="store_true", help="a line per step")
    copy.set_defaults(func=cmd_copy)

    doctor = command("doctor", "check the configuration and each backend", parents=[store_parent])
    doctor.set_defaults(func=cmd_doctor)

    dashboards = command("dashboards", "deploy a dashboard to a backend")
    dashboards.add_argument("target", choices=["cloudwatch"])
    dashboards.add_argument("--name", required=True, help="the dashboard name")
    dashboards.set_defaults(func=cmd_dashboards)

    ui = command("ui", "open a local dashboard of the runs in the store", parents=[store_parent])
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ui.add_argument(
        "--port",
        type=int,
        default=DEFAULT_UI_PORT,
        help=f"port (default {DEFAULT_UI_PORT}; 0: a free one)",
    )
    ui.add_argument("--no-open", action="store_true", help="do not open a browser")
    ui.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a further Host name the dashboard answers to (repeatable)",
    )
    ui.add_argument(
        "--otlp-grpc-port",
        type=int,
        metavar="PORT",
        help="also take OTLP over gRPC on this port (e.g. 4317; the grpc extra)",
    )
    ui.set_defaults(func=cmd_ui)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from runnertrace._internal.imports import MissingExtraError
    from runnertrace.store import StoreError, TraceNotFoundError

    args = build_parser().parse_args(argv)
    out, err = _console(), _console(stderr=True)
    try:
        code: int = args.func(args, out)
    except ConfigError as exc:
        err.print(Text(str(exc), style="red"), soft_wrap=True)
        return 2
    except (CommandError, StoreError, TraceNotFoundError, OSError, MissingExtraError) as exc:
        err.print(Text(f"error: {exc}", style="red"), soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
