"""Shared helpers for the alert tests: the Prometheus binaries are required in CI, optional elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alerts.tools import ToolMissingError, find_binary


def require_tool(tool: str) -> Path:
    """The tool's path; skip with the reason when it is missing, but fail when CI=true."""
    try:
        return find_binary(tool)
    except ToolMissingError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {exc}")
        pytest.skip(str(exc))
