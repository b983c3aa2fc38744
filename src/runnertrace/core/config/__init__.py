"""Moved to :mod:`runnertrace.tracing.config`; this path is deprecated.

Still importable without a warning: examples, user code and our tests use it.
"""

from runnertrace._internal.moved import alias
from runnertrace.tracing.config import *  # noqa: F403  (the names type checkers see)

alias(__name__, "runnertrace.tracing.config", warn=False)
