"""Moved to :mod:`runnertrace.tracing.config_env`; this path is deprecated.

Importing it warns (DeprecationWarning); nothing of ours imports it.
"""

from runnertrace._internal.moved import alias
from runnertrace.tracing.config_env import *  # noqa: F403  (the names type checkers see)

alias(__name__, "runnertrace.tracing.config_env", warn=True)
