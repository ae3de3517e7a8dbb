"""``phasefit serve``: the service (ingest, query API, Alertmanager receiver, /metrics) under uvicorn.

A plain command function; the CLI registers it with ``app.command()(serve)``. Settings come from the
environment (``PHASEFIT_*``, see ``phasefit.service.settings``); the flags below override a few. They are
checked here, before uvicorn starts, so a bad setup exits non-zero with a clear message (2 for several
processes on SQLite, 1 otherwise); uvicorn then builds the app in each worker process with
:func:`phasefit.service.app.app_from_environment`. With ``--workers N`` (or ``PHASEFIT_SERVICE_WORKERS``)
above 1, uvicorn supervises N processes on the one port and restarts one that dies, and the folder their
metrics share is prepared here (:mod:`phasefit.service.processes`).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from phasefit.cli.db import DatabaseUrl
from phasefit.cli.output import fail, human

if TYPE_CHECKING:
    from phasefit.service.settings import ServiceSettings

_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind; the default serves this machine only.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8000,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="Service processes on this port (uvicorn workers, each a whole service sharing the store; "
            "more than one needs PostgreSQL). Default: PHASEFIT_SERVICE_WORKERS, else 1.",
            show_default=False,
        ),
    ] = None,
    dev: Annotated[
        bool,
        typer.Option("--dev", help="Development mode (the demo): no tokens needed. Loopback addresses only."),
    ] = False,
    database_url: DatabaseUrl = None,
    log_level: Annotated[
        str, typer.Option(help="uvicorn log level: critical, error, warning, info, debug.")
    ] = "info",
    access_log: Annotated[
        bool, typer.Option(help="Log one line per request (no headers, never tokens).")
    ] = True,
    ssl_keyfile: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="TLS key (PEM).")
    ] = None,
    ssl_certfile: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="TLS certificate.")
    ] = None,
) -> None:
    """Run the phasefit service: POST /v1/ingest, the /v1 query API, POST /v1/alerts/alertmanager, /metrics,
    /healthz and /readyz (OpenAPI at /docs and /openapi.json, behind the same read access as the API).

    Collector tokens come from PHASEFIT_INGEST_TOKENS_FILE (one NAME:SHA256HEX or plain token per line,
    re-read when it changes) or PHASEFIT_INGEST_TOKENS; without one the service refuses to start unless
    --dev. The store is PHASEFIT_DATABASE_URL (PostgreSQL in production, an SQLite file for the demo).
    --workers N runs N processes on the port, sharing the store (PostgreSQL only) and adding up their
    /metrics; admission and per-token limits are per process.
    """
    import uvicorn

    from phasefit.service import processes as metric_files

    if dev and not is_loopback(host):
        fail(
            f"--dev serves without credentials and is refused on {host}: bind 127.0.0.1, or configure tokens"
        )
    if (ssl_keyfile is None) != (ssl_certfile is None):
        fail("give both --ssl-keyfile and --ssl-certfile, or neither")
    if dev:
        os.environ["PHASEFIT_DEV"] = "true"
    if database_url:
        os.environ["PHASEFIT_DATABASE_URL"] = database_url
    if workers is not None:  # the workers read their settings from the environment too
        os.environ["PHASEFIT_SERVICE_WORKERS"] = str(workers)
    # The settings refuse open reads on a network address; they must know the address to do so.
    os.environ["PHASEFIT_SERVICE_BIND_HOST"] = host
    settings = _settings()
    if settings.dev and not is_loopback(host):
        fail(f"PHASEFIT_DEV serves without credentials and is refused on {host}: bind 127.0.0.1")
    console = human()
    processes = settings.workers
    console.print(
        f"phasefit service on {host}:{port} ({processes} process{'es' if processes > 1 else ''})",
        markup=False,
    )
    made = metric_files.prepare(processes)  # before uvicorn spawns the workers
    try:
        uvicorn.run(
            "phasefit.service.app:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=processes,
            log_level=log_level,
            access_log=access_log,
            ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
            ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
            server_header=False,
            timeout_graceful_shutdown=10,
        )
    finally:
        metric_files.remove(made)


def _settings() -> ServiceSettings:
    """The settings from the environment, or exit: 2 for several processes on SQLite, 1 otherwise."""
    from pydantic import ValidationError

    from phasefit.service.settings import MultiprocessStoreError, ServiceSettings

    try:
        return ServiceSettings()
    except ValidationError as exc:
        errors = exc.errors()
        usage = any(isinstance(e.get("ctx", {}).get("error"), MultiprocessStoreError) for e in errors)
        fail("; ".join(_message(error) for error in errors), code=2 if usage else 1)
        raise  # unreachable: fail() exits


def _message(error: Any) -> str:
    """A settings error in words, naming the variable unless the message already does."""
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error" or not error["loc"]:
        return message
    name = str(error["loc"][0])
    variable = name if name.startswith("PHASEFIT_") else f"PHASEFIT_{name.upper()}"
    return f"{variable}: {message}"
