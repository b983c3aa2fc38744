"""Tracing a runner you wrote yourself, with ``traced()``.

Needs: ``pip install -e .`` (no extra).

Run it with ``python examples/custom_runner.py``.

``GlossaryRunner`` below does not subclass runnertrace's ``Runner``: it is any
object with ``run()`` and ``stream()``. Tracing is duck-typed on the ``type``
of each event the runner yields, so a hand-written runner gets the same span
tree as the built-in ones:

* **stream mode**: the wrapper reads the events as they pass through, so there
  is a span for the run, the step, the tool call and the model message;
* **run mode**: nothing is yielded, so the wrapper only sees the call itself
  and records the run span (with its outcome). A runner that also wants the
  inner spans in run mode reports its events through
  ``runnertrace.core.claim_observer()``, as the built-in runners do.

Spans go to the default ``local`` store, one per user (``runnertrace doctor`` prints where).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from runnertrace import traced
from runnertrace.core import Agent, Session
from runnertrace.core import events as ev
from runnertrace.core.models import AgentReplyText, AgentRequestText
from runnertrace.exporters.local_store import SpanStore, span_tree

GLOSSARY = {
    "span": "one timed operation in a trace",
    "trace": "the tree of spans of one run",
}


class GlossaryRunner:
    """Explains the glossary terms in a prompt. Yields runnertrace's event classes."""

    framework = "glossary"

    async def stream(self, agent: Any, session: Any, requests: list[Any]) -> AsyncIterator[Any]:
        prompt = " ".join(r.prompt for r in requests)
        terms = [w.strip("?.,!").lower() for w in prompt.split()]
        found = [t for t in terms if t in GLOSSARY]
        yield ev.StepStart(step_name="explain", step_index=0)
        # The lookup is this runner's "tool": start, arguments, end, result.
        yield ev.ToolCallStart(tool_call_id="lookup-1", tool_name="glossary_lookup")
        yield ev.ToolCallArgs(tool_call_id="lookup-1", delta=f'{{"terms": {found!r}}}')
        yield ev.ToolCallEnd(tool_call_id="lookup-1")
        yield ev.ToolCallResult(tool_call_id="lookup-1", content=f"{len(found)} term(s) found")
        # The answer is streamed word by word, like a model's message.
        answer = "; ".join(f"{t}: {GLOSSARY[t]}" for t in found) or "No glossary terms found."
        yield ev.MessageStart(message_id="answer-1", model="glossary-1", provider="example")
        for word in answer.split(" "):
            yield ev.TextDelta(message_id="answer-1", delta=word + " ")
        yield ev.MessageEnd(message_id="answer-1", finish_reason="stop")
        yield ev.StepEnd(step_name="explain", step_index=0)

    async def run(self, agent: Any, session: Any, requests: list[Any]) -> AgentReplyText:
        text = "".join(
            [e.delta async for e in self.stream(agent, session, requests) if e.type == "text_delta"]
        )
        return AgentReplyText(text=text.strip())


def print_trace(store: SpanStore, trace_id: str) -> None:
    for span, depth in span_tree(store.get_trace(trace_id)):
        print(f"  {'  ' * depth}{span.name}")


async def main() -> None:
    runner = traced(GlossaryRunner(), type="local")  # "local" is also the default
    agent = Agent("glossary", runner)
    requests = [AgentRequestText(prompt="What is a span in a trace?")]

    print("stream mode:")
    words = [
        e.delta
        async for e in runner.stream(agent, Session("custom-runner-stream"), requests)
        if e.type == "text_delta"
    ]
    print(f"  answer: {''.join(words).strip()}")

    print("run mode:")
    reply = await runner.run(agent, Session("custom-runner-run"), requests)
    print(f"  answer: {reply.text}")

    runner.setup.flush()  # spans are exported in the background; make the store complete
    store = SpanStore(runner.settings.local.path)
    for run in reversed(store.list_runs(2)):
        plural = "" if run.span_count == 1 else "s"
        print(f"trace {run.trace_id} ({run.mode} mode, {run.span_count} span{plural}):")
        print_trace(store, run.trace_id)


if __name__ == "__main__":
    asyncio.run(main())
