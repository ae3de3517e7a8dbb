"""Roofline: every worker on its SKU's roofline, both SKUs' roofs drawn, so a misplaced worker shows at a
glance."""

from __future__ import annotations

import streamlit as st

from dashboard import compute, roofline_chart, widgets
from dashboard.data import catalog

context = widgets.page(
    "Roofline",
    "Each worker at its mean over the range: achieved FLOP/s per GPU against arithmetic intensity, under the "
    "roofs of every SKU it could run on. Decode sits on the sloped (memory) part, prefill near the flat "
    "(compute) part; the gap between two SKUs' slopes is what the same decode work gains on the faster HBM.",
)
scope = context.scope
workers = context.inventory.in_scope(scope)
activity = widgets.served(lambda: context.reads.worker_activity(scope, widgets.scoped_worker_ids(context)))
if activity is None:
    st.stop()
findings = widgets.served(lambda: context.reads.findings(scope)) or []
view = compute.roofline_view(workers, activity, findings, catalog())

if not view.points:
    st.info("No worker in this range has tensor and DRAM activity to place on a roofline.")
    st.stop()
mode = st.radio(
    "View",
    ["Roofline", "Speed-of-light plane"],
    horizontal=True,
    key="rf_view",
    help="The speed-of-light plane uses the counters alone (no FLOP/byte estimate).",
)
if mode == "Roofline":
    widgets.chart(roofline_chart.roofline(view.roofs, view.points))
    st.caption(
        "Intensity and FLOP/s are estimated from counters: tensor-pipe activity x the SKU's dense peak at "
        "the worker's precision, over DRAM activity x its HBM bandwidth (DCGM's DRAM activity tops out "
        "near 0.8). "
        "Roofs are the catalog's spec figures. Red rings: open misplacement findings."
    )
else:
    widgets.chart(roofline_chart.speed_of_light(view.points))
    st.caption(
        "Right of the dashed line: memory pressure; above it: compute pressure; neither: under-utilised."
    )

st.subheader("Points")
st.dataframe(compute.point_rows(view), hide_index=True, width="stretch")
if view.undrawn:
    with st.expander(f"{len(view.undrawn)} worker(s) not drawn"):
        st.dataframe([{"worker": w, "why": why} for w, why in view.undrawn], hide_index=True, width="stretch")
