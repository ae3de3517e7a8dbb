"""Real Prometheus and Alertmanager on loopback deliver a phasefit rule's alert to a webhook, then resolve it.

Prometheus scrapes a static dcgm-exporter / vLLM exposition served by Python on 127.0.0.1, evaluates the
shipped zero-agent rule (rendered with short windows), and Alertmanager, configured from the shipped
example, delivers to a webhook sink with the bearer token. Only the sources change for the full
end-to-end test (phasefit's exporter and webhook receiver instead of the stand-ins).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from alerts.layout import ALERTMANAGER_EXAMPLE
from alerts.loopback_http import Delivery, ExpositionServer, WebhookSink
from alerts.render import render_rule_file
from alerts.rules_dcgm import dcgm_rule_file
from alerts.rules_source import default_config
from alerts.testing import (
    ScrapeJob,
    example_alertmanager_config,
    prometheus_config,
    running_alertmanager,
    running_prometheus,
)
from fleet.catalog import load_catalog
from tests.alerts.helpers import require_tool

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

ALERT = "PhasefitDcgmDecodeOnLowerBandwidthGpu"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


class FakeFleet:
    """dcgm-exporter and vLLM exposition for one decode pod on an H100 and one prefill pod on an H200."""

    def __init__(self) -> None:
        self.decode_dram = 0.72
        self._started = time.monotonic()

    def dcgm(self) -> str:
        rows = [
            ("DCGM_FI_PROF_DRAM_ACTIVE", "0", H100, "decode-0", "decode", self.decode_dram),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0", H100, "decode-0", "decode", 0.15),
            ("DCGM_FI_PROF_DRAM_ACTIVE", "1", H200, "prefill-0", "prefill", 0.30),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "1", H200, "prefill-0", "prefill", 0.62),
        ]
        lines = ["# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge", "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge"]
        for metric, gpu, model, pod, role, value in rows:
            lines.append(
                f'{metric}{{gpu="{gpu}",UUID="GPU-{gpu}",modelName="{model}",Hostname="node-a",'
                f'namespace="llm",pod="{pod}",container="vllm",role="{role}"}} {value:.6f}'
            )
        return "\n".join(lines) + "\n"

    def vllm(self) -> str:
        tokens = 100.0 * (time.monotonic() - self._started)  # 100 generated tokens/s
        return (
            "# TYPE vllm:generation_tokens counter\n"
            'vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"} '
            f"{tokens}\n"
        )


def _phasefit_alert(status: str) -> Callable[[Delivery], bool]:
    def matches(d: Delivery) -> bool:
        return (
            d.path == "/v1/alerts/alertmanager"
            and isinstance(d.body, dict)
            and any(a["labels"].get("alertname") == ALERT and a["status"] == status for a in d.body["alerts"])
        )

    return matches


def test_rule_alert_reaches_webhook_through_real_prometheus_and_alertmanager(tmp_path: Path) -> None:
    for tool in ("prometheus", "alertmanager"):
        require_tool(tool)
    cfg = replace(default_config(load_catalog().gpus), window="6s", for_override="2s")
    rules = tmp_path / "phasefit-dcgm.yaml"
    rules.write_text(render_rule_file(dcgm_rule_file(cfg)), encoding="utf-8")
    fleet = FakeFleet()

    with (
        ExpositionServer({"/dcgm": fleet.dcgm, "/vllm": fleet.vllm}) as exposition,
        WebhookSink() as sink,
        running_alertmanager(
            lambda workdir: example_alertmanager_config(
                ALERTMANAGER_EXAMPLE, workdir, webhook_base_url=sink.url()
            )
        ) as alertmanager,
        running_prometheus(
            prometheus_config(
                [
                    ScrapeJob("dcgm-exporter", f"127.0.0.1:{exposition.port}", "/dcgm", {"cluster": "c1"}),
                    ScrapeJob(
                        "vllm",
                        f"127.0.0.1:{exposition.port}",
                        "/vllm",
                        {"cluster": "c1", "namespace": "llm", "pod": "decode-0"},
                    ),
                ],
                rule_files=[rules],
                alertmanager=alertmanager.address,
            )
        ),
    ):
        firing = sink.wait_for(_phasefit_alert("firing"), timeout_s=45)
        alert = next(a for a in firing.body["alerts"] if a["labels"]["alertname"] == ALERT)
        assert alert["labels"] == {
            "alertname": ALERT,
            "severity": "warning",
            "cluster": "c1",
            "namespace": "llm",
            "pod": "decode-0",
            "modelName": H100,
            "role": "decode",
        }
        assert firing.headers["authorization"] == "Bearer test-token-phasefit-service"
        assert firing.body["version"] == "4"
        description = alert["annotations"]["description"]
        assert "pod llm/prefill-0 on NVIDIA H200 holds GPUs with 1.43x its HBM bandwidth" in description
        assert "tokens/s are lost now" in description  # the vLLM rate was joined
        assert alert["annotations"]["runbook_url"].endswith("/phasefitdcgmdecodeonlowerbandwidthgpu.md")
        # The example also routes warnings to Slack.
        sink.wait_for(lambda d: d.path == "/slack", timeout_s=15)

        fleet.decode_dram = 0.2  # the decode pod is no longer memory-bound: the placement is fine
        resolved = sink.wait_for(_phasefit_alert("resolved"), timeout_s=45)
        assert resolved.body["status"] == "resolved"
