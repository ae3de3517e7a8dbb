"""Thin adapter over the Prometheus tools: ``promtool`` (rules) and ``amtool`` (Alertmanager config).

Debian's ``prometheus`` package ships ``promtool``, ``prometheus-alertmanager`` ships ``amtool`` and names
the server binary ``prometheus-alertmanager`` (upstream: ``alertmanager``).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BINARIES: dict[str, tuple[str, ...]] = {
    "promtool": ("promtool",),
    "amtool": ("amtool",),
    "prometheus": ("prometheus",),
    "alertmanager": ("alertmanager", "prometheus-alertmanager"),
}


class ToolMissingError(RuntimeError):
    """A Prometheus binary is not installed (or not on PATH)."""


def find_binary(tool: str) -> Path:
    """The path of ``tool`` (a key of :data:`BINARIES`); :class:`ToolMissingError` naming the package."""
    for name in BINARIES[tool]:
        found = shutil.which(name)
        if found:
            return Path(found)
    package = "prometheus-alertmanager" if tool in ("amtool", "alertmanager") else "prometheus"
    raise ToolMissingError(
        f"{' or '.join(BINARIES[tool])} not found on PATH: install Debian's {package} package "
        f"(apt-get install --no-install-recommends {package})"
    )


@dataclass(frozen=True)
class ToolResult:
    command: tuple[str, ...]
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _run(command: Sequence[str], timeout_s: float) -> ToolResult:
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s, check=False)
    return ToolResult(tuple(command), done.returncode, (done.stdout + done.stderr).strip())


def check_rules(paths: Sequence[Path], *, timeout_s: float = 60.0) -> ToolResult:
    """``promtool check rules`` on rule files (a PrometheusRule CR is not a rule file: pass spec files)."""
    return _run([str(find_binary("promtool")), "check", "rules", *map(str, paths)], timeout_s)


def run_rule_tests(paths: Sequence[Path], *, timeout_s: float = 120.0) -> ToolResult:
    """``promtool test rules`` on unit-test files; their ``rule_files`` are relative to each test file."""
    return _run([str(find_binary("promtool")), "test", "rules", *map(str, paths)], timeout_s)


def check_alertmanager_config(path: Path, *, timeout_s: float = 60.0) -> ToolResult:
    return _run([str(find_binary("amtool")), "check-config", str(path)], timeout_s)
