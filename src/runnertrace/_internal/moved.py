"""Old module paths kept importable after a module moved.

A shim at the old path calls :func:`alias` and then *is* the moved module:
``runnertrace.core.config is runnertrace.tracing.config``, so a patch applied
through either name is seen through both, and nothing is defined twice.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str, *, warn: bool) -> None:
    """Make the module being imported as ``old`` the module ``new``.

    The import system returns whatever ``sys.modules[old]`` holds once the
    shim's code has run, so replacing that entry is all it takes. ``warn``
    emits a :class:`DeprecationWarning` pointing at the importing line; it is
    off for the paths our own code and tests still import.
    """
    sys.modules[old] = importlib.import_module(new)
    if warn:
        warnings.warn(
            f"{old} moved to {new}; import it from there (the old path will be removed)",
            DeprecationWarning,
            stacklevel=3,
        )
