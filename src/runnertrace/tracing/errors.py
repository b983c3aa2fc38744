"""The configuration error, at the bottom of ``tracing``.

The configuration, the backend registry and the environment reader all raise it;
defining it here lets each of them sit below the ones that read it, with no import
circle between them. ``runnertrace.tracing.config.ConfigError`` is the same class.
"""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and what is allowed."""
