"""Drift: each pool's traffic mix and prefill:decode ratio over time, against provisioned and recommended."""

from __future__ import annotations

from collections import defaultdict

import streamlit as st

from analyzer.report.style import si
from dashboard import charts, compute, widgets

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
    by_pool[worker.pool].append(worker.worker_id)
if not by_pool:
    st.info("No workers in this scope.")
    st.stop()
pool = st.selectbox("Pool", sorted(by_pool), key="dr_pool")
traffic = widgets.served(lambda: context.reads.traffic(scope, {pool: by_pool[pool]}))
analysis = widgets.served(lambda: context.reads.analysis(scope))
summary = next((p for p in analysis.pools if p.get("pool") == pool), None) if analysis else None

if summary is not None:
    tiles = st.columns(4)
    tiles[0].metric("Prefill:decode now", str(summary.get("prefill_decode_now") or "-"))
    tiles[1].metric(
        "Recommended",
        str(summary.get("prefill_decode_recommended") or "-"),
        help="The best split of the same GPUs for the latest traffic mix (per SKU below).",
    )
    tiles[2].metric("Bound by", str(summary.get("bound") or "-"), help="The pool that limits requests/s now.")
    tiles[3].metric("Lost tokens/s", si(summary.get("lost_tokens_per_s")))
    if summary.get("ratio_drift"):
        st.warning("Pool-ratio drift: the provisioned prefill:decode capacity no longer matches the traffic.")

if traffic:
    st.subheader("Traffic")
    widgets.chart(charts.traffic_mix(traffic))
    st.subheader("Prefill:decode ratio")
    rows, changes = compute.ratio_series(traffic, summary)
    widgets.chart(charts.ratio_over_time(rows, changes))
    st.caption(
        "'traffic needs': the hour's prompt and generated tokens at the pool's per-worker capacities (latest "
        "analyzer run); 'provisioned': workers reporting each role; red lines: detected change points."
    )
elif traffic is not None:
    st.caption("No engine telemetry for this pool in the range.")

if summary is not None:
    events = summary.get("drift_events") or []
    st.subheader("Change points")
    if events:
        st.table(
            [
                {
                    "from (UTC)": e["start"].replace("T", " ").removesuffix(":00Z"),
                    "what changed": e.get("description", ""),
                    "magnitude": f"{float(e.get('magnitude') or 0):.0%}",
                }
                for e in events
            ],
            hide_index=True,
        )
    else:
        st.caption("No change in the traffic mix was detected in the analyzed range.")
    per_sku = summary.get("recommended") or {}
    if per_sku:
        st.subheader("Recommended split per SKU group")
        st.table(
            [
                {
                    "group": group,
                    "prefill now": r.get("prefill_now"),
                    "decode now": r.get("decode_now"),
                    "prefill best": r.get("prefill_best"),
                    "decode best": r.get("decode_best"),
                    "prefill tok/s per worker": si(r.get("prefill_tokens_per_s_per_worker")),
                    "decode tok/s per worker": si(r.get("decode_tokens_per_s_per_worker")),
                }
                for group, r in sorted(per_sku.items())
            ],
            hide_index=True,
        )
    checks = summary.get("checks") or []
    if checks:
        with st.expander("Does disaggregation pay off here? (the analyzer's checks)"):
            st.table(
                [
                    {
                        "check": c["check"],
                        "passed": {True: "yes", False: "no"}.get(c["passed"], "n/a"),
                        "detail": c["detail"],
                    }
                    for c in checks
                ],
                hide_index=True,
            )
elif analysis is None and context.reads.kind == "store":
    st.info("No analyzer run covers this range: recommended ratios and change points appear after one.")
