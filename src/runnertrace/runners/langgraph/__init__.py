"""LangGraph: the runner over a compiled graph, and its module (the ``langgraph`` extra).

The runner's parts, as in every framework's package: :mod:`.runner` (the runner, a
run, the module), :mod:`.convert` (requests to the graph's input, its final state
to the reply), :mod:`.request` (what a model call was sent), :mod:`.mapper`
(LangChain's callbacks as events), :mod:`.adapter` (the callback handler LangChain
calls), :mod:`.quiet` (other LangChain tracers kept out of a traced run),
:mod:`.nesting` (a graph a tool runs) and :mod:`.testing` (an offline chat model).
"""

from runnertrace._internal.imports import missing_extra

try:  # the extra's two distributions, before any module of ours imports from them
    import langchain_core.callbacks  # noqa: F401
    import langgraph.pregel  # noqa: F401
except ImportError as exc:
    raise missing_extra(exc, "langgraph") from exc

from runnertrace.runners.langgraph.convert import merge_config
from runnertrace.runners.langgraph.runner import LangGraphModule, LangGraphRunner

__all__ = ["LangGraphModule", "LangGraphRunner", "merge_config"]
