"""Attribute keys: the GenAI semconv keys our spans carry, and the vendor keys
that backends add at export (:func:`vendor_mirrors`).

Backend mappings read these; keeping the strings in one place keeps the
mappings and the state machine in step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# OTel GenAI
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
AGG_INPUT_TOKENS = "gen_ai.aggregated_usage.input_tokens"
AGG_OUTPUT_TOKENS = "gen_ai.aggregated_usage.output_tokens"
TTFC = "gen_ai.response.time_to_first_chunk"
TTFC_LOGFIRE = "gen_ai.client.operation.time_to_first_chunk"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
ERROR_TYPE = "error.type"

# vendor spellings, added at export by backend mappings (see vendor_mirrors)
SESSION_ID = "session.id"
USER_ID = "user.id"
OPENINFERENCE_KIND = "openinference.span.kind"
INPUT_VALUE = "input.value"
OUTPUT_VALUE = "output.value"
LEGACY_TOOL_NAME = "tool.name"

# ours
FRAMEWORK = "runnertrace.framework"
MODE = "runnertrace.mode"
REPLY_TYPE = "runnertrace.reply.type"
STEP_NAME = "runnertrace.step.name"
STEP_INDEX = "runnertrace.step.index"
STEP_CODE = "runnertrace.step.code"  # the code a step ran (content capture only)
DELTA_COUNT = "runnertrace.delta.count"
DELTA_CHARS = "runnertrace.delta.chars"
CANCELLED = "runnertrace.cancelled"
INCOMPLETE = "runnertrace.incomplete"
MALFORMED = "runnertrace.stream.anomalies"
FAULT = "runnertrace.event.fault"
"""On a span an event could not be applied to (a foreign event with a field of the
wrong type, say): that event's type. The span is kept: an event that was to end it ends
it then, marked ``runnertrace.incomplete``; else it ends as usual. The fault is counted
in ``runnertrace.stream.anomalies`` on the run span."""
SANITIZED = "runnertrace.sanitized"
"""On a span or span event: the keys whose values had to be made encodable (lone
surrogates replaced by U+FFFD, an integer beyond 64 bits or a value of no attribute
type written as its text). Span names are built from those same cleaned values."""
HANDOFF_SOURCE = "runnertrace.handoff.source"
HANDOFF_TARGET = "runnertrace.handoff.target"
SPAN_TYPE = "runnertrace.span.type"
"""One of ``run``, ``step``, ``message``, ``reasoning``, ``tool``: what the span stands for."""

# cost in USD (the GenAI conventions have no cost key yet; Langfuse reads this one)
COST = "gen_ai.usage.cost"
"""A model call's list price, on its chat span (see :mod:`runnertrace.tracing.cost`)."""
AGG_COST = "gen_ai.aggregated_usage.cost"
"""A run's summed cost, on its run span: a key of its own, like the token sums, so that
no vendor that sums a trace's costs counts it twice. It covers the run's whole subtree
(nested runs included), and only the calls that got a price: see :data:`UNPRICED_CALLS`."""

# -- a run's totals (on its run span, at its end) ---------------------------------------------
# Every total on an ``invoke_agent`` span covers the run's whole subtree: its own model and
# tool calls and those of every run nested in it (an agent run as a tool, a delegate, a
# workflow's executor). A nested run's totals roll up into its parent when it ends, also
# when it fails or is cancelled. The AGG_* token and cost keys above follow the same rule.
UNPRICED_CALLS = "runnertrace.usage.unpriced_calls"
"""Model calls in the subtree that reported tokens but got no price: when present (> 0),
:data:`AGG_COST` is a partial sum (or absent, when no call was priced)."""
UNPRICED_MODELS = "runnertrace.usage.unpriced_models"
"""Why those calls have no price: the models (``provider/model``) no price was found for."""
AGG_MODEL_CALLS = "runnertrace.aggregated.model_calls"
AGG_TOOL_CALLS = "runnertrace.aggregated.tool_calls"
AGG_ERRORS = "runnertrace.aggregated.errors"
"""Model and tool calls in the subtree that ended in error (a failed run adds none itself)."""
NESTED_RUNS = "runnertrace.nested_runs"
"""Runs nested anywhere below this one; present when > 0, with the ``OWN_*`` keys."""
# A run's own work, without its nested runs: only on a run that had nested runs (without
# them, its own totals are the aggregated ones).
OWN_INPUT_TOKENS = "runnertrace.own.input_tokens"
OWN_OUTPUT_TOKENS = "runnertrace.own.output_tokens"
OWN_COST = "runnertrace.own.cost"
OWN_UNPRICED_CALLS = "runnertrace.own.unpriced_calls"
OWN_MODEL_CALLS = "runnertrace.own.model_calls"
OWN_TOOL_CALLS = "runnertrace.own.tool_calls"
OWN_ERRORS = "runnertrace.own.errors"


# -- the vendor spellings of facts the core span carries once ---------------------------------

OPENINFERENCE_KINDS = {
    "run": "AGENT",
    "step": "CHAIN",
    "message": "LLM",
    "tool": "TOOL",
    "reasoning": "CHAIN",
}
"""``runnertrace.span.type`` -> ``openinference.span.kind``. Reasoning is a part of a
model call's output, not a call of its own: as LLM it would count the call twice."""

_OPENINFERENCE_RENAMED = ((CONVERSATION_ID, SESSION_ID),)
# Other vendors' and deprecated spellings: only when asked for (trace.otlp.vendor_keys:
# all, trace.semconv_version: 1), and by the backend of the vendor that reads them.
_LEGACY_RENAMED = (
    (PROVIDER, SYSTEM),
    (TOOL_NAME, LEGACY_TOOL_NAME),
    (TTFC, TTFC_LOGFIRE),
)
# Values mirrored into OpenInference's input.value/output.value, per span type. LLM
# spans get none on purpose: input.value there hides the structured chat in Langfuse.
_VALUES = {
    "run": ((INPUT_MESSAGES, INPUT_VALUE), (OUTPUT_MESSAGES, OUTPUT_VALUE)),
    "tool": ((TOOL_ARGUMENTS, INPUT_VALUE), (TOOL_RESULT, OUTPUT_VALUE)),
    "reasoning": ((OUTPUT_MESSAGES, OUTPUT_VALUE),),
}


def session_of(attrs: Mapping[str, Any]) -> str | None:
    """A span's session id: the semconv key, else ``session.id`` (spans written by 0.1)."""
    value = attrs.get(CONVERSATION_ID) or attrs.get(SESSION_ID)
    return value if isinstance(value, str) and value else None


def vendor_mirrors(
    attrs: Mapping[str, Any], span_type: Any, *, legacy: bool = True
) -> dict[str, Any]:
    """The cross-vendor spellings of what ``attrs`` holds, for a span of ``span_type``.

    The core span carries each fact once, in its GenAI semconv key. Readers that
    predate those keys look elsewhere: Phoenix and Langfuse for
    ``openinference.span.kind``, ``session.id``, ``input.value``/``output.value``;
    Logfire for ``gen_ai.system`` and its own time-to-first-chunk key; older
    dashboards for ``tool.name``. Backends add these to their exported copy, and
    ``trace.semconv_version: 1`` puts them on the span itself, as before.
    ``attrs`` may be a whole span's attributes or only the ones being set now.
    ``legacy=False`` leaves out all but OpenInference's spellings.
    """
    out: dict[str, Any] = {}
    for ours, theirs in (
        (*_OPENINFERENCE_RENAMED, *_LEGACY_RENAMED) if legacy else _OPENINFERENCE_RENAMED
    ):
        value = attrs.get(ours)
        if value is not None:
            out[theirs] = value
    if SPAN_TYPE in attrs:
        kind = OPENINFERENCE_KINDS.get(str(span_type))
        if kind:
            out[OPENINFERENCE_KIND] = kind
    for ours, theirs in _VALUES.get(str(span_type), ()):
        value = attrs.get(ours)
        if value is not None:
            out[theirs] = message_text(value) if ours in _MESSAGE_KEYS else value
    return out


_MESSAGE_KEYS = frozenset({INPUT_MESSAGES, OUTPUT_MESSAGES})
_TEXT_PARTS = frozenset({"text", "reasoning"})


def message_text(value: Any) -> Any:
    """The text (or reasoning) parts of a ``gen_ai.*.messages`` JSON string, joined by
    newlines.

    What ``input.value``/``output.value`` held before the structured keys: the
    prompt or reply as plain text. A value that is not such JSON (truncated, or
    redacted into something else) is returned unchanged.
    """
    if not isinstance(value, str):
        return value
    try:
        messages = json.loads(value)
        texts = [
            part["content"]
            for message in messages
            for part in message.get("parts", ())
            if part.get("type") in _TEXT_PARTS and isinstance(part.get("content"), str)
        ]
    except (ValueError, TypeError, AttributeError, KeyError):
        return value
    return "\n".join(texts) if texts else value
