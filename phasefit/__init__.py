"""The shell that composes phasefit: the ``phasefit`` CLI and the FastAPI service."""

from __future__ import annotations

import functools


def __getattr__(name: str) -> str:
    """``__version__``, looked up when first asked for: the package metadata scan costs about 30 ms, which
    every ``phasefit`` command would otherwise pay at start-up."""
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _version() -> str:
    return installed_version() or "0.0.0+unknown"  # a source tree that was never installed


def installed_version() -> str | None:
    """The installed distribution's version, None where phasefit runs from a source tree never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("phasefit")
    except PackageNotFoundError:
        return None
