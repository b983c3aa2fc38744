"""Export survives ``os.fork()``: the child's spans are exported, and so are the parent's.

A forked child (a gunicorn ``--preload`` worker, ``multiprocessing`` with
``fork``) inherits the batch processors but not their worker threads. The
application here traces a run, forks (with ``os.fork`` or a ``multiprocessing``
process); the child traces a run and exits normally; the parent traces another.
Every run must reach every backend, once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.otlp_fixtures import (  # noqa: F401 - fixtures are used by name
    clean_vendor_env_fixture,
    make_receiver_fixture,
    receiver_fixture,
)
from tests.otlp_receiver import OtlpReceiver
from tests.traced_process import launch, received_runs, stored_runs

SPANS_PER_RUN = 9
RUNS = ("invoke_agent parent-1", "invoke_agent child", "invoke_agent parent-2")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
@pytest.mark.parametrize("fork", ["fork", "multiprocessing"])
def test_parent_and_forked_child_runs_reach_the_store_and_the_receiver(
    fork: str, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    store = tmp_path / "traces.db"
    result = launch(fork, store, receiver.traces_url)
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    expected = dict.fromkeys(RUNS, SPANS_PER_RUN)
    assert stored_runs(store) == expected
    assert received_runs(receiver.spans) == expected
    span_ids = [span.span_id for span in receiver.spans]
    assert len(span_ids) == len(set(span_ids)) == len(RUNS) * SPANS_PER_RUN  # none sent twice
