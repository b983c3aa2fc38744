"""What a model call is sent, in GenAI shapes: messages, instructions, tool
definitions, request parameters, and the provider behind the model.

Built from what the agent passes its model (``messages``, ``stop_sequences``,
``tools_to_call_from``) and the model object itself; telemetry only, so the
mapper builds it through the boundary's ``detail`` (a fault costs the fields,
never the message).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from smolagents import Tool
from smolagents.models import (
    ChatMessage,
    MessageRole,
    get_tool_json_schema,
    tool_role_conversions,
)

from runnertrace.runners._kit import genai

__all__ = ["provider_of", "request_fields"]

_ROLES: dict[str, str] = {
    **{str(role.value): str(role.value) for role in MessageRole},
    **{str(k.value): str(v.value) for k, v in tool_role_conversions.items()},
}


def _parts(message: ChatMessage) -> list[genai.Part]:
    """A smolagents message's content (text blocks, images) and tool calls as parts."""
    content = message.content
    parts: list[genai.Part] = []
    if isinstance(content, str):
        if content:
            parts.append(genai.text_part(content))
    else:
        for block in content or ():
            kind = block.get("type")
            if kind == "text":
                parts.append(genai.text_part(str(block.get("text") or "")))
            elif kind in ("image", "image_url"):
                parts.append(genai.blob_part("image"))
    parts.extend(
        genai.tool_call_part(call.id, call.function.name, call.function.arguments)
        for call in message.tool_calls or ()
    )
    return parts


# smolagents' model classes (their subclasses too) -> gen_ai.provider.name
_PROVIDERS = {
    "AzureOpenAIModel": "azure.ai.openai",
    "OpenAIModel": "openai",
    "AmazonBedrockModel": "aws.bedrock",
    "InferenceClientModel": "huggingface",
    "TransformersModel": "huggingface",
}


def provider_of(model: Any) -> str | None:
    """The provider behind a smolagents model: by its class (the nearest known one in
    its MRO), a LiteLLM ``<provider>/<model>`` id's prefix, else a ``provider`` the
    model declares (offline models do, as the native ``ScriptedLlm``)."""
    for cls in type(model).__mro__:
        if cls.__name__ in ("LiteLLMModel", "LiteLLMRouterModel"):
            prefix, slash, _ = str(getattr(model, "model_id", "") or "").partition("/")
            return prefix.lower() if slash and prefix else None
        known = _PROVIDERS.get(cls.__name__)
        if known is not None:
            return known
    declared = getattr(model, "provider", None)
    return declared if isinstance(declared, str) and declared else None


def request_fields(
    model: Any, messages: Sequence[Any], stop: list[str] | None, tools: Sequence[Tool] | None
) -> dict[str, Any]:
    """The request fields of a MessageStart, from what the agent passes its model: the
    system prompt is the instructions, the model's completion settings and the stop
    sequences the parameters, the tools (managed agents too) their definitions."""
    sent: list[genai.Message] = []
    system: list[str] = []
    for message in messages:
        if isinstance(message, dict):
            message = ChatMessage.from_dict(dict(message))
        role = _ROLES.get(str(getattr(message.role, "value", message.role)), "user")
        parts = _parts(message)
        if role == "system":
            system.extend(str(p["content"]) for p in parts if p["type"] == "text")
        else:
            sent.append(genai.message(role, parts))
    settings: Mapping[str, Any] = getattr(model, "kwargs", None) or {}
    definitions = []
    for tool in tools or ():
        schema = get_tool_json_schema(tool)["function"]
        definitions.append(
            genai.tool_definition(schema["name"], schema["description"], schema["parameters"])
        )
    return {
        "input_messages": genai.or_none(sent),
        "system_instructions": "\n\n".join(system) or None,
        "request_parameters": genai.request_parameters(settings, {"stop_sequences": stop}),
        "tool_definitions": genai.or_none(definitions),
    }
