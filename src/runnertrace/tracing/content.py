"""What content may go onto spans: capture switch, truncation and redaction.

Private by default: prompts, outputs and tool arguments/results are recorded
only when ``trace.capture_content`` is true or, when that is unset,
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` allows it. Captured text
is truncated; image and file bytes are never recorded.

Every value the state machine writes (attribute, event attribute, status
description, and so the span names built from them) passes through one gate,
:meth:`ContentPolicy.clean_value`: it runs the redaction hook on strings and on
sequences of strings, and replaces what no exporter can encode (lone
surrogates, integers beyond 64 bits, values of no attribute type), so nothing
unredacted leaves the process and one odd string never costs a batch. What it
had to replace is named in ``runnertrace.sanitized`` on the span or event.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runnertrace.tracing.attributes import SANITIZED
from runnertrace.tracing.config import ConfigError, TraceConfig

__all__ = ["ContentPolicy", "redact_secrets_and_emails", "sanitize_text"]

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# EVENT_ONLY asks for content on log events, which we do not emit; spans stay clean.
_CAPTURE_ON_SPANS = {"span_only", "span_and_event", "true", "1", "yes"}


def capture_from_env() -> bool:
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in _CAPTURE_ON_SPANS


Redactor = Callable[[str], str]

_SECRET_PATTERNS = [
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"\b(?:pk|sk)-lf-[A-Za-z0-9-]{8,}\b"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*"),
]
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")


def redact_secrets_and_emails(text: str) -> str:
    """A ready-made redactor: API keys, tokens and e-mail addresses become placeholders.

    Use it with ``trace.redact: runnertrace.tracing.content.redact_secrets_and_emails``.
    """
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub("[REDACTED_SECRET]", text)
    return _EMAIL.sub("[REDACTED_EMAIL]", text)


def load_redactor(path: str | None) -> Redactor | None:
    if not path:
        return None
    from runnertrace._internal.imports import import_dotted

    try:
        fn = import_dotted(path)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"trace.redact: cannot load {path!r}: {exc}") from exc
    if not callable(fn):
        raise ConfigError(f"trace.redact: {path!r} is not callable; expected (str) -> str")
    return _returning_text(fn, path)


def _returning_text(fn: Callable[[str], Any], path: str) -> Redactor:
    """``fn``, refusing any result but a ``str``.

    A redactor that returns ``None`` (meaning "drop it"?) or bytes would put a
    value on the span that exporters reject, losing a whole batch. Failing
    closed is the safe answer for a privacy hook: the fault is logged once (it
    raises under pytest), and the span it was for is not recorded, so nothing
    unredacted is exported either.
    """

    def redact(text: str) -> str:
        result = fn(text)
        if not isinstance(result, str):
            raise TypeError(
                f"trace.redact: {path} returned {type(result).__name__}; "
                "a redactor must return the redacted text as a str"
            )
        return result

    return redact


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PLAIN = frozenset({bool, float})  # attribute types the gate has nothing to do for


def sanitize_text(text: str) -> str | None:
    """``text`` made encodable as UTF-8, or ``None`` when it already is.

    Lone surrogates (what ``surrogateescape`` makes of undecodable bytes in file
    names and argv, or JSON's ``"\\ud83d"``) become U+FFFD; a surrogate pair that
    a str kept as two code points is joined into its character. ASCII, by far the
    commonest case, is recognised without copying.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return None


@dataclass(frozen=True)
class ContentPolicy:
    capture: bool
    max_length: int
    redactor: Redactor | None

    @classmethod
    def from_config(cls, config: TraceConfig) -> ContentPolicy:
        capture = (
            config.capture_content if config.capture_content is not None else capture_from_env()
        )
        return cls(capture, config.max_content_length, load_redactor(config.redact))

    def clean_value(self, value: Any) -> tuple[Any, bool]:
        """The one gate every value we write passes: ``(value fit to export, changed)``.

        ``changed`` is true when the value had to be *sanitized*, not merely
        redacted: a string with unencodable code points, an integer no OTLP
        encoder takes, or a value of no attribute type (written as its text).
        Redaction runs before sanitizing, so a redactor's own output is made safe
        too.
        """
        kind = type(value)
        if kind is str:
            redact = self.redactor
            if redact is not None:
                value = redact(value)
            fixed = None if value.isascii() else sanitize_text(value)
            return (value, False) if fixed is None else (fixed, True)
        if kind is int:
            return (value, False) if _INT64_MIN <= value <= _INT64_MAX else (str(value), True)
        if kind in _PLAIN:
            return value, False
        if kind is tuple or kind is list:  # of scalars, all of one type (else as text)
            items = []
            changed = False
            for item in value:
                nested = type(item) is tuple or type(item) is list
                item, item_changed = self.clean_value(str(item) if nested else item)
                items.append(item)
                changed = changed or item_changed or nested
            if len({type(item) for item in items}) > 1:
                return tuple(str(item) for item in items), True
            return tuple(items), changed
        if isinstance(value, str):  # a subclass (a str enum): its text, not its repr
            return self.clean_value(str.__str__(value))
        if isinstance(value, int | float):  # bool is exact above; IntEnum, numpy floats
            return self.clean_value(int(value) if isinstance(value, int) else float(value))
        return self.clean_value(str(value))[0], True

    def clean(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """``attrs`` through :meth:`clean_value`, keys included; the keys it had to
        sanitize are listed under ``runnertrace.sanitized``."""
        out: dict[str, Any] = {}
        sanitized: list[str] | None = None
        clean_value = self.clean_value
        unredacted = self.redactor is None
        for key, value in attrs.items():
            kind = type(value)
            # The commonest values need nothing, so they skip the call (this is the hot
            # path): bool, float, a 64-bit int, and ASCII text when nothing is redacted.
            if not (
                kind in _PLAIN
                or (kind is int and _INT64_MIN <= value <= _INT64_MAX)
                or (kind is str and unredacted and value.isascii())
            ):
                value, changed = clean_value(value)
                if changed:
                    if sanitized is None:
                        sanitized = []
                    sanitized.append(key)
            if not key.isascii():
                key = sanitize_text(key) or key
            out[key] = value
        if sanitized:
            out[SANITIZED] = tuple(sanitized)
        return out

    def truncate(self, text: str) -> str:
        if self.max_length and len(text) > self.max_length:
            return text[: self.max_length] + f"...[truncated {len(text) - self.max_length} chars]"
        return text

    def text(self, value: Any) -> str:
        """Content as a truncated string (redaction happens when the attribute is set)."""
        text = (
            value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        )
        return self.truncate(text)

    def messages(self, messages: list[dict[str, Any]]) -> str:
        """GenAI messages as JSON, each part's text truncated on its own.

        Truncating inside the parts keeps the value valid JSON, so a backend can
        still render it as a chat (a whole-string cut would leave it unparseable).
        """
        return json.dumps(
            [{**m, "parts": [self._part(p) for p in m.get("parts", ())]} for m in messages],
            default=str,
            ensure_ascii=False,
        )

    def parts(self, parts: list[dict[str, Any]]) -> str:
        """Message parts as JSON (``gen_ai.system_instructions``), each truncated alone."""
        return json.dumps([self._part(p) for p in parts], default=str, ensure_ascii=False)

    def _part(self, part: dict[str, Any]) -> dict[str, Any]:
        content = part.get("content")
        if isinstance(content, str) and self.max_length and len(content) > self.max_length:
            return {**part, "content": self.truncate(content)}
        return part


def request_parts(requests: Any) -> list[dict[str, Any]]:
    """Requests as GenAI message parts, never carrying image or file bytes."""
    parts: list[dict[str, Any]] = []
    for request in requests or ():
        kind = getattr(request, "type", None)
        if kind == "text":
            parts.append({"type": "text", "content": request.prompt})
        elif kind in ("image", "file"):
            parts.append(
                {
                    "type": "blob",
                    "modality": "image" if kind == "image" else "file",
                    "mime_type": getattr(request, "mime_type", None),
                    "name": getattr(request, "name", None),
                    "content": "[bytes omitted]",
                }
            )
        elif kind == "any":
            parts.append({"type": "text", "content": json.dumps(request.content, default=str)})
    return parts
