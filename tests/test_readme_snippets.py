"""Every code block of the README and of docs/ runs (or, for a shell one, at least parses).

Why: a snippet a reader copies must be a whole program, with its imports, its
provider and its flush. Each ``python`` block runs in a fresh interpreter, in a
directory of its own, offline: the dashboard's OTLP address in it
(``http://127.0.0.1:7341``) is pointed at a loopback receiver, and a block that
exports there must deliver spans. Each ``yaml`` block is a ``runnertrace.yaml``
the settings model takes. Each ``bash`` block is parsed with ``bash -n``; one
made only of ``runnertrace`` commands (and ``export RUNNERTRACE_...`` lines)
runs, after a demo filled the store. Before a block, a
line ``<!-- snippet: parse-only: <why> -->`` (a shell block: it installs, or
serves until stopped) or ``<!-- snippet: skip: <why> -->`` (a python block that
cannot run offline) is honoured; a marker without a reason is refused.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DASHBOARD = "http://127.0.0.1:7341"
FENCE = re.compile(
    r"(?:^<!-- snippet: (?P<marker>[\w-]+)(?P<reason>: [^\n]*?)? -->\n)?"
    r"^```(?P<lang>python|bash|yaml)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
CLI_LINE = re.compile(r"^(?:\.venv/bin/)?runnertrace\s|^export\s+RUNNERTRACE_\w+=")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str
    marker: str | None
    reason: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            found.append(
                Block(
                    path,
                    text.count("\n", 0, match.start("code")),
                    match.group("lang"),
                    match.group("code"),
                    match.group("marker"),
                    (match.group("reason") or "").removeprefix(": ").strip() or None,
                )
            )
    return found


BLOCKS = blocks()
PYTHON = [b for b in BLOCKS if b.lang == "python"]
SHELL = [b for b in BLOCKS if b.lang == "bash"]
YAML = [b for b in BLOCKS if b.lang == "yaml"]


def _commands(block: Block) -> list[str]:
    lines = (line.strip() for line in block.code.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _runs(block: Block) -> bool:
    """A shell block of runnertrace commands only, not marked: the test runs it."""
    return block.marker != "parse-only" and all(CLI_LINE.match(c) for c in _commands(block))


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNNERTRACE_", "OTEL_", "LANGFUSE_", "LOGFIRE_", "AWS_"))
        and k != "OPENAI_API_KEY"
    }
    # An absolute path: the block runs from a temporary directory.
    env["PYTHONPATH"] = str(ROOT / "src")
    env["XDG_DATA_HOME"] = str(home / "data")
    env["HOME"] = str(home)
    return env


def test_the_documents_hold_blocks_of_both_kinds_and_every_marker_says_why() -> None:
    assert len(PYTHON) >= 2 and len(SHELL) >= 5, [b.name for b in BLOCKS]
    # the terminal viewers of the README run for real, not only parse
    assert any(_runs(b) and "show last" in b.code for b in SHELL if b.path.name == "README.md")
    for block in BLOCKS:
        if block.marker is not None:
            assert block.marker in ("parse-only", "skip"), block.name
            assert block.reason, f"{block.name}: a {block.marker} marker must say why"
            assert (block.marker == "skip") == (block.lang == "python"), block.name
    assert YAML, "the configuration examples are yaml blocks"


@pytest.mark.parametrize("block", YAML, ids=lambda b: b.name)
def test_a_configuration_block_is_a_valid_runnertrace_yaml(block: Block) -> None:
    """A ``runnertrace.yaml`` shown is one the settings model takes as it is."""
    import yaml

    from runnertrace.tracing.config import Settings

    Settings(**yaml.safe_load(block.code))


@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.name)
def test_a_python_block_runs_offline_as_it_is(block: Block, tmp_path: Path) -> None:
    if block.marker == "skip":
        pytest.skip(f"{block.name}: {block.reason}")
    with OtlpReceiver() as receiver:
        code = block.code.replace(DASHBOARD, receiver.url)
        (tmp_path / "snippet.py").write_text(code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "snippet.py"],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"{block.name}:\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        if DASHBOARD in block.code:  # it says it sends to the dashboard: it must
            assert receiver.spans, f"{block.name} exported nothing to {DASHBOARD}"


@pytest.fixture(scope="module")
def filled_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user whose store the demo filled, and a ``runnertrace`` on PATH as installed."""
    home = tmp_path_factory.mktemp("reader")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    script = bin_dir / "runnertrace"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m runnertrace.cli "$@"\n')
    script.chmod(0o755)
    done = subprocess.run(
        [str(script), "demo"], cwd=home, env=_env(home), capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return home


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.name)
def test_a_shell_block_parses_and_a_runnertrace_one_runs(block: Block, filled_home: Path) -> None:
    parsed = subprocess.run(
        ["bash", "-n"], input=block.code, capture_output=True, text=True, check=False
    )
    assert parsed.returncode == 0, f"{block.name}: {parsed.stderr}"
    if not _runs(block):
        return  # it installs, serves or starts another product: parsed is all a test can do
    env = _env(filled_home)
    env["PATH"] = f"{filled_home / 'bin'}{os.pathsep}{env['PATH']}"
    code = "set -e\n" + block.code.replace(".venv/bin/runnertrace", "runnertrace")
    done = subprocess.run(
        ["bash", "-c", code],
        cwd=filled_home,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"{block.name}:\n{done.stdout}\n{done.stderr}"


SNIPPETS_JS = ROOT / "src" / "runnertrace" / "ui" / "static" / "snippets.js"
FRAMEWORK_ROW = re.compile(r'\["[^"]+", "(\w+)", "(\w+Module)", "(\w+)"')


def test_the_empty_dashboards_snippets_name_modules_and_examples_that_exist() -> None:
    """The code an empty dashboard offers per framework imports what it says, where installed."""
    import importlib

    rows = FRAMEWORK_ROW.findall(SNIPPETS_JS.read_text(encoding="utf-8"))
    assert len(rows) == 7, rows
    for package, module_class, _ in rows:
        assert (ROOT / "examples" / f"{package}_agent.py").is_file(), package
        module = f"runnertrace.runners.{package}"
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:  # the framework's extra is not installed here (CrewAI)
            assert "pip install" in str(exc), exc
            continue
        assert hasattr(loaded, module_class), f"{module} has no {module_class}"
