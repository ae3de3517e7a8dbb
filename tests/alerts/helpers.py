"""Shared helpers for the alert tests: the Prometheus binaries are required in CI, optional elsewhere."""

from __future__ import annotations

from pathlib import Path

from alerts.tools import ToolMissingError, find_binary
from tests.availability import unavailable


def require_tool(tool: str) -> Path:
    """The tool's path; skip with the reason when it is missing, but fail when CI=true."""
    try:
        return find_binary(tool)
    except ToolMissingError as exc:
        unavailable(str(exc), f"this test of {tool}")
