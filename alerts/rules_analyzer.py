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
FLEET_LOST = "cluster:phasefit_fleet_lost_tokens_per_second:max"  # secondary: prompt + output tokens
FLEET_LOST_OUTPUT = "cluster:phasefit_fleet_lost_output_tokens_per_second:max"
FLEET_LOST_REQUESTS = "cluster:phasefit_fleet_lost_requests_per_second:max"
LOST_SHARE = "cluster:phasefit_fleet_lost_tokens_per_capacity_tokens:ratio"
MISPLACED_WORKERS = "cluster:phasefit_worker_misplaced:sum"
UNJUDGED_WORKERS = "cluster:phasefit_fleet_unjudged_workers:sum"
# Where a pool serves all its demand the loss is idle capacity (GPUs busy for less work), not undelivered
# tokens. The service exports no demand-limited gauge, so the placement alerts say it in words and stay
# warning/info: none of them is ever critical.
# Requests/s are small numbers: 0.75, not humanize's "750m".
REQUESTS = 'printf "%.2f"'
IDLE_NOTE = (
    "Where a pool serves all its demand, the loss is idle capacity and its cost, not undelivered tokens."
)


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
            RecordingRule(
                record=FLEET_LOST_OUTPUT,
                expr=f"max by ({c}) (phasefit_fleet_lost_output_tokens_per_second{selector(svc)})",
            ),
            RecordingRule(
                record=FLEET_LOST_REQUESTS,
                expr=f"max by ({c}) (phasefit_fleet_lost_requests_per_second{selector(svc)})",
            ),
            # The threshold compares like with like: total lost over total capacity (prompt + output);
            # the service exports no output-token capacity to divide the output loss by.
            RecordingRule(record=LOST_SHARE, expr=f"{FLEET_LOST} / ({CAPACITY} > 0)"),
            RecordingRule(
                record=MISPLACED_WORKERS,
                expr=f"""
                sum by ({c}) (
                  max by ({c}, pool, worker) (phasefit_worker_misplaced{selector(svc)})
                )
                """,
            ),
            RecordingRule(
                record=UNJUDGED_WORKERS,
                expr=f"""
                sum by ({c}) (
                  max by ({c}, reason) (phasefit_fleet_unjudged_workers{selector(svc)})
                )
                """,
            ),
        ),
    )


def _loss(per: str, matchers: str, args: str, svc: str) -> str:
    """``<o> output tokens/s and <r> requests/s (secondary: <t> total prompt + output tokens/s)``, each
    figure looked up from the ``phasefit_<per>_lost_*`` gauges of the alert's own labels; ``unknown``
    where the analyzer exported none (a loss it could not estimate is never 0)."""

    def value(metric: str, as_: str = "humanize") -> str:
        query = f"max(phasefit_{per}_{metric}{{{join_matchers(svc, matchers)}}})"
        return query_value(query, args, as_=as_)

    return (
        f"{value('lost_output_tokens_per_second')} output tokens/s and "
        f"{value('lost_requests_per_second', REQUESTS)} requests/s (secondary: "
        f"{value('lost_tokens_per_second')} total prompt + output tokens/s)"
    )


def _placement_alerts(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    svc = cfg.service_selector
    worker_fmt, worker_args = matchers_from_labels((c, "pool", "worker"))
    pool_fmt, pool_args = matchers_from_labels((c, "pool"))
    cluster_fmt, cluster_args = matchers_from_labels((c,))

    def pool_gauge(metric: str) -> str:
        return f"max(phasefit_pool_{metric}{{{join_matchers(svc, pool_fmt)}}})"

    def fleet(record: str, as_: str = "humanize") -> str:
        return query_value(f"{record}{{{cluster_fmt}}}", cluster_args, as_=as_)

    # The worker losing most output tokens/s, with its requests/s looked up inside the row.
    worker_requests = (
        f"{{{{ with printf `max(phasefit_worker_lost_requests_per_second"
        f"{{{join_matchers(svc, f'{c}=%q, pool=%q, worker=%q')}}})` $labels.{c} .Labels.pool "
        f".Labels.worker | query }}}} ({{{{ . | first | value | {REQUESTS} }}}} requests/s){{{{ end }}}}"
    )
    top_worker = query_rows(
        f"topk(1, max by (pool, worker, sku, role, model) "
        f"(phasefit_worker_lost_output_tokens_per_second{{{join_matchers(svc, cluster_fmt)}}}))",
        cluster_args,
        "worker {{ .Labels.worker }} in pool {{ .Labels.pool }} ({{ .Labels.role }} on {{ .Labels.sku }}, "
        "model {{ .Labels.model }}) at {{ .Value | humanize }} output tokens/s" + worker_requests,
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
                ({{{{ $labels.kind }}}}). phasefit estimates it loses
                {_loss("worker", worker_fmt, worker_args, svc)} against the best placement of the same
                GPUs. {IDLE_NOTE}
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
                The fleet loses {fleet(FLEET_LOST_OUTPUT)} output tokens/s and
                {fleet(FLEET_LOST_REQUESTS, REQUESTS)} requests/s to placement. Secondary, in total
                prompt + output tokens: {fleet(FLEET_LOST)} of
                {fleet(CAPACITY)} tokens/s, {{{{ $value | humanizePercentage }}}} of its token capacity
                (the threshold is {cfg.lost_tokens_share:.0%}). Largest contributor: {top_worker}.
                {IDLE_NOTE}
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
                it loses {_loss("pool", pool_fmt, pool_args, svc)}. {IDLE_NOTE}
                """,
                runbook_url=cfg.runbook_url("PhasefitPoolRatioDrift"),
            ),
            AlertingRule(
                alert="PhasefitWorkersUnjudged",
                expr=f"max by ({c}, reason) (phasefit_fleet_unjudged_workers{selector(svc)}) > 0",
                for_=cfg.for_("1h"),
                severity="info",
                summary="The phasefit analyzer could not judge the placement of some workers.",
                description=f"""
                The analyzer could not judge {{{{ $value | humanize }}}} worker(s): {{{{ $labels.reason }}}}.
                Their placement is neither confirmed nor flagged, so no misplacement alert can fire for
                them; {
                    query_value(
                        f"max(phasefit_fleet_judged_workers{{{join_matchers(svc, cluster_fmt)}}})",
                        cluster_args,
                    )
                } worker(s) were judged.
                """,
                runbook_url=cfg.runbook_url("PhasefitWorkersUnjudged"),
            ),
            _latency_target_alert(cfg),
        ),
    )


def _latency_target_alert(cfg: RulesConfig) -> AlertingRule:
    """A pool whose engines' measured p90 latency met its target in too little of its serving time."""
    c = cfg.cluster_label
    svc = cfg.service_selector
    fmt, args = matchers_from_labels((c, "pool", "metric"))
    pool_fmt, pool_args = matchers_from_labels((c, "pool"))
    target = query_value(
        f"max(phasefit_pool_latency_target_seconds{{{join_matchers(svc, fmt)}}})", args, as_='printf "%.3g"'
    )
    return AlertingRule(
        alert="PhasefitPoolLatencyTargetMissed",
        expr=f"""
        max by ({c}, pool, metric) (phasefit_pool_latency_target_attainment_ratio{selector(svc)})
          < {number(cfg.latency_target_attainment)}
        """,
        for_=cfg.for_("1h"),
        severity="warning",
        summary="A pool's measured p90 latency meets its target in too little of its serving time.",
        description=f"""
        Pool {{{{ $labels.pool }}}}: its engines' p90 {{{{ $labels.metric }}}} (ttft: time to first token,
        tpot: time per output token, e2e: end to end) met the target of {target} s in
        {{{{ $value | humanizePercentage }}}} of its measured serving time over the analysed span (the floor
        is {cfg.latency_target_attainment:.0%}). With targets set, phasefit's capacity and loss for the pool
        count goodput: it loses {_loss("pool", pool_fmt, pool_args, svc)} to placement.
        """,
        runbook_url=cfg.runbook_url("PhasefitPoolLatencyTargetMissed"),
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
