"""``PydanticAIRunner``: the runner contract over a ``pydantic_ai.Agent``.

Install with ``pip install 'runnertrace[pydantic-ai]'``; importing this package
without Pydantic AI raises :class:`~runnertrace._internal.imports.MissingExtraError`.

The package has the same files as every framework runner's:

* :mod:`.runner`: the runner (session state, framework context, run options; the
  plain call, the install step, the quiet step), its per-run class and the module;
* :mod:`.convert`: our requests -> ``user_prompt``; a run's result -> the reply;
* :mod:`.request`: what a model call is sent, in GenAI shapes;
* :mod:`.mapper`: a run's progress -> event builder calls (and the runner's boundary);
* :mod:`.adapter`: the run-time capability Pydantic AI calls;
* :mod:`.quiet`: Pydantic AI's own spans, silenced in traced runs;
* :mod:`.nesting`: an agent a traced run's tool runs (delegation) as a nested run;
* :mod:`.mcp`: a call through an ``MCPToolset`` (the FastMCP client), told once;
* :mod:`.testing`: offline model helpers (over Pydantic AI's own ``FunctionModel``).
"""

from __future__ import annotations

from runnertrace._internal.imports import missing_extra

try:
    import pydantic_ai  # noqa: F401 - the extra, checked once for the whole package
except ImportError as exc:
    raise missing_extra(exc, "pydantic-ai") from exc

from runnertrace.runners.pydantic_ai.convert import user_prompt_of
from runnertrace.runners.pydantic_ai.runner import STATE_KEY, PydanticAIModule, PydanticAIRunner

__all__ = ["STATE_KEY", "PydanticAIModule", "PydanticAIRunner", "user_prompt_of"]
