"""``phasefit dashboard [--port N] [--host ADDR]``: the Streamlit dashboard, on loopback by default.

A plain command function; the CLI registers it with ``app.command()(dashboard)``. It runs
``streamlit run dashboard/app.py`` as a child process (headless, usage statistics off, the deploy button
hidden) and passes the store URL, catalog path and dashboard settings through the environment. The
dashboard has no login: bind it to a non-loopback address only behind an authenticating proxy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def app_path() -> Path:
    """The dashboard's entry script inside the installed package."""
    import dashboard

    return Path(dashboard.__file__).resolve().parent / "app.py"


def streamlit_command(host: str, port: int, python: str = sys.executable) -> list[str]:
    """The child process's command line."""
    return [
        python,
        "-m",
        "streamlit",
        "run",
        str(app_path()),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
        "--server.fileWatcherType",
        "none",
    ]


def child_environment(
    base: Mapping[str, str], *, database_url: str | None, source: str | None, api_url: str | None
) -> dict[str, str]:
    """The environment for the child: the caller's, with the options that were given set explicitly."""
    env = dict(base)
    if database_url:
        env["PHASEFIT_DATABASE_URL"] = database_url
    if source:
        env["PHASEFIT_DASHBOARD_SOURCE"] = source
    if api_url:
        env["PHASEFIT_DASHBOARD_API_URL"] = api_url
    env.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    return env


def dashboard(
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port (default PHASEFIT_DASHBOARD_PORT or 8501)."),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to bind (default PHASEFIT_DASHBOARD_HOST, 127.0.0.1)."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url", show_default=False, help="Store URL (overrides PHASEFIT_DATABASE_URL)."
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option("--source", help="'store' (read the store) or 'api' (read the service at --api-url)."),
    ] = None,
    api_url: Annotated[
        str | None, typer.Option("--api-url", help="The phasefit service's URL (with --source api).")
    ] = None,
) -> None:
    """Serve the dashboard (Fleet, Misplacements, Roofline, Drift, Alerts, Audit reports) until Ctrl-C."""
    from pydantic import ValidationError

    from dashboard.settings import DashboardSettings
    from phasefit.cli.db import POINT_AT_A_STORE, die, load_settings, missing_sqlite_file, say

    env = child_environment(os.environ, database_url=database_url, source=source, api_url=api_url)
    try:
        from_env = DashboardSettings()
        given = _given(host=host, port=port, source=source, api_url=api_url)
        settings = DashboardSettings.model_validate({**from_env.model_dump(), **given}) if given else from_env
    except ValidationError as exc:
        die("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    store_url = load_settings(database_url).database_url
    if settings.source == "store" and (missing := missing_sqlite_file(store_url)) is not None:
        die(f"no store at {missing}: {POINT_AT_A_STORE}")  # the dashboard only reads: never create one
    env["PHASEFIT_DATABASE_URL"] = store_url
    if settings.host not in LOOPBACK:
        say(f"warning: the dashboard has no login and will listen on {settings.host}; keep it behind a proxy")
    command = streamlit_command(settings.host, settings.port)
    say(f"dashboard on http://{settings.host}:{settings.port} reading {settings.source} (Ctrl-C stops it)")
    code = run_child(command, env)
    if code not in (0, -signal.SIGINT, -signal.SIGTERM, 130):
        raise typer.Exit(code if code > 0 else 1)


def run_child(command: list[str], env: dict[str, str], stop_timeout_s: float = 10.0) -> int:
    """Run the dashboard until it exits; SIGTERM and SIGHUP sent to this process are passed on to it (a
    service manager stops ``phasefit dashboard``, not its child), Ctrl-C too, and it gets ``stop_timeout_s``
    to stop before it is killed."""
    child = subprocess.Popen(command, env=env)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            return child.wait()
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
            try:
                return child.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _given(**values: object) -> dict[str, object]:
    return {key: value for key, value in values.items() if value is not None}
