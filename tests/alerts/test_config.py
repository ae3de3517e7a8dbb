from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from alerts.config import RulesConfig, SkuBandwidth, check_selector

SKUS = (SkuBandwidth("H100-SXM", "(?i)NVIDIA H100 80GB HBM3", 3.35e12),)


def test_runbook_url_is_base_plus_lowercased_alertname() -> None:
    cfg = RulesConfig(skus=SKUS, runbook_base_url="https://runbooks.example.org/phasefit/")
    assert cfg.runbook_url("PhasefitGpuLost") == "https://runbooks.example.org/phasefit/phasefitgpulost.md"
    assert replace(cfg, runbook_suffix="").runbook_url("PhasefitGpuLost").endswith("/phasefitgpulost")


@pytest.mark.parametrize("good", ["", 'job="dcgm-exporter"', 'job=~"dcgm.*", namespace!="kube-system"'])
def test_selectors_accept_matcher_lists(good: str) -> None:
    assert check_selector(good, "x") == good.strip()


@pytest.mark.parametrize("bad", ['{job="x"}', "job=x", 'job="x",', "job=`x`", 'job="x" or up'])
def test_selectors_reject_anything_else(bad: str) -> None:
    with pytest.raises(ValueError, match="label matchers"):
        check_selector(bad, "dcgm selector")


def test_with_selectors_replaces_by_key_and_refuses_unknown_keys() -> None:
    cfg = RulesConfig(skus=SKUS).with_selectors({"dcgm": 'job="gpu-metrics"'})
    assert cfg.dcgm_selector == 'job="gpu-metrics"'
    with pytest.raises(ValueError, match="unknown selector key"):
        cfg.with_selectors({"nodes": 'job="x"'})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("runbook_base_url", "docs/runbooks", "must start with http"),
        ("cluster_label", "k8s-cluster", "not a valid Prometheus label name"),
        ("dcgm_role_label", "llm-d.ai/role", "not a valid Prometheus label name"),
        ("dcgm_pool_labels", ("cluster",), "always part of the pool"),
        ("lost_tokens_share", 5.0, "strictly between 0 and 1"),
        ("memory_bound_dram_active", 0.0, r"\(0, 1\]"),
        ("min_bandwidth_ratio", 1.0, "must exceed 1"),
        ("window", "five minutes", "not a Prometheus duration"),
        ("for_override", "soon", "not a Prometheus duration"),
        ("decode_role_regex", 'decode"', "quotes"),
        ("skus", (), "at least one SKU"),
        ("skus", SKUS + SKUS, "unique"),
    ],
)
def test_bad_config_fails_with_a_clear_message(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        changes: dict[str, Any] = {field: value}
        replace(RulesConfig(skus=SKUS), **changes)


def test_sku_bandwidth_validation() -> None:
    with pytest.raises(ValueError, match="positive"):
        SkuBandwidth("X", "X", 0.0)
    with pytest.raises(ValueError, match="bad modelName regex"):
        SkuBandwidth("X", "NVIDIA (H100", 1.0)


def test_for_override_shortens_every_for() -> None:
    assert RulesConfig(skus=SKUS).for_("30m") == "30m"
    assert RulesConfig(skus=SKUS, for_override="2s").for_("30m") == "2s"
