"""``OpenAIRunner``: the runner contract over the OpenAI Agents SDK (``openai-agents``).

Importing this package needs the extra: ``pip install 'runnertrace[openai-agents]'``.

How the SDK maps onto the contract, and why (each part is detailed in its module):

- **Session state** lives under ``"openai"`` as the SDK's own input-item list
  (``RunResult.to_input_list(mode="normalized")``). The next run replays it
  before the new user message. We keep the history ourselves instead of passing
  an SDK ``Session`` so that a failed run saves nothing: the stored history and
  the framework context only ever move forward together, after success.
- **Input** (``convert.py``): all requests of a run become one user message.
- **Framework context** (full round trip): the loaded copy is passed as
  ``context=``; tools mutate it through ``RunContextWrapper.context`` and that
  very object is written back, only when the run succeeded. Without a stored
  context the run gets ``context=None``, so a tool that writes to it fails
  loudly rather than losing the write.
- **Run options** go to ``Runner.run`` / ``Runner.run_streamed`` unchanged;
  unknown keys reach the SDK (which raises ``TypeError``). The keys the runner
  owns are reserved, see :attr:`OpenAIRunner.RESERVED_RUN_OPTIONS`.
- **Observation** (only when a run is observed; an untraced run is the SDK's
  own call with nothing added): a ``RunHooks`` object composed with the user's
  declared ``hooks=`` (``adapter.py``), whose callbacks the mapper turns into
  events (``mapper.py``), with what each model call is sent (``request.py``).
  Run mode takes the rest from the hooks too; stream mode from the stream events.
- **Tool errors**: a function tool that raised and whose exception the SDK
  turned into a message for the model reaches our ``RunConfig.tool_error_formatter``,
  which records it for the call's result and hands over to the user's formatter.
- **An agent run as a tool** (``Agent.as_tool()``) is a run of its own, an
  ``invoke_agent`` span under the tool's ``execute_tool`` span with its own steps,
  chat and tool spans (``nesting.py``).
- **Not mapped**: hosted tools that run inside the model call (web search,
  file search, image generation, code interpreter) get no tool events; their
  time is in the model call. A tool with its own ``failure_error_function``
  reports its error text as an ordinary result: the SDK hands that exception
  to the tool's function only. MCP server tools are listed in the tool
  definitions from the listing the SDK made for the turn (``request.py``),
  except under ``include_server_in_tool_names`` or a callable ``tool_filter``.
- **The SDK's own tracing is switched off for a traced run, by default**
  (``quiet.py``); ``OpenAIRunner(keep_sdk_tracing=True)`` keeps it.
- Exceptions from the SDK (``MaxTurnsExceeded``, guardrail tripwires, model
  errors) propagate unchanged. Events already reported stay as they are; the
  tracing layer closes what was left open.

The offline test model is in ``runnertrace.runners.openai_agents.testing``.
"""

from runnertrace._internal.imports import missing_extra

try:
    import agents  # noqa: F401 - the SDK, which every module of this package imports
except ImportError as exc:
    raise missing_extra(exc, "openai-agents") from exc

from runnertrace.runners.openai_agents.convert import native_input
from runnertrace.runners.openai_agents.runner import OpenAIModule, OpenAIRunner

__all__ = ["OpenAIModule", "OpenAIRunner", "native_input"]
