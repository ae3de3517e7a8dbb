"""The shell that composes phasefit: the ``phasefit`` CLI and the FastAPI service."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("phasefit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
