"""Shared test setup: isolation from the developer's environment and config."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from runnertrace._internal.errors import internal_log
from runnertrace.tracing import drops

# The store engines' fixtures (engine, store_location, postgres): tests/store_engines.py.
pytest_plugins = ["store_engines"]


@pytest.fixture(autouse=True, scope="session")
def _isolated_user_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The per-user store lives under a temporary data directory, never the real one.

    Set in ``os.environ`` for the whole session, so the CLI subprocesses the tests
    start (they inherit the environment) are isolated too.
    """
    import os

    import platformdirs

    saved = os.environ.get("XDG_DATA_HOME")
    data_home = tmp_path_factory.mktemp("xdg-data")
    os.environ["XDG_DATA_HOME"] = str(data_home)
    assert platformdirs.user_data_dir("runnertrace").startswith(str(data_home))
    yield
    if saved is None:
        del os.environ["XDG_DATA_HOME"]
    else:
        os.environ["XDG_DATA_HOME"] = saved


@pytest.fixture(autouse=True)
def _isolated_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """No test reads a real config file, a real API key, or a previous test's setup."""
    for var in (
        "OPENAI_API_KEY",
        "RUNNERTRACE_CONFIG",
        "OTEL_SDK_DISABLED",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "AWS_LAMBDA_FUNCTION_NAME",
        "LANGFUSE_PUBLIC_KEY",
        "LANGFUSE_SECRET_KEY",
        "LANGFUSE_HOST",
        "LOGFIRE_TOKEN",
        "TRACELOOP_API_KEY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)
    for name in list(__import__("os").environ):
        if name.startswith("RUNNERTRACE_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    # Each test its own per-user data directory (the default store lives there).
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("user-data")))
    internal_log.reset()
    drops.reset()
    yield
    from runnertrace.tracing.setup import reset_tracing_setups

    reset_tracing_setups(timeout_s=0.5)


@pytest.fixture
def runnertrace_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog
