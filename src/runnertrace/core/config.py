"""Configuration: ``runnertrace.yaml`` plus ``RUNNERTRACE_<SECTION>__<KEY>`` env vars.

Precedence, highest first: constructor arguments, environment variables, the
YAML file (``./runnertrace.yaml``, or the path in ``RUNNERTRACE_CONFIG``), then
defaults. Invalid values raise :class:`ConfigError`, naming the key, the value
and what is allowed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from runnertrace.exporters.cloudwatch_config import CloudWatchConfig
from runnertrace.exporters.vendor_config import (
    LangfuseConfig,
    LogfireConfig,
    OpenLLMetryConfig,
    OtlpConfig,
)

__all__ = [
    "CONFIG_ENV_VAR",
    "ConfigError",
    "ExecutionConfig",
    "LocalConfig",
    "Settings",
    "TraceConfig",
    "load_settings",
]

CONFIG_ENV_VAR = "RUNNERTRACE_CONFIG"
DEFAULT_CONFIG_FILE = "runnertrace.yaml"


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and what is allowed."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LocalConfig(_Section):
    """The embedded local store."""

    path: str = ".runnertrace/traces.db"
    max_queue_size: int = Field(2048, ge=1)


class TraceConfig(_Section):
    """The ``trace`` section: whether and how runs are traced."""

    enabled: bool = False
    type: str | list[str] = "local"
    capture_content: bool | None = None
    """``None`` defers to ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``."""
    max_content_length: int = Field(4096, ge=0)
    deltas: Literal["aggregate", "events"] = "aggregate"
    redact: str | None = None
    """Dotted path to a ``(str) -> str`` callable applied to every exported string."""
    sample_rate: float = Field(1.0, ge=0.0, le=1.0)
    flush_timeout_s: float = Field(5.0, gt=0)
    metrics: bool = True
    """OTel GenAI metrics (durations, tokens, runs, tool calls, errors, cost) for every backend."""
    service_name: str | None = None
    user_id: str | None = None
    local: LocalConfig = Field(default_factory=LocalConfig)
    otlp: OtlpConfig = Field(default_factory=OtlpConfig)
    langfuse: LangfuseConfig = Field(default_factory=LangfuseConfig)
    logfire: LogfireConfig = Field(default_factory=LogfireConfig)
    openllmetry: OpenLLMetryConfig = Field(default_factory=OpenLLMetryConfig)
    cloudwatch: CloudWatchConfig = Field(default_factory=CloudWatchConfig)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | list[str]) -> str | list[str]:
        from runnertrace.exporters import validate_backend_name

        names = [value] if isinstance(value, str) else value
        if not names:
            raise ValueError("at least one trace type is required")
        for name in names:
            validate_backend_name(name)
        return value

    @property
    def types(self) -> list[str]:
        return [self.type] if isinstance(self.type, str) else list(self.type)


class ExecutionConfig(_Section):
    mode: Literal["sync", "stream"] = "sync"


class Settings(BaseSettings):
    """All of runnertrace's configuration."""

    model_config = SettingsConfigDict(
        env_prefix="RUNNERTRACE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
    )

    trace: TraceConfig = Field(default_factory=TraceConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = Path(os.environ.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path.is_file():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        elif CONFIG_ENV_VAR in os.environ:
            raise ConfigError(f"{CONFIG_ENV_VAR} points to {str(path)!r}, which is not a file")
        return tuple(sources)


def _describe(error: ErrorDetails) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "<root>"
    value = error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key (value {value!r}); check the spelling"
    if kind == "literal_error" and "expected" in ctx:
        return f"{key}: invalid value {value!r}; expected {ctx['expected']}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{key}: invalid value {value!r}: {message}"


def format_validation_error(exc: ValidationError, *, prefix: str = "") -> str:
    problems = [_describe(e) for e in exc.errors()]
    if prefix:
        problems = [f"{prefix}{p}" for p in problems]
    return "invalid runnertrace configuration:\n  " + "\n  ".join(problems)


def load_settings(**overrides: Any) -> Settings:
    """Read the configuration; raises :class:`ConfigError` on any invalid value."""
    import yaml

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    except yaml.YAMLError as exc:
        path = os.environ.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE)
        raise ConfigError(f"cannot parse {path}: {exc}") from None
    except (TypeError, ValueError) as exc:  # e.g. a top level that is not a mapping
        raise ConfigError(f"invalid runnertrace configuration: {exc}") from None
