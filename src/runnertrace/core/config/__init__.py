"""Moved to :mod:`runnertrace.tracing.config`; this path is deprecated.

Still importable without a warning, as user code and our own tests use it; new code
imports ``from runnertrace import load_settings`` (or ``runnertrace.tracing.config``).
"""

from runnertrace._internal.moved import alias
from runnertrace.tracing.config import *  # noqa: F403  (the names type checkers see)

alias(__name__, "runnertrace.tracing.config", warn=False)
