"""``MAFRunner``: the runner contract over a Microsoft Agent Framework ``Agent``, or a
workflow registered as the agent (``workflow.as_agent()``, a ``WorkflowAgent``).

Install with ``pip install 'runnertrace[maf]'``; importing this package without
``agent-framework-core`` raises :class:`~runnertrace._internal.imports.MissingExtraError`.

What the runner does, per run:

* **Session state.** The conversation lives in an Agent Framework ``AgentSession``
  (made by ``agent.create_session(session_id=<our session id>)`` on the first run;
  its history provider keeps the messages in ``session.state``). The session is
  stored as its ``to_dict()`` under the session key ``"maf"`` (:data:`STATE_KEY`) and
  rebuilt with ``AgentSession.from_dict`` for each run, so a failed run never touches
  what is stored: it is saved only after the run succeeded.
* **Framework context** (full round trip). The loaded copy of the session's
  framework context is put in the native session's state under
  :data:`CONTEXT_KEY`; tools read and mutate it through
  ``FunctionInvocationContext.session.state[CONTEXT_KEY]``, and what is there
  after a successful run is written back (tool-added keys included). Without a
  stored context, tools get a throw-away ``{}``.
* **Run options** go to ``agent.run`` (``options`` holds the model settings:
  ``{"temperature": ..., "max_tokens": ...}``; also ``tools``, ``middleware``,
  ``function_invocation_kwargs``, ...). ``messages``, ``session`` and ``stream``
  are the runner's. The caller's ``middleware`` is kept and ours is appended.
  ``function_invocation_configuration`` (the tool loop's limits, e.g.
  ``{"max_iterations": 3}``) is also a run option: Agent Framework keeps it on
  the chat client, so a run that declares it runs on a shallow copy of the agent
  whose client copy carries the merged configuration; the shared client is
  never changed.
* **Replies.** The response's ``value`` when the run asked for structured output
  (``options={"response_format": Model}``), else its text.
* **Events** come from three middleware of ours (:mod:`.adapter`), passed per run
  with ``run(middleware=...)``. An untraced run-mode call installs none of them (the
  plain ``agent.run``); stream mode always needs them (the events are the stream)
  but builds the request fields only when someone observes.
* **Agent Framework's own OpenTelemetry spans**: ours replace the ones we cover
  (:mod:`.quiet`).
* **An agent run as a tool** and **a workflow as the agent**: each run of an inner
  agent is a nested run of its own (:mod:`.nesting`).
* **MCP tools** (``MCPStdioTool``, ``MCPStreamableHTTPTool``): one ``execute_tool``
  span per call, with the MCP attributes, the only span for it (:mod:`.mcp`).

The package's modules, the same in every runner: ``runner`` (the runner, its per-run
class, the module), ``convert`` (requests to native input, native output to ours),
``request`` (what a model call is sent, in GenAI shapes), ``mapper`` (native progress
to builder calls), ``adapter`` (the middleware Agent Framework calls), ``quiet``,
``nesting``, ``mcp``, and ``testing`` (the offline test model).
"""

from runnertrace._internal.imports import missing_extra

try:
    import agent_framework  # noqa: F401 - the extra's check, before anything else loads
except ImportError as exc:
    raise missing_extra(exc, "maf") from exc

from runnertrace.runners.maf.convert import CONTEXT_KEY, messages_of
from runnertrace.runners.maf.runner import STATE_KEY, MAFModule, MAFRunner

__all__ = ["CONTEXT_KEY", "STATE_KEY", "MAFModule", "MAFRunner", "messages_of"]
