"""The import rules between top-level packages (docs/architecture.md): drawn from the source, not assumed.

The examiner (``fleetsim``) and the examined (``analyzer``) share nothing but the data contract and the
catalogs in ``fleet``: the analyzer imports neither the simulator nor the collector, and the simulator
imports nothing of the analyzer's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fleet", "fleetsim", "collector", "analyzer", "alerts", "dashboard", "phasefit", "migrations")

# package -> top-level packages of ours it must never import
FORBIDDEN = {
    # fleet is the kernel: it imports nothing of ours (it finds migrations/ as data, never imports it).
    "fleet": {"fleetsim", "collector", "analyzer", "alerts", "dashboard", "phasefit", "migrations"},
    # The simulated fleet plugs into the collector as one source among others (fleetsim.source).
    "fleetsim": {"analyzer", "alerts", "dashboard", "phasefit", "tests", "benchmarks"},
    "analyzer": {"fleetsim", "collector", "alerts", "dashboard", "phasefit", "tests", "benchmarks"},
    "collector": {"fleetsim", "analyzer", "alerts", "dashboard", "phasefit", "tests", "benchmarks"},
}
# Test code is imported by tests alone: the product, its benchmarks and its scripts stand without it.
NOT_TESTS = (*PACKAGES, "benchmarks", "scripts")


def imported_packages(folder: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """Top-level package names each module under ``folder`` imports (absolute imports only)."""
    out: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(root))] = names
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_what_the_architecture_forbids(package: str) -> None:
    bad = {
        module: sorted(names & FORBIDDEN[package])
        for module, names in imported_packages(ROOT / package).items()
        if names & FORBIDDEN[package]
    }
    assert bad == {}, f"{package} imports what it must not: {bad}"


@pytest.mark.parametrize("folder", NOT_TESTS)
def test_nothing_but_tests_imports_tests(folder: str) -> None:
    bad = sorted(module for module, names in imported_packages(ROOT / folder).items() if "tests" in names)
    assert bad == [], f"{folder} imports test code: {bad}"


def test_the_rule_sees_the_imports_it_forbids(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import fleetsim.truth\nfrom collector import agent\nfrom . import x\n")
    assert imported_packages(tmp_path, tmp_path) == {"m.py": {"fleetsim", "collector"}}
