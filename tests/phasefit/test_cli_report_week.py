"""`phasefit report` with no --week audits the last complete week that holds telemetry, or names the weeks
the store holds."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleet.store.engine import make_engine
from phasefit.cli.report import choose_week, default_week, report, weeks_phrase, weeks_with_telemetry
from tests.analyzer.synthetic import H100, H200
from tests.phasefit.synthetic_store import synthetic_store

app = typer.Typer()
app.command()(report)
DATA_WEEK = "2024-W23"  # the synthetic store's 8 hours start on Monday 2024-06-03


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return synthetic_store(tmp_path_factory.mktemp("weeks"), [("node00", H100, 0, 2), ("node01", H200, 2, 0)])


def test_the_store_lists_the_weeks_it_holds(store: str) -> None:
    engine = make_engine(store)
    with engine.connect() as connection:
        assert weeks_with_telemetry(connection) == [DATA_WEEK]
    engine.dispose()


def test_no_week_audits_the_last_complete_week_with_telemetry(store: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store, "--json"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["week"] == DATA_WEEK
    said = " ".join(result.stderr.split())
    assert f"no --week: auditing {DATA_WEEK}, the last complete week with telemetry" in said


def test_a_week_without_telemetry_names_the_weeks_the_store_holds(store: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", store, "--week", "2024-W30"], env={"COLUMNS": "300"})
    assert result.exit_code == 1
    said = " ".join(result.stderr.split())
    assert "no telemetry" in said and f"the store holds {DATA_WEEK}" in said


def test_only_the_current_week_holding_telemetry_names_it_and_exits_1(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wednesday = datetime(2024, 6, 5, 12, tzinfo=UTC)  # DATA_WEEK is not over yet
    with pytest.raises(typer.Exit) as stopped:
        default_week(store, wednesday)
    assert stopped.value.exit_code == 1
    said = " ".join(capsys.readouterr().err.split())
    assert f"the store holds {DATA_WEEK}" in said and "--week" in said
    assert default_week(store, datetime(2024, 6, 10, 1, tzinfo=UTC)) == DATA_WEEK  # last week: said nothing


def test_an_empty_store_is_refused_without_creating_one(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    result = CliRunner().invoke(app, ["--database-url", f"sqlite:///{path}"])
    assert result.exit_code == 1 and not path.exists()


def test_choose_week_and_weeks_phrase() -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)  # in 2026-W49
    assert choose_week(["2026-W40", "2026-W47", "2026-W49"], now) == "2026-W47"
    assert choose_week(["2026-W49"], now) is None
    assert weeks_phrase([]) == "no telemetry"
    many = [f"2026-W{n:02d}" for n in range(1, 21)]
    assert weeks_phrase(many) == "20 weeks from 2026-W01 to 2026-W20 (latest: 2026-W18, 2026-W19, 2026-W20)"
