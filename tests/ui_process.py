"""``python tests/ui_process.py PORT STORE``: ``runnertrace ui`` as a user starts it, for tests
that send it OTLP from other processes (no browser opened)."""

from __future__ import annotations

import sys

from runnertrace.cli import main

if __name__ == "__main__":
    port, store = sys.argv[1:3]
    sys.exit(main(["ui", "--store", store, "--port", port, "--no-open"]))
