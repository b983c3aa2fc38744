"""The runner: a run of a smolagents agent object, in a worker thread, on its turn.

The template (:class:`~runnertrace.runners._kit.skeleton.FrameworkRunner`) calls
three steps, in this order:

- :meth:`SmolagentsRunner.start` waits for the agent object's turn (runs of one
  agent object take turns: it is stateful) and returns the plain call: the
  agent's own ``run`` in a worker thread, with the session's memory and context;
- :meth:`SmolagentsRunner.install` (a traced run, or a stream) puts the run's
  stand-ins on the agent (``adapter``) with the run's mapper (``mapper``);
- :meth:`SmolagentsRunner.quiet` (a traced run) decides whether the worker runs
  with smolagents' instrumentors silenced (``quiet``).

A run's turn lasts until both the run has ended and its worker thread is done
with the agent (a cancelled run's thread finishes its step first): then what the
install step put on the agent is undone, and the next run's turn comes. So the
stand-ins are put on and taken off on the run's turn, and never over another
run's.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractContextManager,
    ExitStack,
    aclosing,
    asynccontextmanager,
    closing,
    nullcontext,
    suppress,
)
from dataclasses import dataclass, field
from typing import Any, ClassVar

from smolagents import MultiStepAgent
from smolagents.memory import FinalAnswerStep, MemoryStep
from smolagents.utils import AgentError

from runnertrace._internal.errors import internal_log
from runnertrace.core.models import AgentReply
from runnertrace.core.module import Module
from runnertrace.runners._kit.skeleton import (
    FrameworkRun,
    FrameworkRunner,
    MappingBoundary,
    Prepared,
    RunSetup,
    save,
)
from runnertrace.runners.smolagents.adapter import _Steps, install_stand_ins, silent_console
from runnertrace.runners.smolagents.convert import reply_for, storable, task_of
from runnertrace.runners.smolagents.mapper import BOUNDARY, _Mapper
from runnertrace.runners.smolagents.quiet import quiet_framework_telemetry

__all__ = ["STATE_KEY", "SmolagentsModule", "SmolagentsRunner"]

STATE_KEY = "smolagents"


# -- turns on an agent object ----------------------------------------------------------------


class _Turns:
    """The runs of one agent object, one at a time, in the order they asked.

    A run waits for its turn on its event loop (a future, no thread held), so a
    hundred runs queued on one agent neither block the loop nor fill the thread
    pool the turns' workers need. The turn may be given back from any thread (the
    worker's), and to a run on another loop.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._taken = False
        self._waiting: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    async def take(self) -> _Turn:
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._taken:
                self._taken = True
                return _Turn(self)
            turn: asyncio.Future[None] = loop.create_future()
            self._waiting.append((loop, turn))
        try:
            await turn
        except asyncio.CancelledError:
            with self._mutex:
                waiting = (loop, turn) in self._waiting
                if waiting:
                    self._waiting.remove((loop, turn))
            if not waiting and turn.done() and not turn.cancelled():
                self.give()  # it came just as the run left: the next one's
            raise
        return _Turn(self)

    def give(self) -> None:
        """The turn's run is done with the agent: the next waiting run's, or nobody's."""
        while True:
            with self._mutex:
                if not self._waiting:
                    self._taken = False
                    return
                loop, turn = self._waiting.popleft()
            if not loop.is_closed():  # a closed loop's runs are gone
                loop.call_soon_threadsafe(self._hand, turn)
                return

    def _hand(self, turn: asyncio.Future[None]) -> None:
        if turn.cancelled():  # its run left before the turn reached it
            self.give()
        else:
            turn.set_result(None)


class _Turn:
    """One run's turn on its agent object: from :meth:`SmolagentsRunner.start` until
    the run has ended and its worker thread is done with the agent (either may come
    first); then ``undo`` (what the install step put on the agent) unwinds and the
    turn passes on. A worker that starts after its run ended runs nothing."""

    def __init__(self, turns: _Turns) -> None:
        self.undo = ExitStack()
        self._turns = turns
        self._mutex = threading.Lock()
        self._ended = False
        self._working = False

    def begin_work(self) -> bool:
        with self._mutex:
            if self._ended:
                return False
            self._working = True
            return True

    def end_work(self) -> None:
        with self._mutex:
            self._working = False
            if not self._ended:
                return
        self._pass()

    def end_run(self) -> None:
        with self._mutex:
            self._ended = True
            if self._working:
                return
        self._pass()

    def _pass(self) -> None:
        try:
            self.undo.close()
        finally:
            self._turns.give()


# -- one run on the agent object ------------------------------------------------------------


@dataclass
class _Outcome:
    output: Any = None
    steps: list[MemoryStep] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Call:
    """One native run: what to call it with, and how it is observed (``mapper`` is
    set by the install step; without one, the plain ``agent.run``)."""

    native: MultiStepAgent
    task: str
    images: list[Any] | None
    prepared: Prepared
    mapper: _Mapper | None = None
    quiet: Callable[[], AbstractContextManager[None]] = nullcontext
    stop: threading.Event = field(default_factory=threading.Event)

    def execute(self, turn: _Turn, tick: Callable[[], None] | None) -> _Outcome:
        """In the worker thread, on the run's turn: set the agent's memory up, run it,
        put its state and console back."""
        if not turn.begin_work():
            return _Outcome()  # the run ended before its thread started
        try:
            with self.quiet(), ExitStack() as undo:
                native = self.native
                saved_state = dict(native.state)
                undo.callback(_put_back_state, native, saved_state)
                silent_console(native, undo)
                steps = self.prepared.state
                if steps is not None:
                    native.memory.steps = list(steps)
                return self._run(tick)
        finally:
            turn.end_work()

    def cancel(self) -> None:
        """Stop the run at the next item; nothing more is reported from here on."""
        self.stop.set()
        if self.mapper is not None:
            self.mapper.close()

    def _arguments(self, stream: bool) -> dict[str, Any]:
        return {
            **self.prepared.options,
            "task": self.task,
            "images": self.images,
            "stream": stream,
            "reset": self.prepared.state is None,
            "additional_args": self.prepared.context or None,
            "return_full_result": False,
        }

    def _outcome(self, output: Any) -> _Outcome:
        native = self.native
        context = self.prepared.context or {}
        kept = {key: native.state[key] for key in context if key in native.state}
        return _Outcome(output, [storable(s) for s in native.memory.steps], kept)

    def _run(self, tick: Callable[[], None] | None) -> _Outcome:
        native, mapper = self.native, self.mapper
        if mapper is None:
            return self._outcome(native.run(**self._arguments(stream=False)))
        return self._drive(native.run(**self._arguments(stream=True)), mapper, tick)

    def _drive(
        self, items: Iterator[Any], mapper: _Mapper, tick: Callable[[], None] | None
    ) -> _Outcome:
        output: Any = None
        if self.stop.is_set():
            return self._abandon(items)
        with closing(_Steps(self.native, mapper).drive(items)) as mapped:
            for item in mapped:
                if isinstance(item, FinalAnswerStep):
                    output = item.output
                if tick is not None:
                    tick()
                if self.stop.is_set():
                    return self._abandon(items)
        return self._outcome(output)

    def _abandon(self, items: Iterator[Any]) -> _Outcome:
        """The consumer left: smolagents stops at the next step (``interrupt``); the
        rest of the current step runs out here, reporting nothing."""
        self.cancel()
        self.native.interrupt()
        with suppress(AgentError):  # "Agent interrupted.": the stop we asked for
            for _ in items:
                pass
        return _Outcome()


def _put_back_state(native: MultiStepAgent, saved: dict[str, Any]) -> None:
    native.state.clear()
    native.state.update(saved)


# -- the run and the runner ------------------------------------------------------------------


class _Run(FrameworkRun[_Outcome]):
    """One smolagents run, in a worker thread: ``agent.run`` (run mode, or untraced) or
    its ``stream=True`` items (mapped), with a tick per item to wake the stream."""

    def __init__(self, setup: RunSetup[MultiStepAgent], call: _Call, turn: _Turn):
        super().__init__(setup)
        self.native_call = call
        self.turn = turn
        self.exits.callback(turn.end_run)  # the agent is put back, the turn passed on
        self.worker: asyncio.Future[_Outcome] | None = None
        self.completed = False

    async def call(self) -> _Outcome:
        return await asyncio.to_thread(self.native_call.execute, self.turn, None)

    @asynccontextmanager
    async def native_stream(self) -> AsyncIterator[AsyncIterable[Any]]:
        call = self.native_call
        ticks: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        waking = threading.Event()  # a tick is on its way: later items need none
        done = object()

        def tick() -> None:
            # After the item's events are queued; the consumer clears the flag before
            # it drains, so an event queued before a skipped tick is drained anyway.
            if not waking.is_set():
                waking.set()
                loop.call_soon_threadsafe(ticks.put_nowait, None)

        worker = self.worker = asyncio.ensure_future(
            asyncio.to_thread(call.execute, self.turn, tick)
        )
        worker.add_done_callback(lambda _: ticks.put_nowait(done))

        async def progress() -> AsyncGenerator[None, None]:
            while await ticks.get() is not done:
                waking.clear()
                yield None
            worker.result()  # the run's failure, if it failed

        try:
            async with aclosing(progress()) as items:
                yield items
        finally:
            if not worker.done():
                call.cancel()  # the thread finishes the current step, reporting nothing
                # nobody waits for it now: its outcome (or failure) is dropped
                worker.add_done_callback(_dropped)

    def fail(self, error: BaseException) -> None:
        if self.native_call.mapper is not None:
            self.native_call.mapper.fail(error)

    def complete(self) -> None:
        self.completed = True

    def close(self) -> None:
        if not self.completed and not self.setup.streaming:
            self.native_call.cancel()  # cancelled: the thread finishes the step, reporting nothing
        mapper = self.native_call.mapper
        if mapper is not None:
            mapper.end_members()  # a member's run left open ends within this run

    async def outcome(self) -> _Outcome:
        assert self.worker is not None  # set when the stream opened
        return self.worker.result()

    async def save(self, result: _Outcome) -> None:
        setup = self.setup
        save(setup.session, STATE_KEY, result.steps, setup.prepared, result.state)

    def reply(self, result: _Outcome, prompt: str) -> AgentReply:
        return reply_for(result.output, prompt)


class SmolagentsRunner(FrameworkRunner[MultiStepAgent]):
    """Runs a smolagents ``ToolCallingAgent`` or ``CodeAgent`` in run or stream mode."""

    framework: ClassVar[str] = "smolagents"
    state_key: ClassVar[str] = STATE_KEY
    native_type: ClassVar[type[Any]] = MultiStepAgent
    native_what: ClassVar[str] = "a smolagents agent (ToolCallingAgent, CodeAgent)"
    boundary: ClassVar[MappingBoundary] = BOUNDARY
    RESERVED_RUN_OPTIONS: ClassVar[dict[str, str]] = {
        "task": "the runner builds the task from the requests",
        "images": "the runner passes the image requests as images",
        "stream": "the runner picks run or stream mode itself",
        "reset": f"the runner restores the agent's memory from the session (key {STATE_KEY!r})",
        "additional_args": (
            "the runner passes the session's framework context as additional_args; "
            "set it with session.set_framework_context()"
        ),
        "return_full_result": "the runner builds the reply from the final answer",
    }

    def __init__(self) -> None:
        self._turns: weakref.WeakKeyDictionary[MultiStepAgent, _Turns] = weakref.WeakKeyDictionary()
        self._turns_guard = threading.Lock()

    def _turns_of(self, native: MultiStepAgent) -> _Turns:
        with self._turns_guard:
            turns = self._turns.get(native)
            if turns is None:
                turns = self._turns[native] = _Turns()
            return turns

    async def start(self, setup: RunSetup[MultiStepAgent]) -> _Run:
        native = setup.native
        task, images = task_of(setup.requests)
        turn = await self._turns_of(native).take()
        return _Run(setup, _Call(native, task, images, setup.prepared), turn)

    def install(self, setup: RunSetup[MultiStepAgent], run: FrameworkRun[Any]) -> None:
        assert isinstance(run, _Run)
        mapper = _Mapper(setup.builder, setup.agent.name, setup.native)
        install_stand_ins(setup.native, mapper, setup.streaming, run.turn.undo)
        run.native_call.mapper = mapper

    def quiet(self, setup: RunSetup[MultiStepAgent], run: FrameworkRun[Any]) -> None:
        assert isinstance(run, _Run)
        run.native_call.quiet = quiet_framework_telemetry()


def _dropped(worker: asyncio.Future[Any]) -> None:
    """The outcome of a run the consumer left: a failure there is the framework's, logged
    once as an internal fault rather than as an unretrieved task exception."""
    if not worker.cancelled() and worker.exception() is not None:
        internal_log.warning(
            "smolagents-abandoned-run",
            "runnertrace: a smolagents run stopped after its consumer left failed: %r",
            worker.exception(),
        )


class SmolagentsModule(Module):
    """Registers smolagents agents with the runtime, each paired with a
    :class:`SmolagentsRunner`; ``.run_options(agent, [factory], **options)`` declares
    ``agent.run`` keywords (``max_steps``, ...). An agent's name is its ``name``
    (``ToolCallingAgent(..., name="assistant")``)."""

    naming = ("the smolagents agent", "ToolCallingAgent(..., name='assistant')")
    runner_class = SmolagentsRunner
