"""The single source of truth for phasefit's Prometheus rules.

Three files, one per kind of deployment, so a fleet loads only what it has:

* ``phasefit-analyzer.yaml``: the analyzer's findings from the phasefit service;
* ``phasefit-collector.yaml``: collector health, GPU state, placement over collector series;
* ``phasefit-dcgm.yaml``: placement over plain dcgm-exporter + vLLM/SGLang series (zero agent).

Both the plain rule files and the Kubernetes ``PrometheusRule`` are rendered from :func:`rule_files`.
"""

from __future__ import annotations

from alerts.config import RulesConfig, SkuBandwidth
from alerts.model import RuleFile
from alerts.promql import literal_regex, promql_regex
from alerts.rules_analyzer import analyzer_rule_file
from alerts.rules_collector import collector_rule_file
from alerts.rules_dcgm import dcgm_rule_file
from analyzer.pipeline import AnalyzerParams
from analyzer.telemetry.bottleneck import BottleneckThresholds
from fleet.contract import TelemetrySource
from fleet.gpus import GpuCatalog, GpuSku


def rule_files(cfg: RulesConfig) -> tuple[RuleFile, ...]:
    files = (analyzer_rule_file(cfg), collector_rule_file(cfg), dcgm_rule_file(cfg))
    groups = [g.name for f in files for g in f.groups]
    duplicates = sorted({name for name in groups if groups.count(name) > 1})
    if duplicates:
        raise ValueError(f"rule group names must be unique across files: {duplicates}")
    alerts = [a.alert for f in files for a in f.alerts]
    if len(alerts) != len(set(alerts)):
        raise ValueError("alert names must be unique across files")
    return files


def sku_bandwidths(gpus: GpuCatalog) -> tuple[SkuBandwidth, ...]:
    """Per-SKU HBM bandwidth and a ``modelName`` regex, from the GPU catalog (one place for the figures).

    The regex alternates the SKU's exact NVML names and its catalog name patterns, case-insensitively as
    the catalog resolves them. SKUs without a known bandwidth or without any name are left out.
    """
    return tuple(
        SkuBandwidth(
            sku=sku.key,
            model_name_regex=_model_name_regex(sku),
            hbm_bandwidth_bytes_per_s=sku.hbm_bandwidth_bytes_per_s,
        )
        for sku in sorted(gpus.skus.values(), key=lambda s: s.key)
        if sku.hbm_bandwidth_bytes_per_s and (sku.nvml_names or sku.name_patterns)
    )


def default_config(gpus: GpuCatalog, bottleneck: BottleneckThresholds | None = None) -> RulesConfig:
    """The configuration the committed files in ``alerts/rules/`` are rendered with.

    The bounds a placement alert calls compute- and memory-bound are the analyzer's: normalised pressure
    ``busy`` of the saturated tensor activity and of DCGM's saturated DRAM activity."""
    t = bottleneck or AnalyzerParams().bottleneck
    return RulesConfig(
        skus=sku_bandwidths(gpus),
        compute_bound_tensor_active=round(t.busy * t.tensor_saturation, 4),
        memory_bound_dram_active=round(t.busy * t.dram_saturation[TelemetrySource.DCGM], 4),
    )


def _model_name_regex(sku: GpuSku) -> str:
    names = [literal_regex(name) for name in sku.nvml_names]
    names += [promql_regex(pattern) for pattern in sku.name_patterns]
    return "(?i)" + "|".join(names)
