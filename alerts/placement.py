"""The analyzer-free placement rule, written once and instantiated for two kinds of series.

Decode is memory-bandwidth-bound, prefill compute-bound (docs/architecture.md, "The physics"). A decode worker
whose GPUs are memory-bound while, in the same pool, a compute-bound prefill worker holds GPUs with more
HBM bandwidth is on the wrong hardware: swapping the two roles speeds decode up by up to the bandwidth
ratio and costs prefill little (H100 and H200 have the same compute). The rule needs no analyzer: per-SKU
bandwidth comes from the catalog, matched on the GPU's name (``modelName``) or phasefit's ``sku`` label.

The chain of recording rules is the same for dcgm-exporter series (worker = pod) and for the phasefit
collector's series (worker = phasefit's worker id); :class:`PlacementSeries` says how each names things.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from alerts.config import RulesConfig, SkuBandwidth
from alerts.model import AlertingRule, RecordingRule, RuleGroup
from alerts.promql import labels, matchers_from_labels, number, query_rows, query_value


@dataclass(frozen=True)
class PlacementSeries:
    """How one family of series spells workers, pools, roles and GPU models.

    ``dram``/``tensor`` are PromQL expressions giving one already-averaged ratio per worker with exactly
    ``worker_labels``; ``gpu_model_label`` names the GPU (``modelName`` or ``sku``) and
    ``gpu_model_matcher`` builds its matcher for one catalog SKU.
    """

    level: str  # recording-rule level of worker-level series, e.g. "namespace_pod"
    pool_level: str  # recording-rule level of pool-level series, e.g. "cluster_namespace"
    metric_prefix: str  # e.g. "dcgm" -> namespace_pod:dcgm_gpu_hbm_bandwidth_bytes_per_second:catalog
    dram_record: str
    dram_expr: str
    tensor_record: str
    tensor_expr: str
    tokens_record: str
    tokens_expr: str
    worker_labels: tuple[str, ...]
    pool_labels: tuple[str, ...]
    identity_labels: tuple[str, ...]  # the labels that name one worker (join with its token rate)
    role_label: str
    prefill_matcher: str
    decode_matcher: str
    gpu_model_label: str
    worker_text: str  # template naming the alert's worker and its role, from $labels
    counterpart_text: str  # template naming a prefill worker from .Labels inside a range
    tokens_source: str  # where the token rate comes from, e.g. "the vLLM/SGLang generation-token rate"

    def gpu_model_matcher(self, sku: SkuBandwidth) -> str:
        if self.gpu_model_label == "sku":
            return f'sku="{sku.sku}"'
        return f'{self.gpu_model_label}=~"{sku.model_name_regex}"'

    def record(self, level: str, metric: str, operation: str) -> str:
        return f"{level}:{self.metric_prefix}_{metric}:{operation}"


def placement_groups(
    cfg: RulesConfig, series: PlacementSeries, *, group_prefix: str, alert: str, skus: Sequence[SkuBandwidth]
) -> tuple[RuleGroup, RuleGroup]:
    """Recording rules and the alert for one family of series."""
    w = labels(series.worker_labels)
    pool = labels(series.pool_labels)
    bandwidth = series.record(series.level, "gpu_hbm_bandwidth_bytes_per_second", "catalog")
    prefill_max = series.record(
        series.pool_level, "compute_bound_prefill_hbm_bandwidth_bytes_per_second", "max"
    )
    headroom = series.record(series.level, "memory_bound_decode_hbm_bandwidth_headroom", "ratio")
    bandwidth_branches = "\nor\n".join(
        f"{number(s.hbm_bandwidth_bytes_per_s)} * group by ({w}) "
        f"({series.dram_record}{{{series.gpu_model_matcher(s)}}})"
        for s in skus
    )
    compute_bound = f"{series.tensor_record} >= {number(cfg.compute_bound_tensor_active)}"
    memory_bound = f"{series.dram_record} >= {number(cfg.memory_bound_dram_active)}"
    recording = RuleGroup(
        name=f"{group_prefix}.rules",
        rules=(
            RecordingRule(record=series.dram_record, expr=series.dram_expr),
            RecordingRule(record=series.tensor_record, expr=series.tensor_expr),
            RecordingRule(record=series.tokens_record, expr=series.tokens_expr),
            RecordingRule(record=bandwidth, expr=bandwidth_branches),
            RecordingRule(
                record=prefill_max,
                expr=f"""
                max by ({pool}) (
                  {bandwidth}{{{series.prefill_matcher}}}
                  and {compute_bound}
                )
                """,
            ),
            RecordingRule(
                record=headroom,
                expr=f"""
                {prefill_max}
                / on ({pool}) group_right ()
                (
                  {bandwidth}{{{series.decode_matcher}}}
                  and {memory_bound}
                )
                """,
            ),
        ),
    )
    pool_fmt, pool_args = matchers_from_labels(series.pool_labels)
    id_fmt, id_args = matchers_from_labels(series.identity_labels)
    worker_fmt, worker_args = matchers_from_labels(series.worker_labels)
    dram_now = query_value(f"{series.dram_record}{{{worker_fmt}}}", worker_args, as_="humanizePercentage")
    counterpart = query_rows(
        f"topk(1, {bandwidth}{{{pool_fmt}, {series.prefill_matcher}}} and {compute_bound})",
        pool_args,
        series.counterpart_text,
    )
    lost = query_value(
        f"{series.tokens_record}{{{id_fmt}}} * (%f - 1)",
        f"{id_args} $value",
        before="up to ",
        after=f" tokens/s are lost now (bandwidth-ratio bound on {series.tokens_source})",
        missing=f"the tokens lost are unknown ({series.tokens_source} not found for this worker)",
    )
    alerting = RuleGroup(
        name=group_prefix,
        rules=(
            AlertingRule(
                alert=alert,
                expr=f"{headroom} >= {number(cfg.min_bandwidth_ratio)}",
                for_=cfg.for_("30m"),
                severity="warning",
                summary="A memory-bound decode worker sits on lower-bandwidth GPUs than a compute-bound "
                "prefill worker of the same pool.",
                description=f"""
                Decode worker {series.worker_text} on {{{{ $labels.{series.gpu_model_label} }}}} is
                memory-bound (DRAM active {dram_now}) while compute-bound prefill worker {counterpart}
                holds GPUs with
                {{{{ $value | printf "%.2f" }}}}x its HBM bandwidth. Swapping the two roles would speed
                this decoder up by as much: {lost}.
                """,
                runbook_url=cfg.runbook_url(alert),
            ),
        ),
    )
    return recording, alerting
