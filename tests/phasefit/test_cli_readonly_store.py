"""The commands that read the store never create it: a missing or empty store says how to point at one."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleet.settings import default_database_url
from phasefit.cli import app

READERS = [
    ["analyze"],
    ["analyze", "--json"],
    ["plan"],
    ["plan", "--json"],
    ["report"],
    ["report", "--week", "2024-W23", "--json"],
    ["db", "stats"],
]


def _says_how_to_point_at_a_store(text: str) -> None:
    flat = " ".join(text.split())
    assert "PHASEFIT_DATABASE_URL" in flat
    assert "phasefit demo" in flat and "make demo" in flat
    assert "--database-url" in flat


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_missing_store_given_by_url_is_not_created(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "sub" / "phasefit.db"
    result = CliRunner().invoke(app, [*args, "--database-url", f"sqlite:///{path}"], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert not path.exists() and not path.parent.exists()
    assert list(tmp_path.iterdir()) == []
    assert "no store at" in result.stderr and result.stdout == ""
    _says_how_to_point_at_a_store(result.stderr)


@pytest.mark.parametrize("args", [["analyze"], ["plan"], ["report"]], ids=lambda a: a[0])
def test_a_missing_store_given_by_the_environment_is_not_created(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "phasefit.db"
    env = {"PHASEFIT_DATABASE_URL": f"sqlite:///{path}", "COLUMNS": "200"}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 1
    assert not path.exists()
    assert "(PHASEFIT_DATABASE_URL)" in " ".join(result.stderr.split())


@pytest.mark.parametrize("args", [["analyze"], ["plan"], ["report"]], ids=lambda a: a[0])
def test_the_missing_default_store_is_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("PHASEFIT_DATABASE_URL", raising=False)
    default = Path(default_database_url().removeprefix("sqlite:///"))
    assert default.is_relative_to(tmp_path)
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert not default.exists() and not (tmp_path / "data").exists()
    flat = " ".join(result.stderr.split())
    assert "the default store: PHASEFIT_DATABASE_URL is not set" in flat
    assert "phasefit db upgrade" not in flat  # the wrong fix for a reader
    _says_how_to_point_at_a_store(result.stderr)


@pytest.mark.parametrize("args", [["analyze"], ["plan"], ["report"]], ids=lambda a: a[0])
def test_an_existing_file_without_tables_says_how_to_point_at_a_store(
    tmp_path: Path, args: list[str]
) -> None:
    path = tmp_path / "phasefit.db"
    path.write_bytes(b"")  # what an earlier phasefit left behind by connecting to a missing default store
    result = CliRunner().invoke(app, [*args, "--database-url", f"sqlite:///{path}"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    flat = " ".join(result.stderr.split())
    assert "holds no phasefit tables" in flat and "phasefit db upgrade" not in flat
    _says_how_to_point_at_a_store(result.stderr)


def test_db_current_reads_a_missing_store_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "phasefit.db"
    result = CliRunner().invoke(app, ["db", "current", "--json", "--database-url", f"sqlite:///{path}"])
    assert result.exit_code == 0, result.output
    assert '"state": "empty"' in result.stdout
    assert not path.exists()


def test_a_missing_default_store_points_at_the_demo_store_in_this_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("PHASEFIT_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "phasefit-demo").mkdir()
    (tmp_path / "phasefit-demo" / "phasefit.db").write_bytes(b"")  # what `make demo` leaves here
    result = CliRunner().invoke(app, ["plan"], env={"COLUMNS": "400"})
    assert result.exit_code == 1
    flat = " ".join(result.stderr.split())
    assert f"export PHASEFIT_DATABASE_URL=sqlite:///{tmp_path / 'phasefit-demo' / 'phasefit.db'}" in flat
    assert not (tmp_path / "data").exists()
