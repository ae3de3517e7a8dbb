"""The loopback harness itself: HTTP stand-ins, config builders, and a server that fails to start."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from alerts.layout import ALERTMANAGER_EXAMPLE
from alerts.loopback_http import ExpositionServer, WebhookSink
from alerts.testing import (
    ScrapeJob,
    ServerStartError,
    example_alertmanager_config,
    free_port,
    prometheus_config,
    running_alertmanager,
)
from tests.alerts.helpers import require_tool


def test_exposition_server_renders_on_every_scrape_and_404s_elsewhere() -> None:
    calls = []

    def render() -> str:
        calls.append(1)
        return f"example_scrapes {len(calls)}\n"

    with ExpositionServer({"/metrics": render}) as server:
        for expected in (1, 2):
            with urllib.request.urlopen(server.url("/metrics"), timeout=5) as response:
                assert response.read().decode() == f"example_scrapes {expected}\n"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(server.url("/other"), timeout=5)


def test_webhook_sink_records_posts_and_times_out_with_what_it_saw() -> None:
    with WebhookSink() as sink:
        request = urllib.request.Request(
            sink.url("/hook"),
            data=json.dumps({"status": "firing"}).encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer t"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        delivery = sink.wait_for(lambda d: d.path == "/hook", timeout_s=5)
        assert delivery.headers["authorization"] == "Bearer t"
        assert delivery.body == {"status": "firing"}
        with pytest.raises(TimeoutError, match=r"received \[\('/hook', 'firing'\)\]"):
            sink.wait_for(lambda d: d.body.get("status") == "resolved", timeout_s=0.2)


def test_prometheus_config_scrapes_jobs_evaluates_rules_and_alerts(tmp_path: Path) -> None:
    config = prometheus_config(
        [ScrapeJob("dcgm-exporter", "127.0.0.1:9400", "/dcgm", {"cluster": "c1"})],
        rule_files=[tmp_path / "r.yaml"],
        alertmanager="127.0.0.1:9093",
    )
    assert config["global"]["evaluation_interval"] == "1s"
    assert config["scrape_configs"][0]["static_configs"] == [
        {"targets": ["127.0.0.1:9400"], "labels": {"cluster": "c1"}}
    ]
    assert config["alerting"]["alertmanagers"][0]["static_configs"] == [{"targets": ["127.0.0.1:9093"]}]


def test_example_alertmanager_config_points_every_receiver_at_loopback(tmp_path: Path) -> None:
    config = example_alertmanager_config(
        ALERTMANAGER_EXAMPLE, tmp_path, webhook_base_url="http://127.0.0.1:1"
    )
    phasefit = next(r for r in config["receivers"] if r["name"] == "phasefit-service")["webhook_configs"][0]
    assert phasefit["url"] == "http://127.0.0.1:1/v1/alerts/alertmanager"
    token = Path(phasefit["http_config"]["authorization"]["credentials_file"])
    assert token.read_text() == "test-token-phasefit-service"
    slack = next(r for r in config["receivers"] if r.get("slack_configs"))["slack_configs"][0]
    assert Path(slack["api_url_file"]).read_text() == "http://127.0.0.1:1/slack"
    assert config["route"]["group_wait"] == "1s"
    assert all(route.get("group_interval", "1s") == "1s" for route in config["route"]["routes"])
    yaml.safe_dump(config)  # still plain data


def test_free_port_is_bindable() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))


def test_a_server_that_cannot_start_raises_with_its_log() -> None:
    require_tool("alertmanager")
    with (
        pytest.raises(ServerStartError, match="exited with") as failure,
        running_alertmanager({"route": {"receiver": "nowhere"}, "receivers": []}),
    ):
        pass
    assert "nowhere" in str(failure.value)  # the log tail explains why
