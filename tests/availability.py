"""One rule for tests that need something outside Python: skip with the reason here, fail under ``CI=true``.

CI installs every component (``scripts/test-env.sh``), so a skip there could only hide a regression.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(reason: str, what: str = "this test") -> NoReturn:
    """Skip with ``reason``; under CI=true fail with it instead."""
    if under_ci():
        pytest.fail(f"{reason}; under CI=true {what} must run", pytrace=False)
    pytest.skip(f"{reason}: {what} skipped")


def require_executable(name: str, package: str, what: str = "this test") -> Path:
    """The executable's path, or a skip (a failure under CI) naming the Debian package that provides it."""
    found = shutil.which(name)
    if found is None:
        unavailable(f"{name} is not installed (Debian package {package!r})", what)
    return Path(found)
