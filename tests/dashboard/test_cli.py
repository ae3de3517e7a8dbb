"""``phasefit dashboard``: the Streamlit command line and environment it starts the child with."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from phasefit.cli import dashboard as cli


class FakeChild:
    started: ClassVar[list[tuple[list[str], dict[str, str]]]] = []

    def __init__(self, command: list[str], env: dict[str, str], **_: Any) -> None:
        FakeChild.started.append((command, env))

    def wait(self, timeout: float | None = None) -> int:
        return 0


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> tuple[CliRunner, typer.Typer]:
    FakeChild.started = []
    monkeypatch.setattr(subprocess, "Popen", FakeChild)
    for name in ("PHASEFIT_DASHBOARD_HOST", "PHASEFIT_DASHBOARD_PORT", "PHASEFIT_DASHBOARD_SOURCE"):
        monkeypatch.delenv(name, raising=False)
    app = typer.Typer()
    app.command()(cli.dashboard)
    return CliRunner(), app


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_runs_streamlit_headless_on_loopback(runner: tuple[CliRunner, typer.Typer], tmp_path: Path) -> None:
    invoke, app = runner
    (tmp_path / "store.db").touch()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = invoke.invoke(app, ["--port", "8765", "--database-url", url])
    assert result.exit_code == 0, result.output
    ((command, env),) = FakeChild.started
    assert command[1:4] == ["-m", "streamlit", "run"] and Path(command[4]) == cli.app_path()
    assert cli.app_path().is_file()
    assert _option(command, "--server.address") == "127.0.0.1"
    assert _option(command, "--server.port") == "8765"
    assert _option(command, "--server.headless") == "true"
    assert _option(command, "--browser.gatherUsageStats") == "false"
    assert env["PHASEFIT_DATABASE_URL"] == url


def test_a_missing_store_is_refused_not_created(
    runner: tuple[CliRunner, typer.Typer], tmp_path: Path
) -> None:
    invoke, app = runner
    result = invoke.invoke(app, ["--database-url", f"sqlite:///{tmp_path / 'nothing' / 'store.db'}"])
    assert result.exit_code != 0
    assert "PHASEFIT_DATABASE_URL" in result.output and not FakeChild.started
    assert list(tmp_path.iterdir()) == []


def test_host_port_and_api_source(
    runner: tuple[CliRunner, typer.Typer], monkeypatch: pytest.MonkeyPatch
) -> None:
    invoke, app = runner
    monkeypatch.setenv("PHASEFIT_DASHBOARD_PORT", "9001")
    result = invoke.invoke(app, ["--host", "0.0.0.0", "--source", "api", "--api-url", "http://svc:8000"])
    assert result.exit_code == 0, result.output
    ((command, env),) = FakeChild.started
    assert (_option(command, "--server.address"), _option(command, "--server.port")) == ("0.0.0.0", "9001")
    assert (
        env["PHASEFIT_DASHBOARD_SOURCE"] == "api" and env["PHASEFIT_DASHBOARD_API_URL"] == "http://svc:8000"
    )
    assert "no login" in result.output


def test_bad_settings_are_refused(runner: tuple[CliRunner, typer.Typer]) -> None:
    invoke, app = runner
    result = invoke.invoke(app, ["--source", "prometheus"])
    assert result.exit_code == 1 and "source" in result.output
    assert FakeChild.started == []


def test_a_stop_signal_reaches_the_dashboard_process() -> None:
    """A service manager stops 'phasefit dashboard' with SIGTERM; the Streamlit child must stop with it."""
    import os
    import signal
    import sys
    import threading

    before = signal.getsignal(signal.SIGTERM)
    child = [sys.executable, "-c", "import time; time.sleep(30)"]
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code = cli.run_child(child, dict(os.environ))
    finally:
        timer.cancel()
    assert code == -signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back
