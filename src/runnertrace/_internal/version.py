"""The package's version, at the bottom of the layers so that every layer may read it.

``runnertrace.__version__`` re-exports it; the tracer, the meter, the CLI and the
report read it from here, so none of them imports the package face above them.
"""

__version__ = "0.1.0"
