"""The checks around loading the configuration that pydantic-settings does not make.

* The YAML file: a syntax error names the file, line and column; a top level
  that is not a mapping says what was expected (instead of pydantic's
  "dictionary update sequence element #0 ...").
* ``RUNNERTRACE_*`` variables that map to no key are warned about, with the
  nearest valid name (``RUNNERTRACE_TRACE_ENABLED`` is silently ignored
  otherwise: one underscore where two are needed). A variable inside a section
  (``RUNNERTRACE_TRACE__ENABELD``) is not ignored but refused: the configuration
  error names it, so it is not also called "ignored" here.
* Lists from the environment: ``RUNNERTRACE_TRACE__TYPE=local,console`` (commas,
  as OTel's own variables) or JSON (``'["local", "console"]'``).
* Dotted paths (``trace.redact``, a dotted ``trace.type``) are imported when
  the configuration loads, so every bad path fails the same way, in the same
  place, and ``runnertrace doctor`` reports it.
* The per-user default location of the local store.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = [
    "default_store_path",
    "read_yaml_mapping",
    "resolve_dotted",
    "split_comma_list",
    "unknown_env_vars",
    "warn_unknown_env_vars",
]

logger = logging.getLogger("runnertrace")

ENV_PREFIX = "RUNNERTRACE_"
# Variables read by other parts than the configuration: the file's location, and the
# dashboard's token and ingest keys (runnertrace.ui.auth).
_NOT_KEYS = frozenset({"RUNNERTRACE_CONFIG", "RUNNERTRACE_UI_TOKEN", "RUNNERTRACE_INGEST_KEY"})
_warned: set[str] = set()


def default_store_path() -> str:
    """One store per user, in the platform's data directory (found from any directory).

    ``$XDG_DATA_HOME/runnertrace/traces.db`` on Linux (``~/.local/share/...``),
    ``~/Library/Application Support/runnertrace/traces.db`` on macOS.
    """
    import platformdirs

    return str(Path(platformdirs.user_data_dir("runnertrace", appauthor=False)) / "traces.db")


def read_yaml_mapping(path: Path) -> None:
    """Parse ``path`` and raise :class:`ConfigError` unless it is a mapping (or empty)."""
    import yaml

    from runnertrace.tracing.errors import ConfigError

    try:
        with path.open(encoding="utf-8") as stream:
            data = yaml.safe_load(stream)
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(
            f"{path}: the top level is a {type(data).__name__}; expected a mapping of sections, "
            "e.g.\ntrace:\n  enabled: true\n  type: local"
        )


def _env_names(model: type[BaseModel], prefix: str) -> list[str]:
    """Every ``RUNNERTRACE_...`` name that maps to a key of ``model`` (sections included)."""
    names: list[str] = []
    for field_name, info in model.model_fields.items():
        name = f"{prefix}{field_name.upper()}"
        names.append(name)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names.extend(_env_names(annotation, f"{name}__"))
    return names


def _section_names(variable: str) -> list[str] | None:
    """The env names of the backend section ``variable`` falls in, if it names one.

    Backend sections are not fields of the ``trace`` model (each backend owns
    its own), so they are looked up by name, loading only that backend's model.
    """
    from runnertrace.tracing.backend_registry import backend_names, section_model

    for backend in backend_names():
        prefix = f"{ENV_PREFIX}TRACE__{backend.upper()}__"
        if variable.startswith(prefix):
            model = section_model(backend)
            return _env_names(model, prefix) if model is not None else None
    return None


def unknown_env_vars(
    model: type[BaseModel], environ: Mapping[str, str]
) -> list[tuple[str, str | None]]:
    """``(variable, nearest valid name or None)`` for each ``RUNNERTRACE_`` variable with no key."""
    valid = _env_names(model, ENV_PREFIX)
    known = set(valid) | _NOT_KEYS
    sections = tuple(f"{ENV_PREFIX}{field.upper()}__" for field in model.model_fields)
    unknown: list[tuple[str, str | None]] = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        if upper.startswith(sections) and name == upper:
            continue  # read into its section, where a wrong key is an error naming it
        section = _section_names(upper)  # trace.<backend> keys: that backend's model only
        if section is not None:
            if upper in section:
                continue
            valid = [*valid, *section]
        close = difflib.get_close_matches(upper, valid, n=1, cutoff=0.6)
        unknown.append((name, close[0] if close else None))
    return unknown


def warn_unknown_env_vars(model: type[BaseModel]) -> None:
    """Warn once per process about each ``RUNNERTRACE_`` variable that sets nothing."""
    for name, nearest in unknown_env_vars(model, os.environ):
        if name in _warned:
            continue
        _warned.add(name)
        hint = f"; did you mean {nearest}?" if nearest else ""
        logger.warning(
            "runnertrace: environment variable %s matches no configuration key and is "
            "ignored%s (sections and keys are separated by two underscores)",
            name,
            hint,
        )


def split_comma_list(value: Any) -> Any:
    """``"local,console"`` → ``["local", "console"]`` (the OTel env vars' list syntax)."""
    if isinstance(value, str) and "," in value:
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def resolve_dotted(path: str, expected: str, accept: Callable[[object], bool]) -> object:
    """Import ``path``; one error format for every dotted path in the configuration.

    Raises ``ValueError`` (pydantic reports it under the key) saying what could
    not be loaded and what was expected.
    """
    from runnertrace._internal.imports import import_dotted

    try:
        target = import_dotted(path)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"cannot load {path!r} ({exc}); expected {expected}") from None
    if not accept(target):
        raise ValueError(f"{path!r} is not {expected}")
    return target
