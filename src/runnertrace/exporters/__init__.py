"""Backends: where spans go.

A backend is named in ``trace.type``. Built-in names resolve lazily to their
module, so configuring one never imports the others (or their vendor SDKs). A
dotted path names a user backend class.
"""

from __future__ import annotations

BUILTIN_BACKENDS: dict[str, str] = {
    "local": "runnertrace.exporters.local:LocalBackend",
    "console": "runnertrace.exporters.console:ConsoleBackend",
    "otlp": "runnertrace.exporters.otlp:OtlpBackend",
    "langfuse": "runnertrace.exporters.langfuse:LangfuseBackend",
    "logfire": "runnertrace.exporters.logfire:LogfireBackend",
    "openllmetry": "runnertrace.exporters.openllmetry:OpenLLMetryBackend",
    "cloudwatch": "runnertrace.exporters.cloudwatch:CloudWatchBackend",
    "app": "runnertrace.exporters.app:AppBackend",
}


def validate_backend_name(name: str) -> None:
    """Accept a built-in name or a dotted path; reject anything else with the valid list."""
    if name in BUILTIN_BACKENDS or "." in name or ":" in name:
        return
    valid = ", ".join(sorted(BUILTIN_BACKENDS))
    raise ValueError(
        f"unknown trace type {name!r}; expected one of {valid}, or a dotted path to a backend class"
    )
