"""Other LangChain tracers kept out of a traced run: each call is a span once, ours.

OpenInference's LangChain instrumentor (and any that works the same way) adds its
tracer to every callback manager; next to ours, each model and tool call would be
a span twice and its tokens counted twice. Inside a traced run only (the template
calls :func:`quiet_framework_telemetry` there), the run's callbacks carry a
stand-in (:class:`_StandIn`) that makes the instrumentor believe its tracer is
there already: ours is the one tree, while HTTP instrumentation inside a call
still nests under its span (OTel's suppression key would have silenced that too).
Untraced runs are the instrumentor's to trace, as before.
"""

from __future__ import annotations

from abc import ABCMeta

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.tracers.base import BaseTracer


def _injected_handler_types() -> set[type]:
    """Handlers an instrumentation adds to every new LangChain callback manager.

    OpenInference's LangChain instrumentor wraps ``BaseCallbackManager.__init__``
    and adds its tracer to each manager that does not hold a handler of the
    tracer's class yet; a probe manager shows what is added that way.
    """
    probe = BaseCallbackManager(handlers=[])
    return {type(h) for h in probe.handlers if isinstance(h, BaseTracer)}


class _StandIn(BaseCallbackHandler):
    """Stands for an instrumentor's tracer in a traced run's callback managers.

    Those instrumentors add their tracer to a callback manager unless it already
    holds an instance of the tracer's class. The tracers are ABCs: registered as
    a virtual subclass of each, this handler, which ignores every callback, counts
    as one, so the managers of a traced run never get theirs. Untraced runs carry
    no stand-in and are traced by them as usual. (Our own handler is not the one
    registered: LangGraph hands tracers a node's recorded payload, not the real one.)
    The registration is process-wide and stays (an ABC has no unregister): it means
    nothing to a manager that holds no stand-in.
    """

    run_inline = True
    ignore_llm = ignore_chain = ignore_agent = ignore_retriever = True
    ignore_chat_model = ignore_custom_event = ignore_retry = True


_STAND_IN = _StandIn()


def quiet_framework_telemetry() -> list[BaseCallbackHandler]:
    """The handlers a traced run's callbacks carry to keep other tracers out: the
    stand-in, registered for each injected tracer class, when there is one."""
    injected = _injected_handler_types()
    for kind in injected:
        if isinstance(kind, ABCMeta) and not issubclass(_StandIn, kind):
            kind.register(_StandIn)
    return [_STAND_IN] if any(isinstance(_STAND_IN, kind) for kind in injected) else []
