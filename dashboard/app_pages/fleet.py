"""Fleet: lost tokens now and over the range, GPUs by SKU and role, activity over time, open findings."""

from __future__ import annotations

import streamlit as st

from analyzer.report.style import percent, si, tokens_range
from dashboard import charts, compute, gpu_only, widgets
from fleet.contract import ActivityEvidence

context = widgets.page(
    "Fleet",
    "Is each worker on the hardware its bottleneck needs, and how many tokens does the fleet lose where it "
    "is "
    "not? Figures for the selected range, cluster and model.",
)
reads, scope = context.reads, context.scope
ids = widgets.scoped_worker_ids(context)

if not context.inventory.workers:
    # GPU samples and no engine (dcgm-exporter alone): the GPU view, as `phasefit analyze` prints it.
    gpu_view = gpu_only.gpu_view(reads, scope)
    if gpu_view is not None:
        gpu_only.render(gpu_view)
        st.stop()

findings = widgets.served(lambda: reads.findings(scope)) or []
lost = widgets.served(lambda: reads.lost_tokens(scope)) or []
analysis = widgets.served(lambda: reads.analysis(scope)) if reads.kind == "store" else None
head = compute.headline(analysis, findings, lost)

tiles = st.columns(4)
demand_limited = analysis is not None and analysis.fleet is not None and analysis.fleet.demand_limited is True
if head.lost_output_now is not None:
    tiles[0].metric(
        "Output capacity lost now (tok/s)" if demand_limited else "Lost output tokens/s now",
        si(head.lost_output_now),
        help="Generated tokens/s against the best placement of the same GPUs; range "
        f"{tokens_range(head.lost_output_low, head.lost_output_high)}; "
        + (f"{head.lost_requests_now:,.2f} requests/s; " if head.lost_requests_now is not None else "")
        + f"secondary: {si(head.lost_now)} total (prompt + output) tokens/s. Source: {head.source}.",
    )
else:
    tiles[0].metric(
        "Capacity lost now (total tok/s)" if demand_limited else "Lost total tokens/s now",
        si(head.lost_now) if head.lost_now is not None else "unknown",
        help="Total (prompt + output) tokens/s against the best placement of the same GPUs; range "
        f"{tokens_range(head.lost_low, head.lost_high)}. Source: {head.source}.",
    )
if head.lost_output_in_range is not None:
    tiles[1].metric(
        "Lost output tokens over the range",
        f"{si(head.lost_output_in_range)} output tokens",
        help=f"Generated tokens over the {head.lost_output_hours} hour(s) whose output loss is known. "
        f"Secondary, of which prompt + output total: {si(head.lost_tokens_in_range)} tokens (mean "
        f"{si(head.mean_lost)} tok/s over the hours the analyzer covered).",
    )
else:
    tiles[1].metric(
        "Lost over the range (total tokens, secondary)",
        f"{si(head.lost_tokens_in_range)} tokens" if head.lost_tokens_in_range is not None else "unknown",
        help="Prompt + output tokens (output tokens unknown for this range): mean "
        f"{si(head.mean_lost)} tok/s over the hours the analyzer covered.",
    )
tiles[2].metric(
    "Placement efficiency",
    "unknown" if head.capacity_unknown else percent(head.efficiency),
    help="Current sustainable tokens/s over what the best placement of the same GPUs would sustain.",
)
tiles[3].metric(
    "Misplaced workers",
    str(head.misplaced_workers),
    help=f"{head.open_findings} open findings: "
    + ", ".join(f"{n} {s}" for s, n in sorted(head.open_by_severity.items())),
)
if head.unjudged_workers:
    st.warning(
        f"{head.unjudged_workers} worker(s) could not be judged (misplaced or not is unknown for them): "
        + "; ".join(f"{reason} ({n})" for reason, n in head.unjudged_reasons.items())
    )
elif analysis is not None and head.judged_workers is None:
    st.info(
        "Which workers the analyzer could judge is unknown: this run does not say (an older summary "
        "version). Misplaced or not is unknown for every worker without a finding."
    )
weak = head.judged_by_evidence.get(ActivityEvidence.UTILISATION, 0)
if weak:
    st.info(
        f"{weak} worker(s) were judged on utilisation counters only (no profiling fields): weaker evidence. "
        "Busy-time counters say how often an engine or the memory controller was busy, not whether bandwidth "
        "or compute limited throughput; their findings are never critical."
    )
if demand_limited:
    st.info(
        "The fleet was demand-limited: the loss is idle capacity and money, not undelivered tokens "
        "(the best placement would serve the same traffic with fewer GPUs busy)."
    )
model = analysis.summary.model if analysis is not None else None
if model is not None and model.changes_scored:
    st.caption(
        f"Did the changes pay off: {model.changes_scored} change(s) of a split scored in this range, median "
        f"realized-versus-predicted error {widgets.known(model.realized_error_median, percent)} (per pool on "
        "the Drift page)."
    )

if any(p.output is not None for p in lost):
    st.subheader("Lost output tokens/s")
    widgets.chart(charts.lost_output(lost))
    st.caption("Secondary: lost total tokens/s (prompt + output), with its range.")
    widgets.chart(charts.lost_tokens(lost))
else:
    st.subheader("Lost tokens/s (secondary: total prompt + output; output tokens unknown)")
    if any(p.lost is not None for p in lost):
        widgets.chart(charts.lost_tokens(lost))
    else:
        st.caption("No analyzer conclusions cover this range.")

groups = compute.scoped_groups(context.inventory, scope)
lost_gpus = sum(g.gpus for g in groups if g.state == "lost")
degraded = sum(g.gpus for g in groups if g.state == "degraded")
unattributed = sum(g.gpus for g in groups if g.role == "unattributed")
if lost_gpus or degraded or unattributed:
    st.warning(
        f"Telemetry: {lost_gpus} GPU(s) lost (Xid 79), {degraded} with degraded telemetry, "
        f"{unattributed} not attributed to a worker (their role is unknown, never guessed)."
    )

left, right = st.columns([2, 3])
with left:
    st.subheader("GPUs by SKU and role")
    st.caption(compute.device_line(context.inventory, groups, scope.cluster is None and scope.model is None))
    widgets.chart(charts.gpu_groups(groups))
    st.dataframe(
        [
            {
                "SKU": g.sku,
                "role": g.role,
                "state": g.state,
                "GPUs": None if g.mig else g.gpus,
                "MIG instances": g.gpus if g.mig else None,
            }
            for g in groups
        ],
        hide_index=True,
        width="stretch",
    )
with right:
    st.subheader("Activity per SKU and role (hourly means)")
    points = widgets.served(lambda: reads.utilisation(scope, ids))
    if points:
        widgets.chart(charts.utilisation(points, "tensor_active", "Tensor-pipe activity"))
        widgets.chart(charts.utilisation(points, "dram_active", "DRAM activity"))
        st.caption(
            "Prefill is compute-bound (tensor activity high); decode is memory-bound (DRAM activity high; "
            "DCGM's practical ceiling is about 80%)."
        )
    elif points is not None:
        st.caption("No GPU telemetry in this range.")
