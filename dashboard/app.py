"""The phasefit dashboard: ``streamlit run dashboard/app.py`` (``phasefit dashboard`` does that for you).

A router only: ``st.navigation`` over one script per page under ``app_pages/``; each page draws its own
filters (time range, cluster, model) and reads through :mod:`dashboard.data`.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).resolve().parent / "app_pages"

st.set_page_config(page_title="phasefit", page_icon=":material/memory:", layout="wide")
navigation = st.navigation(
    {
        "Fleet": [
            st.Page(PAGES / "fleet.py", title="Fleet", icon=":material/dns:", default=True),
            st.Page(PAGES / "misplacements.py", title="Misplacements", icon=":material/swap_horiz:"),
            st.Page(PAGES / "roofline.py", title="Roofline", icon=":material/show_chart:"),
            st.Page(PAGES / "drift.py", title="Drift", icon=":material/trending_up:"),
        ],
        "Operations": [
            st.Page(PAGES / "alerts.py", title="Alerts", icon=":material/notifications:"),
            st.Page(PAGES / "reports.py", title="Audit reports", icon=":material/description:"),
        ],
    }
)
navigation.run()
