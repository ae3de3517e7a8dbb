"""``phasefit serve``: the service (ingest, query API, Alertmanager receiver, /metrics) under uvicorn.

A plain command function; the CLI registers it with ``app.command()(serve)``. Settings come from the
environment (``PHASEFIT_*``, see ``phasefit.service.settings``); the flags below override a few. They are
checked here, before uvicorn starts, so a bad setup exits non-zero with a clear message; uvicorn then builds
the app in each worker process with :func:`phasefit.service.app.app_from_environment`.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated

import typer

from phasefit.cli.db import DatabaseUrl
from phasefit.cli.output import fail, human

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
        int, typer.Option(min=1, max=64, help="uvicorn worker processes (each one is a whole service).")
    ] = 1,
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
    """
    import uvicorn
    from pydantic import ValidationError

    from phasefit.service.settings import ServiceSettings

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
    # The settings refuse open reads on a network address; they must know the address to do so.
    os.environ["PHASEFIT_SERVICE_BIND_HOST"] = host
    try:
        settings = ServiceSettings()
    except ValidationError as exc:
        fail("; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()))
        raise  # unreachable: fail() exits
    if settings.dev and not is_loopback(host):
        fail(f"PHASEFIT_DEV serves without credentials and is refused on {host}: bind 127.0.0.1")
    console = human()
    console.print(f"phasefit service on {host}:{port} ({workers} worker(s))", markup=False)
    uvicorn.run(
        "phasefit.service.app:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=access_log,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
