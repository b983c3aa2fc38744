"""The runner contract: run options, framework context, hooks, locks, stores, context, config."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from runnertrace.core import (
    Agent,
    PostHook,
    PreHook,
    Runner,
    Runtime,
    Session,
    SqliteSessionStore,
    ToolContext,
)
from runnertrace.core import events as ev
from runnertrace.core.models import (
    AgentReply,
    AgentReplyText,
    AgentRequest,
    AgentRequestText,
    prompt_of,
)
from runnertrace.runners.native import (
    Agent as NativeAgent,
)
from runnertrace.runners.native import (
    ExecutionContext,
    LlmResponse,
    NativeModule,
    ScriptedLlm,
    ToolCall,
    calculator,
    tool,
)
from runnertrace.tracing.config import ConfigError, Settings, load_settings

QUESTION = "What is 1234 * 5678, plus 17?"


def new_runtime(**kwargs: Any) -> Runtime:
    return Runtime(settings=Settings(trace={"enabled": False}), **kwargs)


def ask(text: str = QUESTION) -> list[AgentRequest]:
    return [AgentRequestText(prompt=text)]


class OptionsRunner(Runner):
    """Resolves run options the way adapters do, writing its owned key last."""

    framework = "probe"
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "session_id": "the runner passes the session id itself"
    }

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def run(self, agent: Agent, session: Session, requests: list[Any]) -> AgentReply:
        options = await agent.resolve_run_options(session, requests)
        options["session_id"] = session.id
        self.seen.append(options)
        return AgentReplyText(text="ok", prompt=prompt_of(requests))

    async def stream(
        self, agent: Agent, session: Session, requests: list[Any]
    ) -> AsyncIterator[ev.StreamEvent]:
        options = await agent.resolve_run_options(session, requests)
        self.seen.append(options)
        yield ev.StepStart(step_name="probe")
        yield ev.StepEnd(step_name="probe")


# -- run options ------------------------------------------------------------------------
def test_reserved_key_rejected_at_declaration_naming_key_and_reason() -> None:
    runtime = new_runtime()
    native = NativeAgent(ScriptedLlm(), name="n")
    module = NativeModule([native], runtime=runtime)
    with pytest.raises(ValueError, match=r"'context'.*restores the execution context"):
        module.run_options(native, context=ExecutionContext())
    with pytest.raises(ValueError, match=r"'on_event'.*observer channel"):
        module.run_options(native, max_steps=3, on_event=print)
    # nothing from a rejected declaration is kept
    assert module.get(native).run_options == {}

    agent = runtime.agents().register(Agent("probe", OptionsRunner()))
    with pytest.raises(ValueError, match=r"'session_id'.*passes the session id itself"):
        agent.declare_run_options(session_id="x")


async def test_declared_options_chain_and_later_wins() -> None:
    runtime = new_runtime()
    runner = OptionsRunner()
    agent = runtime.agents().register(Agent("probe", runner))
    agent.declare_run_options(a=1, b=1)
    agent.declare_run_options(b=2, c=3)
    await runtime.run(agent, Session("s"), ask())
    assert runner.seen == [{"a": 1, "b": 2, "c": 3, "session_id": "s"}]
    # the resolved dict is a copy: the runner's owned key never leaks into the declaration
    assert agent.run_options == {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_factory_merges_over_declared_and_runner_keys_win(kind: str) -> None:
    runtime = new_runtime()
    runner = OptionsRunner()
    agent = runtime.agents().register(Agent("probe", runner))
    calls: list[tuple[Agent, Session, list[Any]]] = []

    def produce(a: Agent, s: Session, r: list[Any]) -> dict[str, Any]:
        calls.append((a, s, r))
        return {"b": "factory", "nested": {"only": "factory"}, "turn": len(calls)}

    async def produce_async(a: Agent, s: Session, r: list[Any]) -> dict[str, Any]:
        return produce(a, s, r)

    agent.declare_run_options(
        produce if kind == "sync" else produce_async,
        a="static",
        b="static",
        nested={"static": True},
    )
    session = Session("s")
    requests = ask("hello")
    await runtime.run(agent, session, requests)
    await runtime.run(agent, session, requests)
    assert runner.seen == [
        {
            "a": "static",
            "b": "factory",
            "nested": {"only": "factory"},
            "turn": 1,
            "session_id": "s",
        },
        {
            "a": "static",
            "b": "factory",
            "nested": {"only": "factory"},
            "turn": 2,
            "session_id": "s",
        },
    ]
    assert calls[0][0] is agent and calls[0][1] is session and calls[0][2] == requests


async def test_factory_on_native_runner_overrides_declared_max_steps() -> None:
    """Declared max_steps=1 cannot finish a two-tool-step task; the factory's 3 can."""
    runtime = new_runtime()
    native = NativeAgent(ScriptedLlm(), tools=[calculator], name="calc")
    module = NativeModule([native], runtime=runtime).run_options(native, max_steps=1)
    reply = await runtime.run(module.get(native), Session("a"), ask())
    assert str(reply) == "Stopped after 1 steps without a final answer."
    module.run_options(native, lambda a, s, r: {"max_steps": 3})
    reply = await runtime.run(module.get(native), Session("b"), ask())
    assert str(reply) == "The answer is 7006669."


async def test_factory_returning_non_mapping_is_a_type_error() -> None:
    runtime = new_runtime()
    agent = runtime.agents().register(Agent("probe", OptionsRunner()))
    agent.declare_run_options(lambda a, s, r: [("a", 1)])
    with pytest.raises(TypeError, match=r"'probe'.*returned list, expected a mapping"):
        await runtime.run(agent, Session("s"), ask())


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_factory_naming_reserved_key_fails_the_run(mode: str) -> None:
    runtime = new_runtime()
    native = NativeAgent(ScriptedLlm(), name="n")
    module = NativeModule([native], runtime=runtime)
    module.run_options(native, lambda a, s, r: {"context": None})
    agent = module.get(native)
    session = Session("s")
    with pytest.raises(ValueError, match=r"'context'.*reserved"):
        if mode == "run":
            await runtime.run(agent, session, ask())
        else:
            async for _ in runtime.stream(agent, session, ask()):
                pass
    assert session.get("native") is None


# -- framework context ------------------------------------------------------------------
def context_agent(turns: list[Any]) -> tuple[Runtime, Agent, list[dict[str, Any]]]:
    """A native agent whose tool edits ExecutionContext.state (the injected context)."""
    seen_stored: list[dict[str, Any]] = []

    @tool
    def remember(ctx: ExecutionContext) -> str:
        """Edit the framework context."""
        ctx.state["nested"]["n"] = 2
        ctx.state["added"] = True
        del ctx.state["user"]
        stored = Session.current().get_framework_context()
        assert stored is not None
        seen_stored.append(stored)
        return "remembered"

    runtime = new_runtime()
    native = NativeAgent(ScriptedLlm(turns=turns), tools=[remember], name="ctx")
    agent = NativeModule([native], runtime=runtime).get(native)
    return runtime, agent, seen_stored


def remember_call() -> LlmResponse:
    return LlmResponse(content=[ToolCall("call_r", "remember", {})], finish_reason="tool_calls")


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_framework_context_deep_copied_in_and_shallow_merged_back(mode: str) -> None:
    runtime, agent, seen_stored = context_agent([remember_call(), "done"])
    session = Session("s")
    session.set_framework_context({"user": "ann", "nested": {"n": 1}})
    if mode == "run":
        await runtime.run(agent, session, ask("go"))
    else:
        async for _ in runtime.stream(agent, session, ask("go")):
            pass
    # during the run the tool edited a deep copy: the stored nested dict was untouched
    assert seen_stored == [{"user": "ann", "nested": {"n": 1}}]
    # after success: the edits land, and the key the run dropped is kept (shallow merge)
    assert session.get_framework_context() == {"user": "ann", "nested": {"n": 2}, "added": True}


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_failed_run_leaves_framework_context_intact(mode: str) -> None:
    # the tool edits the context, then the model fails (the script runs out of turns)
    runtime, agent, _ = context_agent([remember_call()])
    session = Session("s")
    session.set_framework_context({"user": "ann", "nested": {"n": 1}})
    with pytest.raises(RuntimeError, match="ran out of turns"):
        if mode == "run":
            await runtime.run(agent, session, ask("go"))
        else:
            async for _ in runtime.stream(agent, session, ask("go")):
                pass
    assert session.get_framework_context() == {"user": "ann", "nested": {"n": 1}}


def test_write_back_is_a_shallow_merge_over_the_loaded_copy() -> None:
    session = Session("s")
    session.set_framework_context({"a": 1, "b": {"x": 1}})
    loaded = session.load_framework_context()
    assert loaded is not None
    loaded["b"]["x"] = 99
    assert session.get_framework_context() == {"a": 1, "b": {"x": 1}}
    session.write_back_framework_context(loaded, {"b": {"y": 2}, "c": 3})
    assert session.get_framework_context() == {"a": 1, "b": {"y": 2}, "c": 3}


# -- hooks ------------------------------------------------------------------------------
class EchoRunner(Runner):
    """Replies with the prompt it got; streams one message carrying it."""

    framework = "echo"

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, agent: Agent, session: Session, requests: list[Any]) -> AgentReply:
        self.calls += 1
        return AgentReplyText(text=prompt_of(requests), prompt=prompt_of(requests))

    async def stream(
        self, agent: Agent, session: Session, requests: list[Any]
    ) -> AsyncIterator[ev.StreamEvent]:
        self.calls += 1
        yield ev.StepStart(step_name="echo")
        yield ev.MessageStart(message_id="m")
        for word in prompt_of(requests).split():
            yield ev.TextDelta(message_id="m", delta=word)
        yield ev.MessageEnd(message_id="m")
        yield ev.StepEnd(step_name="echo")


class Suffix(PreHook):
    def __init__(self, suffix: str, log: list[str]) -> None:
        self.suffix, self.log = suffix, log

    async def on_run(
        self, session: Session, agent: Agent, requests: list[AgentRequest]
    ) -> list[AgentRequest] | AgentReply:
        self.log.append(f"pre{self.suffix}")
        return [AgentRequestText(prompt=prompt_of(requests) + self.suffix)]


class Refuse(PreHook):
    async def on_run(
        self, session: Session, agent: Agent, requests: list[AgentRequest]
    ) -> list[AgentRequest] | AgentReply:
        return AgentReplyText(text="refused", prompt=prompt_of(requests))


class Tag(PostHook):
    def __init__(self, tag: str, log: list[str]) -> None:
        self.tag, self.log = tag, log

    async def on_run(
        self, session: Session, agent: Agent, requests: list[AgentRequest], reply: AgentReply
    ) -> AgentReply:
        self.log.append(f"post{self.tag}")
        return AgentReplyText(text=f"{reply}{self.tag}", prompt=prompt_of(requests))


async def test_pre_hooks_run_in_order_then_post_hooks_in_order() -> None:
    log: list[str] = []
    runtime = new_runtime()
    agent = runtime.agents().register(
        Agent(
            "echo",
            EchoRunner(),
            pre_hooks=[Suffix(" A", log), Suffix(" B", log)],
            post_hooks=[Tag("!", log), Tag("?", log)],
        )
    )
    reply = await runtime.run(agent, Session("s"), ask("x"))
    assert str(reply) == "x A B!?"
    assert log == ["pre A", "pre B", "post!", "post?"]


@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_pre_hook_reply_short_circuits(mode: str) -> None:
    log: list[str] = []
    runner = EchoRunner()
    runtime = new_runtime()
    agent = runtime.agents().register(
        Agent("echo", runner, pre_hooks=[Refuse(), Suffix(" late", log)])
    )
    if mode == "run":
        reply = await runtime.run(agent, Session("s"), ask("x"))
        assert str(reply) == "refused"
    else:
        chunks = [c async for c in runtime.stream(agent, Session("s"), ask("x"))]
        assert [(c.done, c.event) for c in chunks] == [(True, None)]
    assert runner.calls == 0
    assert log == []


class DropText(PostHook):
    async def on_stream_event(
        self, session: Session, agent: Agent, event: ev.StreamEvent
    ) -> ev.StreamEvent | Sequence[ev.StreamEvent] | None:
        return None if isinstance(event, ev.TextDelta) and event.delta == "secret" else event


class Shout(PostHook):
    async def on_stream_event(
        self, session: Session, agent: Agent, event: ev.StreamEvent
    ) -> ev.StreamEvent | Sequence[ev.StreamEvent] | None:
        if isinstance(event, ev.TextDelta):
            return ev.TextDelta(message_id=event.message_id, delta=event.delta.upper())
        return event


class Spaced(PostHook):
    async def on_stream_event(
        self, session: Session, agent: Agent, event: ev.StreamEvent
    ) -> ev.StreamEvent | Sequence[ev.StreamEvent] | None:
        if isinstance(event, ev.TextDelta):
            return [event, ev.TextDelta(message_id=event.message_id, delta=" ")]
        return event


async def test_post_hooks_drop_replace_and_expand_stream_events_in_order() -> None:
    runtime = new_runtime()
    agent = runtime.agents().register(
        Agent("echo", EchoRunner(), post_hooks=[DropText(), Shout(), Spaced()])
    )
    chunks = [c async for c in runtime.stream(agent, Session("s"), ask("hello secret world"))]
    assert "".join(c.delta for c in chunks if c.delta) == "HELLO WORLD "
    types = [c.event.type for c in chunks if c.event is not None]
    assert types == [
        "step_start",
        "message_start",
        "text_delta",
        "text_delta",
        "text_delta",
        "text_delta",
        "message_end",
        "step_end",
    ]
    assert chunks[-1].done


async def test_post_hook_order_matters_for_stream_events() -> None:
    # expanding before replacing: the replacement applies to each expanded event
    runtime = new_runtime()
    agent = runtime.agents().register(Agent("echo", EchoRunner(), post_hooks=[Spaced(), Shout()]))
    chunks = [c async for c in runtime.stream(agent, Session("s"), ask("a b"))]
    assert [c.delta for c in chunks if c.delta] == ["A", " ", "B", " "]


# -- session locks --------------------------------------------------------------------------
class GateRunner(Runner):
    """Each run records entry, waits for its gate, records exit."""

    framework = "gate"

    def __init__(self) -> None:
        self.log: list[str] = []
        self.entered: dict[str, asyncio.Event] = {}
        self.gates: dict[str, asyncio.Event] = {}

    def prepare(self, *names: str) -> None:
        for name in names:
            self.entered[name] = asyncio.Event()
            self.gates[name] = asyncio.Event()

    async def run(self, agent: Agent, session: Session, requests: list[Any]) -> AgentReply:
        name = prompt_of(requests)
        self.log.append(f"enter {name}")
        self.entered[name].set()
        await self.gates[name].wait()
        self.log.append(f"exit {name}")
        return AgentReplyText(text=name)

    async def stream(
        self, agent: Agent, session: Session, requests: list[Any]
    ) -> AsyncIterator[ev.StreamEvent]:
        await self.run(agent, session, requests)
        yield ev.StepStart(step_name="gate")


async def test_runs_of_one_session_are_serialised() -> None:
    runtime = new_runtime()
    runner = GateRunner()
    runner.prepare("A", "B")
    agent = runtime.agents().register(Agent("gate", runner))
    task_a = asyncio.create_task(runtime.run(agent, Session("same"), ask("A")))
    await runner.entered["A"].wait()
    task_b = asyncio.create_task(runtime.run(agent, Session("same"), ask("B")))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not runner.entered["B"].is_set()  # B waits on A's lock
    runner.gates["A"].set()
    runner.gates["B"].set()
    await asyncio.gather(task_a, task_b)
    assert runner.log == ["enter A", "exit A", "enter B", "exit B"]


async def test_stream_holds_the_session_lock_too() -> None:
    runtime = new_runtime()
    runner = GateRunner()
    runner.prepare("A", "B")
    agent = runtime.agents().register(Agent("gate", runner))

    async def consume() -> None:
        async for _ in runtime.stream(agent, Session("same"), ask("A")):
            pass

    task_a = asyncio.create_task(consume())
    await runner.entered["A"].wait()
    task_b = asyncio.create_task(runtime.run(agent, Session("same"), ask("B")))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not runner.entered["B"].is_set()
    runner.gates["A"].set()
    runner.gates["B"].set()
    await asyncio.gather(task_a, task_b)
    assert runner.log == ["enter A", "exit A", "enter B", "exit B"]


async def test_runs_of_different_sessions_overlap() -> None:
    runtime = new_runtime()
    runner = GateRunner()
    runner.prepare("A", "B")
    agent = runtime.agents().register(Agent("gate", runner))
    task_a = asyncio.create_task(runtime.run(agent, Session("one"), ask("A")))
    task_b = asyncio.create_task(runtime.run(agent, Session("two"), ask("B")))
    # both must be inside the runner at once; a shared lock would deadlock here,
    # so the wait is bounded only to turn that bug into a failure instead of a hang
    await asyncio.wait_for(
        asyncio.gather(runner.entered["A"].wait(), runner.entered["B"].wait()), timeout=10
    )
    assert runner.log == ["enter A", "enter B"]
    runner.gates["A"].set()
    runner.gates["B"].set()
    await asyncio.gather(task_a, task_b)


# -- session stores ---------------------------------------------------------------------
async def test_sqlite_store_persists_sessions_across_store_instances(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "store.db"
    llm = ScriptedLlm()
    native = NativeAgent(llm, tools=[calculator], name="calc")

    first = new_runtime(session_store=SqliteSessionStore(path))
    agent = NativeModule([native], runtime=first).get(native)
    session = first.sessions().new("conv")
    session.set("custom", {"k": [1, 2]})
    session.set_framework_context({"user": "ann"})
    session.cache["volatile"] = True
    await first.run(agent, session, ask())

    second = new_runtime(session_store=SqliteSessionStore(path))
    agent2 = NativeModule([native], runtime=second).get(native)
    restored = second.sessions().get("conv")
    assert restored is not None and restored is not session
    assert restored.get("custom") == {"k": [1, 2]}
    assert restored.get_framework_context() == {"user": "ann"}
    assert restored.cache == {}
    assert len(restored.get("native")) == len(session.get("native")) > 0
    assert second.sessions().get("other") is None

    await second.run(agent2, restored, ask("hello"))
    history = llm.requests[-1].contents
    assert history[0].content == QUESTION  # the first run's history reached the model
    assert (
        SqliteSessionStore(path)
        .load("conv")
        .get("native")[-1]
        .content[0]
        .content.startswith("I am a scripted offline model")
    )


# -- current session / agent / tool context ----------------------------------------------------
def current_all() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, getter in (
        ("session", Session.current),
        ("agent", Agent.current),
        ("tool_context", ToolContext.get),
    ):
        try:
            found[name] = getter()
        except RuntimeError:
            found[name] = None
    return found


async def test_current_values_inside_tools_hooks_and_factory_and_not_outside() -> None:
    seen: dict[str, dict[str, Any]] = {}

    @tool
    def probe() -> str:
        """Record what is current."""
        seen["tool"] = current_all()
        return "ok"

    class Pre(PreHook):
        async def on_run(
            self, session: Session, agent: Agent, requests: list[AgentRequest]
        ) -> list[AgentRequest] | AgentReply:
            seen["pre"] = current_all()
            return requests

    class Post(PostHook):
        async def on_run(
            self, session: Session, agent: Agent, requests: list[AgentRequest], reply: AgentReply
        ) -> AgentReply:
            seen["post"] = current_all()
            return reply

    def factory(agent: Agent, session: Session, requests: list[Any]) -> dict[str, Any]:
        seen["factory"] = current_all()
        return {}

    runtime = new_runtime()
    turns = [LlmResponse(content=[ToolCall("c", "probe", {})]), "done"]
    native = NativeAgent(ScriptedLlm(turns=turns), tools=[probe], name="probe")
    module = NativeModule([native], runtime=runtime)
    module.pre_hook(native, Pre()).post_hook(native, Post()).run_options(native, factory)
    agent, session = module.get(native), Session("s")
    requests = ask("go")

    getters = {"Session": Session.current, "Agent": Agent.current, "ToolContext": ToolContext.get}
    for owner, getter in getters.items():
        with pytest.raises(RuntimeError, match=rf"{owner}\.\w+\(\) called outside"):
            getter()
    await runtime.run(agent, session, requests)

    for where in ("pre", "post", "factory", "tool"):
        assert seen[where]["session"] is session, where
        assert seen[where]["agent"] is agent, where
    for where in ("factory", "tool"):
        ctx = seen[where]["tool_context"]
        assert (ctx.agent, ctx.session, ctx.requests, ctx.runtime) == (
            agent,
            session,
            requests,
            runtime,
        )
    assert current_all() == {"session": None, "agent": None, "tool_context": None}


# -- runtime registries ------------------------------------------------------------------------
def test_runtime_current_and_registries() -> None:
    runtime = new_runtime()
    default = Runtime.current()
    assert default is not runtime and Runtime.current() is default
    with runtime.activate():
        assert Runtime.current() is runtime
        native = NativeAgent(ScriptedLlm(), name="helper")
        module = NativeModule([native])  # registers with the current runtime
    assert Runtime.current() is default
    assert module.runtime is runtime
    agent = runtime.agents().get("helper")
    assert agent.native is native and agent.framework == "native"
    assert runtime.agents().names() == ["helper"]
    with pytest.raises(KeyError, match=r"'nobody'.*registered: helper"):
        runtime.agents().get("nobody")
    with pytest.raises(ValueError, match="already registered"):
        NativeModule([NativeAgent(ScriptedLlm(), name="helper")], runtime=runtime)

    assert runtime.sessions().get("x") is None
    created = runtime.sessions().new("x")
    assert isinstance(created, Session) and created.id == "x"
    assert runtime.sessions().get("x") is created
    assert runtime.sessions().get_or_new("x") is created


# -- config -------------------------------------------------------------------------------------
@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import os

    for key in list(os.environ):
        if key.startswith("RUNNERTRACE_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_config_defaults_without_file(clean_env: Path) -> None:
    settings = load_settings()
    assert settings.execution.mode == "sync"
    assert settings.trace.enabled is False


def test_config_yaml_then_env_override(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (clean_env / "runnertrace.yaml").write_text(
        "trace:\n  enabled: true\n  type: [console, local]\n  max_content_length: 10\n"
        "execution:\n  mode: stream\n"
    )
    settings = load_settings()
    assert settings.execution.mode == "stream"
    assert settings.trace.enabled is True
    assert settings.trace.types == ["console", "local"]
    assert settings.trace.max_content_length == 10

    monkeypatch.setenv("RUNNERTRACE_EXECUTION__MODE", "sync")
    monkeypatch.setenv("RUNNERTRACE_TRACE__MAX_CONTENT_LENGTH", "20")
    settings = load_settings()
    assert settings.execution.mode == "sync"
    assert settings.trace.max_content_length == 20
    assert settings.trace.enabled is True  # untouched keys still come from the file


def test_config_path_from_env(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (clean_env / "runnertrace.yaml").write_text("execution:\n  mode: sync\n")
    other = clean_env / "conf" / "other.yaml"
    other.parent.mkdir()
    other.write_text("execution:\n  mode: stream\n")
    monkeypatch.setenv("RUNNERTRACE_CONFIG", str(other))
    assert load_settings().execution.mode == "stream"
    monkeypatch.setenv("RUNNERTRACE_CONFIG", str(clean_env / "missing.yaml"))
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        load_settings()


@pytest.mark.parametrize("source", ["yaml", "env"])
def test_invalid_mode_names_key_value_and_allowed(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    if source == "yaml":
        (clean_env / "runnertrace.yaml").write_text("execution:\n  mode: fast\n")
    else:
        monkeypatch.setenv("RUNNERTRACE_EXECUTION__MODE", "fast")
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "execution.mode" in message
    assert "'fast'" in message
    assert "'sync'" in message and "'stream'" in message


def test_invalid_trace_type_lists_the_known_ones(clean_env: Path) -> None:
    (clean_env / "runnertrace.yaml").write_text("trace:\n  type: langfus\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "trace.type" in message
    assert "unknown trace type 'langfus'; did you mean 'langfuse'? expected one of" in message
    assert "console" in message and "local" in message
    # the message names the file it read
    assert message.startswith(
        f"invalid runnertrace configuration (read from {(clean_env / 'runnertrace.yaml').resolve()}"
    )


def test_a_tool_reached_through_another_backend_is_pointed_to_it(clean_env: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(trace={"type": "phoenix"})
    assert "unknown trace type 'phoenix'; Arize Phoenix takes OTLP: type: otlp" in str(info.value)


def test_a_wrong_key_or_value_at_any_level_gets_the_nearest_one(clean_env: Path) -> None:
    def problem(**config: Any) -> str:
        with pytest.raises(ConfigError) as info:
            load_settings(**config)
        (line,) = str(info.value).splitlines()[1:]
        return line.strip()

    assert problem(trace={"local": {"pth": "x.db"}}) == (
        "trace.local.pth: unknown key (value 'x.db'); did you mean 'path'? "
        "expected one of path, retention, max_queue_size"
    )
    assert problem(trace={"deltas": "event"}) == (
        "trace.deltas: invalid value 'event'; did you mean 'events'? "
        "expected 'aggregate' or 'events'"
    )


def test_a_misspelt_variable_in_a_section_is_refused_by_name_not_called_ignored(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runnertrace")
    monkeypatch.setenv("RUNNERTRACE_TRACE__ENABELD", "true")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert (
        "trace.enabeld: unknown key (value 'true') (from environment variable "
        "RUNNERTRACE_TRACE__ENABELD); did you mean 'enabled'?" in str(info.value)
    )
    assert [r for r in caplog.records if "ignored" in r.getMessage()] == []


def test_unknown_key_is_named(clean_env: Path) -> None:
    (clean_env / "runnertrace.yaml").write_text("execution:\n  speed: 3\n")
    with pytest.raises(ConfigError, match=r"execution\.speed: unknown key"):
        load_settings()


def test_any_module_takes_the_users_name_for_an_agent() -> None:
    from runnertrace.core.runtime import Runtime
    from runnertrace.runners.native import Agent as NativeAgent
    from runnertrace.runners.native import NativeModule
    from runnertrace.runners.native.scripted import ScriptedLlm

    first = NativeAgent(ScriptedLlm(), name="framework-name")
    second = NativeAgent(ScriptedLlm(), name="other")
    module = NativeModule([("mine", first)], runtime=Runtime())
    assert module.get(first).name == "mine"
    assert module.add(second, name="also-mine").name == "also-mine"
    assert module.add(NativeAgent(ScriptedLlm(), name="kept")).name == "kept"
