"""``/api/compare`` pairs two runs' spans by their place in the tree (issue 30).

The store holds the suite's test runs (``ui_fixtures.build_store``): real traced
runs of the native agent (``calc``: a sum with two tool steps, a division whose
tool fails, a greeting with no tool) and three hand-made "pricey" runs whose
model calls name different models.
"""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="needs the ui extra: pip install -e '.[dev,ui]'")

import itertools
from collections.abc import Iterator
from typing import Any

from starlette.testclient import TestClient

from runnertrace.ui import create_app
from ui_fixtures import build_store


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = build_store(tmp_path_factory.mktemp("ui-compare") / "traces.db")
    with TestClient(create_app(db), base_url="http://127.0.0.1") as client:
        yield client


def runs_of(client: TestClient, agent: str) -> list[dict[str, Any]]:
    """The agent's runs, oldest first."""
    body = client.get("/api/runs", params={"agent": agent, "sort": "start", "dir": "asc"})
    assert body.status_code == 200, body.text
    return list(body.json()["runs"])


def compare(client: TestClient, a: str, b: str) -> dict[str, Any]:
    answer = client.get("/api/compare", params={"a": a, "b": b})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_two_models_put_their_model_calls_on_one_row(client: TestClient) -> None:
    mini, large = (run["trace_id"] for run in runs_of(client, "pricey")[:2])
    compared = compare(client, mini, large)
    rows = [(r["a"] and r["a"]["name"], r["b"] and r["b"]["name"]) for r in compared["timeline"]]
    assert rows == [
        ("invoke_agent pricey", "invoke_agent pricey"),
        ("chat gpt-test-mini", "chat gpt-test-large"),
        ("execute_tool lookup", "execute_tool lookup"),
    ]
    assert compared["timeline"][1]["label"] == "chat gpt-test-mini / chat gpt-test-large"
    differences = {d["field"]: d for d in compared["differences"]}
    assert differences["framework"] == {
        "field": "framework", "a": "langgraph", "b": "langgraph", "same": True
    }  # fmt: skip
    # what a reader compares for, in its order: only those that differ
    assert compared["matters"] == ["tokens in", "cost", "output"]


def test_a_shorter_run_keeps_each_span_in_its_place(client: TestClient) -> None:
    """A sum (two tool steps) against a greeting (one step, no tool): the greeting's one
    step, and its one model call, pair with the sum's first; the rest is the sum's alone."""
    runs = {run["input_preview"]: run["trace_id"] for run in runs_of(client, "calc")}
    sum_id = next(t for text, t in runs.items() if text and "1234" in text)
    hello_id = next(t for text, t in runs.items() if text and text.startswith("Hello"))
    timeline = compare(client, sum_id, hello_id)["timeline"]
    paired = [(r["a"]["name"], r["a"]["depth"]) for r in timeline if r["a"] and r["b"]]
    assert paired == [("invoke_agent calc", 0), ("agent_step calc", 1), ("chat scripted-1", 2)]
    only_a = [r["a"]["name"] for r in timeline if not r["b"]]
    assert only_a.count("execute_tool calculator") == 2 and only_a.count("agent_step calc") == 2
    assert all(r["a"] for r in timeline)  # the greeting has no span the sum lacks
    # depth first, as the tree: each row's parent row comes before it
    depths = [(r["a"] or r["b"])["depth"] for r in timeline]
    assert depths[0] == 0 and all(b <= a + 1 for a, b in itertools.pairwise(depths))
