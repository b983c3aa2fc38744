"""Exiting after a traced run: everything queued is exported, and nothing is printed.

On Python 3.12+ the interpreter refuses to start threads once it is shutting
down, and the provider's shutdown runs in an ``atexit`` handler; a shutdown that
starts a thread printed ``Exception ignored in atexit callback ... can't create
new thread at interpreter shutdown`` and lost the spans. ``.ci/run`` runs this
test on the newest Python the machine has as well.
"""

from __future__ import annotations

from pathlib import Path

from tests.otlp_fixtures import (  # noqa: F401 - fixtures are used by name
    clean_vendor_env_fixture,
    make_receiver_fixture,
    receiver_fixture,
)
from tests.otlp_receiver import OtlpReceiver
from tests.traced_process import launch, received_runs, stored_runs

# One native run: 1 run span, 3 steps, 3 model calls, 2 tool calls.
SPANS_PER_RUN = 9


def test_exit_after_a_traced_run_exports_it_and_prints_nothing(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    store = tmp_path / "traces.db"
    result = launch("exit", store, receiver.traces_url)
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert stored_runs(store) == {"invoke_agent solo": SPANS_PER_RUN}
    assert received_runs(receiver.spans) == {"invoke_agent solo": SPANS_PER_RUN}
