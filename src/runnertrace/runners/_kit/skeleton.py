"""The run/stream skeleton every framework runner shares: prepare, invoke, save, reply.

A framework runner differs from another in how it calls its framework and how it
maps what the framework reports onto events; the steps around that are the same
everywhere, and live here once:

- :func:`native_of`: the agent's native object, type-checked with an error that
  names the agent and what was expected;
- :func:`prepare`: resolve the declared (and factory) run options, load the
  framework context and read the runner's session state;
- :func:`invoke` (run mode): call the framework with the tool context active, and
  tell the mapping about a failure (so the span where it happened gets it) and
  about the end of the call (so nothing it entered stays current);
- :func:`relay` (stream mode): pull the framework's stream, hand each native item
  to the mapping and yield the events the builder made for it, with the same
  failure handling, and no task or queue hop per native item;
- :func:`save`: write the session state and the framework context back, only
  after a run that succeeded (the callers call it last);
- :func:`reply_of`: the usual framework output (text, an image, a model or any
  JSON value) as an :class:`AgentReply`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from runnertrace.core.context import ensure_tool_context
from runnertrace.core.models import AgentReply, AgentReplyAny, AgentReplyImage, AgentReplyText

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent
    from runnertrace.core.events import StreamEvent
    from runnertrace.core.models import AgentRequest
    from runnertrace.core.session import Session
    from runnertrace.runners._kit.builder import EventBuilder

T = TypeVar("T")
Item = TypeVar("Item")


def native_of(agent: Agent, expected: type[T], what: str) -> T:
    """``agent.native`` when it is an ``expected``; else a ``TypeError`` naming both.

    ``what`` is how a user would call the expected object ("a pydantic_ai agent").
    """
    native = agent.native
    if not isinstance(native, expected):
        raise TypeError(f"agent {agent.name!r} is not {what} (got {type(native).__name__})")
    return native


@dataclass
class Prepared:
    """What a run needs before the framework is called.

    ``options`` are the validated run options (declared, then the factory's), a
    fresh dict the runner may add its owned keys to; ``context`` is the loaded
    framework context (``None`` when the session has none); ``state`` is the
    runner's own session state under its key (``None`` on a first run).
    """

    options: dict[str, Any]
    context: dict[str, Any] | None
    state: Any


async def prepare(
    agent: Agent, session: Session, requests: list[AgentRequest], state_key: str
) -> Prepared:
    """Resolve the run options, load the framework context and read the session state."""
    options = await agent.resolve_run_options(session, requests)
    return Prepared(options, session.load_framework_context(), session.get(state_key))


def save(
    session: Session,
    state_key: str,
    state: Any,
    prepared: Prepared,
    produced: Mapping[str, Any] | None = None,
) -> None:
    """After a successful run: the runner's state, then what the run made of the context.

    ``produced`` is the framework's view of the context after the run (by
    default the loaded context itself, which the tools may have mutated).
    """
    session.set(state_key, state)
    if prepared.context is not None:
        session.write_back_framework_context(
            prepared.context, prepared.context if produced is None else produced
        )


def _no_failure(error: BaseException) -> None:
    """The default ``on_failure``: nothing open to close."""


def _no_exit() -> None:
    """The default ``on_exit``: nothing entered to leave."""


async def invoke(
    agent: Agent,
    session: Session,
    requests: list[AgentRequest],
    call: Callable[[], Awaitable[T]],
    *,
    on_failure: Callable[[BaseException], None] = _no_failure,
    on_exit: Callable[[], None] = _no_exit,
) -> T:
    """Run mode: await ``call()`` with the tool context active.

    A failure is handed to ``on_failure`` (the mapping's ``builder.fail``, so the
    open chat or tool span ends with it) and re-raised unchanged; ``on_exit``
    runs whatever happens, cancellation included, in this same context.
    """
    with ensure_tool_context(agent, session, requests):
        try:
            return await call()
        except Exception as exc:
            on_failure(exc)
            raise
        finally:
            on_exit()


async def relay(
    builder: EventBuilder,
    native: AsyncIterable[Item],
    on_item: Callable[[Item], None] | None = None,
    *,
    on_failure: Callable[[BaseException], None] | None = None,
    on_complete: Callable[[], None] = _no_exit,
    on_exit: Callable[[], None] = _no_exit,
) -> AsyncGenerator[StreamEvent, None]:
    """Stream mode: pull ``native``, map each item, and yield the events made so far.

    The builder reports each event to the observer as it is made (spans start
    when things happen) and queues it; the queue is yielded after each native
    item. When ``native`` ends, ``on_complete`` maps what is left (a last usage
    report, the run's end) before the final events are yielded. A failure goes to
    ``on_failure`` (default ``builder.fail``), the events made before it are
    yielded, and it is re-raised unchanged. ``on_exit`` runs at the end, on
    failure, and when the consumer stops early.

    Iterate it under ``contextlib.aclosing`` (the caller keeps the tool context
    active around that): then a consumer that stops early closes it at once, in
    its own context, rather than leaving ``on_exit`` to the garbage collector.
    """
    fail = builder.fail if on_failure is None else on_failure
    try:
        try:
            async for item in native:
                if on_item is not None:
                    on_item(item)
                for event in builder.drain():
                    yield event
        except Exception as exc:
            fail(exc)
            for event in builder.drain():
                yield event
            raise
        on_complete()
        for event in builder.drain():
            yield event
    finally:
        on_exit()


def reply_of(
    output: Any, prompt: str, *, image: str | None = None, wrap_key: str = "output"
) -> AgentReply:
    """The reply for a framework's final output.

    Text (with ``image``, the base64 of a generated image, when there is one)
    becomes a text or image reply; a Pydantic model, a mapping or any other
    JSON-able value becomes an ``any`` reply (a non-mapping under ``wrap_key``,
    for a framework that has its own name for it).
    """
    if output is None:
        output = ""
    if isinstance(output, str):
        if image is not None:
            return AgentReplyImage(text=output, image_data=image, prompt=prompt)
        return AgentReplyText(text=output, prompt=prompt)
    import pydantic_core  # a pydantic dependency, already loaded with the models
    from pydantic import BaseModel

    content = (
        output.model_dump(mode="json")
        if isinstance(output, BaseModel)
        else pydantic_core.to_jsonable_python(output, fallback=repr)
    )
    if not isinstance(content, dict):
        content = {wrap_key: content}
    return AgentReplyAny(content=content, prompt=prompt)
