"""The runner contract: events, requests/replies, sessions, agents, hooks, runtime."""

from runnertrace.core.agent import Agent, RunOptionsFactory
from runnertrace.core.context import ToolContext
from runnertrace.core.hooks import PostHook, PreHook
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
    "ToolContext",
    "claim_observer",
    "observing",
]
