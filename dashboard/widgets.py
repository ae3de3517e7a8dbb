"""What every page shares: opening the reads, the sidebar filters (time range, cluster, model), small helpers.

Filter values live in ``st.session_state`` under keys of their own (``pf_*``), copied from the widgets'
keys on change, so the chosen range and filters survive moving between pages (Streamlit drops a widget's
state when a page without it runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, TypeVar

import altair as alt
import streamlit as st

from dashboard.data import Reads, describe_source, open_reads
from dashboard.plain import plain_rows
from dashboard.views import ALL, Inventory, NotServedError, Scope

T = TypeVar("T")
RANGES = {
    "Last 24 hours": timedelta(days=1),
    "Last 7 days": timedelta(days=7),
    "Last 30 days": timedelta(days=30),
}
CUSTOM = "Custom dates"
DEFAULT_RANGE = "Last 7 days"


@dataclass(frozen=True)
class PageContext:
    reads: Reads
    inventory: Inventory
    scope: Scope


def _remember(key: str) -> None:
    st.session_state[key] = st.session_state["_" + key]


def _sticky_select(label: str, options: Sequence[str], key: str, default: str) -> str:
    """A sidebar selectbox whose value survives page changes (see the module docstring)."""
    remembered = st.session_state.get(key, default)
    if remembered not in options:
        remembered = default if default in options else options[0]
    st.session_state["_" + key] = remembered
    choice = st.sidebar.selectbox(label, list(options), key="_" + key, on_change=_remember, args=(key,))
    st.session_state[key] = choice
    return str(choice)


def _anchor(inventory: Inventory) -> datetime:
    """The end of the time range: the newest telemetry (a replayed or simulated week lives in the past)."""
    return inventory.data_until or datetime.now(UTC).replace(microsecond=0)


def _time_range(inventory: Inventory) -> tuple[datetime, datetime]:
    end = _anchor(inventory)
    choice = _sticky_select("Time range", [*RANGES, CUSTOM], "pf_range", DEFAULT_RANGE)
    if choice != CUSTOM:
        return end - RANGES[choice], end
    first_day = (end - timedelta(days=7)).date()
    remembered = st.session_state.get("pf_dates", (first_day, end.date()))
    st.session_state["_pf_dates"] = remembered
    picked = st.sidebar.date_input(
        "From / to (UTC, inclusive)", key="_pf_dates", on_change=_remember, args=("pf_dates",)
    )
    days = [d for d in (picked if isinstance(picked, tuple) else (picked,)) if isinstance(d, date)]
    if not days:
        return end - RANGES[DEFAULT_RANGE], end
    since = datetime.combine(days[0], time(), tzinfo=UTC)
    until = datetime.combine(days[-1], time(), tzinfo=UTC) + timedelta(days=1)
    return since, until


def page(title: str, caption: str) -> PageContext:
    """Open the reads, draw the title and the sidebar filters, and return what the page needs; stops the
    page with an explanation when the data source cannot be read."""
    st.title(title)
    st.caption(caption)
    try:
        reads = open_reads()
        inventory = reads.inventory()
    except Exception as exc:  # a wrong URL, an unreachable store or service: say so, do not show a trace
        st.error(f"Cannot read phasefit's data: {type(exc).__name__}: {exc}")
        st.stop()
        raise  # unreachable: st.stop() ends the script run
    since, until = _time_range(inventory)
    cluster = _sticky_select("Cluster", [ALL, *inventory.clusters], "pf_cluster", ALL)
    model = _sticky_select("Model", [ALL, *inventory.models], "pf_model", ALL)
    st.sidebar.caption(f"{since:%Y-%m-%d %H:%M} → {until:%Y-%m-%d %H:%M} UTC · {describe_source(reads)}")
    scope = Scope(since, until, None if cluster == ALL else cluster, None if model == ALL else model)
    return PageContext(reads, inventory, scope)


def served(read: Callable[[], T]) -> T | None:
    """Run a read; where the data source does not serve it, show why and return None."""
    try:
        return read()
    except NotServedError as exc:
        st.info(str(exc))
        return None


def scoped_worker_ids(context: PageContext) -> list[str] | None:
    """The workers inside the cluster/model filter; None when no filter is set (the whole fleet)."""
    if context.scope.cluster is None and context.scope.model is None:
        return None
    return [w.record.worker_id for w in context.inventory.in_scope(context.scope)]


def chart(figure: alt.TopLevelMixin) -> None:
    """Draw an Altair chart. Its spec is built without Altair's JSON-schema validation (seconds for a
    thousand points; the builders' specs are validated once in tests/dashboard/test_charts.py)."""
    st.vega_lite_chart(spec=figure.to_dict(validate=False), width="stretch")


def fmt_time(ts: datetime | None) -> str:
    return "-" if ts is None else f"{ts:%Y-%m-%d %H:%M}"


def table(rows: Sequence[Mapping[str, Any]]) -> None:
    """``st.table`` of rows whose text is data (names, details): its cells are Markdown, so every text cell
    is escaped (:func:`dashboard.plain.plain_rows`) and shows exactly as it is."""
    st.table(plain_rows(rows), hide_index=True)


def known(value: T | None, show: Callable[[T], str] = str) -> str:
    """A value as ``show`` writes it, or "unknown" where the data does not say (never 0, never a blank)."""
    return "unknown" if value is None else show(value)
