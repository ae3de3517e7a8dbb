"""Misplacements: the analyzer's findings, largest loss first, with their evidence and recommended action."""

from __future__ import annotations

import csv
import io

import streamlit as st

from analyzer.report.style import si, tokens_range
from dashboard import compute, widgets
from dashboard.plain import plain

context = widgets.page(
    "Misplacements",
    "Workers whose measured bottleneck does not match their GPU, and pools whose prefill:decode split no "
    "longer matches their traffic: sorted by the tokens/s the best placement of the same GPUs would add.",
)
findings = widgets.served(lambda: context.reads.findings(context.scope)) or []

filters = st.columns(5)
statuses = filters[0].multiselect("Status", ["open", "resolved"], default=["open"], key="mp_status")
pools = filters[1].multiselect("Pool", sorted({f.pool for f in findings if f.pool}), key="mp_pool")
skus = filters[2].multiselect("SKU", sorted({f.gpu_sku for f in findings if f.gpu_sku}), key="mp_sku")
roles = filters[3].multiselect("Role", sorted({f.role for f in findings}), key="mp_role")
kinds = filters[4].multiselect("Kind", sorted({f.kind for f in findings}), key="mp_kind")
shown = [
    f
    for f in findings
    if (not statuses or f.status in statuses)
    and (not pools or f.pool in pools)
    and (not skus or f.gpu_sku in skus)
    and (not roles or f.role in roles)
    and (not kinds or f.kind in kinds)
]
rows = compute.finding_rows(shown)

if not rows:
    st.info(
        "No findings match these filters. Only workers whose bottleneck was measured are judged: the Fleet "
        "page says how many could not be, and why."
    )
    st.stop()

workers = [f for f in shown if f.worker_id and f.kind in compute.MISPLACEMENT_KINDS]
st.markdown(
    f"**{len(shown)} findings**, {len({f.worker_id for f in workers})} misplaced workers. Findings of one "
    "worker or pool overlap: their losses are not added up."
)

st.subheader("Top actions")
top = [
    {
        "worker / pool": r["worker"] or r["pool"],
        "kind": r["kind"],
        "SKU · role": f"{r['SKU']} · {r['role']}" if r["SKU"] else "pool-level",
        "lost output tok/s": f"{si(r['lost output tok/s'])} ({tokens_range(r['low'], r['high'])})"
        if r["lost output tok/s"] is not None
        else "-",
        "lost req/s": "-" if r["lost req/s"] is None else f"{r['lost req/s']:,.2f}",
        "total tok/s (secondary)": si(r["total tok/s (secondary)"]),
        "action": r["action"],
        "what to do": r["detail"],
        "evidence": r["evidence"],
    }
    for r in rows[:10]
]
widgets.table(top)  # names and details are data: shown as they are, never as Markdown

st.subheader("All findings")
st.dataframe(
    rows,
    hide_index=True,
    width="stretch",
    column_order=[
        "worker",
        "pool",
        "kind",
        "severity",
        "SKU",
        "role",
        "bottleneck",
        "lost output tok/s",
        "low",
        "high",
        "lost req/s",
        "total tok/s (secondary)",
        "action",
        "expected gain tok/s",
        "counterpart",
        "target SKU",
        "evidence",
        "first seen",
        "last seen",
        "status",
    ],
    column_config={
        "lost output tok/s": st.column_config.NumberColumn(format="%d"),
        "total tok/s (secondary)": st.column_config.NumberColumn(format="%d"),
        "expected gain tok/s": st.column_config.NumberColumn(format="%d"),
    },
)
buffer = io.StringIO()
writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
writer.writeheader()
writer.writerows(rows)
st.download_button("Download CSV", buffer.getvalue(), file_name="phasefit-findings.csv", mime="text/csv")

st.subheader("Evidence")
by_loss = sorted(shown, key=lambda f: (f.lost_tokens_per_s is None, -(f.lost_tokens_per_s or 0.0)))
labels = [f"{f.subject} · {f.kind}" for f in by_loss]
chosen = st.selectbox("Finding", labels, key="mp_detail")
finding = by_loss[labels.index(chosen)] if chosen else None
if finding is not None:
    left, right = st.columns(2)
    with left:
        # Every name and label is escaped (dashboard.plain): a worker id is data, never Markdown.
        where = (
            f"{plain(finding.role)} on {plain(finding.gpu_sku)}"
            if finding.gpu_sku
            else "a pool-level finding"
        )
        st.markdown(
            f"**{plain(finding.subject)}** ({where}): measured bottleneck **{plain(finding.bottleneck)}**, "
            f"{plain(finding.severity)}, {plain(finding.status)}.  \n"
            f"Seen {widgets.fmt_time(finding.first_seen)} → {widgets.fmt_time(finding.last_seen)} UTC; "
            "losing "
            + (
                f"{tokens_range(finding.lost_output_tokens_per_s_low, finding.lost_output_tokens_per_s_high)}"
                " of output"
                + (
                    f", {finding.lost_requests_per_s:,.2f} requests/s"
                    if finding.lost_requests_per_s is not None
                    else ""
                )
                + "; secondary, total prompt + output: "
                f"{tokens_range(finding.lost_tokens_per_s_low, finding.lost_tokens_per_s_high)}."
                if finding.lost_output_tokens_per_s is not None
                else f"{tokens_range(finding.lost_tokens_per_s_low, finding.lost_tokens_per_s_high)} "
                "(total prompt + output tokens; output unknown)."
                if compute.total_lost(finding) is not None
                else "an unknown amount: this finding estimates no loss."
            )
        )
        if finding.action:
            st.markdown(
                f"**Recommended action: {plain(finding.action)}.** {plain(finding.action_detail or '')}"
            )
    with right:
        st.dataframe(
            [
                {"signal": k, "value": v if isinstance(v, str) else f"{v:,.4g}"}
                for k, v in finding.evidence.items()
                if v is not None
            ],
            hide_index=True,
            width="stretch",
            height=320,
        )
