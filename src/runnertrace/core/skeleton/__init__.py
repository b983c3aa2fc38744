"""Moved to :mod:`runnertrace.runners._kit.skeleton`; this path is deprecated.

Still importable without a warning while runners and tests written against it
remain; new code imports the runner toolkit from its new home.
"""

from runnertrace._internal.moved import alias
from runnertrace.runners._kit.skeleton import *  # noqa: F403  (the names type checkers see)

alias(__name__, "runnertrace.runners._kit.skeleton", warn=False)
