"""Our built-in backends: where spans go.

Each module holds one backend, registered by name in the ``runnertrace.backends``
entry-point group (``pyproject.toml``; see :mod:`runnertrace.tracing.backend_registry`).
Configuring one imports only its module, never the others or their vendor SDKs.
"""
