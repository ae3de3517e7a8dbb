"""The audit as Markdown: the same headings, tables and numbers as the HTML. Charts are PNG files written
next to the ``.md`` and linked relatively, each with alt text stating its main number, so the document is
complete without them (some renderers drop ``data:`` images)."""

from __future__ import annotations

from analyzer.report.blocks import Block, Figure, Heading, Para, Table, Tiles
from analyzer.report.model import AuditReport


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def chart_file(week: str, name: str) -> str:
    return f"phasefit-audit-{week}-{name}.png"


def _block(block: Block, week: str) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, Para):
        return (
            f"> {block.text}"
            if block.kind == "verdict"
            else (f"_{block.text}_" if block.kind == "note" else block.text)
        )
    if isinstance(block, Tiles):
        return "\n".join(f"- **{t.label}: {t.value}**: {t.detail}" for t in block.tiles)
    if isinstance(block, Table):
        lines = [
            "| " + " | ".join(_cell(c) for c in block.columns) + " |",
            "|" + "|".join("---:" if i in block.numeric else "---" for i in range(len(block.columns))) + "|",
        ]
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in block.rows]
        if block.note:
            lines.append(f"\n_{block.note}_")
        return "\n".join(lines)
    assert isinstance(block, Figure)
    chart = block.chart
    return f"![{chart.alt}]({chart_file(week, chart.name)})\n\n_{chart.title}._"


def render_markdown(report: AuditReport, blocks: list[Block]) -> str:
    return "\n\n".join(_block(b, report.week) for b in blocks) + "\n"
