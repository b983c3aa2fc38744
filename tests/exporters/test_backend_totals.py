"""Each backend adds up a nested composition's usage its own way, and gets each call once.

A real OTLP/HTTP receiver decodes what each backend's exporter sends; the test then
sums the spans the way that backend's product does and compares with the model calls
(issue 28). What each one sums, per span, over a trace:

* Langfuse: every observation's usage (``langfuse.observation.usage_details``, else
  the ``gen_ai.usage.*`` keys) and cost (``gen_ai.usage.cost``): a trace's totals are
  the sum over all its observations, agents and chains included.
* Phoenix (the ``otlp`` backend): its cumulative token counts add the
  ``llm.token_count.*`` of every span in a subtree, and it converts ``gen_ai.usage.*``
  to those on ingest, whatever the span's kind.
* Logfire: a trace's cost is the sum of ``operation.cost`` over its spans, and its
  token totals sum ``gen_ai.usage.input_tokens``/``output_tokens`` per span.
* OpenLLMetry (Traceloop): ``gen_ai.usage.*`` and ``llm.usage.total_tokens`` per span.

So a run span must carry no key any of them sums; its own totals are under
``gen_ai.aggregated_usage.*``, which none of them reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest
from tests.nesting_helpers import Outer, drive, inner_opened, inner_traced_runner
from tests.otlp_fixtures import (  # noqa: F401 - fixtures are used by name
    clean_vendor_env_fixture,
    make_receiver_fixture,
    receiver_fixture,
    trace_config,
)
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

from runnertrace.tracing import attributes as A
from runnertrace.tracing.config import TraceConfig
from runnertrace.tracing.runner import TracingRunner
from runnertrace.tracing.setup import get_tracing_setup

MODEL_INPUT = 1000 + 500 + 1200  # the outer agent's two calls and the inner agent's one
MODEL_OUTPUT = 10 + 5 + 20
PRICED = {"model": "gpt-4o", "provider": "openai"}  # the outer agent's last call only


def langfuse_sums(spans: list[ReceivedSpan]) -> tuple[int, int, float]:
    tokens_in = tokens_out = 0
    cost = 0.0
    for span in spans:
        a = span.attributes
        usage = a.get("langfuse.observation.usage_details")
        if usage is not None:
            details = json.loads(usage)
            tokens_in += details.get("input", 0)
            tokens_out += details.get("output", 0)
        else:
            tokens_in += a.get(A.INPUT_TOKENS, 0)
            tokens_out += a.get(A.OUTPUT_TOKENS, 0)
        cost += a.get(A.COST, 0.0)
    return tokens_in, tokens_out, cost


def phoenix_sums(spans: list[ReceivedSpan]) -> tuple[int, int, float]:
    tokens_in = sum(
        s.attributes.get("llm.token_count.prompt", s.attributes.get(A.INPUT_TOKENS, 0))
        for s in spans
    )
    tokens_out = sum(
        s.attributes.get("llm.token_count.completion", s.attributes.get(A.OUTPUT_TOKENS, 0))
        for s in spans
    )
    cost = sum(s.attributes.get("llm.cost.total", s.attributes.get(A.COST, 0.0)) for s in spans)
    return tokens_in, tokens_out, cost


def logfire_sums(spans: list[ReceivedSpan]) -> tuple[int, int, float]:
    tokens_in = sum(s.attributes.get(A.INPUT_TOKENS, 0) for s in spans)
    tokens_out = sum(s.attributes.get(A.OUTPUT_TOKENS, 0) for s in spans)
    return tokens_in, tokens_out, sum(s.attributes.get("operation.cost", 0.0) for s in spans)


def openllmetry_sums(spans: list[ReceivedSpan]) -> tuple[int, int, float]:
    tokens_in = sum(s.attributes.get(A.INPUT_TOKENS, 0) for s in spans)
    tokens_out = sum(s.attributes.get(A.OUTPUT_TOKENS, 0) for s in spans)
    total = sum(s.attributes.get("llm.usage.total_tokens", 0) for s in spans)
    assert total == tokens_in + tokens_out
    return tokens_in, tokens_out, sum(s.attributes.get(A.COST, 0.0) for s in spans)


SUMS: dict[str, Callable[[list[ReceivedSpan]], tuple[int, int, float]]] = {
    "langfuse": langfuse_sums,
    "otlp": phoenix_sums,
    "logfire": logfire_sums,
    "openllmetry": openllmetry_sums,
}


@pytest.mark.parametrize("backend", sorted(SUMS))
@pytest.mark.parametrize("path", ["traced-runner", "open_nested_run"])
@pytest.mark.parametrize("mode", ["run", "stream"])
async def test_each_backend_sums_a_nested_composition_to_its_model_calls_once(
    backend: str, path: str, mode: str, receiver: OtlpReceiver
) -> None:
    config = trace_config(backend, {backend: receiver})
    inner = (
        inner_traced_runner(mode, settings=config) if path == "traced-runner" else inner_opened()
    )
    await drive(TracingRunner(Outer(inner, **PRICED), settings=config), mode)
    assert get_tracing_setup(config).flush()

    spans = receiver.spans
    chats = [s for s in spans if s.attributes.get(A.SPAN_TYPE) == "message"]
    assert len(chats) == 3
    priced = [s.attributes[A.COST] for s in chats if A.COST in s.attributes]
    assert len(priced) == 1
    tokens_in, tokens_out, cost = SUMS[backend](spans)
    assert (tokens_in, tokens_out) == (MODEL_INPUT, MODEL_OUTPUT)
    assert math.isclose(cost, priced[0])
    # The run spans say the same numbers under keys of their own, partial where it is.
    (root,) = [s for s in spans if s.name == "invoke_agent outer"]
    assert root.attributes[A.AGG_INPUT_TOKENS] == MODEL_INPUT
    assert root.attributes[A.UNPRICED_CALLS] == 2
    assert math.isclose(root.attributes[A.AGG_COST], priced[0])


@pytest.mark.parametrize("path", ["traced-runner", "open_nested_run"])
async def test_token_and_cost_metrics_count_each_call_once_labelled_with_its_agent(
    path: str, receiver: OtlpReceiver
) -> None:
    config = TraceConfig(type="otlp", otlp={"endpoint": receiver.traces_url})
    inner = (
        inner_traced_runner("run", settings=config) if path == "traced-runner" else inner_opened()
    )
    await drive(TracingRunner(Outer(inner, **PRICED), settings=config), "run")
    assert get_tracing_setup(config).flush()

    tokens: dict[tuple[str, str], float] = {}
    for point in receiver.points:
        if point.name == "gen_ai.client.token.usage":
            key = (point.attributes["gen_ai.agent.name"], point.attributes["gen_ai.token.type"])
            tokens[key] = tokens.get(key, 0) + point.value
    assert tokens == {
        ("outer", "input"): 2200,
        ("outer", "output"): 30,
        ("inner", "input"): 500,
        ("inner", "output"): 5,
    }
    costs = {
        p.attributes["gen_ai.agent.name"]: p.value
        for p in receiver.points
        if p.name == "runnertrace.cost"
    }
    (chat,) = [s for s in receiver.spans if A.COST in s.attributes]
    assert costs.keys() == {"outer"} and math.isclose(costs["outer"], chat.attributes[A.COST])
