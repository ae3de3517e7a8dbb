"""Rules over the phasefit service's gauges: the analyzer's findings, and the service's own health.

The service runs as stateless replicas that may each export the same gauges, so every aggregation first
takes ``max`` over the identifying labels (deduplicating replicas) before summing.
"""

from __future__ import annotations

from alerts.config import RulesConfig
from alerts.model import AlertingRule, RecordingRule, RuleFile, RuleGroup
from alerts.promql import (
    join_matchers,
    labels,
    matchers_from_labels,
    number,
    query_rows,
    query_value,
    selector,
)

CAPACITY = "cluster:phasefit_pool_capacity_tokens_per_second:sum"
FLEET_LOST = "cluster:phasefit_fleet_lost_tokens_per_second:max"
LOST_SHARE = "cluster:phasefit_fleet_lost_tokens_per_capacity_tokens:ratio"
MISPLACED_WORKERS = "cluster:phasefit_worker_misplaced:sum"


def analyzer_rule_file(cfg: RulesConfig) -> RuleFile:
    return RuleFile(
        name="phasefit-analyzer",
        description="Alerts on the phasefit analyzer's findings, from the phasefit service's /metrics.",
        groups=(_recording(cfg), _placement_alerts(cfg), _service_alerts(cfg)),
    )


def _recording(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    svc = cfg.service_selector
    return RuleGroup(
        name="phasefit-analyzer.rules",
        rules=(
            RecordingRule(
                record=CAPACITY,
                expr=f"""
                sum by ({c}) (
                  max by ({c}, pool) (phasefit_pool_capacity_tokens_per_second{selector(svc)})
                )
                """,
            ),
            RecordingRule(
                record=FLEET_LOST,
                expr=f"max by ({c}) (phasefit_fleet_lost_tokens_per_second{selector(svc)})",
            ),
            RecordingRule(record=LOST_SHARE, expr=f"{FLEET_LOST} / ({CAPACITY} > 0)"),
            RecordingRule(
                record=MISPLACED_WORKERS,
                expr=f"""
                sum by ({c}) (
                  max by ({c}, pool, worker) (phasefit_worker_misplaced{selector(svc)})
                )
                """,
            ),
        ),
    )


def _placement_alerts(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    svc = cfg.service_selector
    worker_fmt, worker_args = matchers_from_labels((c, "pool", "worker"))
    pool_fmt, pool_args = matchers_from_labels((c, "pool"))
    cluster_fmt, cluster_args = matchers_from_labels((c,))
    worker_lost = query_value(
        f"max(phasefit_worker_lost_tokens_per_second{{{join_matchers(svc, worker_fmt)}}})", worker_args
    )

    def pool_gauge(metric: str) -> str:
        return f"max(phasefit_pool_{metric}{{{join_matchers(svc, pool_fmt)}}})"

    top_worker = query_rows(
        f"topk(1, max by (pool, worker, sku, role, model) "
        f"(phasefit_worker_lost_tokens_per_second{{{join_matchers(svc, cluster_fmt)}}}))",
        cluster_args,
        "worker {{ .Labels.worker }} in pool {{ .Labels.pool }} ({{ .Labels.role }} on {{ .Labels.sku }}, "
        "model {{ .Labels.model }}) at {{ .Value | humanize }} tokens/s",
    )
    share = number(cfg.lost_tokens_share)
    return RuleGroup(
        name="phasefit-placement",
        rules=(
            AlertingRule(
                alert="PhasefitWorkerMisplaced",
                expr=f"""
                max by ({labels((c, "pool", "worker", "sku", "role", "model", "kind"))}) (
                  phasefit_worker_misplaced{selector(svc)}
                ) == 1
                """,
                for_=cfg.for_("30m"),
                severity="warning",
                summary="An inference worker runs on a GPU model that does not suit its bottleneck.",
                description=f"""
                Worker {{{{ $labels.worker }}}} in pool {{{{ $labels.pool }}}} ({{{{ $labels.role }}}} role,
                model {{{{ $labels.model }}}}) runs on {{{{ $labels.sku }}}} and is misplaced
                ({{{{ $labels.kind }}}}). phasefit estimates it loses {worker_lost} tokens/s against the best
                placement of the same GPUs.
                """,
                runbook_url=cfg.runbook_url("PhasefitWorkerMisplaced"),
            ),
            AlertingRule(
                alert="PhasefitFleetLostTokensHigh",
                expr=f"{LOST_SHARE} > {share}",
                for_=cfg.for_("1h"),
                severity="warning",
                summary="The fleet loses a large share of its token capacity to GPU placement.",
                description=f"""
                The fleet loses {{{{ $value | humanizePercentage }}}} of its token capacity to placement
                ({query_value(f"{FLEET_LOST}{{{cluster_fmt}}}", cluster_args)} of
                {query_value(f"{CAPACITY}{{{cluster_fmt}}}", cluster_args)} tokens/s; the threshold is
                {cfg.lost_tokens_share:.0%}). Largest contributor: {top_worker}.
                """,
                runbook_url=cfg.runbook_url("PhasefitFleetLostTokensHigh"),
            ),
            AlertingRule(
                alert="PhasefitPoolRatioDrift",
                expr=f"max by ({c}, pool) (phasefit_pool_ratio_drift{selector(svc)}) == 1",
                for_=cfg.for_("1h"),
                severity="warning",
                summary="A pool's prefill:decode capacity no longer matches its traffic.",
                description=f"""
                Pool {{{{ $labels.pool }}}} runs a prefill:decode capacity ratio of
                {query_value(pool_gauge("prefill_decode_ratio"), pool_args, as_='printf "%.2f"')}
                while its traffic needs
                {query_value(pool_gauge("recommended_prefill_decode_ratio"), pool_args, as_='printf "%.2f"')};
                it loses {query_value(pool_gauge("lost_tokens_per_second"), pool_args)} tokens/s.
                """,
                runbook_url=cfg.runbook_url("PhasefitPoolRatioDrift"),
            ),
        ),
    )


def _service_alerts(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    svc = cfg.service_selector
    stale = number(cfg.analyzer_stale_seconds)
    return RuleGroup(
        name="phasefit-service",
        rules=(
            AlertingRule(
                alert="PhasefitServiceDown",
                expr=f"up{selector(svc)} == 0",
                for_=cfg.for_("10m"),
                severity="warning",
                summary="Prometheus cannot scrape the phasefit service.",
                description="""
                Prometheus has failed to scrape phasefit service target {{ $labels.instance }}
                (job {{ $labels.job }}) for 10 minutes. Collectors cannot ship samples to it and the
                placement alerts that read its metrics go silent.
                """,
                runbook_url=cfg.runbook_url("PhasefitServiceDown"),
            ),
            AlertingRule(
                alert="PhasefitAnalyzerStale",
                expr=f"""
                time() - max by ({c}) (phasefit_analyzer_last_run_timestamp_seconds{selector(svc)}) > {stale}
                """,
                for_=cfg.for_("15m"),
                severity="warning",
                summary="The phasefit analyzer has not completed a run recently.",
                description=f"""
                The phasefit analyzer last finished a run {{{{ $value | humanizeDuration }}}} ago (limit
                {cfg.analyzer_stale_seconds}s). Misplacement, lost-token and drift figures are frozen at
                that run, so the placement alerts neither fire nor resolve.
                """,
                runbook_url=cfg.runbook_url("PhasefitAnalyzerStale"),
            ),
        ),
    )
