"""Backends found through the ``runnertrace.backends`` entry-point group, with their own sections.

The third-party backend here is really installed: a package and a ``.dist-info``
directory with ``entry_points.txt`` are written to a temporary directory on
``sys.path``, which is how ``importlib.metadata`` finds any installed
distribution. Nothing of ours is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from tests.otlp_fixtures import NATIVE_SPAN_COUNTS, traced_run

from runnertrace.cli import main
from runnertrace.exporters.local import LocalConfig
from runnertrace.tracing.backend_registry import (
    BUILTIN_BACKENDS,
    ENTRY_POINT_GROUP,
    backend_names,
    clear_backend_registry,
    load_backend,
)
from runnertrace.tracing.config import ConfigError, TraceConfig, load_settings
from runnertrace.tracing.setup import get_tracing_setup

REPO = Path(__file__).resolve().parent.parent.parent

BACKEND_MODULE = '''
"""A third-party backend: spans to memory, a label from its own trace.{name} section."""

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import Field

from runnertrace.tracing.backend import Backend, BackendSettings, Check

EXPORTERS = []


class {model}(BackendSettings):
    label: str = "unset"
    tags: list[str] = Field(default_factory=list)
    retries: int = Field(0, ge=0)


class {cls}(Backend):
    name = "{name}"
    config_model = {model}

    @property
    def settings(self):
        return self.trace_config.section(self.name, {model})

    def exporter(self):
        exporter = InMemorySpanExporter()
        EXPORTERS.append(exporter)
        return exporter

    def resource_attributes(self):
        return {{"{name}.label": self.settings.label, "{name}.tags": self.settings.tags}}

    def check(self):
        return [Check(self.name, "label", "ok", f"label is {{self.settings.label}}")]
'''


def install(
    site: Path,
    dist: str,
    backends: dict[str, str],
    *,
    module: str | None = None,
    cls: str = "ThirdPartyBackend",
    name: str | None = None,
) -> None:
    """Install distribution ``dist`` into ``site``: its entry points, and a backend module."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"  # as wheels name it
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{key} = {target}\n" for key, target in backends.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    if module is not None:
        backend_name = name or next(iter(backends))
        source = BACKEND_MODULE.format(name=backend_name, cls=cls, model=f"{cls}Config")
        (site / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` to install distributions into; the registry forgets it after."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    clear_backend_registry()
    yield path
    for module in [m for m in sys.modules if m.startswith("rt_thirdparty")]:
        del sys.modules[module]
    clear_backend_registry()


@pytest.fixture
def thirdparty(site: Path) -> Path:
    install(
        site,
        "rt-thirdparty",
        {"mybackend": "rt_thirdparty:ThirdPartyBackend"},
        module="rt_thirdparty",
    )
    return site


def exporters() -> list[object]:
    return list(sys.modules["rt_thirdparty"].EXPORTERS)


# -- built-ins -------------------------------------------------------------------------------------
def test_builtins_are_declared_as_entry_points_and_the_fallback_table_agrees() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared[ENTRY_POINT_GROUP] == dict(BUILTIN_BACKENDS)
    installed = {
        point.name: point.value
        for point in entry_points(group=ENTRY_POINT_GROUP)
        if point.dist is not None and point.dist.name == "runnertrace"
    }
    assert installed == dict(BUILTIN_BACKENDS)
    for name in BUILTIN_BACKENDS:
        assert load_backend(name).name == name


def test_an_unknown_section_or_key_is_named_with_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(trace={"langfus": {"secret_key": "sk-hidden"}, "enabeld": True})
    message = str(caught.value)
    assert "trace.langfus: unknown key; did you mean 'langfuse'?" in message
    assert "sk-hidden" not in message  # a mistyped section may hold a secret
    assert "trace.enabeld: unknown key (value True); did you mean 'enabled'?" in message
    assert "cloudwatch, console, langfuse, local, logfire, openllmetry, otlp" in message
    with pytest.raises(
        ConfigError, match=r"trace\.langfuse\.public_kye: unknown key \(value 'p'\)"
    ):
        load_settings(trace={"langfuse": {"public_kye": "p"}})


def test_sections_come_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNERTRACE_TRACE__LANGFUSE__PUBLIC_KEY", "pk-env")
    monkeypatch.setenv("RUNNERTRACE_TRACE__LANGFUSE__TAGS", '["prod", "eu"]')
    monkeypatch.setenv("RUNNERTRACE_TRACE__OTLP__HEADERS", '{"x-team": "a"}')
    trace = load_settings().trace
    assert trace.langfuse.public_key == "pk-env"
    assert trace.langfuse.tags == ["prod", "eu"]
    assert trace.otlp.headers == {"x-team": "a"}
    monkeypatch.setenv("RUNNERTRACE_TRACE__LOCAL__MAX_QUEUE_SIZE", "0")
    with pytest.raises(ConfigError, match=r"trace\.local\.max_queue_size: invalid value '0'"):
        load_settings()


def test_a_section_not_given_reads_as_defaults_that_can_be_changed() -> None:
    config = TraceConfig(type="tests.backends.MemoryBackend")
    setup = get_tracing_setup(config)
    assert config.section("local", LocalConfig) == LocalConfig()
    assert config.langfuse.tags == []  # read: the defaults are stored now
    assert get_tracing_setup(config) is setup  # ... which is still the same pipeline
    config.local.path = "elsewhere.db"
    assert config.section("local", LocalConfig).path == "elsewhere.db"
    assert get_tracing_setup(config) is not setup
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = config.nonsense


# -- a third-party backend -------------------------------------------------------------------------
async def test_a_third_party_backend_gets_its_own_validated_section(thirdparty: Path) -> None:
    (Path.cwd() / "runnertrace.yaml").write_text(
        "trace:\n  enabled: true\n  type: mybackend\n"
        "  mybackend:\n    label: from-yaml\n    tags: [a, b]\n"
    )
    trace = load_settings().trace
    assert "mybackend" in backend_names()
    assert trace.mybackend.label == "from-yaml"
    await traced_run(trace)
    assert get_tracing_setup(trace).flush()
    [exporter] = exporters()
    spans = exporter.get_finished_spans()  # type: ignore[attr-defined]
    names = [span.name for span in spans]
    assert {name: names.count(name) for name in set(names)} == NATIVE_SPAN_COUNTS
    resource = spans[0].resource.attributes
    assert resource["mybackend.label"] == "from-yaml"
    assert tuple(resource["mybackend.tags"]) == ("a", "b")


def test_a_third_party_section_is_checked_like_a_builtin_one(
    thirdparty: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(trace={"type": "mybackend", "mybackend": {"labl": "x", "retries": -1}})
    message = str(caught.value)
    assert (
        "trace.mybackend.labl: unknown key (value 'x'); did you mean 'label'? expected one of"
        in message
    )
    assert "trace.mybackend.retries: invalid value -1" in message
    monkeypatch.setenv("RUNNERTRACE_TRACE__MYBACKEND__LABEL", "from-env")
    monkeypatch.setenv("RUNNERTRACE_TRACE__MYBACKEND__TAGS", '["x"]')
    trace = load_settings(trace={"type": "mybackend"}).trace
    assert (trace.mybackend.label, trace.mybackend.tags) == ("from-env", ["x"])
    with pytest.raises(
        ConfigError,
        match=r"unknown trace type 'mybackendd'; did you mean 'mybackend'\? expected one of .*",
    ):
        load_settings(trace={"type": "mybackendd"})
    with pytest.raises(ConfigError, match=r"console, langfuse, local, logfire, mybackend, open"):
        load_settings(trace={"type": "mybackendd"})


def test_doctor_runs_a_third_party_backends_checks(
    thirdparty: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    (Path.cwd() / "runnertrace.yaml").write_text(
        "trace:\n  type: [mybackend]\n  mybackend:\n    label: shown-by-doctor\n"
    )
    assert main(["doctor"]) == 0
    assert "label is shown-by-doctor" in capsys.readouterr().out


def test_a_name_registered_twice_is_refused_when_used(site: Path) -> None:
    install(site, "rt-thirdparty-a", {"twice": "rt_thirdparty_a:A", "local": "rt_thirdparty_a:L"})
    install(site, "rt-thirdparty-b", {"twice": "rt_thirdparty_b:B"})
    for name, dists in (
        ("twice", ("rt-thirdparty-a", "rt-thirdparty-b")),
        ("local", ("runnertrace", "rt-thirdparty-a")),
    ):
        with pytest.raises(ConfigError, match="registered more than once") as caught:
            load_backend(name)
        for dist in dists:
            assert f"(from {dist})" in str(caught.value)
    assert load_backend("console").name == "console"  # the others still load


def test_broken_registrations_name_the_entry_and_the_cause(site: Path) -> None:
    install(site, "rt-thirdparty-missing", {"gone": "rt_thirdparty_nowhere:Backend"})
    install(
        site,
        "rt-thirdparty-renamed",
        {"renamed": "rt_thirdparty_renamed:ThirdPartyBackend"},
        module="rt_thirdparty_renamed",
        name="other",
    )
    with pytest.raises(ConfigError, match=r"trace\.type: cannot load backend 'gone': No module"):
        load_backend("gone")
    with pytest.raises(ConfigError, match=r"trace\.gone: cannot load backend 'gone'"):
        load_settings(trace={"gone": {}})
    with pytest.raises(ConfigError, match=r"whose name is 'other'; set name = 'renamed'"):
        load_backend("renamed")


def test_resolution_is_lazy(thirdparty: Path) -> None:
    """Listing backends imports none; loading one imports its module and no other backend."""
    probe = textwrap.dedent(
        """
        import json, sys
        from runnertrace.tracing.backend_registry import backend_names, load_backend
        from runnertrace.tracing.config import load_settings

        def loaded():
            return sorted(
                m for m in sys.modules
                if m.startswith(("runnertrace.exporters.", "rt_thirdparty", "boto3"))
            )

        names = backend_names()
        load_settings(trace={"type": ["mybackend", "langfuse"]})
        after_validation = loaded()
        load_backend("mybackend")
        after_one = loaded()
        load_settings(trace={"mybackend": {"label": "x"}})
        print(json.dumps([names, after_validation, after_one, loaded()]))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(thirdparty), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    names, after_validation, after_one, after_section = json.loads(result.stdout)
    assert "mybackend" in names and "cloudwatch" in names
    assert after_validation == []
    assert after_one == ["rt_thirdparty"]
    assert after_section == ["rt_thirdparty"]
