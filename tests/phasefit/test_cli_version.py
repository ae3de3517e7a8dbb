"""``phasefit --version``: ``phasefit <version>`` on stdout, exit 0."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest
from typer.testing import CliRunner

import phasefit.cli as cli


def test_version_option_prints_the_package_version() -> None:
    result = CliRunner().invoke(cli.app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"phasefit {cli.package_version()}\n"
    assert cli.package_version() not in ("", "unknown")


def test_without_an_installed_distribution_the_pyproject_version_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr("importlib.metadata.version", missing)
    import tomllib

    expected = tomllib.loads(cli.PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    assert cli.package_version() == expected
    result = CliRunner().invoke(cli.app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"phasefit {expected}\n"


def test_an_unreadable_pyproject_gives_unknown(tmp_path: Path) -> None:
    assert cli._pyproject_version(tmp_path / "missing.toml") == "unknown"


def test_the_package_version_is_read_when_first_asked_for() -> None:
    """Every command would pay the metadata scan (~30 ms) at start-up if ``import phasefit`` made it."""
    import phasefit

    assert phasefit.__version__ == cli.package_version()
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = phasefit.nothing_here  # type: ignore[attr-defined]
