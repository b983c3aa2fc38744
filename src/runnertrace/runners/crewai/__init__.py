"""CrewAI: :class:`CrewAIRunner` runs a CrewAI ``Agent`` (as a one-task crew) or a
registered ``Crew`` (as built) under the runner contract; :class:`CrewAIModule`
registers CrewAI agents.

Install with ``pip install 'runnertrace[crewai]'``; importing this package without
CrewAI raises :class:`~runnertrace._internal.imports.MissingExtraError`.

The package's files are the same in every runner: ``runner`` (the runner, its
per-run ``_Run`` and the module), ``convert`` (requests in as the task, the crew's
output out as the reply), ``request`` (what a model call is sent), ``mapper``
(CrewAI's events as builder calls), ``adapter`` (the stream sink, the kickoff
callback and the tool-function wrapper CrewAI calls), ``quiet`` (other OTel
instrumentation, silenced around a traced crew), ``nesting`` (a coworker delegated
to, as a nested run) and ``testing`` (an offline CrewAI model).
"""

from runnertrace._internal.imports import missing_extra

try:  # the extra: every module of the package imports from it
    import crewai  # noqa: F401
except ImportError as exc:
    raise missing_extra(exc, "crewai") from exc

from runnertrace.runners.crewai.convert import CrewAIReportedError
from runnertrace.runners.crewai.runner import STATE_KEY, CrewAIModule, CrewAIRunner

__all__ = ["STATE_KEY", "CrewAIModule", "CrewAIReportedError", "CrewAIRunner"]
