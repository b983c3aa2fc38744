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
  JSON value) as an :class:`AgentReply`;
- :class:`MappingBoundary`: the one error boundary around every call into a
  runner's mapping, wherever the framework makes it;
- :class:`FrameworkRunner` and :class:`FrameworkRun`: the template that puts the
  steps together in the one order every guarantee needs (see there).
"""

from __future__ import annotations

import base64
import binascii
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
)
from contextlib import AbstractAsyncContextManager, ExitStack, aclosing
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, ParamSpec, TypeVar

from runnertrace._internal.errors import report_internal_error
from runnertrace.core.context import ensure_tool_context
from runnertrace.core.models import (
    AgentReply,
    AgentReplyAny,
    AgentReplyImage,
    AgentReplyText,
    prompt_of,
)
from runnertrace.core.observer import (
    NULL_OBSERVER,
    Observer,
    claim_observer,
    in_traced_run,
    stream_observer,
)
from runnertrace.core.runner import Runner
from runnertrace.runners._kit.builder import EventBuilder

if TYPE_CHECKING:
    from runnertrace.core.agent import Agent
    from runnertrace.core.events import StreamEvent
    from runnertrace.core.models import AgentRequest
    from runnertrace.core.session import Session
    from runnertrace.runners._kit.builder import EventBuilder

T = TypeVar("T")
Item = TypeVar("Item")
Native = TypeVar("Native")
Result = TypeVar("Result")
P = ParamSpec("P")
R = TypeVar("R")


class MappingBoundary:
    """The one error boundary around a runner's mapping of its framework's progress.

    A framework calls a runner's mapping from many places (hooks, callbacks,
    middleware, plugins, event handlers, the native stream); each such call, and
    each call the template makes into a run, goes through this one object. A
    fault there is ours, not the host's: it is reported once per framework
    (rate-limited, so a mapping that fails on every event logs one line) and
    the run goes on unchanged; under pytest it is raised, so tests see it.

    It keeps no state, so one module-level instance serves every run, in every
    task and thread. A runner rarely writes ``with boundary:`` itself: the
    template calls the run's ends and the install step inside it, and the
    adapter classes the framework calls are guarded whole
    (:func:`~runnertrace.runners._kit.adapter.guarded`).
    """

    __slots__ = ("installing", "where")

    def __init__(self, framework: str) -> None:
        self.where = f"{framework} mapping"
        self.installing = (
            f"{framework} install"  # its own log key: a fault there costs the run's telemetry
        )

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if error is None or not isinstance(error, Exception):
            return False  # nothing happened, or a cancellation / exit: not ours to stop
        report_internal_error(self.where, error)
        return True

    def detail(
        self, build: Callable[P, dict[str, Any]], *args: P.args, **kwargs: P.kwargs
    ) -> dict[str, Any]:
        """Telemetry-only detail (what a model call was sent): ``build(...)``, or ``{}``
        on a fault. Such a fault costs the detail alone: the message still starts, so
        the events (and the stream a consumer reads) are otherwise unchanged."""
        try:
            return build(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
            report_internal_error(self.where, exc)
            return {}


RUNNER_BOUNDARY = MappingBoundary("runner")
"""The boundary of a runner that names none (a custom runner using :func:`relay`)."""


def media_bytes(data: str, mime_type: str, name: str | None) -> bytes:
    """The bytes of an image or file request's base64 data, or a one-line error naming it.

    The runners pass an ``http(s)://`` URL or a ``data:`` URI on as their framework
    spells it; anything else must be base64, and this is where that is checked.
    """
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        label = f"{name!r} " if name else ""
        raise ValueError(
            f"request {label}({mime_type}) is neither base64 data, a data: URI nor an http(s) URL"
        ) from exc


def is_url(data: str) -> bool:
    """Whether a request's image or file data is an ``http(s)://`` URL."""
    return data.startswith(("http://", "https://"))


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
    boundary: MappingBoundary = RUNNER_BOUNDARY,
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
            with boundary:
                on_failure(exc)
            raise
        finally:
            with boundary:
                on_exit()


async def relay(
    builder: EventBuilder,
    native: AsyncIterable[Item],
    on_item: Callable[[Item], None] | None = None,
    *,
    on_failure: Callable[[BaseException], None] | None = None,
    on_complete: Callable[[], None] = _no_exit,
    on_exit: Callable[[], None] = _no_exit,
    boundary: MappingBoundary = RUNNER_BOUNDARY,
    items_are_events: bool = False,
) -> AsyncGenerator[StreamEvent, None]:
    """Stream mode: pull ``native``, map each item, and yield the events made so far.

    The builder reports each event to the observer as it is made (spans start
    when things happen) and queues it; the queue is yielded after each native
    item. When ``native`` ends, ``on_complete`` maps what is left (a last usage
    report, the run's end) before the final events are yielded. A failure goes to
    ``on_failure`` (default ``builder.fail``), the events made before it are
    yielded, and it is re-raised unchanged. ``on_exit`` runs at the end, on
    failure, and when the consumer stops early. Each of those calls into the
    mapping runs inside ``boundary``: a fault there is logged and the run goes on.
    With ``items_are_events`` the native items are already our events (made by a
    builder the native loop drains itself), and are yielded as they come.

    Iterate it under ``contextlib.aclosing`` (the caller keeps the tool context
    active around that): then a consumer that stops early closes it at once, in
    its own context, rather than leaving ``on_exit`` to the garbage collector.
    """
    fail = builder.fail if on_failure is None else on_failure
    try:
        try:
            async for item in native:
                if items_are_events:  # a loop that makes our events itself (the native agent)
                    yield item  # type: ignore[misc]
                elif on_item is not None:
                    try:  # the boundary, inline: a try costs nothing until it catches
                        on_item(item)
                    except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
                        report_internal_error(boundary.where, exc)
                for event in builder.drain():
                    yield event
        except Exception as exc:
            with boundary:
                fail(exc)
            for event in builder.drain():
                yield event
            raise
        with boundary:
            on_complete()
        for event in builder.drain():
            yield event
    finally:
        with boundary:
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


def reply_events(reply: AgentReply) -> Iterator[StreamEvent]:
    """A reply as the events of one message, for a stream whose mapping could not be
    installed: the consumer still gets the answer. They are not reported to the
    tracing layer, which saw no model call."""
    builder = EventBuilder(queue=True)
    message_id = builder.message_start()
    builder.text(str(reply), message_id)
    builder.message_end(message_id)
    return builder.drain()


# -- the template ---------------------------------------------------------------------------


@dataclass
class RunSetup(Generic[Native]):
    """What a runner's :meth:`FrameworkRunner.start` gets to set one run up.

    ``builder`` reports to the run's observer; in run mode ``builder.observed``
    says whether anyone traces the run (when nobody does, a runner installs
    nothing: no hook, callback, middleware or plugin of ours). In stream mode
    the events are the stream, so the mapping is always installed.
    """

    agent: Agent
    native: Native
    session: Session
    requests: list[AgentRequest]
    prepared: Prepared
    builder: EventBuilder
    streaming: bool

    @property
    def observed(self) -> bool:
        return self.builder.observed


class BoundedBuilder(EventBuilder):
    """An event builder whose every call runs inside a mapping boundary.

    For a loop that calls the builder itself, between its own awaits (the native
    agent): there is no framework hook to put a boundary around, so the builder
    carries it. A fault in a call is reported and the call makes nothing; a
    message that failed to start still gets an id, so the loop goes on unchanged.
    """

    def __init__(self, observer: Observer, boundary: MappingBoundary, *, queue: bool) -> None:
        super().__init__(observer, queue=queue)
        self.boundary = boundary

    def step_start(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().step_start(*args, **kwargs)

    def step_end(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().step_end(*args, **kwargs)

    def message_start(self, message_id: str | None = None, **fields: Any) -> str:
        try:
            return super().message_start(message_id, **fields)
        except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
            report_internal_error(self.boundary.where, exc)
            return message_id or "msg_unreported"

    def reasoning(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().reasoning(*args, **kwargs)

    def text(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().text(*args, **kwargs)

    def tool_call(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().tool_call(*args, **kwargs)

    def message_end(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().message_end(*args, **kwargs)

    def tool_start(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().tool_start(*args, **kwargs)

    def tool_result(self, *args: Any, **kwargs: Any) -> None:
        with self.boundary:
            super().tool_result(*args, **kwargs)

    def fail(self, error: BaseException) -> None:
        with self.boundary:
            super().fail(error)


class FrameworkRun(ABC, Generic[Result]):
    """One run of a framework, as a runner sets it up; :class:`FrameworkRunner` drives it.

    A runner supplies how to call its framework (:meth:`call` in run mode,
    :meth:`native_stream` in stream mode), how a native stream item maps onto
    builder calls (:meth:`map`), and how the outcome is saved and replied. The
    other methods are the mapping's ends of a run (:meth:`fail`, :meth:`complete`,
    :meth:`close`); the template calls each inside the runner's boundary.
    """

    def __init__(self, setup: RunSetup[Any]) -> None:
        self.setup = setup
        self.builder = setup.builder
        #: What the install step put in place that must be taken down when the run ends
        #: (a listener on a process-wide bus, a patched hook): the install step pushes
        #: each undo here, and the template unwinds them at the end, or at once when the
        #: install step fails half-way.
        self.exits = ExitStack()
        self._ended = False

    # -- calling the framework --------------------------------------------------------------
    @abstractmethod
    async def call(self) -> Result:
        """Run mode: the framework's own call, to its result."""

    def native_stream(self) -> AbstractAsyncContextManager[AsyncIterable[Any]]:
        """Stream mode: the framework's stream of native items, open inside the block.

        Leaving the block closes the framework's own stream or runner, at once, in
        the consumer's context (the template leaves it as soon as the consumer
        stops, fails or finishes).
        """
        raise NotImplementedError(f"{type(self).__name__} has no stream mode")

    async def outcome(self) -> Result:
        """Stream mode: the run's result, once its stream has ended."""
        raise NotImplementedError(f"{type(self).__name__} has no stream mode")

    # -- the mapping's ends of a run (each called inside the boundary) ----------------------
    #: The install step failed: the run is the plain call (in stream mode too).
    uninstrumented: bool = False

    #: The native stream's items are our events already (a loop that drives the
    #: builder itself and drains it): they are yielded as they come.
    items_are_events: ClassVar[bool] = False

    def map(self, item: Any) -> None:
        """Stream mode: map one native item onto builder calls (default: the hooks do)."""

    def fail(self, error: BaseException) -> None:
        """The framework call failed with ``error``: what is open ends with it."""
        self.builder.fail(error)

    def complete(self) -> None:
        """The framework call succeeded: map what is left (the last step's end)."""

    def close(self) -> None:
        """Whatever happened (success, failure, cancellation, an early stop): leave
        what the mapping entered, in this same context."""

    def end(self) -> None:
        """The template's last word on a run: :meth:`close`, then nothing more is
        reported, whatever the framework still calls back (a graph cancelling its
        tasks, a worker thread finishing its step) after the run has ended. Once: the
        template also calls it when the framework's stream failed to open."""
        if self._ended:
            return
        self._ended = True
        try:
            self.close()
        finally:
            self.builder.observer = self.setup.builder.observer = NULL_OBSERVER
            self.exits.close()

    # -- after success ----------------------------------------------------------------------
    @abstractmethod
    async def save(self, result: Result) -> None:
        """Write the session state and the framework context back (after success only)."""

    @abstractmethod
    def reply(self, result: Result, prompt: str) -> AgentReply:
        """The run's reply."""


class FrameworkRunner(Runner, Generic[Native]):
    """The template of a framework runner: it owns every step that is the same everywhere.

    ``run`` and ``stream`` are written here once, in the order the guarantees need:

    1. the agent's native object is checked (:func:`native_of`);
    2. the observer is claimed (run mode: hidden from nested runs; stream mode:
       before the first ``yield``) and the event builder made;
    3. the tool context is active for everything after, the framework call included;
    4. the run options, framework context and session state are prepared
       (:func:`prepare`), and the runner's :meth:`start` sets the run up;
    5. run mode awaits the framework call; stream mode relays the framework's
       stream under ``aclosing`` (:func:`relay`), so an early stop closes it at once;
    6. every call into the mapping made here runs inside :attr:`boundary`;
    7. state is saved only after success, and the reply is made last.

    A runner supplies its session key (``state_key``), the native type it runs
    (``native_type``, named as ``native_what``), its mapping boundary, and three
    steps, which the template calls in this order:

    - :meth:`start` returns the run's :class:`FrameworkRun`: the plain framework
      call, with nothing of ours in it (what an untraced run mode runs);
    - :meth:`install` puts the mapping in: hooks, callback handlers, plugins,
      middleware. The template calls it only when the run is streamed or traced, so
      an untraced run mode installs nothing by construction;
    - :meth:`quiet` silences the framework's own telemetry, called only inside a
      traced run (where it would tell each call a second time).

    Both of the latter run inside the boundary. A fault in :meth:`install` (a
    framework release that renamed what an install step reads) is reported once and
    costs the run its telemetry, never the run: what was installed is taken down
    (:attr:`FrameworkRun.exits`), and the run goes on as an untraced one, from a
    fresh :meth:`start`. In stream mode it then runs in run mode, and its reply
    arrives as one message. A fault in :meth:`quiet` is reported the same way and
    costs the silencing only: the mapping is in, so the run keeps its telemetry and
    a stream its events (the framework's own spans may then show next to ours).
    """

    state_key: ClassVar[str]
    native_type: ClassVar[type[Any]]
    native_what: ClassVar[str]
    boundary: ClassVar[MappingBoundary] = RUNNER_BOUNDARY

    @abstractmethod
    async def start(self, setup: RunSetup[Native]) -> FrameworkRun[Any]:
        """Set one run up: the framework call and its arguments, nothing of ours."""

    def install(self, setup: RunSetup[Native], run: FrameworkRun[Any]) -> None:
        """Put the mapping into ``run`` (stream mode, or a traced run): see the class."""

    def quiet(self, setup: RunSetup[Native], run: FrameworkRun[Any]) -> None:
        """Silence the framework's own telemetry for ``run`` (a traced run only)."""

    def native_of(self, agent: Agent) -> Native:
        native: Native = native_of(agent, self.native_type, self.native_what)
        return native

    async def _start(
        self,
        agent: Agent,
        native: Native,
        session: Session,
        requests: list[AgentRequest],
        builder: EventBuilder,
        *,
        streaming: bool,
    ) -> FrameworkRun[Any]:
        prepared = await prepare(agent, session, requests, self.state_key)
        options = dict(prepared.options)  # as declared: a failed install starts over from it
        setup = RunSetup(agent, native, session, requests, prepared, builder, streaming)
        run = await self.start(setup)
        if not (streaming or builder.observed):
            return run  # untraced run mode: nothing of ours goes in
        try:
            self.install(setup, run)
        except Exception as exc:  # noqa: BLE001 - the install step's error boundary
            report_internal_error(self.boundary.installing, exc)
            with self.boundary:
                run.exits.close()
            prepared.options = options
            plain = RunSetup(
                agent, native, session, requests, prepared, EventBuilder(), streaming=False
            )
            run = await self.start(plain)
            run.uninstrumented = True
            return run
        if in_traced_run():
            try:
                self.quiet(setup, run)
            except Exception as exc:  # noqa: BLE001 - the quiet step's: the mapping is in
                report_internal_error(self.boundary.installing, exc)
        return run

    async def run(self, agent: Agent, session: Session, requests: list[AgentRequest]) -> AgentReply:
        native = self.native_of(agent)
        boundary = self.boundary
        with claim_observer() as observer, ensure_tool_context(agent, session, requests):
            run = await self._start(
                agent, native, session, requests, EventBuilder(observer), streaming=False
            )

            async def call() -> Any:
                result = await run.call()
                with boundary:
                    run.complete()
                return result

            result = await invoke(
                agent,
                session,
                requests,
                call,
                on_failure=run.fail,
                on_exit=run.end,
                boundary=boundary,
            )
        await run.save(result)
        return run.reply(result, prompt_of(requests))

    async def stream(
        self, agent: Agent, session: Session, requests: list[AgentRequest]
    ) -> AsyncIterator[StreamEvent]:
        native = self.native_of(agent)
        builder = EventBuilder(stream_observer(), queue=True)  # before the first yield
        with ensure_tool_context(agent, session, requests):
            run = await self._start(agent, native, session, requests, builder, streaming=True)
            if run.uninstrumented:
                result = await invoke(agent, session, requests, run.call, on_exit=run.end)
                await run.save(result)
                for event in reply_events(run.reply(result, prompt_of(requests))):
                    yield event
                return
            try:
                async with (
                    run.native_stream() as items,
                    aclosing(
                        relay(
                            builder,
                            items,
                            run.map,
                            on_failure=run.fail,
                            on_complete=run.complete,
                            on_exit=run.end,
                            boundary=self.boundary,
                            items_are_events=run.items_are_events,
                        )
                    ) as events,
                ):
                    async for event in events:
                        yield event
            finally:  # the stream failed to open: relay never ran, and the run still ends
                with self.boundary:
                    run.end()
            result = await run.outcome()
        await run.save(result)
