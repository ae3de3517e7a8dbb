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
    # The simulator reads AI Configurator's tables as committed data, never the package itself.
    "fleetsim": {"analyzer", "alerts", "dashboard", "phasefit", "tests", "benchmarks", "aiconfigurator"},
    "analyzer": {
        "fleetsim",
        "collector",
        "alerts",
        "dashboard",
        "phasefit",
        "tests",
        "benchmarks",
        "aiconfigurator",
        "scripts",
    },
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


def _modules_imported(path: Path) -> set[str]:
    """Dotted modules a file imports (absolute imports; ``from a import b`` counts ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the nodes along it), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_top_level_packages_import_each_other_without_a_cycle() -> None:
    graph = {
        package: {
            name
            for names in imported_packages(ROOT / package).values()
            for name in names
            if name in PACKAGES and name != package
        }
        for package in PACKAGES
    }
    assert _cycle(graph) is None, f"import cycle between packages: {' -> '.join(_cycle(graph) or [])}"


@pytest.mark.parametrize("package", ["phasefit/service", "collector", "analyzer", "fleet"])
def test_the_modules_of_a_package_import_each_other_without_a_cycle(package: str) -> None:
    folder = ROOT / package
    dotted = package.replace("/", ".")
    modules = {
        f"{dotted}.{'.'.join(p.relative_to(folder).with_suffix('').parts)}".removesuffix(".__init__"): p
        for p in folder.rglob("*.py")
    }
    graph = {
        name: {m for m in _modules_imported(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    found = _cycle(graph)
    assert found is None, f"import cycle in {package}: {' -> '.join(found or [])}"


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# The analyzer's parts in pipeline order, lowest first: each imports only parts at or below its own place.
ANALYZER_LAYERS = (
    "tunable",  # how a threshold is declared, documented and set by path
    "results",  # typed results: the summary's model, nothing of the analyzer's
    "model",  # the performance model: roofline, MoE, KV budgets, fitted constants
    "telemetry",  # frames on a time grid, bottleneck classification, drift
    "pools",  # pools, workload, capacity, the split search, per-pool analysis
    "findings",  # one module per finding kind, their evidence and checks
    "pool_summaries",  # one summary entry per pool, with its segments
    "summarize",
    "pipeline",  # analyze(): the composition of the above
    "planning",  # plans and what-ifs built on an analysis
    "sources",  # adapters: the store and Prometheus in
    "report",
    "settings",  # operator settings turned into parameters
)


def analyzer_part_edges(root: Path = ROOT) -> dict[str, set[str]]:
    """Analyzer part -> the other analyzer parts its modules import."""
    folder = root / "analyzer"
    edges: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        part = path.relative_to(folder).parts[0].removesuffix(".py")
        for module in _modules_imported(path):
            names = module.split(".")
            ours = len(names) > 1 and ((folder / names[1]).is_dir() or (folder / f"{names[1]}.py").is_file())
            if names[0] == "analyzer" and ours and names[1] != part:
                edges.setdefault(part, set()).add(names[1])
    return edges


def test_every_analyzer_part_has_a_place_in_the_pipeline() -> None:
    folder = ROOT / "analyzer"
    parts = {
        p.name.removesuffix(".py")
        for p in folder.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    assert parts - {"__init__"} == set(ANALYZER_LAYERS)


def test_analyzer_parts_import_only_what_lies_below_them() -> None:
    rank = {part: i for i, part in enumerate(ANALYZER_LAYERS)}
    upward = {
        f"{part} -> {other}"
        for part, others in analyzer_part_edges().items()
        for other in others
        if rank[other] > rank[part]
    }
    assert upward == set(), f"analyzer parts import upward in the pipeline: {sorted(upward)}"


# What the examined must not know of its examiner: the measured step-time tables (data/measured), the
# script that writes them, and the simulator's own telemetry and role sources.
EXAMINER_MARKS = (
    "data/measured",
    "measured_physics",
    "PHASEFIT_MEASURED_TABLES",
    "aiconfigurator",
    "TelemetrySource.SIM",
    "RoleSource.SIM",
    "fleetsim",
)


def examiner_marks(folder: Path, root: Path = ROOT) -> dict[str, list[str]]:
    """Module -> the examiner's marks its source text holds (names, paths, the simulator's sources)."""
    out: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix not in {".py", ".yaml", ".yml", ".json", ".csv", ".toml"} or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found = [mark for mark in EXAMINER_MARKS if mark.casefold() in text.casefold()]
        if found:
            out[str(path.relative_to(root))] = found
    return out


def test_the_analyzer_knows_nothing_of_its_examiner() -> None:
    assert examiner_marks(ROOT / "analyzer") == {}


def test_the_examiner_marks_are_seen(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('TABLES = "data/measured/trtllm"\nx = TelemetrySource.SIM\n')
    (tmp_path / "b.py").write_text("import numpy\n")
    assert examiner_marks(tmp_path, tmp_path) == {"a.py": ["data/measured", "TelemetrySource.SIM"]}
