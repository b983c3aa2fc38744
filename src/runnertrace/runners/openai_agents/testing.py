"""The offline test model: the SDK's own ``ScriptedModel``, with a model name.

The SDK ships a scripted model (``agents.testing``: ``ModelStep``,
``assistant_message``, ``function_call``) that drives a real run offline; what it
lacks is a model name, which our chat spans are named after (``chat fake-model``)
and ``MessageStart`` reports. The tests, the contract cases and the benchmarks
build their agents on :class:`FakeModel`.
"""

from __future__ import annotations

from agents.testing import ScriptedModel

__all__ = ["FakeModel"]


class FakeModel(ScriptedModel):
    """The SDK's scripted model, with a model name for ``MessageStart`` and span names."""

    model = "fake-model"
