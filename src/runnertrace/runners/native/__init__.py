"""The native agent: a from-scratch think/act loop over an ``LlmClient``."""

from runnertrace.runners.native.agent import Agent
from runnertrace.runners.native.builtin_tools import calculator
from runnertrace.runners.native.llm import LlmClient
from runnertrace.runners.native.runner import NativeModule, NativeRunner
from runnertrace.runners.native.scripted import ScriptedLlm
from runnertrace.runners.native.tools import BaseTool, FunctionTool, tool
from runnertrace.runners.native.types import (
    AgentResult,
    Event,
    ExecutionContext,
    LlmRequest,
    LlmResponse,
    Message,
    ToolCall,
    ToolResult,
    Usage,
)

__all__ = [
    "Agent",
    "AgentResult",
    "BaseTool",
    "Event",
    "ExecutionContext",
    "FunctionTool",
    "LlmClient",
    "LlmRequest",
    "LlmResponse",
    "Message",
    "NativeModule",
    "NativeRunner",
    "ScriptedLlm",
    "ToolCall",
    "ToolResult",
    "Usage",
    "calculator",
    "tool",
]


def __getattr__(name: str) -> object:
    if name == "OpenAICompatibleLlm":
        from runnertrace.runners.native.openai_compat import OpenAICompatibleLlm

        return OpenAICompatibleLlm
    raise AttributeError(name)
