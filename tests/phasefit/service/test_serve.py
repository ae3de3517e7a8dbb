"""``phasefit serve``: refuses unsafe setups before starting uvicorn, and runs the app factory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from phasefit.cli.serve import is_loopback, serve
from phasefit.service.app import app_from_environment


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> tuple[typer.Typer, list[dict[str, Any]]]:
    names = ("PHASEFIT_DEV", "PHASEFIT_INGEST_TOKENS", "PHASEFIT_INGEST_TOKENS_FILE", "PHASEFIT_DATABASE_URL")
    for name in (*names, "PHASEFIT_SERVICE_TOKENS_FILE", "PHASEFIT_READ_ACCESS", "PHASEFIT_READ_TOKENS",
                 "PHASEFIT_READ_TOKENS_FILE", "PHASEFIT_SERVICE_BIND_HOST",
                 "PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK", "PHASEFIT_SERVICE_WORKERS",
                 "PROMETHEUS_MULTIPROC_DIR"):  # fmt: skip
        monkeypatch.setenv(name, "")  # recorded, so whatever serve() exports is undone after the test
        monkeypatch.delenv(name)
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: runs.append({"app": app, **kwargs}))
    app = typer.Typer()
    app.command()(serve)
    return app, runs


def test_no_token_refuses_to_start(cli: tuple[typer.Typer, list[dict[str, Any]]], tmp_path: Path) -> None:
    app, runs = cli
    result = CliRunner().invoke(app, ["--database-url", f"sqlite:///{tmp_path / 'db'}"])
    assert result.exit_code == 1
    assert "no ingest token configured" in result.output
    assert runs == []


def test_dev_mode_only_on_loopback(cli: tuple[typer.Typer, list[dict[str, Any]]], tmp_path: Path) -> None:
    app, runs = cli
    refused = CliRunner().invoke(
        app, ["--dev", "--host", "0.0.0.0", "--database-url", f"sqlite:///{tmp_path / 'db'}"]
    )
    assert refused.exit_code == 1 and "refused on 0.0.0.0" in refused.output
    started = CliRunner().invoke(
        app, ["--dev", "--port", "8123", "--database-url", f"sqlite:///{tmp_path / 'db'}"]
    )
    assert started.exit_code == 0, started.output
    [run] = runs
    assert run["app"] == "phasefit.service.app:app_from_environment" and run["factory"] is True
    assert (run["host"], run["port"], run["workers"]) == ("127.0.0.1", 8123, 1)


def test_tokens_allow_a_routable_address_and_the_factory_builds_the_app(
    cli: tuple[typer.Typer, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = cli
    tuned: list[bool] = []
    monkeypatch.setattr("phasefit.service.app.tune_gc_for_serving", lambda: tuned.append(True))
    monkeypatch.setenv("PHASEFIT_INGEST_TOKENS", "a-plain-token-0123456789")
    monkeypatch.setenv("PHASEFIT_READ_TOKENS", "a-read-token-0123456789")  # reads are closed on 0.0.0.0
    url = "postgresql+psycopg://phasefit@db.invalid/phasefit"  # several processes need PostgreSQL
    result = CliRunner().invoke(app, ["--host", "0.0.0.0", "--workers", "2", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert runs[0]["workers"] == 2
    built = app_from_environment()  # what each uvicorn worker runs, from the environment serve prepared
    assert built.state.phasefit.settings.database_url == url
    assert tuned == [True]  # the serving process's garbage collector is tuned (not this test process's)
    built.state.phasefit.engine.dispose()


def test_serve_on_a_network_address_keeps_reads_closed(
    cli: tuple[typer.Typer, list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, runs = cli
    monkeypatch.setenv("PHASEFIT_INGEST_TOKENS", "a-plain-token-0123456789")
    url = f"sqlite:///{tmp_path / 'db'}"
    refused = CliRunner().invoke(app, ["--host", "0.0.0.0", "--database-url", url])
    said = " ".join(refused.output.split())  # the console wraps long messages
    assert refused.exit_code == 1 and "read access defaults to 'token' on the non-loopback address" in said
    monkeypatch.setenv("PHASEFIT_READ_ACCESS", "open")
    forced = CliRunner().invoke(app, ["--host", "0.0.0.0", "--database-url", url])
    said = " ".join(forced.output.split())
    assert forced.exit_code == 1 and "PHASEFIT_SERVICE_ALLOW_OPEN_READS_ON_NETWORK=true" in said
    assert runs == []


def test_gc_tuning_freezes_start_up_objects_and_raises_the_first_threshold() -> None:
    code = (
        "import gc; from phasefit.service.app import GC_GEN0_THRESHOLD, tune_gc_for_serving; "
        "before = gc.get_threshold(); tune_gc_for_serving(); after = gc.get_threshold(); "
        "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count(); "
        "assert after == (GC_GEN0_THRESHOLD, *before[1:]), (before, after); print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


HOSTS = [("127.0.0.1", True), ("::1", True), ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
         ("10.0.0.5", False)]  # fmt: skip


@pytest.mark.parametrize(("host", "loopback"), HOSTS)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
