"""Alerts: what Alertmanager delivered to phasefit, firing and resolved."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, widgets

context = widgets.page(
    "Alerts",
    "Alert episodes Alertmanager delivered to phasefit's webhook receiver in the range (one row per "
    "fingerprint and start; a re-delivery updates its row).",
)
alerts = widgets.served(lambda: context.reads.alerts(context.scope))
if alerts is None:
    st.stop()
firing = [a for a in alerts if a.status == "firing"]
tiles = st.columns(3)
tiles[0].metric("Firing", len(firing))
tiles[1].metric("Resolved", len(alerts) - len(firing))
tiles[2].metric("Alert names", len({a.alertname for a in alerts}))
if not alerts:
    st.success("No alert episodes in this range.")
    st.stop()
status = st.segmented_control("Status", ["firing", "resolved"], selection_mode="multi", key="al_status")
shown = [a for a in alerts if not status or a.status in status]
widgets.chart(charts.alert_timeline(shown, context.scope.since, context.scope.until))
st.dataframe(
    [
        {
            "alert": a.alertname,
            "status": a.status,
            "severity": a.severity,
            "started": widgets.fmt_time(a.starts_at),
            "ended": widgets.fmt_time(a.ends_at),
            "worker": a.labels.get("worker", ""),
            "pool": a.labels.get("pool", ""),
            "summary": a.summary,
            "fingerprint": a.fingerprint,
            "receiver": a.receiver,
        }
        for a in shown
    ],
    hide_index=True,
    width="stretch",
)
