"""A redaction hook: content capture on, yet no secret or e-mail reaches the trace store.

Needs: ``pip install -e .`` (no extra).

Run it with ``python examples/redaction.py``.

With ``trace.capture_content`` on, prompts, model output and tool arguments
and results are recorded on spans. ``trace.redact`` names a ``(str) -> str``
function by dotted path; it runs on every string attribute (and on error
messages) before anything is exported. Here it is :func:`redact` below, which
applies the ready-made :func:`runnertrace.tracing.content.redact_secrets_and_emails`
(API keys, tokens, e-mail addresses) and also masks this app's own customer
numbers. In a config file the same settings read::

    trace:
      enabled: true
      capture_content: true
      redact: myapp.telemetry.redact   # or runnertrace.tracing.content.redact_secrets_and_emails

The prompt below carries a planted API key, e-mail address and customer
number. The offline model echoes the prompt, so they appear in the input, the
model output and the reply. The reply the app gets back is untouched
(redaction is for telemetry only); the store is then searched for all three.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid

from runnertrace import load_settings
from runnertrace.core import Runtime, Session
from runnertrace.core.models import AgentRequestText
from runnertrace.exporters.local_store import SpanStore
from runnertrace.runners.native import Agent, NativeModule, ScriptedLlm, calculator
from runnertrace.tracing import get_tracing_setup
from runnertrace.tracing.content import redact_secrets_and_emails

API_KEY = "sk-proj-Example0123456789abcdefXYZ"
EMAIL = "jane.doe@example.com"
CUSTOMER = "CUST-20240917"
PROMPT = f"Please remember my key {API_KEY}, my e-mail {EMAIL} and my account {CUSTOMER}."

_CUSTOMER_NUMBER = re.compile(r"\bCUST-\d{8}\b")


def redact(text: str) -> str:
    """The app's redactor: the built-in patterns plus its own customer numbers."""
    return _CUSTOMER_NUMBER.sub("[REDACTED_CUSTOMER]", redact_secrets_and_emails(text))


def message_text(recorded: object) -> str:
    """The text parts of a recorded ``gen_ai.*.messages`` value (a JSON list of messages)."""
    if not isinstance(recorded, str):
        return f"(not recorded: {recorded!r})"
    return " ".join(
        part["content"]
        for message in json.loads(recorded)
        for part in message.get("parts", [])
        if part.get("type") == "text"
    )


async def main() -> None:
    settings = load_settings(
        trace={
            "enabled": True,
            "type": "local",
            "capture_content": True,
            # A dotted path, as in runnertrace.yaml. When this file runs as a script
            # its module is __main__; in an app it would be e.g. "myapp.telemetry.redact".
            "redact": f"{__name__}.redact",
        }
    )
    runtime = Runtime(settings=settings)
    native = Agent(ScriptedLlm(), tools=[calculator], name="redaction-demo")
    agent = NativeModule([native], runtime=runtime).get(native)

    session = Session(f"redaction-example-{uuid.uuid4().hex[:8]}")
    reply = await runtime.run(agent, session, [AgentRequestText(prompt=PROMPT)])
    print(f"reply to the app (not redacted): {reply}")

    get_tracing_setup(settings.trace).flush()
    store = SpanStore(settings.trace.local.path, read_only=True)
    run = next(r for r in store.list_runs(20) if r.session_id == session.id)
    spans = store.get_trace(run.trace_id)
    run_span = next(s for s in spans if s.span_type == "run")
    # What the run span recorded, in the GenAI semconv keys every span carries.
    for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
        print(f"recorded {key}: {message_text(run_span.attributes.get(key))}")

    # Search everything stored for this trace: names, attributes, events, statuses.
    stored = repr([(s.name, s.attributes, s.events, s.status_description) for s in spans])
    for label, planted in (("API key", API_KEY), ("e-mail", EMAIL), ("customer no.", CUSTOMER)):
        print(f"{label} in the store: {'FOUND' if planted in stored else 'no'}")
    print(f"checked {len(spans)} spans in {store.path}")


if __name__ == "__main__":
    asyncio.run(main())
