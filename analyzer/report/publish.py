"""Rendering the audit, storing it by ISO week, and writing it to files.

The stored body is the self-contained HTML (what the dashboard shows and ``GET /v1/reports/{week}``
serves); the summary holds the headline figures. ``created_at`` lives only in the reports table, never
in the body, so rebuilding a week from the same store gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection

from analyzer.report.document import blocks
from analyzer.report.figures import Chart, charts
from analyzer.report.html import render_html
from analyzer.report.markdown import chart_file, render_markdown
from analyzer.report.model import AuditReport
from fleet.store.reports import Report, put_report

Format = Literal["html", "md"]


@dataclass(frozen=True)
class Rendered:
    html: str
    markdown: str
    charts: list[Chart]
    summary: dict[str, Any]


def render(report: AuditReport) -> Rendered:
    drawn = charts(report)
    content = blocks(report, {c.name: c for c in drawn})
    return Rendered(render_html(report, content), render_markdown(report, content), drawn, report.summary())


def store_report(connection: Connection, week: str, rendered: Rendered, *, created_at: datetime) -> None:
    """Store (or replace) the week's report: HTML body, summary figures, creation time."""
    put_report(connection, Report(week, "html", created_at, rendered.summary, rendered.html))


def write_files(rendered: Rendered, week: str, folder: Path, fmt: Format) -> list[Path]:
    """Write the report into ``folder`` (created if missing): one HTML file, or the Markdown file with its
    chart PNGs next to it. Each file is written whole or not at all (temporary name, then rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    files: list[tuple[Path, bytes]] = []
    if fmt == "html":
        files.append((folder / f"phasefit-audit-{week}.html", rendered.html.encode()))
    else:
        files.append((folder / f"phasefit-audit-{week}.md", rendered.markdown.encode()))
        files += [(folder / chart_file(week, c.name), c.png) for c in rendered.charts]
    for path, data in files:
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        partial.replace(path)
    return [path for path, _ in files]
