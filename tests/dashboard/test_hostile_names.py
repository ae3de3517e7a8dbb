"""Names are data on the dashboard (issue 29, C): a worker id holding Markdown or HTML shows as the text it
is. Streamlit renders Markdown in ``st.markdown``, captions, alerts, ``st.table`` cells and metrics; the
Misplacements page of a store whose misplaced workers have hostile ids is run with AppTest, and every
Markdown element it sends is rendered with markdown-it (CommonMark plus GFM tables and strikethrough) and
checked: no link, no image, no URL of the evil host in any attribute, the name as its text.

The browser-level check (no request to the evil host from headless Chromium) is in test_browser.py."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import compute
from dashboard.plain import plain, plain_rows
from dashboard.views import FindingView
from tests.dashboard.seed import Seeded
from tests.markup import Tags, markdown_it, parse_html

PAGES = Path(__file__).resolve().parents[2] / "dashboard" / "app_pages"
HOSTILE = [
    "![x](https://evil.example/a.png)",
    "[link](https://evil.example)",
    "<img src=https://evil.example/x>",
    "**bold**",
    "[/bold]c",
]


def _rendered(markdown: str) -> Tags:
    return parse_html(markdown_it().render(markdown))


def _assert_inert(markdown: str) -> str:
    """The Markdown renders no link, image or embedded HTML and names the evil host in no attribute; its
    text as a reader sees it (the zero-width spaces that break autolinks are invisible)."""
    tags = _rendered(markdown)
    for tag, attrs in tags.tags:
        assert tag not in ("a", "img", "iframe", "script"), (tag, markdown)
        assert all("evil.example" not in value for value in attrs.values()), (tag, attrs)
    return tags.visible


@pytest.mark.parametrize("name", HOSTILE)
def test_plain_shows_the_name_as_it_is(name: str) -> None:
    text = _assert_inert(plain(name))
    assert text.strip() == name
    assert not [t for t, _ in _rendered(plain(name)).tags if t != "p"]  # no emphasis, no code either
    assert plain("node03/decode-1") == "node03/decode-1"  # ordinary names read as they are


def test_plain_rows_escape_text_cells_only() -> None:
    (row,) = plain_rows([{"worker": HOSTILE[0], "lost": 12.0, "none": None}])
    assert row["lost"] == 12.0 and row["none"] is None
    assert _assert_inert(row["worker"]).strip() == HOSTILE[0]


def test_a_finding_that_estimates_no_loss_shows_no_total_of_0() -> None:
    """A telemetry-degraded finding carries 0 total tokens/s beside a null output figure: unknown, not 0."""
    base = FindingView(
        id=1, kind="telemetry-degraded", worker_id="w", pool="c/m", severity="warning", status="open",
        gpu_sku="H100-SXM", role="decode", bottleneck="unknown", evidence={}, tokens_per_s=None,
        lost_tokens_per_s=0.0, lost_tokens_per_s_low=0.0, lost_tokens_per_s_high=0.0, action=None,
        action_detail="", expected_gain_tokens_per_s=None, counterpart_worker_id=None, target_sku=None,
        first_seen=_ts(), last_seen=_ts(), resolved_at=None,
    )  # fmt: skip
    (row,) = compute.finding_rows([base])
    assert row["total tok/s (secondary)"] is None
    placed = dataclasses.replace(base, lost_tokens_per_s=900.0, lost_output_tokens_per_s=100.0)
    assert compute.finding_rows([placed])[0]["total tok/s (secondary)"] == 900.0


def _ts() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 11, 25, tzinfo=UTC)


def hostile_copy(seeded: Seeded, folder: Path) -> tuple[str, dict[str, str]]:
    """A copy of the seeded store whose misplaced workers' findings name them with hostile ids: its URL and
    seeded id -> hostile id (shared with the browser test)."""
    target = folder / "hostile.db"
    with sqlite3.connect(seeded.url.removeprefix("sqlite:///")) as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    names = {w: f"{w} {HOSTILE[i % len(HOSTILE)]}" for i, w in enumerate(sorted(seeded.misplaced))}
    with sqlite3.connect(target) as db:
        for old, new in names.items():
            for column in ("worker_id", "subject", "recommendation", "evidence"):
                db.execute(f"UPDATE findings SET {column} = REPLACE({column}, ?, ?)", (old, new))
    return f"sqlite:///{target}", names


@pytest.fixture
def hostile_store(seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The page reads :func:`hostile_copy`; seeded id -> hostile id."""
    url, names = hostile_copy(seeded, tmp_path)
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", url)
    monkeypatch.setenv("PHASEFIT_DASHBOARD_SOURCE", "store")
    monkeypatch.delenv("PHASEFIT_CATALOG_PATH", raising=False)
    return names


def test_the_misplacements_page_shows_hostile_worker_ids_as_text(hostile_store: dict[str, str]) -> None:
    app = AppTest.from_string((PAGES / "misplacements.py").read_text(), default_timeout=60)
    app.run()
    assert not app.exception, [e.message for e in app.exception]
    (top,) = [t.value for t in app.table]
    cells = [str(v) for column in top.columns for v in top[column] if isinstance(v, str)]
    shown = {_assert_inert(cell).strip() for cell in cells}
    assert set(hostile_store.values()) <= shown  # each hostile id, as its text
    # Every other Markdown element of the page: the header line, the chosen finding's evidence and action.
    markdown = [m.value for m in app.markdown] + [c.value for c in app.caption] + [i.value for i in app.info]
    for body in markdown:
        _assert_inert(body)
    for name in hostile_store.values():
        chosen = [o for o in app.selectbox(key="mp_detail").options if o.startswith(name)]
        if not chosen:
            continue
        app.selectbox(key="mp_detail").select(chosen[0]).run()
        assert not app.exception
        texts = [_assert_inert(m.value) for m in app.markdown]
        assert any(name in t for t in texts), texts
    # st.dataframe and the CSV show text as it is (no Markdown there): the ids unescaped.
    assert set(hostile_store.values()) <= set(app.dataframe[0].value["worker"])


@pytest.mark.parametrize("name", ["see https://evil.example/x", "www.evil.example", "ops@evil.example"])
def test_plain_leaves_nothing_for_gfm_literal_autolinking(name: str) -> None:
    """Streamlit's GFM autolinks URLs, www. and e-mails in text after escapes are resolved: a zero-width
    space after the scheme's colon, after www and after @ leaves no pattern to match (GFM's literal
    autolink patterns, checked here on the text a renderer would scan), and the text reads the same."""
    import re

    assert _assert_inert(plain(name)).strip() == name  # what a reader sees
    raw = "".join(_rendered(plain(name)).text)  # what an autolinker scans: escapes resolved, spaces kept
    assert not re.search(r"(?i)https?://|www\.|[-.+\w]+@[-\w]+\.", raw), raw
