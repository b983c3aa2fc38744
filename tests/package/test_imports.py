"""``import runnertrace`` stays light: no framework, vendor SDK or model client is loaded.

One thing is outside our control: logfire registers a *pydantic plugin* (entry
point group ``pydantic``), and pydantic imports it the first time any model
class is defined, in any package. With logfire installed, defining our event
models therefore loads logfire. The main check disables that plugin so it sees
only what runnertrace itself imports; a second check pins down that the plugin
is the one and only route by which anything heavy arrives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = (
    "openai",
    "agents",
    "agent_framework",
    "langgraph",
    "langchain_core",
    "pydantic_ai",
    "langfuse",
    "logfire",
    "boto3",
    "botocore",
    "traceloop",
    "smolagents",
    "crewai",
    "google.adk",
    "google.genai",
    "psycopg",  # the PostgreSQL store's driver: loaded when such a store is opened
    "grpc",  # OTLP/gRPC ingest: loaded by `runnertrace ui --otlp-grpc-port`
)

PROBE = """
import json, sys
import runnertrace, runnertrace.core, runnertrace.runners.native
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
{extra}
heavy = {heavy!r}
loaded = (m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps(sorted(loaded)))
"""


def loaded_after(extra: str = "", *, pydantic_plugins: bool = False) -> list[str]:
    env = dict(os.environ)
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    if not pydantic_plugins:
        env["PYDANTIC_DISABLE_PLUGINS"] = "logfire-plugin"
    code = PROBE.format(heavy=HEAVY, extra=extra)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


def test_import_loads_no_framework_or_vendor_sdk() -> None:
    assert loaded_after() == []


@pytest.mark.needs_logfire
def test_only_the_logfire_pydantic_plugin_brings_anything_heavy() -> None:
    import logfire  # noqa: F401 - without it the check below would pass vacuously

    loaded = loaded_after(pydantic_plugins=True)
    assert {m.split(".")[0] for m in loaded} <= {"logfire"}
    if loaded:
        assert "logfire.integrations.pydantic" in loaded


def test_the_probe_notices_a_heavy_import() -> None:
    """Touching the lazy OpenAI client does load openai, so the probe can fail."""
    extra = (
        "from runnertrace.runners.native import OpenAICompatibleLlm\n"
        "OpenAICompatibleLlm('m', base_url='http://127.0.0.1:9/v1').client"
    )
    assert "openai" in loaded_after(extra)


def test_the_store_and_the_ui_load_no_database_driver_until_a_postgresql_store_is_opened() -> None:
    """SQLite users never load psycopg or grpc; opening a PostgreSQL store loads psycopg."""
    pytest.importorskip("psycopg")
    sqlite = (
        "import runnertrace.store, runnertrace.exporters.local, runnertrace.cli\n"
        "from runnertrace.store import SpanStore\n"
        "SpanStore('/nonexistent/traces.db', read_only=True)\n"
    )
    assert loaded_after(sqlite) == []
    assert "psycopg" in loaded_after(sqlite + "SpanStore('postgresql://u@127.0.0.1:9/db')\n")
