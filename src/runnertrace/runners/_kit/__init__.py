"""The runner toolkit: what framework runners share, and only runners import.

``builder`` (the event builder every runner emits through), ``skeleton`` (the
template of a run: prepare, the plain call, the install and quiet steps inside the
boundary, relay, save, reply), ``adapter`` (the class guard for whatever the
framework calls, the call bracket, the scope ledger), ``nesting`` (the lifecycle
of an agent run the framework starts by itself) and ``genai`` (GenAI semconv
shapes of what a model was sent). Private: a runner's public face is its
package's ``__all__``.
"""
