"""``GoogleADKRunner``: the runner contract over a Google ADK agent (``LlmAgent``).

Install with ``pip install 'runnertrace[adk]'``; importing this module without
``google-adk`` raises :class:`~runnertrace._internal.imports.MissingExtraError`.

How the contract maps onto ADK, per run:

* **The native call.** An ADK ``Runner`` over the user's agent, built per run
  from a per-run ``App`` (so the declared plugins and app settings apply to this
  run only) and driven with ``run_async``. Its session service belongs to the
  :class:`GoogleADKRunner` (an ``InMemorySessionService`` unless one is given),
  and the ADK session is keyed by our session id, under the app name of the
  agent and the runner's ``user_id``. The per-run ``Runner`` is closed after the
  run, as ADK closes a runner: the plugins' ``close()`` and the agent's toolsets
  (bounded by ``plugin_close_timeout``).
* **Session state.** After a successful run the ADK session's events are also
  stored under the session key ``"adk"`` (each run adds the copies of its own
  events); a runner that has not run the conversation yet (a fresh process, a
  session loaded from a durable store) replays them into its service first when
  the service lacks the session, so the conversation continues.
* **Framework context** (round-trips, filtered, accumulate-only). The loaded
  copy is merged into the ADK session state through ``state_delta``; after a
  successful run the session's state, minus ADK's scoped ``app:`` / ``user:`` /
  ``temp:`` keys, is written back (shallow-merged). Tool-added keys survive
  (``tool_context.state[...] = ...``), and so does anything else in the state.
* **Run options** go where ADK takes them: ``plugins`` (and the other ``App``
  settings: ``events_compaction_config``, ``context_cache_config``,
  ``resumability_config``) to the per-run ``App``; ``memory_service``,
  ``artifact_service``, ``credential_service`` and ``plugin_close_timeout`` to
  the per-run ``Runner``; everything else to ``run_async`` (``run_config``,
  ``abort_signal``; an unknown key is ADK's ``TypeError`` on the first run).
  The turn limit is ``run_config=RunConfig(max_llm_calls=N)``.
* **Stream mode** copies the declared ``run_config`` with
  ``streaming_mode=SSE`` (one warning per runner when the caller set another
  mode explicitly): partial responses become text (and reasoning) deltas, and
  the final non-partial response closes the message with its function calls and
  usage. Run mode honours the ``run_config`` as declared.

**Events** come from one ADK plugin of ours (:class:`_ObserverPlugin`), added
last to the per-run ``App``'s plugins (once per native runner). Every callback
returns ``None``, so the user's plugins and the agent's callbacks still fire
exactly once and keep the last word. An untraced run-mode call adds no plugin;
stream mode always needs it (the events are the stream) but builds the request
fields only when someone observes.

* A step is one model call and the tool calls it asks for (ADK's LLM-flow step);
  it starts at ``before_model_callback`` and ends when the next one on its lane
  starts, its agent is done (``after_agent_callback``) or the run ends. A *lane*
  is one ADK invocation on one ADK branch (``invocation_id``, ``branch``), on
  which agents take turns: a ``sub_agents`` transfer, a ``SequentialAgent``'s
  agents, a ``LoopAgent``'s iterations. A step
  after a ``transfer_to_agent`` call by another agent records the handoff (source
  and target); a turn of a workflow agent is a plain step of the new agent.
* Compositions inside one run are builder branches (see
  :mod:`runnertrace.runners._kit.builder`): the run's own lane is the run's line,
  every other lane a branch keyed by its invocation and ADK branch, its steps under
  the run span. A ``ParallelAgent`` gives each sub-agent its own ADK branch, so its
  branches' steps overlap, each with its own chat and tool spans and agent name; a
  step on a lane ends the steps of the invocation's lanes that take turns with it
  (any but one parting right under a ``ParallelAgent``).
* An ``AgentTool`` runs its agent on a sub-runner of its own invocation, to which
  ADK passes our plugin: the invocation started while the tool runs
  (``before_run_callback``, told apart by a context variable set in the tool's
  task) is a **nested run** (:func:`~runnertrace.core.observer.open_nested_run`,
  opened in the tool's scope: an ``invoke_agent`` span under the tool's
  ``execute_tool`` span, in run mode, as ``AgentTool`` runs its agent unary). Its
  callbacks go to a mapping of its own, reporting to that run, which ends with the
  sub-invocation (``after_run_callback``: with its final text as the reply;
  ``on_run_error_callback``: with the error) or, at the latest, with its tool call.
  Its totals roll up into the run that called the tool. When the tool call is
  cancelled (a sibling branch of a ``ParallelAgent`` failed; ADK then calls
  ``on_tool_error_callback`` with the ``CancelledError``), the nested run ends
  cancelled, and its open step and unfinished chat span with it (the ADK
  ``after_agent_callback`` of an agent being cancelled ends nothing there). An
  untraced stream does not map it: the stream is the outer agent's. Any run still
  open when its caller's run ends (fails, stops) ends cancelled first.
* The chat span starts when the request is about to be sent, with what is sent:
  ``llm_request.contents`` as GenAI messages, the system instruction as text, the
  generate-content config's sampling parameters and the function declarations.
  ``on_model_error_callback`` ends it with the exception, in its step. ADK does
  not retry a failed model call; unless an error callback answers for the model,
  the run fails.
* A tool call runs in the tool scope from ``before_tool_callback`` to
  ``after_tool_callback`` / ``on_tool_error_callback`` (ADK runs all three in the
  same task, so spans opened in the tool nest under its ``execute_tool``). A tool
  that raises is reported with its exception, whether an ``on_tool_error``
  callback feeds a response back to the model or the run fails.

**ADK's own OpenTelemetry spans: silenced in traced runs.** ADK sends
``invoke_workflow`` / ``invoke_agent`` / ``generate_content`` / ``execute_tool``
spans to the global tracer provider, which is also ours when the application
installed an SDK provider (runnertrace then reuses it). Next to ours each call
would show twice and its tokens count twice. So the first traced run wraps ADK's
tracer (the one object all of ADK's modules share) once per process: where a
context variable says so, its spans are OpenTelemetry's no-op spans, which pass
the current context through, as with the global provider left at its default. A
traced run sets it while it drives ADK (the tasks ADK starts inherit it, an
``AgentTool``'s sub-runner included) and unsets it inside a tool's own code, so
an untraced ADK runner a tool starts keeps its spans; untraced runs keep ADK's
spans untouched and pay one context-variable read per span. Ours are parented
explicitly; each tool's span is made current only inside the tool, and the chat
span around the model call: entered in ``before_model_callback`` and left in the
final ``after_model_callback`` (or ``on_model_error_callback``), which ADK runs
in its own task inside the scope it drives the model call with, carrying the
attached context from one resumption to the next and never out to the consumer
of the stream. So a span opened inside a model call (an HTTP client's, the user's
own in the model or a model callback) nests under our chat span, with any
provider, and any sampler keeps ADK's spans out. (An instrumentation that wraps
the model's client, such as google-genai's, still makes its own span there,
under ours.) Should an ADK keep its tracer elsewhere, a traced run falls back to
driving ADK under an *unsampled* copy of the run span's context: parent-based
samplers (the SDK default) then drop ADK's spans, and, while they record, the
chat span is not made current in a model call (spans opened there are dropped
with ADK's), and an ``AgentTool``'s sub-runner runs under an unsampled copy of
its tool span's context.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterator, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    aclosing,
    contextmanager,
    suppress,
)
from contextvars import ContextVar, Token
from typing import Any, ClassVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from pydantic import JsonValue

from runnertrace._internal.imports import missing_extra

try:
    from google.adk.agents import BaseAgent, LlmAgent, ParallelAgent, RunConfig
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext

    # ADK documents this import path; mypy sees it as an implicit re-export.
    from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
    from google.adk.apps import App
    from google.adk.events import Event
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins import BasePlugin
    from google.adk.runners import Runner as ADKRunner
    from google.adk.sessions import BaseSessionService, InMemorySessionService
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.adk.tools.agent_tool import AgentTool
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ImportError as exc:
    raise missing_extra(exc, "adk") from exc

from runnertrace.core.agent import Agent
from runnertrace.core.models import AgentReply, AgentRequest, AgentRequestText
from runnertrace.core.module import Module
from runnertrace.core.observer import NestedRun, in_traced_run, open_nested_run
from runnertrace.runners._kit.builder import EventBuilder
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    RunSetup,
    is_url,
    media_bytes,
    reply_of,
    save,
)

__all__ = ["STATE_KEY", "GoogleADKModule", "GoogleADKRunner", "user_content_of"]

logger = logging.getLogger("runnertrace")

STATE_KEY = "adk"
_boundary = MappingBoundary("google_adk")
PLUGIN_NAME = "runnertrace"
_TRANSFER = "transfer_to_agent"  # ADK's tool for a transfer to another agent
DEFAULT_USER_ID = "runnertrace"

# ADK's scoped state prefixes: app-, user- and invocation-wide values, not the run's context.
_SCOPED_PREFIXES = ("app:", "user:", "temp:")

# Where each run option goes (anything else goes to run_async).
_APP_OPTIONS = frozenset(App.model_fields) - {"name", "root_agent"}
_RUNNER_OPTIONS = frozenset(
    {"memory_service", "artifact_service", "credential_service", "plugin_close_timeout"}
)

# GenerateContentConfig fields that are GenAI request parameters, by semconv name.
_REQUEST_PARAMETERS = {
    "temperature": "temperature",
    "max_output_tokens": "max_tokens",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "stop_sequences": "stop_sequences",
}


# -- requests -> native input ----------------------------------------------------------------------


def _blob(data: str, mime_type: str, name: str | None) -> types.Part:
    """An image or file: an http(s) URL stays a reference, anything else is inline bytes."""
    if is_url(data):
        return types.Part(file_data=types.FileData(file_uri=data, mime_type=mime_type))
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        mime_type = header[5:].split(";")[0] or mime_type
    raw = media_bytes(data, mime_type, name)
    return types.Part(inline_data=types.Blob(data=raw, mime_type=mime_type, display_name=name))


_REQUEST_PARTS: dict[str, Callable[[Any], types.Part]] = {
    "text": lambda r: types.Part(text=r.prompt),
    "image": lambda r: _blob(r.image_data, r.mime_type, r.name),
    "file": lambda r: _blob(r.file_data, r.mime_type, r.name),
    "any": lambda r: types.Part(
        text=r.content if isinstance(r.content, str) else json.dumps(r.content, default=str)
    ),
}


def user_content_of(requests: Sequence[AgentRequest]) -> types.Content:
    """Our requests as the ADK user message (one part per request, in order)."""
    if not requests:
        raise ValueError("a run needs at least one request")
    return types.Content(role="user", parts=[_REQUEST_PARTS[r.type](r) for r in requests])


# -- what a model call is sent ---------------------------------------------------------------------


def _jsonable(value: Any) -> JsonValue:
    return json.loads(json.dumps(value, default=str))  # type: ignore[no-any-return]


def _part(part: types.Part) -> dict[str, JsonValue] | None:
    """One ``types.Part`` as a GenAI semconv message part (``None``: nothing to show)."""
    if part.function_call is not None:
        call = part.function_call
        return {
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            "arguments": _jsonable(call.args or {}),
        }
    if part.function_response is not None:
        response = part.function_response
        return {
            "type": "tool_call_response",
            "id": response.id,
            "name": response.name,
            "response": _jsonable(response.response),
        }
    if part.text is not None:
        return {"type": "reasoning" if part.thought else "text", "content": part.text}
    blob = part.inline_data or part.file_data
    if blob is not None:
        return {"type": "blob", "mime_type": blob.mime_type}
    return None


_ROLES = {"model": "assistant", "user": "user"}


def _messages(contents: Sequence[types.Content]) -> list[dict[str, JsonValue]]:
    """``llm_request.contents`` as GenAI semconv input messages.

    A user-role content that holds only function responses is the tool's message.
    """
    messages: list[dict[str, JsonValue]] = []
    for content in contents:
        parts = [p for p in map(_part, content.parts or ()) if p is not None]
        if not parts:
            continue
        role = _ROLES.get(content.role or "user", content.role or "user")
        if all(p["type"] == "tool_call_response" for p in parts):
            role = "tool"
        messages.append({"role": role, "parts": list(parts)})
    return messages


def _instruction_text(instruction: Any) -> str | None:
    """The system instruction as the text the model gets (ADK renders it to a string)."""
    if instruction is None or isinstance(instruction, str):
        return instruction or None
    if isinstance(instruction, types.Content):
        texts = [p.text for p in instruction.parts or () if p.text]
        return "\n".join(texts) or None
    if isinstance(instruction, types.Part):
        return instruction.text or None
    if isinstance(instruction, list):
        return "\n".join(filter(None, map(_instruction_text, instruction))) or None
    return str(instruction)


def _tool_definitions(config: types.GenerateContentConfig) -> list[dict[str, JsonValue]]:
    definitions: list[dict[str, JsonValue]] = []
    for tool in config.tools or ():
        for declaration in getattr(tool, "function_declarations", None) or ():
            schema: Any = declaration.parameters_json_schema
            if schema is None and declaration.parameters is not None:
                schema = declaration.parameters.model_dump(mode="json", exclude_none=True)
            definitions.append(
                {
                    "type": "function",
                    "name": declaration.name,
                    "description": declaration.description,
                    "parameters": _jsonable(schema),
                }
            )
    return definitions


def _request_fields(llm_request: LlmRequest) -> dict[str, Any]:
    """The optional ``MessageStart`` fields: messages, instructions, parameters, tools."""
    config = llm_request.config
    parameters: dict[str, JsonValue] = {
        name: _jsonable(getattr(config, field))
        for field, name in _REQUEST_PARAMETERS.items()
        if getattr(config, field, None) is not None
    }
    return {
        "input_messages": _messages(llm_request.contents) or None,
        "system_instructions": _instruction_text(config.system_instruction),
        "request_parameters": parameters or None,
        "tool_definitions": _tool_definitions(config) or None,
    }


def _provider_of(model: str | None) -> str | None:
    """``gen_ai.provider.name`` for a model id, read as ADK's own telemetry reads it.

    Gemini ids are Google's (``gcp.vertex_ai`` when the google-genai client is set to
    Vertex, else ``gcp.gemini``), ``claude-*`` Anthropic's, and a LiteLLM-style
    ``<provider>/<model>`` names its provider; any other id names none we know.
    """
    if not model:
        return None
    name = model.rsplit("models/", 1)[-1]  # a resource path ends in models/<id>
    if name.startswith("gemini"):
        vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("1", "true")
        return "gcp.vertex_ai" if vertex else "gcp.gemini"
    if name.startswith("claude"):
        return "anthropic"
    prefix, slash, _ = name.partition("/")
    return prefix.lower() if slash and prefix else None


def _result_text(result: Any) -> str:
    """A tool's result as text: ADK wraps a non-dict return as ``{"result": value}``."""
    if isinstance(result, Mapping) and set(result) == {"result"}:
        result = result["result"]
    return result if isinstance(result, str) else json.dumps(result, default=str)


_FINISH_REASONS = {types.FinishReason.STOP: "stop", types.FinishReason.MAX_TOKENS: "length"}


# -- native progress -> builder calls (the mapping) ------------------------------------------------


class _ModelCall:
    """One agent's model call in progress: its message, what its partial responses
    carried (``True``: reasoning, ``False``: text) and the scope entered for it."""

    __slots__ = ("message", "scope", "streamed")

    def __init__(self, message: str, scope: AbstractContextManager[None] | None) -> None:
        self.message = message
        self.scope = scope
        self.streamed: set[bool] = set()


# The AgentTool call running in this task, with the mapping that reported it: the
# sub-runner ADK starts there sends its callbacks to our plugin too (ADK passes the
# plugins down), and its invocation is that agent's nested run. Set and reset in the
# tool's own task.
_AGENT_TOOL_CALL: ContextVar[tuple[_Mapper, str] | None] = ContextVar(
    "runnertrace_adk_agent_tool", default=None
)

_LaneKey = tuple[str, str]  # (ADK invocation id, ADK branch)


def _concurrent(branch: str, other: str, root: BaseAgent | None) -> bool:
    """Whether two ADK branches of one invocation run at the same time: they part
    right under a ``ParallelAgent`` (ADK names a sub-agent's branch
    ``<parallel>.<sub-agent>`` under its parent's); a branch and one it contains, or
    two that part under any other agent, take turns. Agents of no tree we can read
    (``root`` is ``None``) may run at once: neither's step is ended by the other."""
    ours, theirs = branch.split(".") if branch else [], other.split(".") if other else []
    shared = 0
    for mine, yours in zip(ours, theirs, strict=False):
        if mine != yours:
            break
        shared += 1
    if shared in (0, len(ours), len(theirs)):
        return False
    if root is None:
        return True
    parting = root.find_agent(ours[shared - 1].partition("@")[0])
    return isinstance(parting, ParallelAgent)


class _Lane:
    """One line of steps: the agents of one ADK invocation on one ADK branch take
    turns on it (a transfer, a ``SequentialAgent``, a ``LoopAgent``); a
    ``ParallelAgent`` gives each sub-agent its own branch. ``branch`` is its
    builder branch (``None``: the run's own line)."""

    __slots__ = ("agent", "branch", "step", "transferring")

    def __init__(self, branch: str | None) -> None:
        self.branch = branch
        self.step: tuple[str, int] | None = None
        self.agent: str | None = None
        self.transferring = False  # its step called transfer_to_agent


def _content_text(content: types.Content | None) -> str:
    """The text of a message (its non-thought text parts), ``""`` if none."""
    if content is None:
        return ""
    return "".join(p.text for p in content.parts or () if p.text and not p.thought)


def _cancelling() -> bool:
    """Whether the task running now is being cancelled (ADK calls some callbacks on
    its way out of a cancelled agent)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _final_text(event: Event) -> str | None:
    """The text of an invocation's final response, if ``event`` is one."""
    if event.partial or event.content is None or not event.is_final_response():
        return None
    return _content_text(event.content) or None


class _Mapper:
    """Turns one run's plugin callbacks into builder calls.

    One instance per traced run: the run's own, and one per agent run an
    ``AgentTool`` starts (``nested``: the nested run it reports to, which it ends).
    Steps, model calls and their tool calls are kept per lane (see :class:`_Lane`),
    since the agents of a ``ParallelAgent`` call their models at the same time.
    ``model_scopes`` says whether the chat span may be made current around the
    model call, ``silenced`` whether ADK's tracer passes the context through in
    this run (see the module docstring).
    """

    def __init__(
        self,
        builder: EventBuilder,
        *,
        model_scopes: bool,
        silenced: bool = False,
        nested: NestedRun | None = None,
        prompt: str = "",
    ) -> None:
        self.builder = builder
        self._detailed = builder.observed
        self._model_scopes = model_scopes
        self._silenced = silenced
        self.nested = nested
        self.done = False  # a nested run: ended (nothing more is reported)
        self._prompt = prompt
        self._output: str | None = None  # a nested run: its final text so far
        self._steps = 0
        self.root: str | None = None  # the run's own invocation id
        self._lanes: dict[_LaneKey, _Lane] = {}
        self._calls: dict[_LaneKey, _ModelCall] = {}  # lane -> its model call in progress
        self._tool_scopes: dict[str, AbstractContextManager[None]] = {}
        self._agent_tools: dict[str, Token[tuple[_Mapper, str] | None]] = {}  # AgentTool call
        self._spans_on: dict[str, Token[bool]] = {}  # other tool call -> ADK's spans record
        self._quiet_tools: dict[str, Token[otel_context.Context]] = {}  # AgentTool call -> token
        self._agent_runs: dict[str, list[_Mapper]] = {}  # AgentTool call -> its agent runs
        self._pending: dict[str, str] = {}  # tool call id -> tool name, no result yet
        self._failed: set[str] = set()  # reported failed; a fed-back response follows

    # invocations and lanes ----------------------------------------------------------
    def run_started(self, invocation_id: str) -> None:
        """The run's own invocation starts."""
        self.root = invocation_id

    def run_ended(self, invocation_id: str) -> None:
        """An invocation is over: its lanes' last steps end (an agent run's before its
        tool's result closes its span)."""
        for key in [k for k in self._lanes if k[0] == invocation_id]:
            self._close(key)
            self.end_step(key)

    def agent_ended(self, key: _LaneKey, agent_name: str) -> None:
        """An agent is done: its last step on its lane ends now, not when the lane is
        next used (a ``ParallelAgent`` branch that finishes first, a failing run).
        ADK calls this for an agent being cancelled too: in a nested run, its step
        is then left to end, marked cancelled, with the run."""
        if self.nested is not None and _cancelling():
            return
        lane = self._lanes.get(key)
        if lane is not None and lane.agent == agent_name:
            self._close(key)
            self.end_step(key)

    def _lane(self, key: _LaneKey) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            invocation, branch = key
            own_line = invocation == self.root and not branch
            lane = self._lanes[key] = _Lane(None if own_line else f"{invocation}:{branch}")
        return lane

    # agent runs (AgentTool) -----------------------------------------------------------
    def open_agent_run(self, call_id: str, invocation_context: InvocationContext) -> _Mapper | None:
        """The invocation an ``AgentTool`` call of this run starts: a nested run under
        the tool's span, mapped by a mapper of its own (``None``: not traced)."""
        if not self._detailed or self.done or call_id not in self._tool_scopes:
            return None
        agent = invocation_context.agent
        name = getattr(agent, "name", None) or "agent"
        prompt = _content_text(invocation_context.user_content)
        config = invocation_context.run_config
        streamed = config is not None and config.streaming_mode == StreamingMode.SSE
        with self.builder.tool_scope(call_id):  # opened under the tool's span
            run = open_nested_run(
                name,
                mode="stream" if streamed else "run",
                requests=[AgentRequestText(prompt=prompt)] if prompt else None,
            )
        if run is None:
            return None
        child = _Mapper(
            EventBuilder(run),
            model_scopes=self._model_scopes,
            silenced=self._silenced,
            nested=run,
            prompt=prompt,
        )
        child.run_started(invocation_context.invocation_id)
        self._agent_runs.setdefault(call_id, []).append(child)
        return child

    def see(self, event: Event) -> None:
        """A nested run keeps its final response's text (its reply)."""
        if self.nested is not None:
            text = _final_text(event)
            if text:
                self._output = text

    def end_run(self, error: BaseException | None = None, *, cancelled: bool = False) -> None:
        """End a nested run: with its reply, its ``error``, or ``cancelled`` (its
        open spans end marked so; its tasks are gone, so no scope is left)."""
        nested = self.nested
        if nested is None or self.done:
            return
        self.done = True
        self.end_agent_runs()  # the ones it started, first: they roll up into it
        if cancelled:
            self._calls.clear()
        else:
            if error is not None:
                self.builder.fail(error)
            self.finish()
        reply = None if error is not None or cancelled else reply_of(self._output, self._prompt)
        nested.finish(reply=reply, error=error, cancelled=cancelled)

    def _end_agent_runs_of(self, call_id: str, error: BaseException | None = None) -> None:
        """The tool call that ran agents ended: any run of them still open ends now,
        cancelled with it when the call was (ADK reports that as its error)."""
        cancelled = isinstance(error, asyncio.CancelledError)
        for child in self._agent_runs.pop(call_id, ()):
            child.end_run(None if cancelled else error, cancelled=cancelled)

    def end_agent_runs(self) -> None:
        """This run ends: the agent runs still open were cut short (cancelled)."""
        for call_id in list(self._agent_runs):
            for child in self._agent_runs.pop(call_id):
                child.end_run(cancelled=True)

    # steps --------------------------------------------------------------------------
    def end_step(self, key: _LaneKey) -> None:
        lane = self._lanes.get(key)
        if lane is not None and lane.step is not None:
            name, index = lane.step
            lane.step = None
            self.builder.step_end(name, index, branch=lane.branch)

    def _start_step(self, key: _LaneKey, agent_name: str, root: BaseAgent | None) -> _Lane:
        """A model call starts a step on its lane: the lane's previous step ends, and
        so do those of the invocation's other lanes, unless they run alongside it
        (branches of one ``ParallelAgent``): the agent that ran there is done or
        waits for this one."""
        invocation, branch = key
        for other in [k for k in self._lanes if k[0] == invocation and k != key]:
            if not _concurrent(branch, other[1], root):
                self.end_step(other)
        self.end_step(key)
        lane = self._lane(key)
        handoff = lane.agent if lane.transferring and lane.agent != agent_name else None
        lane.agent, lane.transferring = agent_name, False
        self._steps += 1
        lane.step = (agent_name, self._steps)
        self.builder.step_start(
            agent_name,
            self._steps,
            agent_name=agent_name,
            handoff_from=handoff,
            branch=lane.branch,
        )
        return lane

    # model calls ----------------------------------------------------------------------
    def model_started(
        self, key: _LaneKey, agent_name: str, root: BaseAgent | None, llm_request: LlmRequest
    ) -> None:
        self._close(key)
        lane = self._start_step(key, agent_name, root)
        fields = _boundary.detail(_request_fields, llm_request) if self._detailed else {}
        message = self.builder.message_start(
            model=llm_request.model,
            provider=_provider_of(llm_request.model),
            branch=lane.branch,
            **fields,
        )
        scope = self.builder.model_scope(message) if self._model_scopes else None
        self._calls[key] = _ModelCall(message, scope)
        if scope is not None:
            scope.__enter__()

    def _end(self, key: _LaneKey) -> _ModelCall | None:
        """The lane's model call is over: its scope is left (same task as entered)."""
        call = self._calls.pop(key, None)
        if call is not None and call.scope is not None:
            call.scope.__exit__(None, None, None)
        return call

    def model_responded(self, key: _LaneKey, response: LlmResponse) -> None:
        call = self._calls.get(key)
        if call is None:  # a response no request of ours announced (a callback's)
            call = self._calls[key] = _ModelCall(
                self.builder.message_start(
                    model=response.model_version,
                    provider=_provider_of(response.model_version),
                    branch=self._lane(key).branch,
                ),
                None,
            )
        message = call.message
        parts = response.content.parts or [] if response.content is not None else []
        if response.partial:
            call.streamed.update(bool(p.thought) for p in parts if p.text)
            self._content(parts, message)
            return
        # The final response repeats what the partial ones streamed: only the rest is new.
        self._content([p for p in parts if bool(p.thought) not in call.streamed], message)
        for index, part in enumerate(parts):
            function_call = part.function_call
            if function_call is not None and function_call.id and function_call.name:
                self._pending[function_call.id] = function_call.name
                self.builder.tool_call(
                    json.dumps(function_call.args or {}),
                    tool_call_id=function_call.id,
                    name=function_call.name,
                    index=index,
                    message_id=message,
                )
        usage = response.usage_metadata
        reason = response.finish_reason
        self._end(key)
        self.builder.message_end(
            message,
            finish_reason="error"
            if response.error_code
            else _FINISH_REASONS.get(reason, str(reason.value).lower())
            if reason is not None
            else None,
            input_tokens=usage.prompt_token_count if usage is not None else None,
            output_tokens=usage.candidates_token_count if usage is not None else None,
            cache_read_input_tokens=usage.cached_content_token_count if usage else None,
            reasoning_output_tokens=usage.thoughts_token_count if usage else None,
            response_model=response.model_version,
            response_id=response.interaction_id,
        )

    def _content(self, parts: Sequence[types.Part], message: str) -> None:
        for part in parts:
            if part.text:
                if part.thought:
                    self.builder.reasoning(part.text, message)
                else:
                    self.builder.text(part.text, message)

    def model_failed(self, key: _LaneKey, error: BaseException) -> None:
        call = self._end(key)
        if call is not None:
            self.builder.message_end(call.message, error=error)

    def _close(self, key: _LaneKey) -> None:
        """A model call no response closed (an agent callback answered for the model)."""
        call = self._end(key)
        if call is not None:
            self.builder.message_end(call.message)

    # tools ----------------------------------------------------------------------------
    def tool_started(self, key: _LaneKey, call_id: str, tool: BaseTool) -> None:
        if tool.name == _TRANSFER:
            self._lane(key).transferring = True
        scope = self.builder.tool_scope(call_id)
        scope.__enter__()
        self._tool_scopes[call_id] = scope
        if isinstance(tool, AgentTool):  # the sub-runner it starts is a nested run
            self._agent_tools[call_id] = _AGENT_TOOL_CALL.set((self, call_id))
            if self._detailed and not self._model_scopes:  # traced, and ADK's spans record:
                # the sub-runner's are dropped, as the run's are (see the module docstring)
                self._quiet_tools[call_id] = otel_context.attach(_quiet_context())
        elif self._silenced:  # the tool's own code: ADK's spans record there as anywhere
            self._spans_on[call_id] = _ADK_SPANS_OFF.set(False)

    def _leave_tool_scope(self, call_id: str) -> None:
        quiet = self._quiet_tools.pop(call_id, None)
        if quiet is not None:
            otel_context.detach(quiet)
        # Reset in another context (the task's copy is gone): nothing to undo.
        agent_tool = self._agent_tools.pop(call_id, None)
        if agent_tool is not None:
            with suppress(ValueError):
                _AGENT_TOOL_CALL.reset(agent_tool)
        spans_on = self._spans_on.pop(call_id, None)
        if spans_on is not None:
            with suppress(ValueError):
                _ADK_SPANS_OFF.reset(spans_on)
        scope = self._tool_scopes.pop(call_id, None)
        if scope is not None:
            scope.__exit__(None, None, None)

    def tool_finished(self, call_id: str, name: str, result: Any) -> None:
        """After the tool (or a callback answering for it); a failure was reported already."""
        self._end_agent_runs_of(call_id)
        self._leave_tool_scope(call_id)
        if call_id in self._failed:
            self._failed.discard(call_id)
            return
        self._pending.pop(call_id, None)
        self.builder.tool_result(call_id, _result_text(result), name=name)

    def tool_failed(self, call_id: str, name: str, error: BaseException) -> None:
        """The tool raised (or was cancelled): reported now, whether a callback then
        feeds a response back (``after_tool_callback`` follows) or the run fails."""
        self._end_agent_runs_of(call_id, error)
        self._leave_tool_scope(call_id)
        self._pending.pop(call_id, None)
        self._failed.add(call_id)
        message = f"{type(error).__name__}: {error}"
        self.builder.tool_result(call_id, message, name=name, error=error)

    def settle(self, event: Event) -> None:
        """Function responses whose after-tool hook never reached us (a user plugin
        ahead of ours answered for it) still close their calls."""
        self.see(event)
        for response in event.get_function_responses():
            name = self._pending.pop(response.id, None) if response.id else None
            if name is not None and response.id is not None:
                self._end_agent_runs_of(response.id)
                self.builder.tool_result(response.id, _result_text(response.response), name=name)

    def finish(self) -> None:
        """The native run ended: what is still open closes (the agent runs it started,
        a message a callback answered for, the last step)."""
        self.end_agent_runs()
        for key in list(self._calls):
            self._close(key)
        for key in list(self._lanes):
            self.end_step(key)


def _lane_of(context: CallbackContext) -> _LaneKey:
    """The lane a callback belongs to: its ADK invocation and branch."""
    invocation = context._invocation_context  # noqa: SLF001 - ADK exposes no public branch
    return invocation.invocation_id, invocation.branch or ""


class _ObserverPlugin(BasePlugin):
    """The one plugin through which a run's events are observed.

    ADK passes it down to an ``AgentTool``'s sub-runner, so it hears the agent runs
    the run starts too: each invocation's callbacks go to the mapping of its run
    (the first invocation is the run's own; one started inside an ``AgentTool``
    call is that call's nested run; any other is not ours to map).

    Every callback returns ``None`` (any other value would answer for the model or
    the tool and skip the plugins and agent callbacks after it), and mapping
    faults are telemetry faults: logged once, never fatal to the run.
    """

    def __init__(self, mapper: _Mapper) -> None:
        super().__init__(PLUGIN_NAME)
        self.mapper = mapper
        self._runs: dict[str, _Mapper] = {}  # invocation id -> the mapping of its run

    def _of(self, invocation_id: str) -> _Mapper | None:
        mapper = self._runs.get(invocation_id)
        return mapper if mapper is not None and not mapper.done else None

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        with _boundary:
            invocation = invocation_context.invocation_id
            if self.mapper.root is None:
                self.mapper.run_started(invocation)
                self._runs[invocation] = self.mapper
                return
            started = _AGENT_TOOL_CALL.get()
            if started is not None:
                owner, call_id = started
                child = owner.open_agent_run(call_id, invocation_context)
                if child is not None:
                    self._runs[invocation] = child

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        with _boundary:
            mapper = self._of(invocation_context.invocation_id)
            if mapper is not None:
                mapper.run_ended(invocation_context.invocation_id)
                mapper.end_run()  # a nested run ends with its reply

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        with _boundary:
            mapper = self._of(invocation_context.invocation_id)
            if mapper is not None:
                mapper.end_run(error)  # a nested run ends with the error (ours: the runner's)

    async def after_agent_callback(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> None:
        with _boundary:
            key = _lane_of(callback_context)
            mapper = self._of(key[0])
            if mapper is not None:
                mapper.agent_ended(key, agent.name)

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> None:
        with _boundary:
            key = _lane_of(callback_context)
            mapper = self._of(key[0])
            if mapper is not None:
                agent = callback_context._invocation_context.agent  # noqa: SLF001 - see _lane_of
                mapper.model_started(
                    key,
                    callback_context.agent_name,
                    agent.root_agent if isinstance(agent, BaseAgent) else None,
                    llm_request,
                )

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> None:
        with _boundary:
            key = _lane_of(callback_context)
            mapper = self._of(key[0])
            if mapper is not None:
                mapper.model_responded(key, llm_response)

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> None:
        with _boundary:
            key = _lane_of(callback_context)
            mapper = self._of(key[0])
            if mapper is not None:
                mapper.model_failed(key, error)

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> None:
        if tool_context.function_call_id:
            with _boundary:
                key = _lane_of(tool_context)
                mapper = self._of(key[0])
                if mapper is not None:
                    mapper.tool_started(key, tool_context.function_call_id, tool)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> None:
        if tool_context.function_call_id:
            with _boundary:
                mapper = self._of(tool_context.invocation_id)
                if mapper is not None:
                    mapper.tool_finished(tool_context.function_call_id, tool.name, result)

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> None:
        if tool_context.function_call_id:
            with _boundary:
                mapper = self._of(tool_context.invocation_id)
                if mapper is not None:
                    mapper.tool_failed(tool_context.function_call_id, tool.name, error)

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> None:
        with _boundary:
            mapper = self._of(invocation_context.invocation_id)
            if mapper is not None:
                mapper.settle(event)


# -- the framework's own instrumentation -----------------------------------------------------------

# Where ADK's tracer passes the context through instead of starting spans: set while
# a traced run drives ADK (inherited by the tasks ADK starts, an AgentTool's
# sub-runner included), unset again inside a tool's own code.
_ADK_SPANS_OFF: ContextVar[bool] = ContextVar("runnertrace_adk_spans_off", default=False)
_NOOP_TRACER = trace.NoOpTracer()
_PASSING = "_runnertrace_passes_through"  # marks ADK's tracer as wrapped
_wrapping = threading.Lock()


def _pass_through_adk_spans() -> bool:
    """Wrap ADK's tracer, once per process, so that where :data:`_ADK_SPANS_OFF` is
    set its spans are OpenTelemetry's no-op spans, which keep the current context
    (anywhere else it is left as it is: one context-variable read per span). Whether
    it is wrapped; ``False`` when this ADK keeps its tracer elsewhere.

    ADK's modules share one tracer object (``google.adk.telemetry.tracing.tracer``),
    so its two methods are replaced on that object.
    """
    try:
        from google.adk.telemetry import tracing as adk_tracing
    except ImportError:
        return False
    tracer = getattr(adk_tracing, "tracer", None)
    if tracer is None:
        return False
    if getattr(tracer, _PASSING, False):
        return True
    with _wrapping:
        if getattr(tracer, _PASSING, False):
            return True
        start_span = tracer.start_span
        start_as_current_span = tracer.start_as_current_span

        def quiet_start_span(*args: Any, **kwargs: Any) -> Any:
            chosen = _NOOP_TRACER.start_span if _ADK_SPANS_OFF.get() else start_span
            return chosen(*args, **kwargs)

        def quiet_start_as_current_span(*args: Any, **kwargs: Any) -> Any:
            if _ADK_SPANS_OFF.get():
                return _NOOP_TRACER.start_as_current_span(*args, **kwargs)
            return start_as_current_span(*args, **kwargs)

        try:
            setattr(tracer, "start_span", quiet_start_span)  # noqa: B010 - a method, replaced
        except (AttributeError, TypeError):  # a tracer whose methods cannot be replaced
            return False
        setattr(tracer, "start_as_current_span", quiet_start_as_current_span)  # noqa: B010
        setattr(tracer, _PASSING, True)
    return True


def _adk_spans_record() -> bool:
    """Whether ADK's spans would be recorded: an application set a global provider.

    ADK takes its tracer from the global provider; left at OpenTelemetry's
    default, its spans are no-ops that keep the current context.
    """
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _quiet_context() -> otel_context.Context:
    """The context a traced run drives ADK in: the run span's ids, not sampled.

    Parent-based samplers drop what ADK starts under it; a sampler that ignores
    the parent would keep ADK's spans, nested under our run span.
    """
    run = trace.get_current_span().get_span_context()
    quiet = trace.SpanContext(
        trace_id=run.trace_id,
        span_id=run.span_id,
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
        trace_state=run.trace_state,
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(quiet))


@contextmanager
def _quieted(context: otel_context.Context | None, silenced: bool) -> Iterator[None]:
    """Where a traced run drives ADK: its tracer passing the context through
    (``silenced``), else under the quiet ``context``; an untraced run as it is."""
    spans_off = _ADK_SPANS_OFF.set(True) if silenced else None
    token = otel_context.attach(context) if context is not None else None
    try:
        yield
    finally:
        if token is not None:
            otel_context.detach(token)
        if spans_off is not None:
            _ADK_SPANS_OFF.reset(spans_off)


# -- the run and the runner ------------------------------------------------------------------------


class _Run(FrameworkRun[None]):
    """One ADK invocation on a per-run ADK runner; what it produced so far (the final
    text) is the reply."""

    def __init__(
        self,
        setup: RunSetup[BaseAgent],
        runner: GoogleADKRunner,
        adk: ADKRunner,
        kwargs: dict[str, Any],
        mapper: _Mapper | None,
        quiet: otel_context.Context | None,
        silenced: bool,
    ) -> None:
        super().__init__(setup)
        self.native = setup.native
        self.runner = runner
        self.adk = adk
        self.kwargs = kwargs
        self.mapper = mapper
        self.quiet = quiet
        self.silenced = silenced
        self.output: str | None = None
        self.started = time.time()  # the run's events are the ones from here on

    def see(self, event: Event) -> None:
        """Keep the final response's text (the reply)."""
        text = _final_text(event)
        if text:
            self.output = text

    async def events(self) -> AsyncGenerator[Event, None]:
        """ADK's events, each pulled with ADK's spans silenced in a traced run (never
        across a ``yield``); at the end the per-run ADK runner is closed (its plugins
        and toolsets)."""
        native = self.adk.run_async(**self.kwargs)
        try:
            while True:
                with _quieted(self.quiet, self.silenced):
                    try:
                        event = await anext(native)
                    except StopAsyncIteration:
                        break
                self.see(event)
                yield event
        finally:
            with _quieted(self.quiet, self.silenced):
                await native.aclose()
                await self.adk.close()

    async def call(self) -> None:
        async with aclosing(self.events()) as events:
            async for _ in events:
                pass

    def native_stream(self) -> AbstractAsyncContextManager[AsyncIterable[Any]]:
        # Closed at once when the consumer stops: ADK's per-run runner with it.
        return aclosing(self.events())

    def complete(self) -> None:
        if self.mapper is not None:  # what is still open closes (the last step)
            self.mapper.finish()

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        if self.mapper is not None:  # agent runs cut short by the failure: cancelled
            self.mapper.end_agent_runs()

    def close(self) -> None:
        if self.mapper is not None:  # the run stopped (cancelled, or its consumer left)
            self.mapper.end_agent_runs()

    async def outcome(self) -> None:
        return None

    async def save(self, result: None) -> None:
        await self.runner.save_run(self)

    def reply(self, result: None, prompt: str) -> AgentReply:
        output: Any = self.output
        native = self.native
        if isinstance(native, LlmAgent) and native.output_schema is not None and output:
            with suppress(ValueError):  # not JSON after all: the text is the reply
                output = json.loads(output)
        return reply_of(output, prompt)


class GoogleADKRunner(FrameworkRunner[BaseAgent]):
    """Runs a Google ADK agent (an ``LlmAgent``, or any ``BaseAgent``) in run or stream mode.

    ``session_service`` keeps the ADK sessions (default: an ``InMemorySessionService``
    of this runner); ``user_id`` is the ADK user the sessions belong to.
    """

    framework: ClassVar[str] = "google_adk"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = BaseAgent
    native_what: ClassVar[str] = "a Google ADK agent"
    boundary: ClassVar[MappingBoundary] = _boundary
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "agent": "the runner runs the registered agent",
        "app": "the runner builds a per-run App; declare plugins and App settings as options",
        "app_name": "the runner names the app after the agent",
        "node": "the runner runs the registered agent",
        "session_service": "the session service belongs to the runner: GoogleADKRunner(...)",
        "auto_create_session": "the runner creates the ADK session from the session id",
        "user_id": "the ADK user is the runner's: GoogleADKRunner(user_id=...)",
        "session_id": "the ADK session is keyed by the session id",
        "new_message": "the runner builds the message from the requests",
        "state_delta": (
            "the runner passes the framework context as the state delta; "
            "set it with session.set_framework_context()"
        ),
        "invocation_id": "each run is a new invocation",
        "yield_user_message": "the runner does not map the user's message to events",
    }

    def __init__(
        self,
        session_service: BaseSessionService | None = None,
        *,
        user_id: str = DEFAULT_USER_ID,
    ) -> None:
        self.session_service = session_service or InMemorySessionService()
        self.user_id = user_id
        self._warned_streaming = False
        self._known: set[tuple[str, str]] = set()  # (app, session id) run by this runner

    def _streaming_config(self, agent: Agent, declared: Any) -> RunConfig:
        """A copy of the declared ``run_config`` in SSE mode (the stream mapping needs
        partial responses); one warning per runner when the caller chose another mode."""
        if declared is None:
            return RunConfig(streaming_mode=StreamingMode.SSE)
        if not isinstance(declared, RunConfig):
            raise TypeError(
                f"run option 'run_config' of agent {agent.name!r} must be a "
                f"google.adk.agents.RunConfig, got {type(declared).__name__}"
            )
        chosen = declared.streaming_mode
        explicit = "streaming_mode" in declared.model_fields_set
        if explicit and chosen != StreamingMode.SSE and not self._warned_streaming:
            self._warned_streaming = True
            logger.warning(
                "runnertrace: run_config.streaming_mode=%s of agent %r is replaced by SSE "
                "in stream mode (the stream is made of ADK's partial responses)",
                chosen,
                agent.name,
            )
        return declared.model_copy(update={"streaming_mode": StreamingMode.SSE})

    async def _ensure_session(self, app_name: str, session_id: str, stored: Any) -> None:
        """Replay the events saved in our session into a service that lacks the session.

        Only a conversation with saved events that this runner has not run yet is
        looked up; a new one is created by ADK (``auto_create_session``).
        """
        if not stored or (app_name, session_id) in self._known:
            return
        service, user_id = self.session_service, self.user_id
        found = await service.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
        if found is None:
            created = await service.create_session(
                app_name=app_name, user_id=user_id, session_id=session_id
            )
            for event in stored["events"]:
                await service.append_event(created, event)
        self._known.add((app_name, session_id))

    async def start(self, setup: RunSetup[BaseAgent]) -> _Run:
        # Untraced run mode adds no plugin: the run is the plain native call. Stream
        # mode always maps (the events are the stream).
        traced = in_traced_run()
        # A traced run silences ADK's spans by passing the context through its tracer;
        # where that cannot be done, it drives ADK under a quiet context instead.
        silenced = traced and _pass_through_adk_spans()
        mapper: _Mapper | None = None
        if setup.streaming or setup.observed:
            mapper = _Mapper(
                setup.builder,
                model_scopes=silenced or not _adk_spans_record(),
                silenced=silenced,
            )
        native, session, prepared = setup.native, setup.session, setup.prepared
        options = prepared.options
        app_options = {k: options.pop(k) for k in list(options) if k in _APP_OPTIONS}
        runner_options = {k: options.pop(k) for k in list(options) if k in _RUNNER_OPTIONS}
        plugins = list(app_options.get("plugins") or ())
        if mapper is not None:
            plugins.append(_ObserverPlugin(mapper))
        app_options["plugins"] = plugins
        app = App(name=native.name, root_agent=native, **app_options)
        adk = ADKRunner(
            app=app,
            session_service=self.session_service,
            auto_create_session=True,
            **runner_options,
        )
        await self._ensure_session(native.name, session.id, prepared.state)
        if setup.streaming:
            options["run_config"] = self._streaming_config(setup.agent, options.get("run_config"))
        # Owned keys last, so no declared option can displace them.
        options["user_id"] = self.user_id
        options["session_id"] = session.id
        options["new_message"] = user_content_of(setup.requests)
        options["state_delta"] = dict(prepared.context) if prepared.context else None
        quiet = _quiet_context() if traced and not silenced else None
        return _Run(setup, self, adk, options, mapper, quiet, silenced)

    async def save_run(self, run: _Run) -> None:
        """Copy this run's events and state out of the session service into the session."""
        native, session, prepared = run.native, run.setup.session, run.setup.prepared
        # Only this run's events are copied out of the service (the rest are saved already).
        found = await self.session_service.get_session(
            app_name=native.name,
            user_id=self.user_id,
            session_id=session.id,
            config=GetSessionConfig(after_timestamp=run.started),
        )
        if found is None:
            raise RuntimeError(f"the ADK session {session.id!r} is gone after the run")
        earlier = prepared.state["events"] if prepared.state else []
        state = {"events": [*earlier, *found.events]}
        produced = {k: v for k, v in found.state.items() if not k.startswith(_SCOPED_PREFIXES)}
        save(session, STATE_KEY, state, prepared, produced)
        self._known.add((native.name, session.id))


class GoogleADKModule(Module):
    """Registers Google ADK agents with the runtime, each paired with a
    :class:`GoogleADKRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``plugins``, services, ``plugin_close_timeout`` and ``run_config``.
    """

    runner_class = GoogleADKRunner
