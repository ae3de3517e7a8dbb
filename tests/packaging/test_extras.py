"""The extras: each one's distributions are what phasefit/cli/extras.py says it brings, every runtime
dependency is imported somewhere, every one is pinned, and `make demo` installs the demo extra alone."""

from __future__ import annotations

import re
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from phasefit.cli import extras as cli_extras
from tests.source_imports import top_level_imports

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
FIRST_PARTY = {"fleet", "fleetsim", "collector", "analyzer", "alerts", "dashboard", "phasefit", "migrations"}
# Runtime distributions that no module imports by name, and why they are there all the same.
NOT_IMPORTED = {
    # SQLAlchemy loads it for postgresql+psycopg:// URLs (the store on PostgreSQL, COPY for bulk ingest).
    "psycopg",
}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(spec: str) -> tuple[str, set[str]]:
    """(distribution, extras) of a requirement string such as ``psycopg[binary]>=3.2``."""
    match = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", spec)
    assert match, spec
    return normalise(match[1]), {e.strip() for e in (match[2] or "").split(",") if e.strip()}


def distributions(extra: str) -> set[str]:
    """The distributions an extra installs directly or through ``phasefit[...]``."""
    found: set[str] = set()
    for spec in EXTRAS[extra]:
        name, nested = requirement(spec)
        if name == "phasefit":
            for inner in nested:
                found |= distributions(inner)
        else:
            found.add(name)
    return found


@cache
def owners() -> dict[str, set[str]]:
    """Top-level module -> the installed distributions that provide it."""
    return {module: {normalise(d) for d in dists} for module, dists in packages_distributions().items()}


def modules_of(dists: set[str]) -> set[str]:
    return {m for m, ds in owners().items() if ds & dists and not m.startswith("_")}


RUNTIME_EXTRAS = sorted(set(EXTRAS) - {"test", "all"})


def test_the_cli_knows_every_extra_and_only_those() -> None:
    assert set(cli_extras.EXTRA_MODULES) == set(RUNTIME_EXTRAS)


@pytest.mark.parametrize("extra", RUNTIME_EXTRAS)
def test_each_module_the_cli_names_comes_from_that_extra(extra: str) -> None:
    """A message that says 'install phasefit[X]' must name an X that brings the module."""
    dists = distributions(extra)
    for module in sorted(cli_extras.EXTRA_MODULES[extra]):
        assert module in owners(), f"{module} is not installed here (the test venv has every extra)"
        assert owners()[module] & dists, f"phasefit[{extra}] does not install {module} ({owners()[module]})"


@pytest.mark.parametrize("extra", RUNTIME_EXTRAS)
def test_each_distribution_of_an_extra_is_known_to_the_cli(extra: str) -> None:
    for dist in sorted(distributions(extra)):
        provided = modules_of({dist})
        assert provided & cli_extras.EXTRA_MODULES[extra], (
            f"phasefit[{extra}] installs {dist} ({sorted(provided)}); cli/extras.py lists none of them"
        )


def test_all_installs_every_runtime_extra() -> None:
    everything = set().union(*(distributions(e) for e in RUNTIME_EXTRAS))
    assert distributions("all") == everything


def test_demo_is_what_the_demo_runs_and_no_test_tool() -> None:
    demo = distributions("demo")
    assert demo == set().union(
        *(distributions(e) for e in ("sim", "store", "analyzer", "report", "dashboard"))
    )
    assert not demo & (distributions("test") - distributions("all"))
    assert not demo & {"pytest", "hypothesis", "schemathesis", "playwright", "mypy", "ruff", "scikit-learn"}


def test_every_runtime_dependency_is_imported() -> None:
    imported: set[str] = set()
    for top in FIRST_PARTY:
        for path in (ROOT / top).rglob("*.py"):
            if "tests" not in path.relative_to(ROOT).parts:
                imported |= top_level_imports(path)
    declared = {requirement(d)[0] for d in PROJECT["dependencies"]}
    declared |= set().union(*(distributions(e) for e in RUNTIME_EXTRAS))
    unused = sorted(d for d in declared - NOT_IMPORTED if not modules_of({d}) & imported)
    assert not unused, (
        f"declared but imported by no package: {unused} (drop them, or say why in NOT_IMPORTED)"
    )
    assert "protobuf" not in declared, (
        "nothing imports google.protobuf (the pod-resources client decodes by hand)"
    )


def test_constraints_pin_every_distribution_every_extra_names() -> None:
    pins = set()
    for raw in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line:
            pins.add(normalise(line.split("==", 1)[0]))
    wanted = {requirement(d)[0] for d in PROJECT["dependencies"]}
    for extra in EXTRAS:
        wanted |= distributions(extra)
    assert sorted(wanted - pins) == []


def _recipe(makefile: str, target: str) -> str:
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)
    assert match, f"no rule for {target}"
    return match[1]


def test_make_demo_installs_the_demo_extra_alone() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo_rule = re.search(r"^demo: (\S+)", makefile, re.MULTILINE)
    assert demo_rule and demo_rule[1] == "$(DEMO_STAMP)", "make demo must not depend on the full install"
    recipe = _recipe(makefile, "$(DEMO_STAMP)")
    assert re.findall(r"'\.\[([^\]]*)\]'", recipe) == ["demo"]
    assert "test" not in recipe
    full = _recipe(makefile, "$(STAMP)")
    assert re.findall(r"'\.\[([^\]]*)\]'", full) == ["all,test"]
    for target in ("test", "lint", "bench"):
        rule = re.search(rf"^{target}: (\S+)", makefile, re.MULTILINE)
        assert rule and rule[1] == "$(STAMP)", target


def _closure(roots: set[str]) -> set[str]:
    """The installed distributions ``roots`` pull in, transitively (markers evaluated, no extras)."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            specs = requires(name) or []
        except PackageNotFoundError:
            continue
        for spec in specs:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(normalise(req.name))
    return seen


@pytest.mark.slow
def test_the_demo_runs_with_only_the_demo_extra(tmp_path: Path) -> None:
    """`make demo` installs `.[demo]` alone: the demo must not reach for another extra's distribution."""
    import subprocess
    import sys

    base = {requirement(d)[0] for d in PROJECT["dependencies"]}
    kept = _closure(base | distributions("demo"))
    others = set().union(*(distributions(e) for e in EXTRAS)) - kept
    assert {"fastapi", "pytest", "kubernetes", "scikit-learn"} <= others
    blocked = modules_of(others) - modules_of(kept)
    probe = (
        "import importlib.abc, sys\n"
        "BLOCKED = set(sys.argv[1].split(','))\n"
        "class NotInstalled(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NotInstalled())\n"
        "sys.argv = ['phasefit', *sys.argv[2:]]\n"
        "from phasefit.cli import main\n"
        "main()\n"
    )
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-c", probe, ",".join(sorted(blocked)),
         "demo", "--days", "0.01", "--no-serve", "--json", "--out", str(out)],
        capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "truth.json").is_file() and list(out.glob("phasefit-audit-*.html"))
