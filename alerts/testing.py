"""Real Prometheus and Alertmanager on loopback, for end-to-end tests of the alert path.

Each server gets a free 127.0.0.1 port, its own temporary directory (config, data, log) and is stopped
(SIGTERM, then SIGKILL) when its ``with`` block ends, even on a failed assertion. A server that does not
become ready raises :class:`ServerStartError` with the tail of its log.

>>> with running_alertmanager(am_config) as am, running_prometheus(prom_config(am)) as prom:  # doctest: +SKIP
...     ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alerts.tools import find_binary

_START_ATTEMPTS = 3


class ServerStartError(RuntimeError):
    """A Prometheus or Alertmanager process exited or never became ready."""


@dataclass(frozen=True)
class RunningServer:
    name: str
    port: int
    workdir: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        log = self.workdir / "server.log"
        text = log.read_text(errors="replace") if log.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        import json

        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as response:  # noqa: S310
            return json.load(response)


@dataclass(frozen=True)
class ScrapeJob:
    """A Prometheus scrape job with one static loopback target."""

    name: str
    target: str  # host:port
    metrics_path: str = "/metrics"
    labels: dict[str, str] = field(default_factory=dict)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller retries if another process takes it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prometheus_config(
    jobs: Sequence[ScrapeJob],
    *,
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
    interval: str = "1s",
) -> dict[str, Any]:
    """A prometheus.yml scraping ``jobs`` and evaluating ``rule_files`` every ``interval``."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": scrape_configs(jobs),
    }
    if alertmanager:
        config["alerting"] = {
            "alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": [alertmanager]}]}]
        }
    return config


def scrape_configs(jobs: Sequence[ScrapeJob]) -> list[dict[str, Any]]:
    """The ``scrape_configs`` of ``jobs``, as Prometheus and VictoriaMetrics (``-promscrape.config``) read."""
    return [
        {
            "job_name": job.name,
            "metrics_path": job.metrics_path,
            "static_configs": [{"targets": [job.target], "labels": dict(job.labels)}],
        }
        for job in jobs
    ]


@contextlib.contextmanager
def running_prometheus(config: dict[str, Any], *, ready_timeout_s: float = 30.0) -> Iterator[RunningServer]:
    binary = find_binary("prometheus")

    def command(workdir: Path, port: int) -> list[str]:
        return [
            str(binary),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--rules.alert.resend-delay=1s",
            "--log.level=info",
        ]

    with _running("prometheus", {"prometheus.yml": config}, command, ready_timeout_s) as server:
        yield server


@contextlib.contextmanager
def running_alertmanager(
    config: dict[str, Any] | Callable[[Path], dict[str, Any]],
    *,
    files: dict[str, str] | None = None,
    ready_timeout_s: float = 30.0,
) -> Iterator[RunningServer]:
    """Alertmanager without clustering. ``config`` may be a function of the work directory, where
    ``files`` (name -> text, e.g. a bearer token) are written first, so it can point at them."""
    binary = find_binary("alertmanager")

    def command(workdir: Path, port: int) -> list[str]:
        return [
            str(binary),
            f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=debug",
        ]

    with _running(
        "alertmanager", {"alertmanager.yml": config, **(files or {})}, command, ready_timeout_s
    ) as s:
        yield s


@contextlib.contextmanager
def _running(
    name: str,
    files: dict[str, Any],
    command: Callable[[Path, int], list[str]],
    ready_timeout_s: float,
) -> Iterator[RunningServer]:
    with tempfile.TemporaryDirectory(prefix=f"phasefit-{name}-") as tmp:
        workdir = Path(tmp)
        for filename, content in files.items():
            if isinstance(content, str):
                (workdir / filename).write_text(content, encoding="utf-8")
        for filename, content in files.items():
            if not isinstance(content, str):
                document = content(workdir) if callable(content) else content
                (workdir / filename).write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        server = start_server(name, workdir, command, ready_timeout_s)
        try:
            yield server
        finally:
            stop_process(server.process)


def start_server(
    name: str, workdir: Path, command: Callable[[Path, int], list[str]], ready_timeout_s: float
) -> RunningServer:
    """``command(workdir, port)`` on a free loopback port, retried on a port race, once ``/-/ready``."""
    last_error = ""
    for _ in range(_START_ATTEMPTS):
        port = free_port()
        with (workdir / "server.log").open("ab") as log:
            process = subprocess.Popen(
                command(workdir, port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=workdir,
                start_new_session=True,
            )
        server = RunningServer(name, port, workdir, process)
        try:
            wait_ready(server, ready_timeout_s)
            return server
        except ServerStartError as exc:
            stop_process(process)
            last_error = str(exc)
            if "address already in use" not in server.log_tail().lower():
                break  # not a port race: retrying would fail the same way
    raise ServerStartError(last_error)


def wait_ready(server: RunningServer, timeout_s: float) -> None:
    """Until ``server`` answers ``/-/ready`` (Prometheus, Alertmanager, VictoriaMetrics all serve it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            code = server.process.returncode
            raise ServerStartError(
                f"{server.name} exited with {code} before it was ready:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise ServerStartError(f"{server.name} not ready after {timeout_s}s:\n{server.log_tail()}")


def stop_process(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM to the process group, SIGKILL after ``grace_s``."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)


def example_alertmanager_config(
    example: Path, workdir: Path, *, webhook_base_url: str, group_interval: str = "1s"
) -> dict[str, Any]:
    """The shipped example configuration, pointed at loopback sinks and made fast enough for a test.

    Every receiver URL keeps its path but goes to ``webhook_base_url`` (the phasefit receiver stays at
    ``/v1/alerts/alertmanager``); every ``*_file`` secret is written under ``workdir`` (bearer tokens get
    ``test-token-<receiver>``, a Slack URL file the sink's ``/slack``); every route waits ``group_interval``.
    """
    from urllib.parse import urlsplit

    config: dict[str, Any] = yaml.safe_load(example.read_text(encoding="utf-8"))
    for receiver in config.get("receivers", []):
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = webhook_base_url.rstrip("/") + urlsplit(webhook["url"]).path
            auth = webhook.get("http_config", {}).get("authorization")
            if auth and "credentials_file" in auth:
                token = workdir / f"token-{receiver['name']}"
                token.write_text(f"test-token-{receiver['name']}", encoding="utf-8")
                auth["credentials_file"] = str(token)
        for slack in receiver.get("slack_configs", []):
            url_file = workdir / f"slack-url-{receiver['name']}"
            url_file.write_text(webhook_base_url.rstrip("/") + "/slack", encoding="utf-8")
            slack["api_url_file"] = str(url_file)

    def fast(route: dict[str, Any]) -> None:
        for key in ("group_wait", "group_interval"):
            if key in route or route is config["route"]:
                route[key] = group_interval
        for child in route.get("routes", []):
            fast(child)

    fast(config["route"])
    return config
