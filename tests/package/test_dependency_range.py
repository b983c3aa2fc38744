"""The dependency range we declare is the one we test, and an OTel below it fails clearly.

``.ci/floor`` runs the tracing and exporter tests with every declared lower bound
pinned (``.ci/floor-constraints.txt``); these tests keep that file, pyproject.toml
and the import-time check in ``runnertrace._internal.imports`` saying the same
thing. An OpenTelemetry below the floor, or one that breaks our imports anyway,
must surface as an ``ImportError`` naming the package and version, never as an
``AttributeError`` (which a lazy ``runnertrace.TracingRunner`` would turn into
"no attribute", and ``hasattr`` into a silent ``False``).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from tests.otlp_receiver import OtlpReceiver

from runnertrace._internal.imports import OTEL_CAP, OTEL_FLOOR, OTEL_RANGE, release
from runnertrace.exporters.otlp import ScopedSession

ROOT = Path(__file__).resolve().parents[2]
OTEL_DECLARED = (
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry-proto",
)
#: Extras whose lower bound the floor run also installs (`.ci/floor`).
FLOOR_EXTRAS = ("openai",)


def project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"])


def requirements(*, floor_only: bool) -> dict[str, Requirement]:
    """Declared requirements by canonical name: core, the floor-run extras, the test set.

    ``floor_only`` keeps those the floor run must pin: the core and the floor-run
    extras, plus the OTel packages of the test set (the test tools themselves,
    pytest or moto, are not part of our range).
    """
    meta = project()
    extras = meta["optional-dependencies"]
    lines = list(meta["dependencies"])
    for extra in FLOOR_EXTRAS:
        lines += extras[extra]
    lines += [
        line for line in extras["test"] if line.startswith("opentelemetry-") or not floor_only
    ]
    reqs = (Requirement(line) for line in lines)
    return {canonicalize_name(r.name): r for r in reqs if r.name != "runnertrace"}


def floor_pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for raw in (ROOT / ".ci" / "floor-constraints.txt").read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{raw!r}: every floor constraint must be an exact == pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_otel_is_declared_with_the_checked_floor_and_cap() -> None:
    reqs = requirements(floor_only=False)
    floor = Version(".".join(map(str, OTEL_FLOOR)))
    cap = Version(".".join(map(str, OTEL_CAP)))
    for dist in OTEL_DECLARED:
        specs = {(s.operator, Version(s.version)) for s in reqs[dist].specifier}
        assert specs == {(">=", floor), ("<", cap)}, (
            f"{dist}: pyproject declares {reqs[dist].specifier}, the import check {OTEL_RANGE}"
        )


def test_the_floor_run_pins_every_declared_lower_bound() -> None:
    pins = floor_pins()
    for name, req in requirements(floor_only=True).items():
        (bound,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert pins.get(name) == bound, f"{req}: .ci/floor-constraints.txt must pin {name}=={bound}"
    # Nothing else is pinned, except the exporter's lockstep sibling.
    extra = set(pins) - set(requirements(floor_only=True))
    assert extra == {"opentelemetry-exporter-otlp-proto-common"}, extra
    assert pins["opentelemetry-exporter-otlp-proto-common"] == pins["opentelemetry-sdk"]


@pytest.mark.parametrize(
    ("version", "expected"),
    [("1.35.0", (1, 35, 0)), ("1.45.2rc1", (1, 45, 2)), ("1.36.dev0", (1, 36)), ("2", (2,))],
)
def test_release_reads_the_leading_numbers(version: str, expected: tuple[int, ...]) -> None:
    assert release(version) == expected


def run_python(code: str, tmp_path: Path, *, fake_sdk: str | None = None) -> str:
    """Run ``code`` in a fresh interpreter; a fake dist-info first on sys.path claims an SDK."""
    if fake_sdk is not None:
        info = tmp_path / f"opentelemetry_sdk-{fake_sdk}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: opentelemetry-sdk\nVersion: {fake_sdk}\n"
        )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        # logfire's pydantic plugin would import OTel too, and warn about it on stderr.
        env={"PYTHONPATH": str(tmp_path), "PYDANTIC_DISABLE_PLUGINS": "logfire-plugin"},
        check=True,
    )
    return result.stdout


PROBE = """
import runnertrace
for attempt in ("from runnertrace.tracing import TracingRunner", "runnertrace.TracingRunner",
                "hasattr(runnertrace, 'traced')"):
    try:
        exec(attempt)
    except Exception as exc:
        print(f"{attempt} -> {type(exc).__name__}: {exc}")
    else:
        print(f"{attempt} -> ok")
"""


def test_an_sdk_below_the_floor_is_refused_naming_package_and_version(tmp_path: Path) -> None:
    out = run_python(PROBE, tmp_path, fake_sdk="1.30.0")
    api = importlib.metadata.version("opentelemetry-api")
    expected = (
        f"ImportError: runnertrace needs {OTEL_RANGE} of opentelemetry-api, opentelemetry-sdk; "
        f"found opentelemetry-api {api}, opentelemetry-sdk 1.30.0: pip install "
        f"'opentelemetry-api{OTEL_RANGE}' 'opentelemetry-sdk{OTEL_RANGE}'"
    )
    lines = out.strip().splitlines()
    assert len(lines) == 3, out
    for line in lines:
        assert line.endswith(expected), out


def test_the_floor_itself_is_accepted(tmp_path: Path) -> None:
    """The check compares releases: the floor release (and a patch of it) imports fine."""
    floor = ".".join(map(str, OTEL_FLOOR))
    out = run_python(PROBE, tmp_path, fake_sdk=f"{floor}.1")
    assert out.strip().splitlines() == [
        "from runnertrace.tracing import TracingRunner -> ok",
        "runnertrace.TracingRunner -> ok",
        "hasattr(runnertrace, 'traced') -> ok",
    ], out


def test_an_attribute_error_while_importing_surfaces_as_an_import_error(tmp_path: Path) -> None:
    """A dependency missing a name we use at import time (here the SDK's ``SpanKind`` is
    replaced by an empty class, as a release that dropped it would look) is reported as
    an ``ImportError`` with the versions, on every route into the tracing package."""
    code = (
        "import opentelemetry.trace\n"
        "opentelemetry.trace.SpanKind = type('SpanKind', (), {})\n" + PROBE
    )
    out = run_python(code, tmp_path)
    sdk = importlib.metadata.version("opentelemetry-sdk")
    lines = out.strip().splitlines()
    assert len(lines) == 3, out
    for line in lines:
        assert "-> ImportError: type object 'SpanKind' has no attribute" in line, out
        assert f"opentelemetry-sdk {sdk}" in line and "pip install" in line, out


def test_a_scoped_session_drops_headers_set_on_the_session_itself() -> None:
    """Exporters before 1.44 put ``OTEL_EXPORTER_OTLP_HEADERS`` on the session, not on each
    request; a vendor's scoped session must not forward them by that route either."""
    session = ScopedSession({"authorization": "Bearer vendor"})
    session.headers.update({"x-collector-key": "meant-for-a-collector", "Accept": "*/*"})
    with OtlpReceiver() as receiver:
        session.post(receiver.traces_url, data=b"", headers={"Authorization": "Bearer vendor"})
    (request,) = receiver.requests
    assert request.headers["authorization"] == "Bearer vendor"
    assert "x-collector-key" not in request.headers
    assert request.headers["accept"] == "*/*"  # requests' own defaults still go out
