"""The runner contract: events, requests/replies, sessions, agents, hooks, runtime.

The event classes are in :mod:`runnertrace.core.events` (``from runnertrace.core
import events as ev``); the rest of the contract is named here.
"""

from runnertrace.core.agent import Agent, RunOptionsFactory
from runnertrace.core.context import ToolContext
from runnertrace.core.hooks import PostHook, PreHook
from runnertrace.core.models import (
    AgentReply,
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    AgentRequest,
    AgentRequestAny,
    AgentRequestFile,
    AgentRequestImage,
    AgentRequestText,
    StreamChunk,
    prompt_of,
)
from runnertrace.core.module import Module
from runnertrace.core.observer import claim_observer, observing
from runnertrace.core.runner import Runner
from runnertrace.core.runtime import Runtime
from runnertrace.core.session import (
    InMemorySessionStore,
    Session,
    SessionStore,
    SqliteSessionStore,
)

__all__ = [
    "Agent",
    "AgentReply",
    "AgentReplyAny",
    "AgentReplyImage",
    "AgentReplyText",
    "AgentRequest",
    "AgentRequestAny",
    "AgentRequestFile",
    "AgentRequestImage",
    "AgentRequestText",
    "InMemorySessionStore",
    "Module",
    "PostHook",
    "PreHook",
    "RunOptionsFactory",
    "Runner",
    "Runtime",
    "Session",
    "SessionStore",
    "SqliteSessionStore",
    "StreamChunk",
    "ToolContext",
    "claim_observer",
    "observing",
    "prompt_of",
]
