"""``phasefit serve --workers N``: checked before uvicorn starts, and the metrics folder the processes share.

uvicorn is replaced by a recorder here; tests/phasefit/test_cli_serve_processes.py runs real processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from phasefit.cli.serve import serve
from phasefit.service.settings import MultiprocessStoreError, ServiceSettings, multiprocess_store_problem

TOKEN = "a-plain-token-0123456789"
POSTGRES = "postgresql+psycopg://phasefit@db.invalid/phasefit"
Runs = list[dict[str, Any]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> tuple[typer.Typer, Runs]:
    """The serve command with uvicorn.run recorded (and the metrics folder as it was during the run)."""
    for name in [n for n in os.environ if n.startswith("PHASEFIT_")] + ["PROMETHEUS_MULTIPROC_DIR"]:
        monkeypatch.delenv(name, raising=False)
    for name in ("PHASEFIT_SERVICE_WORKERS", "PHASEFIT_DATABASE_URL", "PHASEFIT_SERVICE_BIND_HOST",
                 "PROMETHEUS_MULTIPROC_DIR", "PHASEFIT_DEV"):  # fmt: skip
        monkeypatch.setenv(name, "")  # recorded, so whatever serve() exports is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("PHASEFIT_INGEST_TOKENS", TOKEN)
    runs: Runs = []

    def run(app: str, **kwargs: Any) -> None:
        folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        files = sorted(p.name for p in Path(folder).iterdir()) if folder else None
        runs.append({"app": app, "metrics_dir": folder, "metrics_files": files, **kwargs})

    monkeypatch.setattr("uvicorn.run", run)
    app = typer.Typer()
    app.command()(serve)
    return app, runs


def invoke(app: typer.Typer, *args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    result.said = " ".join(result.output.split())  # the console wraps long messages
    return result


def test_workers_must_be_between_1_and_64(cli: tuple[typer.Typer, Runs]) -> None:
    app, runs = cli
    for bad in ("0", "65", "two"):
        result = invoke(app, "--workers", bad, "--database-url", POSTGRES)
        assert result.exit_code == 2, (bad, result.output)
        assert "--workers" in result.said
    assert runs == []


def test_several_processes_on_sqlite_exit_2_naming_the_fix(
    cli: tuple[typer.Typer, Runs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = cli
    sqlite = f"sqlite:///{tmp_path / 'store.db'}"
    result = invoke(app, "--workers", "2", "--database-url", sqlite)
    assert result.exit_code == 2
    assert "2 service processes (--workers / PHASEFIT_SERVICE_WORKERS) need PostgreSQL" in result.said
    assert "postgresql+psycopg://" in result.said
    monkeypatch.setenv("PHASEFIT_SERVICE_WORKERS", "3")  # the setting alone, no flag
    result = invoke(app, "--database-url", sqlite)
    assert result.exit_code == 2 and "3 service processes" in result.said
    assert runs == []
    one = invoke(app, "--workers", "1", "--database-url", sqlite)  # the flag overrides the setting
    assert one.exit_code == 0, one.output
    assert [run["workers"] for run in runs] == [1]


def test_an_invalid_workers_setting_names_the_variable(
    cli: tuple[typer.Typer, Runs], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = cli
    monkeypatch.setenv("PHASEFIT_SERVICE_WORKERS", "0")
    result = invoke(app, "--database-url", POSTGRES)
    assert result.exit_code == 1
    assert "PHASEFIT_SERVICE_WORKERS: Input should be greater than or equal to 1" in result.said
    assert runs == []


def test_several_processes_share_a_private_metrics_folder_removed_at_exit(
    cli: tuple[typer.Typer, Runs],
) -> None:
    app, runs = cli
    result = invoke(app, "--workers", "2", "--database-url", POSTGRES)
    assert result.exit_code == 0, result.output
    assert "(2 processes)" in result.said
    [run] = runs
    assert run["app"] == "phasefit.service.app:app_from_environment" and run["factory"] is True
    assert run["workers"] == 2
    assert run["metrics_dir"] is not None and run["metrics_files"] == []  # made, empty, during the run
    assert not Path(run["metrics_dir"]).exists()  # removed when uvicorn returned
    assert os.environ["PHASEFIT_SERVICE_WORKERS"] == "2"  # what each worker's settings read


def test_the_settings_choose_the_process_count_and_one_process_keeps_metrics_in_memory(
    cli: tuple[typer.Typer, Runs], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = cli
    monkeypatch.setenv("PHASEFIT_SERVICE_WORKERS", "3")
    assert invoke(app, "--database-url", POSTGRES).exit_code == 0
    assert invoke(app, "--workers", "1", "--database-url", POSTGRES).exit_code == 0
    assert [(run["workers"], run["metrics_dir"]) for run in runs] == [(3, runs[0]["metrics_dir"]), (1, None)]
    assert runs[0]["metrics_dir"] is not None


def test_an_operator_metrics_folder_is_emptied_of_earlier_runs_and_kept(
    cli: tuple[typer.Typer, Runs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = cli
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "counter_4242.db").write_bytes(b"\0" * 16)  # a previous run's counts: would be added up
    (folder / "gauge_livesum_4242.db").write_bytes(b"\0" * 16)
    (folder / "notes.txt").write_text("not ours", encoding="utf-8")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    assert invoke(app, "--workers", "2", "--database-url", POSTGRES).exit_code == 0
    assert runs[0]["metrics_dir"] == str(folder)
    assert runs[0]["metrics_files"] == ["notes.txt"]
    assert folder.is_dir()  # the operator's folder stays
    missing = tmp_path / "not-yet"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(missing))
    assert invoke(app, "--workers", "2", "--database-url", POSTGRES).exit_code == 0
    assert runs[1]["metrics_files"] == [] and missing.is_dir()


def test_the_settings_refuse_several_processes_on_sqlite_in_every_worker(tmp_path: Path) -> None:
    """A worker started some other way (uvicorn's own CLI) refuses the same setup."""
    from pydantic import ValidationError

    sqlite = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(ValidationError) as caught:
        ServiceSettings(database_url=sqlite, workers=2, ingest_tokens=TOKEN)
    assert isinstance(caught.value.errors()[0]["ctx"]["error"], MultiprocessStoreError)
    assert ServiceSettings(database_url=POSTGRES, workers=2, ingest_tokens=TOKEN).workers == 2
    assert ServiceSettings(database_url=sqlite, workers=1, ingest_tokens=TOKEN).workers == 1
    assert multiprocess_store_problem(1, sqlite) is None
    assert multiprocess_store_problem(2, POSTGRES) is None
