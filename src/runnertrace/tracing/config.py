"""Configuration: ``runnertrace.yaml`` plus ``RUNNERTRACE_<SECTION>__<KEY>`` env vars.

Precedence, highest first: constructor arguments, environment variables, the
YAML file (``./runnertrace.yaml``, or the path in ``RUNNERTRACE_CONFIG``), then
defaults. Invalid values raise :class:`ConfigError`, naming the key, the value
and what is allowed.

This module knows no backend: the model of each ``trace.<backend>`` section
belongs to the backend, found by name through :mod:`runnertrace.tracing.backend_registry`
when a configuration is validated (never at import).
"""

from __future__ import annotations

import builtins
import json
import os
import re
from collections.abc import Mapping, Sequence
from difflib import get_close_matches
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Self, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from runnertrace.tracing.config_env import (
    read_yaml_mapping,
    resolve_dotted,
    split_comma_list,
    warn_unknown_env_vars,
)
from runnertrace.tracing.errors import ConfigError

__all__ = [
    "CONFIG_ENV_VAR",
    "ConfigError",
    "ExecutionConfig",
    "Settings",
    "TraceConfig",
    "load_settings",
]

CONFIG_ENV_VAR = "RUNNERTRACE_CONFIG"
DEFAULT_CONFIG_FILE = "runnertrace.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


SectionT = TypeVar("SectionT", bound=BaseModel)


class SectionErrors(ValueError):
    """Problems in ``trace.<backend>`` sections, one line each, already naming their keys.

    Raised from inside validation, where pydantic would flatten them into one
    ``value_error`` at ``trace``; :func:`format_validation_error` lists them
    line by line instead.
    """

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n  ".join(lines))
        self.lines = lines


class TraceConfig(BaseModel):
    """The ``trace`` section: whether and how runs are traced.

    Besides the settings below, each key is a backend's own section,
    ``trace.<name>``, validated against the ``config_model`` of the backend
    registered as ``<name>`` (see :mod:`runnertrace.tracing.backend_registry`), so a
    third-party backend's settings are checked like a built-in one's. Read one
    with :meth:`section` (typed) or as an attribute (``config.langfuse.host``);
    a section that was not given reads as its model's defaults.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=True)

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
    semconv_version: Literal[1, 2] = 2
    """The span vocabulary, as Pydantic AI's ``InstrumentationSettings.version``:
    ``2`` (default) carries each fact once, in its GenAI semconv key, and backends
    add vendor spellings to their exported copy; ``1`` also puts those spellings
    (``session.id``, ``gen_ai.system``, ``openinference.span.kind``, ``tool.name``,
    ``input.value``/``output.value``...) on the span itself, as runnertrace 0.1 did."""

    @field_validator("type", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return split_comma_list(value)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | list[str]) -> str | list[str]:
        from runnertrace.tracing.backend_registry import backend_names, validate_backend_name

        names = [value] if isinstance(value, str) else value
        if not names:
            raise ValueError("at least one trace type is required")
        for name in names:
            validate_backend_name(name)
            if name not in backend_names():  # a dotted path: it must import, now
                resolve_dotted(
                    name,
                    "a runnertrace Backend subclass (see runnertrace.tracing.backend.Backend)",
                    _is_backend_class,
                )
        return value

    @field_validator("redact")
    @classmethod
    def _loadable_redactor(cls, value: str | None) -> str | None:
        if value:
            resolve_dotted(value, "a callable (str) -> str", callable)
        return value

    @model_validator(mode="after")
    def _backend_sections(self) -> Self:
        """Validate every extra key as a backend's section (a model instance afterwards)."""
        from runnertrace.tracing.backend_registry import section_model

        sections = self.__pydantic_extra__
        if not sections:
            return self
        problems: list[str] = []
        for name, value in sections.items():
            try:
                model = section_model(name)
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            if model is None:
                problems.append(self._unknown_key(name, value))
            elif not isinstance(value, model):
                try:
                    sections[name] = model.model_validate(_decode_json_strings(model, value))
                except ValidationError as exc:
                    problems.extend(_describe(e, ("trace", name)) for e in exc.errors())
        if problems:
            raise SectionErrors(problems)
        return self

    @classmethod
    def _unknown_key(cls, name: str, value: object) -> str:
        from runnertrace.tracing.backend_registry import backend_names

        backends = backend_names()
        # A section's content may hold secrets: only a plain value is repeated.
        shown = "" if isinstance(value, Mapping) else f" (value {value!r})"
        guess = get_close_matches(name, [*cls.model_fields, *backends], n=1)
        hint = f"did you mean {guess[0]!r}? " if guess else ""
        origin = _from_env(("trace", name))
        return (
            f"trace.{name}: unknown key{shown}{origin}; {hint}expected a setting "
            f"({', '.join(cls.model_fields)}) or the section of a backend "
            f"({', '.join(backends)})"
        )

    def section(self, name: str, model: builtins.type[SectionT]) -> SectionT:
        """The ``trace.<name>`` section as ``model``: as configured, else its defaults.

        Defaults are stored on first read, so that changing them
        (``config.section("local", LocalConfig).path = ...``) sticks.
        """
        sections = self.__pydantic_extra__
        value = sections.get(name) if sections is not None else None
        if value is None:
            value = model() if sections is None else sections.setdefault(name, model())
        if not isinstance(value, model):
            raise TypeError(f"trace.{name} holds a {type(value).__name__}, not a {model.__name__}")
        return value

    def __getattr__(self, name: str) -> Any:
        """``config.<backend>``: that backend's section, as :meth:`section` returns it.

        Untyped by nature (any backend may register a name); typed code uses
        :meth:`section`. Other names raise :class:`AttributeError` as usual.
        """
        if name.startswith("_"):  # pydantic internals, copy and pickle probe these
            raise AttributeError(name)
        sections = self.__pydantic_extra__
        if sections is not None and name in sections:
            return sections[name]
        from runnertrace.tracing.backend_registry import section_model

        model = section_model(name)
        if model is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.section(name, model)

    def configured_sections(self) -> dict[str, BaseModel]:
        """The backend sections that differ from their defaults.

        Identifies a configuration's backend settings no matter which sections
        have been read (and so stored) with their defaults.
        """
        return {
            name: value
            for name, value in (self.__pydantic_extra__ or {}).items()
            if not (isinstance(value, BaseModel) and value == type(value)())
        }

    @property
    def types(self) -> list[str]:
        return [self.type] if isinstance(self.type, str) else list(self.type)


def _is_structured(annotation: object) -> bool:
    """Does a field of this type take a list, mapping or model (given as JSON in an env var)?"""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        return any(_is_structured(arg) for arg in get_args(annotation))
    target = origin or annotation
    if not isinstance(target, type) or issubclass(target, str | bytes):
        return False
    return issubclass(target, BaseModel | Mapping | Sequence | set | frozenset)


def _decode_json_strings(model: type[BaseModel], value: object) -> object:
    """Decode JSON given as a string for a structured field of a section.

    ``RUNNERTRACE_TRACE__LANGFUSE__TAGS='["a"]'`` reaches a section as a string:
    pydantic-settings decodes JSON only for the fields it knows, and a backend's
    section is not one of them. Text that is not JSON is left for validation to
    report with the key and the value.
    """
    if not isinstance(value, Mapping):
        return value
    decoded = dict(value)
    for key, raw in value.items():
        field = model.model_fields.get(key)
        if field is None or not _is_structured(field.annotation):
            continue
        if isinstance(raw, str):
            try:
                decoded[key] = json.loads(raw)
            except ValueError:
                continue
        elif isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            decoded[key] = _decode_json_strings(field.annotation, raw)
    return decoded


def _is_backend_class(target: object) -> bool:
    from runnertrace.tracing.backend import Backend

    return isinstance(target, type) and issubclass(target, Backend)


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


def _model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The model that holds the keys at ``path`` (``("trace", "local")``: the local
    backend's section model), or ``None`` when ``path`` leads to no model."""
    from runnertrace.tracing.backend_registry import section_model

    model: type[BaseModel] | None = Settings
    for part in path:
        if model is None:
            return None
        info = model.model_fields.get(part)
        if info is None:
            if model is not TraceConfig:
                return None
            try:
                model = section_model(part)  # trace.<backend>
            except ConfigError:
                return None
            continue
        annotation = info.annotation
        is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation if is_model else None  # type: ignore[assignment]
    return model


def _did_you_mean(given: object, choices: list[str]) -> str:
    guess = get_close_matches(str(given), choices, n=1, cutoff=0.6)
    return f"did you mean {guess[0]!r}? " if guess else ""


def _from_env(path: tuple[str, ...]) -> str:
    """`` (from environment variable X)`` when the key at ``path`` came from one."""
    variable = "RUNNERTRACE_" + "__".join(part.upper() for part in path)
    return f" (from environment variable {variable})" if variable in os.environ else ""


def _describe(error: ErrorDetails, base: tuple[str, ...] = ()) -> str:
    path = tuple(str(p) for p in (*base, *error["loc"]))
    key = ".".join(path) or "<root>"
    value = error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    kind = error["type"]
    origin = _from_env(path)
    if kind == "extra_forbidden":
        parent = _model_at(path[:-1])
        allowed = list(parent.model_fields) if parent is not None else []
        hint = _did_you_mean(path[-1], allowed) if path else ""
        expected = f"expected one of {', '.join(allowed)}" if allowed else "check the spelling"
        return f"{key}: unknown key (value {value!r}){origin}; {hint}{expected}"
    if kind == "literal_error" and "expected" in ctx:
        choices = re.findall(r"'([^']*)'", str(ctx["expected"]))
        hint = _did_you_mean(value, choices)
        return f"{key}: invalid value {value!r}{origin}; {hint}expected {ctx['expected']}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{key}: invalid value {value!r}{origin}: {message}"


def format_validation_error(
    exc: ValidationError, *, prefix: str = "", source: Path | None = None
) -> str:
    """Every problem of ``exc``, one line each; ``source`` is the file that was read."""
    problems: list[str] = []
    for error in exc.errors():
        nested = (error.get("ctx") or {}).get("error")
        if isinstance(nested, SectionErrors):
            problems.extend(nested.lines)
        else:
            problems.append(_describe(error))
    if prefix:
        problems = [f"{prefix}{p}" for p in problems]
    read = f" (read from {source} and the environment)" if source is not None else ""
    return f"invalid runnertrace configuration{read}:\n  " + "\n  ".join(problems)


def load_settings(**overrides: Any) -> Settings:
    """Read the configuration; raises :class:`ConfigError` on any invalid value."""
    import yaml

    path = Path(os.environ.get(CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE))
    source = path.resolve() if path.is_file() else None
    if source is not None:
        read_yaml_mapping(path)
    warn_unknown_env_vars(Settings)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=source)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from None
    except (TypeError, ValueError) as exc:  # e.g. a top level that is not a mapping
        raise ConfigError(f"invalid runnertrace configuration: {exc}") from None
