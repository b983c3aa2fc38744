"""Lazy imports of optional dependencies with an actionable error."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or fail with ``pip install 'runnertrace[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is not installed; install it with: pip install 'runnertrace[{extra}]'"
        ) from exc


def import_dotted(path: str) -> object:
    """Resolve ``package.module.attr`` (or ``package.module:attr``) to the object."""
    module_name, sep, attr = path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise ValueError(f"{path!r} is not a dotted path of the form 'package.module.name'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from exc
