"""``SmolagentsRunner``: the runner contract over smolagents agents (tool-calling and code).

Install with ``pip install 'runnertrace[smolagents]'``; importing this package
without smolagents raises :class:`~runnertrace._internal.imports.MissingExtraError`.

smolagents is synchronous and its agents are stateful objects (memory, state,
step number), so:

* **One run of an agent object at a time.** Runs of the same native agent take
  turns (waited for without blocking the event loop or holding a thread); the
  turn covers the run's setup, its worker thread and the agent being put back.
  Different agents run concurrently.
* **A worker thread per run.** The agent runs in a thread (the event loop is never
  blocked); the thread starts in a copy of the caller's context, so the tool
  context and OTel context reach tools and model calls.
* **The agent object is left as it was.** What the runner changes for a run (the
  model it calls, the step-callback registry, ``stream_outputs``, a silent logger
  at verbosity OFF, ``agent.state``; the same on its managed agents, and their
  ``run``) is put back when the run ends.

What a run does:

* **Session state.** The agent's memory steps are stored under the session key
  ``"smolagents"`` and put back into ``agent.memory`` on the next run, which then
  runs with ``reset=False``; a first run resets the memory. Errors in stored steps
  are kept as :class:`StoredAgentError` (smolagents' own errors do not pickle).
* **Framework context** (round trip, filtered). The loaded context is passed as
  ``additional_args`` (smolagents copies it into ``agent.state`` and appends it to
  the task). After a successful run, only the keys the context had before the run
  are written back from ``agent.state``; keys a tool adds are dropped.
* **Run options** reach ``agent.run`` (``max_steps``, ...). The runner owns
  ``task``, ``stream``, ``reset``, ``additional_args``, ``return_full_result`` and
  ``images``.

**Events** (traced runs, and every stream): the install step puts stand-ins on the
agent for the run (``adapter``), which report to the run's mapper (``mapper``):

* Step callbacks end the steps: a registry that calls the runner's callback and
  then the agent's own registry takes ``agent.step_callbacks``' place for the run
  (smolagents has no way to unregister a callback, so adding one to the user's
  registry would leave it there), so the user's callbacks fire exactly once.
  A step starts at its first model call; for a ``CodeAgent``, the step's code is
  on its ``StepEnd`` (on the step span under content capture).
* Model calls go through a stand-in for ``agent.model`` that reports the request
  (messages, system prompt as text, parameters, tools), runs the call in the
  model scope, and reports the reply, its deltas when streamed, and its usage.
* Tools: a ``ToolCallingAgent``'s ``execute_tool_call`` is replaced on the instance
  for the run, so each tool runs in its call's tool scope (parallel calls too) and
  its result or exception is reported. A ``CodeAgent``'s code runs as the tool
  call ``python_interpreter`` (smolagents' own name), in its scope.
* **Managed agents** (nested ones too; ``nesting``): smolagents calls a member as a
  tool (``member(task)``, which calls ``member.run``) with no runner in between.
  For a traced run, each member's ``run`` is replaced on the instance for the run:
  called in the manager's tool scope, it opens a nested run (an ``invoke_agent``
  span under the manager's ``execute_tool`` for that call, or
  ``python_interpreter`` for a ``CodeAgent``'s code), puts the same stand-ins on
  the member with a mapper of its own reporting there, drives its
  ``run(stream=True)`` and returns its final answer, as ``run`` would. Its events
  are traced, not yielded: the stream is the manager's. A cancelled run ends the
  members' runs too and interrupts them.
* **Stream mode** sets ``stream_outputs`` (when the model has ``generate_stream``)
  and drives ``run(stream=True)``: deltas, tool calls and a step per action step.

A fault of ours in any of that costs telemetry only: the stand-ins and the mapper
are guarded by construction, and a fault while putting the stand-ins on leaves
the run going on uninstrumented (the kit's install step).

**OpenInference's smolagents instrumentor** (and any other that wraps smolagents'
methods) would add a second span for each run, step, model call and tool call.
When smolagents' entry points are wrapped, a *traced* run runs with OTel's
suppress-instrumentation flag set, which those wrappers honour; untraced runs are
theirs (``quiet``). The flag also quiets HTTP-client instrumentation inside the
run; a user's own spans are not affected.
"""

from runnertrace._internal.imports import missing_extra

try:
    import smolagents  # noqa: F401 - the extra's check; the modules below import from it
except ImportError as exc:
    raise missing_extra(exc, "smolagents") from exc

from runnertrace.runners.smolagents.convert import StoredAgentError
from runnertrace.runners.smolagents.runner import STATE_KEY, SmolagentsModule, SmolagentsRunner

__all__ = ["STATE_KEY", "SmolagentsModule", "SmolagentsRunner", "StoredAgentError"]
