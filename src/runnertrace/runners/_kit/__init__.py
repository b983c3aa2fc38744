"""The runner toolkit: what framework runners share, and only runners import.

``builder`` (the event builder every runner emits through), ``skeleton`` (the
steps around a framework call) and ``genai`` (GenAI semconv shapes of what a
model was sent). Private: a runner's public face is its module's ``__all__``.
"""
