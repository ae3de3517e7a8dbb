"""The wheel holds the packages and the data they read, nothing else.

The wheel is built (offline, with the setuptools the test extra installs) from a copy of the checkout into
which a demo's output, a stray report and stray files inside the packages are planted first: none of them
may reach the wheel, and every module and data file the packages read must.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.availability import unavailable

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The files the packages read at run time, besides their modules (each glob is relative to ROOT).
DATA = (
    "fleet/data/*.yaml",
    "fleetsim/scenarios/*.yaml",
    "alerts/README.md",
    "alerts/alertmanager.example.yml",
    "alerts/rules/*.yaml",
    "alerts/tests/*.yaml",
    "migrations/script.py.mako",
    "migrations/versions/*.py",
)
PLANTED = (
    "phasefit-demo/truth.json",
    "phasefit-demo/phasefit-audit-2024-W23.html",
    "phasefit-demo/phasefit.db",
    "phasefit_audit/report.html",
    "phasefit/cli/audit-2024-W23.html",
    "fleet/data/notes.json",
    "analyzer/report/scratch.md",
    "fleetsim/scenarios/local.yaml.orig",
    "migrations/versions/README",
)


def packages() -> list[str]:
    """The top-level packages pyproject.toml includes."""
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.split(".")[0] for pattern in include})


def _sources(top: str) -> Iterator[Path]:
    for path in sorted((ROOT / top).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def expected_files() -> set[str]:
    files = {
        p.relative_to(ROOT).as_posix()
        for top in packages()
        for p in _sources(top)
        if p.suffix == ".py" and (p.parent / "__init__.py").is_file()
    }
    for pattern in DATA:
        files |= {p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern)}
    return files


def _setuptools_version() -> tuple[int, ...]:
    try:
        from importlib.metadata import version

        return tuple(int(part) for part in version("setuptools").split(".")[:2])
    except (ImportError, ValueError):
        return (0,)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    needed = int(PYPROJECT["build-system"]["requires"][0].split(">=")[1])
    if _setuptools_version() < (needed,):
        unavailable(
            f"setuptools>={needed} (the build backend, in the test extra) is not installed", "the wheel build"
        )
    work = tmp_path_factory.mktemp("wheel")
    tree = work / "src"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    for top in packages():
        shutil.copytree(
            ROOT / top, tree / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        )
    for planted in PLANTED:
        path = tree / planted
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n" if path.suffix == ".json" else "planted\n", encoding="utf-8")
    out = work / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", "-w", str(out), str(tree)],
        capture_output=True, text=True, timeout=300, check=False, cwd=work,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = out.glob("phasefit-*.whl")
    with zipfile.ZipFile(built) as archive:
        return archive.namelist()


def test_the_wheel_holds_the_packages_and_their_data_and_nothing_else(wheel: list[str]) -> None:
    payload = {name for name in wheel if ".dist-info/" not in name}
    expected = expected_files()
    missing = sorted(expected - payload)
    extra = sorted(payload - expected)
    assert not missing, f"the wheel lacks {missing}"
    assert not extra, f"the wheel holds files that are neither a module nor data a package reads: {extra}"


def test_no_demo_output_report_or_stray_file_reaches_the_wheel(wheel: list[str]) -> None:
    for planted in PLANTED:
        assert planted not in wheel, planted
    assert not [n for n in wheel if n.startswith("phasefit-demo/") or n.endswith((".html", ".db"))]
    tops = {name.split("/")[0] for name in wheel}
    assert tops - set(packages()) == {n for n in tops if n.endswith(".dist-info")}


def test_the_wheel_declares_the_console_script_and_every_extra(wheel: list[str]) -> None:
    del wheel  # built by the fixture; the metadata is read from pyproject.toml, which the build used
    assert PYPROJECT["project"]["scripts"] == {"phasefit": "phasefit.cli:main"}
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"collector", "server", "analyzer", "dashboard", "store", "sim", "report", "demo", "all"} <= set(
        extras
    )


@pytest.mark.parametrize("pattern", DATA)
def test_each_data_glob_matches_files_in_the_checkout(pattern: str) -> None:
    assert list(ROOT.glob(pattern)), f"{pattern} matches nothing: the packages' data moved"
