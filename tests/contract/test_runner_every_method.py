"""A fault in any method of a runner's mapping or adapter, or in its install step,
costs telemetry only: found by reflection, so a new method is covered without a list.

For each runner in tests/contract/runner_cases.py, every public method of every class defined
in ``<runner>.mapper`` and ``<runner>.adapter``, every function defined in
``<runner>.quiet`` and ``<runner>.nesting``, and the runner's ``install`` and
``quiet`` are broken in turn, as a framework release that renamed what they read
would break them. Then, in both modes:

- run mode: the traced run gives the untraced (healthy) reply;
- stream mode: the traced stream and the untraced stream under the same fault give
  the same events (the stream *is* the mapping in stream mode, traced or not: what a
  fault costs is the same either way, and tracing adds no failure of its own);
- nothing raises, at most one line per boundary is logged, and no span stays open.

A guarded method is broken behind its guard (its wrapper's ``__wrapped__`` is
replaced), so the guard is what is tested; a method left unguarded is replaced whole,
and its fault reaches the run: that fails here. A method marked ``@passes_through``
calls into the framework and is written with the kit's bracket, whose parts are the
mapper's methods (broken here one by one) and whose own guarantees
tests/runners/kit/test_kit_adapter.py checks. A target the offline scenario never reaches is
skipped, with that reason, as it could not fail.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from tests.contract.runner_cases import CASES, RunnerCase
from tests.contract.test_runner_contract import drive, settle
from tests.tracing_helpers import OpenSpanTracker

from runnertrace import TracingRunner
from runnertrace._internal.errors import internal_log
from runnertrace.core import events as ev
from runnertrace.runners._kit.adapter import is_guarded, passes
from runnertrace.testing import CapturedSpans, tolerate_internal_errors

pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")

MODES = ["run", "stream"]
CLASS_MODULES = ("mapper", "adapter")
FUNCTION_MODULES = ("quiet", "nesting")


@dataclass(frozen=True)
class Target:
    """One function to break: where it is looked up, its name, and how to break it."""

    owner: Any
    name: str
    label: str

    def function(self) -> Any:
        value = vars(self.owner)[self.name] if isinstance(self.owner, type) else None
        if isinstance(value, staticmethod | classmethod):
            return value.__func__
        return getattr(self.owner, self.name)


def _defined_in(module: ModuleType, value: Any) -> bool:
    return getattr(value, "__module__", None) == module.__name__


def _submodule(case: RunnerCase, name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{case.module}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{case.module}.{name}":
            return None
        raise


def _runner_class(case: RunnerCase) -> type | None:
    from runnertrace.runners._kit.skeleton import FrameworkRunner

    module = importlib.import_module(case.module)
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, FrameworkRunner)
            and value.__module__.startswith(case.module + ".")
        ):
            return value
    return None


def targets(case: RunnerCase) -> Iterator[Target]:
    """What the suite breaks for ``case``, found by reflection (see the module)."""
    for module_name in CLASS_MODULES:
        module = _submodule(case, module_name)
        if module is None:
            continue
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and _defined_in(module, cls)):
                continue
            for name, value in vars(cls).items():
                if name.startswith("_") and name != "__call__":
                    continue
                function = (
                    value.__func__ if isinstance(value, staticmethod | classmethod) else value
                )
                if not inspect.isfunction(function) or passes(function):
                    continue
                yield Target(cls, name, f"{module_name}.{cls.__name__}.{name}")
    for module_name in FUNCTION_MODULES:
        module = _submodule(case, module_name)
        if module is None:
            continue
        for name, value in vars(module).items():
            if inspect.isfunction(value) and _defined_in(module, value):
                yield Target(module, name, f"{module_name}.{name}")
    runner = _runner_class(case)
    if runner is not None:
        for name in ("install", "quiet"):
            if name in vars(runner):
                yield Target(runner, name, f"{runner.__name__}.{name}")


KNOWN_DIFFERENCES = {
    ("openai_agents", "mapper._Mapper.on_stream_event", "stream"): (
        "a traced stream maps steps and messages from the SDK's run hooks as well, an "
        "untraced one from the stream events alone (it installs no hooks, for speed): a "
        "fault in the stream-event mapping costs both the text, but not the same events"
    ),
}
"""Targets where the traced and the untraced stream differ under the fault, and why
(each is a strict xfail: fixing it makes the suite say so)."""


def _params() -> list[Any]:
    params: list[Any] = []
    for case in CASES:
        if case.name == "native":
            continue  # no adapter: its builder carries the boundary (test_runner_contract)
        try:
            if case.needs:
                importlib.import_module(case.needs)
            found = list(targets(case))
        except ImportError:
            params.append(pytest.param(case, None, id=f"{case.name}-not-installed"))
            continue
        params += [pytest.param(case, t, id=f"{case.name}-{t.label}") for t in found]
    return params


class Broken:
    """Stands in for a function's body and counts how often the run reached it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise KeyError("an attribute a framework release renamed")

    def body(self, original: Any) -> Any:
        """A function of the same kind as ``original`` (async if it is) that raises."""
        if inspect.iscoroutinefunction(original):

            async def broken_async(*args: Any, **kwargs: Any) -> Any:
                return self(*args, **kwargs)

            return broken_async

        def broken(*args: Any, **kwargs: Any) -> Any:
            return self(*args, **kwargs)

        return broken


def break_target(target: Target, monkeypatch: pytest.MonkeyPatch) -> Broken:
    """Break ``target``: behind its guard if it has one, else whole, wherever it is bound."""
    broken = Broken()
    function = target.function()
    if is_guarded(function):
        monkeypatch.setattr(function, "__wrapped__", broken.body(function.__wrapped__))
        return broken
    replacement = broken.body(function)
    if isinstance(target.owner, type):
        value = vars(target.owner)[target.name]
        if isinstance(value, staticmethod | classmethod):
            replacement = type(value)(replacement)
        monkeypatch.setattr(target.owner, target.name, replacement)
        return broken
    # a module-level function: every module of the runner that bound the same object
    package = target.owner.__name__.rpartition(".")[0]
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is function:
                monkeypatch.setattr(module, attribute, replacement)
    return broken


def shape(events: list[ev.StreamEvent]) -> list[tuple[str, str]]:
    """The events as a consumer reads them (ids left out: they differ per run)."""
    out: list[tuple[str, str]] = []
    for event in events:
        detail = getattr(event, "delta", None) or getattr(event, "content", None)
        detail = detail or getattr(event, "tool_name", None) or getattr(event, "step_name", "")
        out.append((event.type, str(detail or "")))
    return out


def internal_faults(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runnertrace" and "internal error in" in r.getMessage()
    ]


@pytest.fixture
def tracker(captured_spans: CapturedSpans) -> OpenSpanTracker:
    tracking = OpenSpanTracker()
    captured_spans.provider.add_span_processor(tracking)
    return tracking


@pytest.fixture(autouse=True)
def _crewai_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path / "crewai"))
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("case", "target"), _params())
async def test_a_fault_in_any_method_costs_telemetry_only(
    case: RunnerCase,
    target: Target | None,
    mode: str,
    tracker: OpenSpanTracker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    if target is None:
        pytest.skip(f"{case.needs or case.name} is not installed in this environment")
    known = KNOWN_DIFFERENCES.get((case.name, target.label, mode))
    if known is not None:
        request.applymarker(pytest.mark.xfail(reason=known, strict=True))
    healthy_reply, _ = await drive(case.make(lambda runner: runner, None), mode)
    broken = break_target(target, monkeypatch)
    internal_log.reset()  # each test counts its own lines
    caplog.set_level(logging.WARNING, logger="runnertrace")
    with tolerate_internal_errors():
        _, untraced_events = await drive(case.make(lambda runner: runner, None), mode)
        reached_untraced = broken.calls
        reply, events = await drive(case.make(TracingRunner, None), mode)
    await settle()
    if broken.calls == 0:
        pytest.skip(f"{target.label} is not reached by the offline scenario in {mode} mode")
    if mode == "run":
        assert reached_untraced == 0, "untraced run mode reached the mapping"
        assert reply == healthy_reply
    else:
        assert shape(events) == shape(untraced_events)
    logged = internal_faults(caplog)
    assert 1 <= len(logged) <= 2, logged  # one per boundary it crossed: mapping, install
    assert tracker.open == {}


PACKAGE_FILES = ("runner", "convert", "request", "mapper", "adapter", "quiet", "nesting", "testing")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES if c.name != "native"])
def test_every_runner_has_the_same_files_and_guarded_classes(case: RunnerCase) -> None:
    """A reader who knows one runner knows all: the same modules, and every class the
    framework calls into (mapper, adapter) guarded by construction."""
    case.runner_module()
    missing = [name for name in PACKAGE_FILES if _submodule(case, name) is None]
    assert missing == [], f"{case.module} lacks {missing}"
    unguarded = [
        f"{module_name}.{cls.__name__}"
        for module_name in CLASS_MODULES
        for cls in vars(_submodule(case, module_name)).values()
        if inspect.isclass(cls)
        and _defined_in(_submodule(case, module_name), cls)  # type: ignore[arg-type]
        and not vars(cls).get("__runnertrace_guarded__", False)
        and any(
            (not n.startswith("_") or n == "__call__") and inspect.isfunction(v)
            for n, v in vars(cls).items()
        )
    ]
    assert unguarded == []
