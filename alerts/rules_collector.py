"""Rules over the phasefit collector's own exporter: its health, GPU state, and placement without analyzer.

GPU-level series are joined to ``phasefit_gpu_info`` on ``(cluster, node, gpu)`` for their worker, SKU,
role and model, so the rules hold whether or not the collector also puts those labels on each series.
"""

from __future__ import annotations

from alerts.config import RulesConfig
from alerts.model import AlertingRule, RuleFile, RuleGroup
from alerts.placement import PlacementSeries, placement_groups
from alerts.promql import join_matchers, labels, number, selector

INFO_LABELS = ("gpu_name", "sku", "worker", "role", "model")
# The collector's own series carry no node label unless the scrape config adds one (relabel the pod's
# node name to `node`, as kube-state-metrics names it).
_ON_NODE = "{{ with $labels.node }} on node {{ . }}{{ end }}"
# " (H100-SXM, worker decode-3, decode role, model m)"; parts the GPU's info series lacks are left out.
_GPU_OWNER = (
    "{{ if $labels.sku }} ({{ $labels.sku }}{{ if $labels.worker }}, worker {{ $labels.worker }}, "
    "{{ $labels.role }} role, model {{ $labels.model }}{{ else }}, no worker attributed{{ end }})"
    "{{ else }} (no phasefit_gpu_info for it){{ end }}"
)


def collector_rule_file(cfg: RulesConfig) -> RuleFile:
    recording, alerting = placement_groups(
        cfg,
        collector_series(cfg),
        group_prefix="phasefit-collector-placement",
        alert="PhasefitCollectorDecodeOnLowerBandwidthGpu",
        skus=cfg.skus,
    )
    return RuleFile(
        name="phasefit-collector",
        description="Health of the phasefit collectors, GPU state, and placement over collector series.",
        groups=(_health_alerts(cfg), _gpu_alerts(cfg), recording, alerting),
    )


def gpu_info(cfg: RulesConfig, *extra: str) -> str:
    """One ``phasefit_gpu_info`` series per GPU (the newest wins if a relabel briefly leaves two)."""
    c = cfg.cluster_label
    return f"topk by ({c}, node, gpu) (1, phasefit_gpu_info{selector(cfg.collector_selector, *extra)})"


def with_gpu_info(cfg: RulesConfig, expr: str) -> str:
    """``expr`` (one series per GPU, or per GPU and reason) with the GPU's worker, SKU, role and model.

    A GPU without an info series (it may have vanished from NVML) keeps its alert, without those labels.
    """
    on = f"on ({cfg.cluster_label}, node, gpu)"
    return f"""
    (
      {expr}
    )
    * {on} group_left ({labels(INFO_LABELS)})
    {gpu_info(cfg)}
    or {on}
    (
      {expr}
    )
    """


def collector_series(cfg: RulesConfig) -> PlacementSeries:
    c = cfg.cluster_label
    worker = (c, "model", "worker", "sku", "role")
    win = cfg.window
    col = selector(cfg.collector_selector)

    def per_worker(metric: str) -> str:
        return f"""
        avg by ({labels(worker)}) (
          avg_over_time({metric}{col}[{win}])
          * on ({c}, node, gpu) group_left (model, worker, sku, role)
          {gpu_info(cfg, 'worker!=""')}
        )
        """

    return PlacementSeries(
        level="worker",
        pool_level=f"{c}_model",
        metric_prefix="phasefit",
        dram_record=f"worker:phasefit_gpu_dram_active_ratio:avg_over_time{win}",
        dram_expr=per_worker("phasefit_gpu_dram_active_ratio"),
        tensor_record=f"worker:phasefit_gpu_tensor_active_ratio:avg_over_time{win}",
        tensor_expr=per_worker("phasefit_gpu_tensor_active_ratio"),
        tokens_record=f"worker:phasefit_worker_generation_tokens:rate{win}",
        tokens_expr=f"sum by ({c}, worker) (rate(phasefit_worker_generation_tokens_total{col}[{win}]))",
        worker_labels=worker,
        pool_labels=(c, "model"),
        identity_labels=(c, "worker"),
        role_label="role",
        prefill_matcher='role="prefill"',
        decode_matcher='role="decode"',
        gpu_model_label="sku",
        worker_text="{{ $labels.worker }} (role {{ $labels.role }}, model {{ $labels.model }})",
        counterpart_text="{{ .Labels.worker }} on {{ .Labels.sku }}",
        tokens_source="the collector's generation-token rate",
    )


def _health_alerts(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    col = cfg.collector_selector
    target = labels((c, "job", "instance", "node"))
    return RuleGroup(
        name="phasefit-collector",
        rules=(
            AlertingRule(
                alert="PhasefitCollectorDown",
                expr=f"up{selector(col)} == 0",
                for_=cfg.for_("10m"),
                severity="warning",
                summary="Prometheus cannot scrape a phasefit collector.",
                description="""
                Prometheus has failed to scrape phasefit collector {{ $labels.instance }} (job
                {{ $labels.job }}) for 10 minutes. The GPUs and workers on that node are not watched: their
                placement, GPU-lost and telemetry alerts cannot fire.
                """,
                runbook_url=cfg.runbook_url("PhasefitCollectorDown"),
            ),
            AlertingRule(
                alert="PhasefitCollectorAbsent",
                expr=f"absent(up{selector(col)})",
                for_=cfg.for_("15m"),
                severity="warning",
                summary="Prometheus has no phasefit collector target at all.",
                description=f"""
                No target matching {{{join_matchers(col)}}} has been scraped for 15 minutes: the
                collectors are not deployed, not discovered, or the job selector in the rules does not
                match them. No GPU in the fleet is watched by phasefit.
                """,
                runbook_url=cfg.runbook_url("PhasefitCollectorAbsent"),
            ),
            AlertingRule(
                alert="PhasefitCollectorStale",
                expr=f"""
                time() - max by ({target}) (phasefit_collector_last_collect_timestamp_seconds{selector(col)})
                > {number(cfg.collector_stale_seconds)}
                """,
                for_=cfg.for_("10m"),
                severity="warning",
                summary="A phasefit collector answers scrapes but has stopped collecting.",
                description=f"""
                Collector {{{{ $labels.instance }}}}{_ON_NODE} last completed a collection
                {{{{ $value | humanizeDuration }}}} ago (limit {cfg.collector_stale_seconds}s). Its process is
                up but its sources (NVML, dcgm-exporter, engine metrics) are stuck or failing, so its GPU
                series are frozen.
                """,
                runbook_url=cfg.runbook_url("PhasefitCollectorStale"),
            ),
            AlertingRule(
                alert="PhasefitCollectorDroppingRecords",
                expr=f"""
                sum by ({target}) (
                  increase(phasefit_collector_spool_dropped_records_total{selector(col)}[15m])
                ) > 0
                """,
                for_=cfg.for_("5m"),
                severity="warning",
                summary="A phasefit collector is dropping telemetry records.",
                description=f"""
                Collector {{{{ $labels.instance }}}}{_ON_NODE} dropped
                {{{{ $value | humanize }}}} records in the last 15 minutes: its spool is full (the service
                has been unreachable too long) or the service rejected records. Those samples are lost
                for the analyzer and the weekly report.
                """,
                runbook_url=cfg.runbook_url("PhasefitCollectorDroppingRecords"),
            ),
        ),
    )


def _gpu_alerts(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    col = selector(cfg.collector_selector)
    degraded = f"max by ({c}, node, gpu, reason) (phasefit_gpu_telemetry_degraded{col}) == 1"
    lost = f"max by ({c}, node, gpu) (phasefit_gpu_lost{col}) == 1"
    return RuleGroup(
        name="phasefit-gpu",
        rules=(
            AlertingRule(
                alert="PhasefitGpuTelemetryDegraded",
                expr=with_gpu_info(cfg, degraded),
                for_=cfg.for_("30m"),
                severity="warning",
                summary="A GPU's telemetry is too weak to judge its placement.",
                description=f"""
                GPU {{{{ $labels.gpu }}}} on node {{{{ $labels.node }}}}{_GPU_OWNER} reports degraded
                telemetry: {{{{ $labels.reason }}}}. phasefit cannot tell whether this GPU is memory- or
                compute-bound, so its worker's misplacement and lost tokens are not counted.
                """,
                runbook_url=cfg.runbook_url("PhasefitGpuTelemetryDegraded"),
            ),
            AlertingRule(
                alert="PhasefitGpuLost",
                expr=with_gpu_info(cfg, lost),
                for_=cfg.for_("2m"),
                severity="critical",
                summary="A GPU has fallen off the bus (Xid 79) and its capacity is gone.",
                description=f"""
                GPU {{{{ $labels.gpu }}}} on node {{{{ $labels.node }}}}{_GPU_OWNER} is lost (Xid 79, NVML
                GPU_IS_LOST): its capacity is gone until the GPU is reset or the node rebooted.
                """,
                runbook_url=cfg.runbook_url("PhasefitGpuLost"),
            ),
        ),
    )
