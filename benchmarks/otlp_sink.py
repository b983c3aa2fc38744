"""A counting OTLP/HTTP receiver in a process of its own, for ``peers.py``.

Why a separate process: the benchmark times the CPU of its own process, and a
collector is never part of the traced application. Decoding protobuf in a
thread of the benchmark would charge every exporting variant for the
receiver's work (and take the GIL from the run being timed).

It is ``tests/otlp_receiver.py``'s receiver (real HTTP on 127.0.0.1, real
protobuf decoding), keeping running totals instead of the decoded spans: a
benchmark sends hundreds of thousands of spans.

Protocol on the pipes: the child prints its port once; then each ``count`` line
on its stdin is answered with ``<spans> <attributes>`` (totals so far); end of
input stops it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))

from otlp_receiver import OtlpReceiver, ReceivedRequest


class CountingReceiver(OtlpReceiver):
    """Counts what arrives (spans and their attributes) and keeps nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.span_total = 0
        self.attribute_total = 0
        self._totals_lock = threading.Lock()

    def record(self, request: ReceivedRequest) -> None:
        attributes = sum(len(span.attributes) for span in request.spans)
        with self._totals_lock:
            self.span_total += len(request.spans)
            self.attribute_total += attributes

    def totals(self) -> tuple[int, int]:
        with self._totals_lock:
            return self.span_total, self.attribute_total


class SinkProcess:
    """The parent's handle on a running sink: its URL and its totals."""

    def __init__(self) -> None:
        self._child = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._to: IO[str] = self._require(self._child.stdin)
        self._from: IO[str] = self._require(self._child.stdout)
        line = self._from.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the OTLP sink did not start (it said {line!r})")
        self.traces_url = f"http://127.0.0.1:{int(line)}/v1/traces"

    @staticmethod
    def _require(pipe: IO[str] | None) -> IO[str]:
        if pipe is None:
            raise RuntimeError("the OTLP sink has no pipe")
        return pipe

    def totals(self) -> tuple[int, int]:
        """(spans, attributes) received so far, over every request."""
        self._to.write("count\n")
        self._to.flush()
        spans, attributes = self._from.readline().split()
        return int(spans), int(attributes)

    def stop(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(10)
        if self._child.stdout is not None:
            self._child.stdout.close()


def _serve() -> None:
    receiver = CountingReceiver()
    receiver.start()
    print(receiver.port, flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "count":
                spans, attributes = receiver.totals()
                print(spans, attributes, flush=True)
    finally:
        receiver.stop()


if __name__ == "__main__":
    _serve()
