"""``phasefit collect`` through Typer's CliRunner, against real local HTTP endpoints."""

from __future__ import annotations

import ctypes.util
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fleet.contract import EngineSample, GpuSample, parse_record
from phasefit.cli.collect import collect
from tests.collector.conftest import VLLM_FIXTURE, fixture_text
from tests.collector.dcgm_text import exposition


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(collect)

    @app.command()
    def other() -> None:  # a second command keeps "collect" a subcommand, as in the phasefit app
        """Unused."""

    return app


@pytest.fixture
def endpoints() -> Iterator[str]:
    pages = {"/metrics": exposition(2), "/vllm": fixture_text(VLLM_FIXTURE)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("INGEST_URL", "OUTPUT_FILE", "DCGM_URL", "ENGINE_URLS", "TOKEN_FILE", "CLUSTER"):
        monkeypatch.delenv(f"PHASEFIT_COLLECTOR_{name}", raising=False)
    monkeypatch.setenv("PHASEFIT_COLLECTOR_SPOOL_PATH", str(tmp_path / "spool.sqlite"))
    monkeypatch.setenv("PHASEFIT_COLLECTOR_NODE", "node-t")


def test_once_json_prints_one_window_as_json_lines(endpoints: str) -> None:
    args = ["collect", "--source", "dcgm", "--dcgm-url", f"{endpoints}/metrics"]
    args += ["--engine-url", f"{endpoints}/vllm", "--once", "--output", "json", "--interval", "0.2"]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    records = [parse_record(line) for line in result.stdout.splitlines()]
    gpus = [r for r in records if isinstance(r, GpuSample)]
    engines = [r for r in records if isinstance(r, EngineSample)]
    assert len(gpus) == 2 and all(g.node == "node-t" and g.source.value == "dcgm" for g in gpus)
    assert len(engines) == 1 and engines[0].engine == "vllm" and engines[0].generation_tokens == 0


def once_json(endpoints: str, *extra: str) -> list[GpuSample | EngineSample]:
    args = ["collect", "--source", "dcgm", "--dcgm-url", f"{endpoints}/metrics", "--engine-url"]
    args += [f"{endpoints}/vllm", "--once", "--output", "json", "--interval", "0.2", *extra]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    return [parse_record(line) for line in result.stdout.splitlines()]


def test_cluster_from_the_environment_and_the_flag_on_every_record(
    endpoints: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = once_json(endpoints)
    assert len(records) == 3 and all(r.cluster is None for r in records)
    monkeypatch.setenv("PHASEFIT_COLLECTOR_CLUSTER", "eu-west")
    records = once_json(endpoints)
    assert len(records) == 3 and all(r.cluster == "eu-west" for r in records)
    records = once_json(endpoints, "--cluster", "us-east", "--node", "gpu-17")  # flags beat the environment
    assert all(r.cluster == "us-east" and r.node == "gpu-17" for r in records)


def test_once_ship_to_a_file(endpoints: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "records.jsonl"
    monkeypatch.setenv("PHASEFIT_COLLECTOR_OUTPUT_FILE", str(out))
    args = [
        "collect",
        "--source",
        "dcgm",
        "--dcgm-url",
        f"{endpoints}/metrics",
        "--once",
        "--interval",
        "0.2",
    ]
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == 0, result.output
    assert len([parse_record(line) for line in out.read_text().splitlines()]) == 2
    assert "shipped 2 records" in result.output


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVML library")
def test_nvml_without_a_driver_is_a_clear_error() -> None:
    result = CliRunner().invoke(cli(), ["collect", "--source", "nvml", "--once", "--output", "json"])
    assert result.exit_code == 1
    assert "libnvidia-ml.so.1" in result.output and "not found" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source", "dcgm", "--once", "--output", "json"], "--dcgm-url"),
        (
            ["--source", "dcgm", "--dcgm-url", "http://127.0.0.1:1/metrics", "--once"],
            "PHASEFIT_COLLECTOR_INGEST_URL",
        ),
        (["--source", "dcgm", "--dcgm-url", "ftp://x", "--once"], "not an http(s) URL"),
        (["--listen", "nowhere", "--once"], "HOST:PORT"),
    ],
)
def test_configuration_errors_are_clear(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli(), ["collect", *args])
    assert result.exit_code == 1
    assert message in result.output.replace("\n", " ")


def test_once_json_with_the_simulated_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHASEFIT_SIM_SCENARIO", "underused")
    result = CliRunner().invoke(
        cli(), ["collect", "--source", "sim", "--once", "--output", "json", "--interval", "30"]
    )
    assert result.exit_code == 0, result.output
    records = [parse_record(line) for line in result.stdout.splitlines()]
    engines = [r for r in records if isinstance(r, EngineSample)]
    gpus = [r for r in records if isinstance(r, GpuSample)]
    assert gpus and engines and all(r.window_s == 30.0 for r in records)
    assert {e.role_source.value for e in engines} == {"sim"} and len({g.node for g in gpus}) > 1
