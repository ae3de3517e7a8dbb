"""The rule source: the alerts it promises, their conventions, and how configuration changes the PromQL."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from alerts.config import RulesConfig
from alerts.model import AlertingRule
from alerts.promql import literal_regex, promql_regex
from alerts.rules_source import default_config, rule_files, sku_bandwidths
from fleet.catalog import load_catalog

# Alert names and labels are a public API (SREs route on them): renaming one must be deliberate.
EXPECTED_ALERTS = {
    "phasefit-analyzer": {
        "PhasefitWorkerMisplaced",
        "PhasefitFleetLostTokensHigh",
        "PhasefitPoolRatioDrift",
        "PhasefitWorkersUnjudged",
        "PhasefitPoolLatencyTargetMissed",
        "PhasefitServiceDown",
        "PhasefitAnalyzerStale",
    },
    "phasefit-collector": {
        "PhasefitCollectorDown",
        "PhasefitCollectorAbsent",
        "PhasefitCollectorStale",
        "PhasefitCollectorDroppingRecords",
        "PhasefitGpuTelemetryDegraded",
        "PhasefitGpuLost",
        "PhasefitCollectorDecodeOnLowerBandwidthGpu",
    },
    "phasefit-dcgm": {"PhasefitDcgmDecodeOnLowerBandwidthGpu", "PhasefitDcgmProfilingMetricsMissing"},
}
PLACEMENT = {
    "PhasefitWorkerMisplaced",
    "PhasefitFleetLostTokensHigh",
    "PhasefitPoolRatioDrift",
    "PhasefitCollectorDecodeOnLowerBandwidthGpu",
    "PhasefitDcgmDecodeOnLowerBandwidthGpu",
}


@pytest.fixture(scope="module")
def cfg() -> RulesConfig:
    return default_config(load_catalog().gpus)


def _alerts(cfg: RulesConfig) -> dict[str, AlertingRule]:
    return {a.alert: a for f in rule_files(cfg) for a in f.alerts}


def test_every_promised_alert_exists_in_its_file(cfg: RulesConfig) -> None:
    assert {f.name: {a.alert for a in f.alerts} for f in rule_files(cfg)} == EXPECTED_ALERTS


def test_placement_never_pages_and_only_a_lost_gpu_is_critical(cfg: RulesConfig) -> None:
    alerts = _alerts(cfg)
    assert {name for name, a in alerts.items() if a.severity == "critical"} == {"PhasefitGpuLost"}
    assert all(alerts[name].severity in ("warning", "info") for name in PLACEMENT)


def test_placement_descriptions_name_worker_gpu_model_role_and_lost_tokens(cfg: RulesConfig) -> None:
    for name in PLACEMENT - {"PhasefitFleetLostTokensHigh", "PhasefitPoolRatioDrift"}:
        text = _alerts(cfg)[name].description
        assert re.search(r"\$labels\.(worker|pod)", text), name
        assert re.search(r"\$labels\.(sku|modelName)", text), name
        assert "$labels.role" in text, name
        assert "tokens/s" in text, name
    fleet = _alerts(cfg)["PhasefitFleetLostTokensHigh"].description
    assert all(f".Labels.{label}" in fleet for label in ("worker", "sku", "role"))


LOSS_ALERTS = {"PhasefitWorkerMisplaced", "PhasefitFleetLostTokensHigh", "PhasefitPoolRatioDrift"}


def test_lost_capacity_is_given_in_output_tokens_and_requests_first(cfg: RulesConfig) -> None:
    """Issue 13: output tokens/s and requests/s from their own gauges, total tokens only as a labelled
    secondary, "unknown" (never 0) where a gauge is missing, and a demand-limited pool is never critical."""
    alerts = _alerts(cfg)
    for name in LOSS_ALERTS:
        alert = alerts[name]
        text = " ".join(alert.description.split()).lower()
        output, requests = text.index("output tokens/s"), text.index("requests/s")
        secondary = text.index("secondary")
        assert "total prompt + output" in text[secondary:], name
        assert output < requests < secondary, name
        assert "lost_output_tokens_per_second" in text and "lost_requests_per_second" in text, name
        assert "{{ else }}unknown{{ end }}" in text, name
        assert "idle capacity" in text and "not undelivered tokens" in text, name
        assert alert.severity == "warning", name
    fleet = alerts["PhasefitFleetLostTokensHigh"].description
    assert "phasefit_worker_lost_output_tokens_per_second" in fleet  # largest contributor by output
    # The threshold compares total with total capacity (no output-token capacity gauge exists).
    assert alerts["PhasefitFleetLostTokensHigh"].expr.startswith(
        "cluster:phasefit_fleet_lost_tokens_per_capacity_tokens:ratio"
    )


def test_unjudged_workers_alert_per_reason_and_never_pages(cfg: RulesConfig) -> None:
    alert = _alerts(cfg)["PhasefitWorkersUnjudged"]
    assert alert.severity == "info"
    assert "phasefit_fleet_unjudged_workers" in alert.expr and "reason" in alert.expr
    assert alert.expr.endswith("> 0")
    assert alert.for_ == "1h"
    assert "$labels.reason" in alert.description
    assert "phasefit_fleet_judged_workers" in alert.description


def test_every_alert_links_its_runbook(cfg: RulesConfig) -> None:
    for name, alert in _alerts(cfg).items():
        assert alert.runbook_url == f"{cfg.runbook_base_url}/{name.lower()}.md"


def test_selectors_labels_and_window_reach_the_promql(cfg: RulesConfig) -> None:
    custom = replace(
        cfg.with_selectors(
            {
                "dcgm": 'job="gpu-metrics"',
                "collector": 'job="agents"',
                "service": 'job="pf"',
                "engine": 'job="vllm"',
            }
        ),
        dcgm_role_label="llm_d_ai_role",
        dcgm_pool_labels=("namespace", "app"),
        cluster_label="k8s_cluster",
        window="10m",
        lost_tokens_share=0.1,
    )
    files = {f.name: f for f in rule_files(custom)}
    dcgm = {r.record: r.expr for r in files["phasefit-dcgm"].recording_rules}
    dram = dcgm["namespace_pod:DCGM_FI_PROF_DRAM_ACTIVE:avg_over_time10m"]
    assert 'DCGM_FI_PROF_DRAM_ACTIVE{job="gpu-metrics", GPU_I_PROFILE="", pod!=""}[10m]' in dram
    assert "by (k8s_cluster, namespace, app, pod, modelName, llm_d_ai_role)" in dram
    assert (
        'rate(vllm:generation_tokens_total{job="vllm"}[10m])'
        in dcgm["namespace_pod:engine_generation_tokens:rate10m"]
    )
    assert "k8s_cluster_namespace_app:dcgm_compute_bound_prefill_hbm_bandwidth_bytes_per_second:max" in dcgm
    collector = {r.record: r.expr for r in files["phasefit-collector"].recording_rules}
    assert (
        'phasefit_gpu_info{job="agents", worker!=""}'
        in collector["worker:phasefit_gpu_dram_active_ratio:avg_over_time10m"]
    )
    alerts = _alerts(custom)
    assert alerts["PhasefitFleetLostTokensHigh"].expr.endswith("> 0.1")
    assert 'phasefit_worker_misplaced{job="pf"}' in alerts["PhasefitWorkerMisplaced"].expr
    assert 'llm_d_ai_role=~"prefill"' in alerts["PhasefitDcgmDecodeOnLowerBandwidthGpu"].description


def test_for_override_applies_to_every_alert(cfg: RulesConfig) -> None:
    assert {a.for_ for a in _alerts(replace(cfg, for_override="3s")).values()} == {"3s"}


def test_catalog_bandwidths_and_name_regexes_agree_with_the_catalog() -> None:
    gpus = load_catalog().gpus
    skus = sku_bandwidths(gpus)
    assert {s.sku for s in skus} >= {"H100-SXM", "H200-SXM", "B200"}
    for sku in skus:
        entry = gpus.get(sku.sku)
        assert sku.hbm_bandwidth_bytes_per_s == entry.hbm_bandwidth_bytes_per_s
        for name in entry.nvml_names:
            matching = [
                other.sku
                for other in skus
                if re.fullmatch(other.model_name_regex.replace("\\\\", "\\"), name)
            ]
            assert matching == [sku.sku], (name, matching)  # anchored: "NVIDIA H200" is not the NVL
            assert gpus.resolve(name).key == sku.sku
    h100, h200 = gpus.get("H100-SXM"), gpus.get("H200-SXM")
    assert h100.hbm_bandwidth_bytes_per_s == 3.35e12 and h200.hbm_bandwidth_bytes_per_s == 4.8e12


def test_literal_and_catalog_regexes_are_safe_in_promql_strings() -> None:
    assert literal_regex("NVIDIA A100-SXM4-80GB (rev.1)") == "NVIDIA A100-SXM4-80GB \\\\(rev\\\\.1\\\\)"
    assert promql_regex(r"AMD Instinct MI300X\s(OAM|VF)") == "AMD Instinct MI300X\\\\s(OAM|VF)"
    with pytest.raises(ValueError, match="look-around"):
        promql_regex("NVIDIA H100(?! NVL)")


def test_group_names_are_unique_across_files(cfg: RulesConfig) -> None:
    names = [g.name for f in rule_files(cfg) for g in f.groups]
    assert len(names) == len(set(names))
