"""Google ADK: :class:`GoogleADKRunner` runs an ADK agent (an ``LlmAgent``, or any
``BaseAgent``) under the runner contract; :class:`GoogleADKModule` registers ADK agents.

Install with ``pip install 'runnertrace[adk]'``; importing this package without
``google-adk`` raises :class:`~runnertrace._internal.imports.MissingExtraError`.

The package's files are the same in every runner: ``runner`` (the runner, its
per-run ``_Run`` and the module), ``convert`` (requests in, the reply out),
``request`` (what a model call is sent), ``mapper`` (ADK's progress as builder
calls), ``adapter`` (the ADK plugin that hears it), ``quiet`` (ADK's own spans,
silenced in traced runs), ``nesting`` (an ``AgentTool``'s agent as a nested run)
and ``testing`` (an offline ADK model).
"""

from runnertrace._internal.imports import missing_extra

try:  # the extra: every module of the package imports from both
    import google.adk
    import google.genai  # noqa: F401
except ImportError as exc:
    raise missing_extra(exc, "adk") from exc

from runnertrace.runners.adk.convert import user_content_of
from runnertrace.runners.adk.runner import STATE_KEY, GoogleADKModule, GoogleADKRunner

__all__ = ["STATE_KEY", "GoogleADKModule", "GoogleADKRunner", "user_content_of"]
