"""VictoriaMetrics (Debian's ``victoria-metrics``, single node) on loopback, scraping for a test.

The server gets a free 127.0.0.1 port, its data under the caller's directory, a scrape configuration
(``-promscrape.config``: VictoriaMetrics' own scraper, strict about unknown fields, so not Prometheus's
configuration with rule files), and is stopped (SIGTERM, then SIGKILL) when its ``with`` block ends, even on
a failed assertion. One that does not become ready raises :class:`alerts.testing.ServerStartError` with the
tail of its log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from alerts.testing import RunningServer, ScrapeJob, scrape_configs, start_server, stop_process

BINARY = "victoria-metrics"
PACKAGE = "victoria-metrics"


def scrape_config(
    jobs: Sequence[ScrapeJob], *, interval: str = "1s", external_labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A ``-promscrape.config`` scraping ``jobs`` every ``interval``; ``external_labels`` are added to every
    scraped series (as vmagent and Prometheus's remote write add theirs)."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": scrape_configs(jobs),
    }
    if external_labels:
        config["global"]["external_labels"] = dict(external_labels)
    return config


@contextlib.contextmanager
def running_victoria_metrics(
    binary: Path,
    workdir: Path,
    config: dict[str, Any],
    *,
    flags: Sequence[str] = (),
    ready_timeout_s: float = 30.0,
) -> Iterator[RunningServer]:
    """VictoriaMetrics scraping per ``config``, its data and log under ``workdir``; ``flags`` are added
    (e.g. ``-search.maxUniqueTimeseries=4``). By default it keeps a day (``-retentionPeriod=1d``) and shows
    samples as soon as they are stored (``-search.latencyOffset=0s``; its default hides the last 30 s)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "scrape.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    def command(workdir: Path, port: int) -> list[str]:
        return [
            str(binary),
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-storageDataPath={workdir / 'data'}",
            "-retentionPeriod=1d",
            f"-promscrape.config={workdir / 'scrape.yml'}",
            "-search.latencyOffset=0s",
            "-loggerLevel=INFO",
            *flags,
        ]

    server = start_server("victoria-metrics", workdir, command, ready_timeout_s)
    try:
        yield server
    finally:
        stop_process(server.process)
