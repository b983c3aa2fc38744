"""Attribute keys we write (OTel GenAI semconv plus a few cross-vendor keys).

Backend mappings read these; keeping the strings in one place keeps the
mappings and the state machine in step.
"""

from __future__ import annotations

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
ERROR_TYPE = "error.type"

# cross-vendor
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
DELTA_COUNT = "runnertrace.delta.count"
DELTA_CHARS = "runnertrace.delta.chars"
CANCELLED = "runnertrace.cancelled"
INCOMPLETE = "runnertrace.incomplete"
MALFORMED = "runnertrace.stream.anomalies"
SPAN_TYPE = "runnertrace.span.type"
"""One of ``run``, ``step``, ``message``, ``reasoning``, ``tool``: what the span stands for."""

# cost in USD (the GenAI conventions have no cost key yet; Langfuse reads this one)
COST = "gen_ai.usage.cost"
"""A model call's list price, on its chat span (see :mod:`runnertrace.tracing.cost`)."""
AGG_COST = "gen_ai.aggregated_usage.cost"
"""A run's summed cost, on its run span: a key of its own, like the token sums, so that
no vendor that sums a trace's costs counts it twice."""
