"""Moved to :mod:`runnertrace.tracing.backend_registry`; this path is deprecated.

Importing it warns (DeprecationWarning); nothing of ours imports it.
"""

from runnertrace._internal.moved import alias
from runnertrace.tracing.backend_registry import *  # noqa: F403  (the names type checkers see)

alias(__name__, "runnertrace.tracing.backend_registry", warn=True)
