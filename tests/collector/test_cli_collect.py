"""``phasefit collect`` through Typer's CliRunner, against real local HTTP endpoints."""

from __future__ import annotations

import ctypes.util
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from click.testing import Result
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


# --- what failed: stderr lines and the exit status of --once (issue 15) ------------------------------------
class Loopback:
    """A loopback HTTP server answering each path with a scripted status and body; POSTs to /v1/ingest are
    answered with ``ingest_status``."""

    def __init__(self, pages: dict[str, tuple[int, str]], ingest_status: int = 200) -> None:
        owner = self
        self.pages = pages
        self.ingest_status = ingest_status
        self.posts = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = owner.pages.get(self.path, (404, ""))
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.posts += 1
                body = b'{"accepted": 1}' if owner.ingest_status == 200 else b'{"detail": "no"}'
                self.send_response(owner.ingest_status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def __enter__(self) -> Loopback:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def refused_url(path: str = "/metrics") -> str:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


PAGES = {
    "/dcgm": (200, exposition(2)),
    "/dcgm401": (401, "Unauthorized"),
    "/dcgm500": (500, "boom"),
    "/empty": (200, "# HELP go_goroutines Number of goroutines.\ngo_goroutines 7\n"),
    "/vllm": (200, fixture_text(VLLM_FIXTURE)),
    "/vllm401": (401, "Unauthorized"),
}


def run(*args: str) -> Result:
    return CliRunner().invoke(cli(), ["collect", "--once", "--interval", "0.2", *args])


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/dcgm401", "HTTP 401", "http_401"),
        ("/dcgm500", "HTTP 500", "http_500"),
        ("/empty", "200", "no_gpu_series"),
    ],
)
def test_a_dcgm_exporter_that_yields_nothing_exits_4_and_says_why(
    path: str, status: str, reason: str
) -> None:
    with Loopback(PAGES) as server:
        result = run("--source", "dcgm", "--dcgm-url", server.url(path), "--output", "json")
    assert result.exit_code == 4, result.output
    line = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert f"dcgm_scrape {server.url(path)}" in line and status in line and f"[reason {reason}]" in line
    assert result.stdout == ""  # no records, and nothing pretends otherwise


def test_a_refused_dcgm_exporter_exits_4() -> None:
    url = refused_url()
    result = run("--source", "dcgm", "--dcgm-url", url, "--output", "json")
    assert result.exit_code == 4, result.output
    assert f"dcgm_scrape {url}" in result.stderr and "[reason connect_refused]" in result.stderr


def test_an_engine_refusing_the_scrape_exits_4_but_the_gpus_are_still_printed() -> None:
    with Loopback(PAGES) as server:
        engines = ["--engine-url", server.url("/vllm401"), "--engine-url", server.url("/vllm")]
        result = run("--source", "dcgm", "--dcgm-url", server.url("/dcgm"), *engines, "--output", "json")
    assert result.exit_code == 4, result.output
    assert len([parse_record(line) for line in result.stdout.splitlines()]) == 3  # 2 GPUs + the good engine
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"engine_scrape {server.url('/vllm401')}" in errors[0]
    assert "HTTP 401" in errors[0] and "[reason http_401]" in errors[0]


@pytest.mark.parametrize(("ingest_status", "reason"), [(401, "http_401"), (500, "http_500")])
def test_an_ingest_api_that_refuses_exits_3_and_keeps_the_records(
    ingest_status: int, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Loopback(PAGES, ingest_status=ingest_status) as server:
        monkeypatch.setenv("PHASEFIT_COLLECTOR_INGEST_URL", server.url())
        result = run("--source", "dcgm", "--dcgm-url", server.url("/dcgm"))
        assert server.posts == 1
    assert result.exit_code == 3, result.output
    assert f"ship {server.url('/v1/ingest')}" in result.stderr and f"[reason {reason}]" in result.stderr
    assert f"HTTP {ingest_status}" in result.stderr and "2 records wait in the spool" in result.stderr


def test_an_unreachable_ingest_api_exits_3_and_wins_over_a_source_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PHASEFIT_COLLECTOR_INGEST_URL", refused_url(""))
    with Loopback(PAGES) as server:
        result = run(
            "--source", "dcgm", "--dcgm-url", server.url("/dcgm"), "--engine-url", server.url("/vllm401")
        )
    assert result.exit_code == 3, result.output
    assert "[reason connect_refused]" in result.stderr and "[reason http_401]" in result.stderr


def test_shipping_everything_from_working_sources_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    with Loopback(PAGES) as server:
        monkeypatch.setenv("PHASEFIT_COLLECTOR_INGEST_URL", server.url())
        result = run(
            "--source", "dcgm", "--dcgm-url", server.url("/dcgm"), "--engine-url", server.url("/vllm")
        )
    assert result.exit_code == 0, result.output
    assert "shipped 3 records" in result.stderr and "error:" not in result.stderr


def test_help_documents_the_exit_status() -> None:
    result = CliRunner().invoke(cli(), ["collect", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for phrase in ("Exit status: 0 every source", "1 configuration", "2 usage", "3 --once: shipping failed",
                   "4 --once: a source yielded nothing", "phasefit_collector_errors_total"):  # fmt: skip
        assert phrase in text, phrase
