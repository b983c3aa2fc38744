"""The store's one JSON encoding: compact, Unicode kept, bytes never stored."""

from __future__ import annotations

import json

__all__ = ["dumps"]


def _json_default(value: object) -> object:
    # Bytes never go into the store: a size note is all a viewer needs.
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    return str(value)


_ENCODER = json.JSONEncoder(default=_json_default, ensure_ascii=False, separators=(",", ":"))
dumps = _ENCODER.encode
