"""Drift: each pool's traffic mix and prefill:decode ratio over time, against provisioned and recommended."""

from __future__ import annotations

from collections import defaultdict

import streamlit as st

from analyzer.report.style import percent, si
from dashboard import charts, compute, widgets
from dashboard.plain import plain


def _yes_no(passed: bool) -> str:
    return "yes" if passed else "no"


context = widgets.page(
    "Drift",
    "Traffic drifts (prompt and output lengths move), so a split that was right at rollout goes wrong "
    "without "
    "anything failing. Per pool: the traffic, the prefill:decode ratio provisioned, the ratio the traffic "
    "needed, the analyzer's recommendation, and the change points it detected.",
)
scope = context.scope
by_pool: dict[str, list[str]] = defaultdict(list)
for worker in context.inventory.in_scope(scope):
    by_pool[worker.pool].append(worker.record.worker_id)
if not by_pool:
    st.info("No workers in this scope.")
    st.stop()
pool = st.selectbox("Pool", sorted(by_pool), key="dr_pool")
traffic = widgets.served(lambda: context.reads.traffic(scope, {pool: by_pool[pool]}))
analysis = widgets.served(lambda: context.reads.analysis(scope))
pool_view = next((p for p in analysis.pools if p.pool == pool), None) if analysis else None

if pool_view is not None:
    tiles = st.columns(4)
    tiles[0].metric("Prefill:decode now", widgets.known(pool_view.prefill_decode_now))
    tiles[1].metric(
        "Recommended",
        widgets.known(pool_view.prefill_decode_recommended),
        help="The best split of the same GPUs for the latest traffic mix (per SKU below).",
    )
    tiles[2].metric("Bound by", widgets.known(pool_view.bound), help="The pool that limits requests/s now.")
    tiles[3].metric(
        "Lost output tokens/s",
        widgets.known(pool_view.lost.output_tokens_per_s.value, si),
        help="Generated tokens/s the best split of the same GPUs would add. Secondary, total prompt + "
        f"output: {widgets.known(pool_view.lost.tokens_per_s.value, si)} tokens/s. Rests on "
        f"{plain(widgets.known(pool_view.loss_basis))} capacities: "
        f"{plain(widgets.known(pool_view.loss_basis_detail))}.",
    )
    if pool_view.ratio_drift:
        st.warning("Pool-ratio drift: the provisioned prefill:decode capacity no longer matches the traffic.")

if traffic:
    st.subheader("Traffic")
    widgets.chart(charts.traffic_mix(traffic))
    st.subheader("Prefill:decode ratio")
    rows, changes = compute.ratio_series(traffic, pool_view)
    widgets.chart(charts.ratio_over_time(rows, changes))
    st.caption(
        "'traffic needs': the hour's prompt and generated tokens at the pool's per-worker capacities (latest "
        "analyzer run); 'provisioned': workers reporting each role; red lines: detected change points."
    )
elif traffic is not None:
    st.caption("No engine telemetry for this pool in the range.")

if pool_view is not None:
    st.subheader("Change points")
    if pool_view.drift_events:
        widgets.table(
            [
                {
                    "from (UTC)": widgets.known(e.start, widgets.fmt_time),
                    "what changed": e.description or "",
                    "magnitude": widgets.known(e.magnitude, percent),
                }
                for e in pool_view.drift_events
            ]
        )
    elif pool_view.drift_events is None:
        st.caption(
            "Change points unknown: this analyzer run does not record them (an older summary version)."
        )
    else:
        st.caption("No change in the traffic mix was detected in the analyzed range.")
    st.subheader("Did the changes pay off?")
    if pool_view.changes:
        widgets.table(
            [
                {
                    "from (UTC)": widgets.known(c.at, widgets.fmt_time),
                    "workers moved": ", ".join(m.describe() for m in c.moved) or "-",
                    "followed": widgets.known(c.followed),
                    "predicted output tok/s": widgets.known(c.predicted_output_tokens_per_s, si),
                    "realized output tok/s": widgets.known(c.realized_output_tokens_per_s, si),
                    "realized / predicted": widgets.known(c.realized_to_predicted, percent),
                    "verdict": widgets.known(c.verdict),
                }
                for c in pool_view.changes
            ]
        )
        st.caption(
            "Predicted: the model's gain for the split adopted, at the time. Realized: the capacity the pool "
            "showed afterwards against before, both at the traffic mix before the change."
        )
    elif pool_view.changes is None:
        st.caption("Changes unknown: this analyzer run does not record them (an older summary version).")
    else:
        st.caption("No change of this pool's prefill/decode split in the analyzed range.")
    st.subheader("Latency targets")
    if pool_view.targets.attainment:
        widgets.table(
            [
                {
                    "latency (p90)": {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end to end"}.get(
                        a.metric or "", widgets.known(a.metric)
                    ),
                    "target": widgets.known(a.target_s, lambda s: f"{s:.3g} s"),
                    "serving time within it": widgets.known(a.share, percent),
                    "measured p90": widgets.known(a.p90_s, lambda s: f"{s:.3g} s"),
                    "pool p90 (merged buckets)": widgets.known(a.pool_p90_s, lambda s: f"{s:.3g} s"),
                    "observations in hours within it": widgets.known(a.pool_met_share, percent),
                }
                for a in pool_view.targets.attainment
            ]
        )
        st.caption(
            f"Rule: {plain(widgets.known(pool_view.targets.source))} "
            f"({plain(widgets.known(pool_view.targets.rule))}). "
            "From the engines' own histograms: the share of serving time whose window p90 met the target "
            "(prefill and colocated workers for TTFT, decode and colocated for TPOT and end to end), and the "
            "pool's p90 from its workers' histograms merged bucket by bucket; unknown "
            "where no "
            "engine reports it. With targets set, capacity and loss count goodput."
        )
    else:
        st.caption(
            "No latency target applies to this pool (PHASEFIT_ANALYZER_TARGETS, the catalog's targets:): "
            "its capacity is raw throughput."
        )
    if pool_view.recommended:
        st.subheader("Recommended split per SKU group")
        widgets.table(
            [
                {
                    "group": group,
                    "prefill now": r.prefill_now,
                    "decode now": r.decode_now,
                    "prefill best": r.prefill_best,
                    "decode best": r.decode_best,
                    "prefill tok/s per worker": si(r.prefill_tokens_per_s_per_worker),
                    "decode tok/s per worker": si(r.decode_tokens_per_s_per_worker),
                }
                for group, r in sorted(pool_view.recommended.items())
            ]
        )
    if pool_view.checks:
        with st.expander("Does disaggregation pay off here? (the analyzer's checks)"):
            widgets.table(
                [
                    {
                        "check": widgets.known(c.check),
                        "passed": widgets.known(c.passed, _yes_no),
                        "detail": c.detail or "",
                    }
                    for c in pool_view.checks
                ]
            )
elif analysis is None and context.reads.kind == "store":
    st.info("No analyzer run covers this range: recommended ratios and change points appear after one.")
