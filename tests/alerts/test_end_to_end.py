"""Issue 7's end-to-end path with real servers on loopback and phasefit at both ends.

phasefit's collector exporter (the same ``collector.exporter`` code ``phasefit collect`` serves) publishes
a decode worker on an H100 that is memory-bound while an H200 runs compute-bound prefill. Debian's
Prometheus scrapes it and evaluates the shipped collector rules (rendered with short windows); Debian's
Alertmanager, configured from the shipped example, delivers to phasefit's own webhook receiver
(``POST /v1/alerts/alertmanager`` of the FastAPI service, bearer token), which stores the episode. Then the
placement is fixed (the roles swap) and the stored episode must turn resolved.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import uvicorn
from pydantic import SecretStr

from alerts.layout import ALERTMANAGER_EXAMPLE
from alerts.loopback_http import WebhookSink
from alerts.render import render_rule_file
from alerts.rules_collector import collector_rule_file
from alerts.rules_source import default_config
from alerts.testing import (
    ScrapeJob,
    example_alertmanager_config,
    free_port,
    prometheus_config,
    running_alertmanager,
    running_prometheus,
)
from collector.exporter import ExporterState, GpuView, StateHolder, WorkerView, build_registry, serve
from fleet.catalog import load_catalog
from fleet.contract import GpuSample, TelemetrySource
from fleet.store.alerts import list_alert_events
from fleet.store.engine import make_engine
from fleet.store.migrate import ensure_schema
from phasefit.service.app import create_app
from phasefit.service.settings import ServiceSettings
from tests.alerts.helpers import require_tool

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(150)]

ALERT = "PhasefitCollectorDecodeOnLowerBandwidthGpu"
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
TOKEN = "test-token-phasefit-service"  # what example_alertmanager_config writes for that receiver


def _state(h100_role: str, h200_role: str, started: float) -> ExporterState:
    """Two workers, one GPU each; the decode worker moves bytes, the prefill worker does math."""
    load = {"decode": (0.12, 0.72), "prefill": (0.62, 0.20)}  # (tensor_active, dram_active)
    gpus, workers = [], []
    for index, (name, sku, role) in enumerate(
        [("NVIDIA H100 80GB HBM3", "H100-SXM", h100_role), ("NVIDIA H200", "H200-SXM", h200_role)]
    ):
        worker = f"node-a/{sku.lower()}-0"
        tensor, dram = load[role]
        sample = GpuSample(
            ts=datetime.now(UTC), window_s=1, node="node-a", gpu_uuid=f"GPU-{index}", gpu_index=index,
            gpu_name=name, worker_id=worker, sm_active=min(1.0, tensor + 0.2), tensor_active=tensor,
            dram_active=dram, source=TelemetrySource.NVML_GPM,
        )  # fmt: skip
        gpus.append(GpuView(sample=sample, sku=sku, worker_id=worker, role=role, model=MODEL))
        generated = 900.0 * (time.monotonic() - started) if role == "decode" else 0.0
        workers.append(
            WorkerView(
                worker_id=worker, role=role, role_source="pod-label", model=MODEL, engine="vllm", sku=sku,
                prompt_tokens_total=0.0, generation_tokens_total=generated,
            )
        )  # fmt: skip
    return ExporterState(node="node-a", up=True, gpus=gpus, workers=workers, last_collect_unix=time.time())


class Fleet:
    """Republishes the exporter state every 0.5 s (token counters advance), with the current placement."""

    def __init__(self, holder: StateHolder) -> None:
        self.holder = holder
        self.roles = ("decode", "prefill")  # misplaced: decode on the H100, prefill on the H200
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.holder.publish(_state(*self.roles, self._started))

    def __enter__(self) -> Fleet:
        self.holder.publish(_state(*self.roles, self._started))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextmanager
def running_service(database_url: str) -> Iterator[str]:
    settings = ServiceSettings(
        database_url=database_url,
        ingest_tokens=SecretStr("collector-token-0123456789abcdef"),
        alertmanager_tokens=SecretStr(TOKEN),
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the phasefit service did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _wait_for_status(engine: object, status: str, timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with engine.connect() as connection:  # type: ignore[attr-defined]
            for stored in list_alert_events(connection, alertname=ALERT):
                if stored.event.status == status:
                    return dict(stored.event.labels)
        time.sleep(0.5)
    raise AssertionError(f"no {status} {ALERT} reached the phasefit service within {timeout_s:.0f} s")


def test_misplacement_alert_reaches_phasefit_and_resolves_when_placement_is_fixed(tmp_path: Path) -> None:
    for tool in ("prometheus", "alertmanager"):
        require_tool(tool)
    database_url = f"sqlite:///{tmp_path / 'phasefit.db'}"
    engine = make_engine(database_url)
    ensure_schema(engine)
    cfg = replace(default_config(load_catalog().gpus), window="4s", for_override="2s")
    rules = tmp_path / "phasefit-collector.yaml"
    rules.write_text(render_rule_file(collector_rule_file(cfg)), encoding="utf-8")

    holder = StateHolder(ExporterState(node="node-a"))
    exporter_port = free_port()
    exporter, _ = serve(build_registry(holder), "127.0.0.1", exporter_port)

    def alertmanager_config(workdir: Path) -> dict[str, object]:
        config = example_alertmanager_config(ALERTMANAGER_EXAMPLE, workdir, webhook_base_url=service_url)
        for file in workdir.glob("slack-url-*"):  # chat goes to a sink, not to the service
            file.write_text(sink.url("/slack"), encoding="utf-8")
        return config

    try:
        with (
            Fleet(holder) as fleet,
            running_service(database_url) as service_url,
            WebhookSink() as sink,
            running_alertmanager(alertmanager_config) as alertmanager,
            running_prometheus(
                prometheus_config(
                    [
                        ScrapeJob(
                            "phasefit-collector", f"127.0.0.1:{exporter_port}", "/metrics", {"cluster": "c1"}
                        )
                    ],
                    rule_files=[rules],
                    alertmanager=alertmanager.address,
                )
            ),
        ):
            labels = _wait_for_status(engine, "firing", timeout_s=60)
            assert labels["worker"] == "node-a/h100-sxm-0"
            assert labels["sku"] == "H100-SXM"
            assert labels["role"] == "decode"
            assert labels["severity"] == "warning"
            assert labels["cluster"] == "c1"

            fleet.roles = ("prefill", "decode")  # the fix: prefill on the H100, decode on the H200
            _wait_for_status(engine, "resolved", timeout_s=60)
            with engine.connect() as connection:
                episodes = list_alert_events(connection, alertname=ALERT)
            assert len(episodes) == 1, "a re-delivered notification must not store a second episode"
            assert episodes[0].event.ends_at is not None
    finally:
        exporter.shutdown()
        engine.dispose()
