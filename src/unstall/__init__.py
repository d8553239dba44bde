"""unstall: find and remove the stalls of distributed deep-learning training."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("unstall")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
