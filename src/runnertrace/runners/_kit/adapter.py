"""Where a framework calls a runner's mapping: the guard, the call bracket, the scope ledger.

A framework reaches a runner's mapping through the objects the runner hands it
(hooks, callback handlers, plugins, middleware, event listeners): the runner's
*adapter*. Each such call is ours, and a fault in it must cost telemetry only.
The kit makes that structural rather than a ``with boundary:`` block per method:

- :func:`guarded` is applied once to each adapter and mapper class. It wraps every
  public method the class defines (sync or async) in the runner's
  :class:`~runnertrace.runners._kit.skeleton.MappingBoundary`: a fault is reported
  once (rate-limited; raised under pytest) and the method returns ``None``, or what
  :func:`fault_returns` declares (a middleware that must hand back its input).
- A method that calls *into* the framework (a middleware's ``call_next``, a
  capability's ``handler``, a stream it passes on) must not be wrapped whole: the
  framework's own exceptions are the agent's and propagate unchanged. It is marked
  :func:`passes_through` and written with :func:`bracket` (or :func:`bracket_sync`,
  or :func:`mapped_stream` for a stream), which guard our parts around the call
  and never the call itself.
- :class:`ScopeLedger` holds the scopes a mapping enters in one framework callback
  and leaves in another (a tool's start and end hooks), keyed by what the
  framework gives to pair them.

The guard calls the method's body through the wrapper's ``__wrapped__`` attribute,
so a test can replace the body and keep the guard (the contract suite breaks every
public method that way), and a method left unguarded is found by the same suite:
its fault reaches the run.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from runnertrace._internal.errors import report_internal_error

if TYPE_CHECKING:
    from runnertrace.runners._kit.skeleton import MappingBoundary

__all__ = [
    "GUARDED",
    "ScopeLedger",
    "bracket",
    "bracket_sync",
    "fault_returns",
    "guarded",
    "is_guarded",
    "mapped_stream",
    "passes",
    "passes_through",
]

C = TypeVar("C", bound=Callable[..., Any])  # a class, or one function
F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H")
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
Item = TypeVar("Item")

GUARDED = "__runnertrace_guarded__"
"""The attribute :func:`guarded` sets on each wrapper (and on the class) it makes."""

_PASSES = "__runnertrace_passes_through__"
_FALLBACK = "__runnertrace_fault_returns__"


def passes_through(method: F) -> F:
    """Mark a method that calls into the framework: :func:`guarded` leaves it unwrapped.

    Its own parts go through :func:`bracket`, :func:`bracket_sync` or
    :func:`mapped_stream`, so the framework call's exceptions stay the agent's.
    """
    setattr(method, _PASSES, True)
    return method


def fault_returns(fallback: Callable[..., Any]) -> Callable[[F], F]:
    """What a guarded method returns after a fault: ``fallback(*args, **kwargs)``.

    For a method the framework needs an answer from, such as a middleware that
    hands each streamed update back (``fault_returns(lambda self, id, update: update)``).
    """

    def mark(method: F) -> F:
        setattr(method, _FALLBACK, fallback)
        return method

    return mark


def passes(function: Any) -> bool:
    """Whether ``function`` is marked :func:`passes_through` (it calls into the framework)."""
    return getattr(function, _PASSES, False) is True


def is_guarded(function: Any) -> bool:
    """Whether ``function`` is a wrapper that :func:`guarded` made."""
    return getattr(function, GUARDED, False) is True


def _guard(function: Callable[..., Any], where: str) -> Callable[..., Any]:
    fallback: Callable[..., Any] | None = getattr(function, _FALLBACK, None)
    if inspect.isasyncgenfunction(function) or inspect.isgeneratorfunction(function):
        raise TypeError(
            f"{function.__qualname__} is a generator: mark it @passes_through and pass its "
            "items on with mapped_stream()"
        )
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await guarded_async.__wrapped__(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
                report_internal_error(where, exc)
                return None if fallback is None else fallback(*args, **kwargs)

        setattr(guarded_async, GUARDED, True)
        return guarded_async

    @functools.wraps(function)
    def guarded_sync(*args: Any, **kwargs: Any) -> Any:
        try:
            return guarded_sync.__wrapped__(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
            report_internal_error(where, exc)
            return None if fallback is None else fallback(*args, **kwargs)

    setattr(guarded_sync, GUARDED, True)
    return guarded_sync


def guarded(boundary: MappingBoundary) -> Callable[[C], C]:
    """A class decorator: every public method the class defines runs inside ``boundary``.

    Public means a name without a leading underscore, plus ``__call__`` (a callback
    object). Methods marked :func:`passes_through` are left as they are, and so are
    properties and nested classes. Inherited methods are guarded where they are
    defined: decorate each adapter class, the bases and the subclasses alike.

    On a function it guards that one function: for a part of an install step whose
    fault should cost only its own telemetry (a process-wide hook that only nested
    runs need), not the whole run's.
    """

    def decorate(cls: C) -> C:
        if inspect.isfunction(cls):
            return _guard(cls, boundary.where)  # type: ignore[return-value]
        for name, value in list(vars(cls).items()):
            if name.startswith("_") and name != "__call__":
                continue
            if isinstance(value, staticmethod | classmethod):
                inner = value.__func__
                if getattr(inner, _PASSES, False) or is_guarded(inner):
                    continue
                setattr(cls, name, type(value)(_guard(inner, boundary.where)))
            elif inspect.isfunction(value):
                if getattr(value, _PASSES, False) or is_guarded(value):
                    continue
                setattr(cls, name, _guard(value, boundary.where))
        setattr(cls, GUARDED, True)
        return cls

    return decorate


def _exit(boundary: MappingBoundary, scope: AbstractContextManager[None] | None) -> None:
    if scope is not None:
        with boundary:
            scope.__exit__(None, None, None)


def _enter(
    boundary: MappingBoundary,
    scope_of: Callable[[Any], AbstractContextManager[None]] | None,
    handle: Any,
) -> AbstractContextManager[None] | None:
    if scope_of is None:
        return None
    try:
        scope = scope_of(handle)
        scope.__enter__()
    except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
        report_internal_error(boundary.where, exc)
        return None
    return scope


class _NotStarted:
    """The handle of a call whose start report failed: nothing after it is reported."""

    __slots__ = ()


_NOT_STARTED = _NotStarted()


def _started(boundary: MappingBoundary, start: Callable[[], H] | None) -> H | _NotStarted | None:
    if start is None:
        return None
    try:
        return start()
    except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
        report_internal_error(boundary.where, exc)
        return _NOT_STARTED


def _failure(error: BaseException, control: tuple[type[BaseException], ...]) -> bool:
    return isinstance(error, Exception) and not isinstance(error, control)


async def bracket(
    boundary: MappingBoundary,
    call: Callable[[], Awaitable[T]],
    *,
    start: Callable[[], H] | None = None,
    scope: Callable[[H], AbstractContextManager[None]] | None = None,
    done: Callable[[H, T], None] | None = None,
    failed: Callable[[H, BaseException], None] | None = None,
    control: tuple[type[BaseException], ...] = (),
    cancelled: Callable[[H, BaseException], None] | None = None,
) -> T:
    """Around one framework call: report its start, run it in its scope, report how it ended.

    ``start()`` reports the call and returns a handle (a message id, a call id) that
    the other three receive; ``scope(handle)`` is what the call runs in (a model or
    tool scope, so what runs inside nests under its span); ``done(handle, result)``
    and ``failed(handle, error)`` report the end. Each of them runs inside
    ``boundary``: a fault there is reported and the call goes on, and when the start
    failed nothing more is reported for it. The call itself is not guarded: its
    exceptions propagate unchanged. ``failed`` sees only an ``Exception`` that is
    not one of ``control`` (a framework's control flow, such as a retry request):
    a cancellation ends the run, which closes what is open as cancelled. A
    lifecycle that must end with the call itself (a nested agent run the framework
    started) passes ``cancelled(handle, error)``, which hears a cancellation (any
    ``BaseException`` that is not an ``Exception``).
    The scope is left before the end is reported, in the context it was entered in.
    """
    handle = _started(boundary, start)
    live = handle is not _NOT_STARTED
    entered = _enter(boundary, scope, handle) if live else None
    try:
        result = await call()
    except BaseException as error:
        _exit(boundary, entered)
        if live and failed is not None and _failure(error, control):
            with boundary:
                failed(handle, error)  # type: ignore[arg-type]
        elif live and cancelled is not None and not isinstance(error, Exception):
            with boundary:
                cancelled(handle, error)  # type: ignore[arg-type]
        raise
    _exit(boundary, entered)
    if live and done is not None:
        with boundary:
            done(handle, result)  # type: ignore[arg-type]
    return result


def bracket_sync(
    boundary: MappingBoundary,
    call: Callable[[], T],
    *,
    start: Callable[[], H] | None = None,
    scope: Callable[[H], AbstractContextManager[None]] | None = None,
    done: Callable[[H, T], None] | None = None,
    failed: Callable[[H, BaseException], None] | None = None,
    control: tuple[type[BaseException], ...] = (),
    cancelled: Callable[[H, BaseException], None] | None = None,
) -> T:
    """:func:`bracket` for a synchronous framework call (a tool a worker thread runs)."""
    handle = _started(boundary, start)
    live = handle is not _NOT_STARTED
    entered = _enter(boundary, scope, handle) if live else None
    try:
        result = call()
    except BaseException as error:
        _exit(boundary, entered)
        if live and failed is not None and _failure(error, control):
            with boundary:
                failed(handle, error)  # type: ignore[arg-type]
        elif live and cancelled is not None and not isinstance(error, Exception):
            with boundary:
                cancelled(handle, error)  # type: ignore[arg-type]
        raise
    _exit(boundary, entered)
    if live and done is not None:
        with boundary:
            done(handle, result)  # type: ignore[arg-type]
    return result


async def mapped_stream(
    boundary: MappingBoundary,
    stream: AsyncIterable[Item],
    on_item: Callable[[Item], None],
    *,
    failed: Callable[[BaseException], None] | None = None,
) -> AsyncIterator[Item]:
    """Pass a framework stream on unchanged, mapping each item inside ``boundary``.

    For a hook that wraps the framework's own stream (a capability's event stream):
    each item is handed to ``on_item`` and then yielded as it came. A failure of the
    stream (an ``Exception``: not an early close or a cancellation) goes to
    ``failed``, and every exit propagates unchanged. The stream is closed when this
    generator is, so an early stop closes the framework's stream at once.
    """
    try:
        async for item in stream:
            try:  # the boundary, inline: a try costs nothing until it catches
                on_item(item)
            except Exception as exc:  # noqa: BLE001 - the mapping's error boundary
                report_internal_error(boundary.where, exc)
            yield item
    except BaseException as error:
        if failed is not None and _failure(error, ()):  # not an early close or a cancel
            with boundary:
                failed(error)
        raise
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


_ENTERED: contextvars.ContextVar[object] = contextvars.ContextVar(
    "runnertrace_ledger_entered", default=None
)
"""Set by a ledger with ``same_context`` at each enter: resetting its token succeeds
only in the context that entered, which is how :meth:`ScopeLedger.leave` tells."""


class ScopeLedger(Generic[K]):
    """Scopes a mapping enters in one framework callback and leaves in another.

    A framework that reports a tool's start and its end in two hooks gives no
    ``with`` block to run the tool in: the mapping enters the tool's scope in the
    first hook and leaves it in the second, paired by ``key`` (the call id, a
    callback's run id, the thread running a tool). Scopes under one key nest:
    :meth:`leave` leaves the newest. :meth:`leave_all` leaves what a run left open
    (a cancelled tool never reaches its end hook), newest first, at the run's end.

    Entering and leaving run inside the runner's boundary: a scope that fails to
    enter is not recorded, so it is never left. Leaving in another context (an
    abandoned generator closed by the event loop) is tolerated by the scopes
    themselves (:func:`runnertrace.core.context.reset_var`).

    ``same_context=True`` is for a framework whose end hook may run in another
    context than its start hook (LangChain runs a model call's end callback in a
    task of its own, to shield it from cancellation): a scope is then left only
    in the context that entered it. Elsewhere it is dropped from the ledger and
    stays entered in its own context until that context ends (leaving it there
    would detach an OpenTelemetry context that is not current, which OTel logs as
    an error).
    """

    __slots__ = ("_boundary", "_open", "_same_context")

    def __init__(self, boundary: MappingBoundary, *, same_context: bool = False) -> None:
        self._boundary = boundary
        self._same_context = same_context
        self._open: dict[
            K, list[tuple[AbstractContextManager[None], contextvars.Token[object] | None]]
        ] = {}

    def enter(self, key: K, scope: AbstractContextManager[None]) -> None:
        with self._boundary:
            scope.__enter__()
            token = _ENTERED.set(key) if self._same_context else None
            self._open.setdefault(key, []).append((scope, token))

    def leave(self, key: K) -> bool:
        """Leave the newest scope entered under ``key``; whether there was one (with
        ``same_context``, one entered in another context is dropped, not left)."""
        stack = self._open.get(key)
        if not stack:
            return False
        scope, token = stack.pop()
        if not stack:
            del self._open[key]
        if token is not None:
            try:
                _ENTERED.reset(token)
            except ValueError:  # another context: the entering one keeps it until it ends
                return True
        with self._boundary:
            scope.__exit__(None, None, None)
        return True

    def holds(self, key: K) -> bool:
        return key in self._open

    def leave_all(self) -> None:
        """Leave every scope still open, the newest first."""
        while self._open:
            key = next(reversed(self._open))
            self.leave(key)

    def __len__(self) -> int:
        return sum(len(stack) for stack in self._open.values())
