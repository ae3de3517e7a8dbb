"""The audit as one self-contained HTML file: inline CSS, charts as base64 PNG ``data:`` URIs, no script, no
external reference of any kind, so it opens offline and mails as a single attachment.
"""

from __future__ import annotations

import base64
from html import escape

from analyzer.report.blocks import Block, Heading, Para, Table, Tiles
from analyzer.report.document import title
from analyzer.report.model import AuditReport

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2rem auto;max-width:1180px;
color:#222;
line-height:1.45;padding:0 1rem}
h1{font-size:1.45rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2.2rem;border-bottom:1px solid #ddd;
padding-bottom:.2rem}
.note{color:#555;font-size:.85rem}.verdict{font-size:1.05rem;background:#f6f8fa;border-left:4px solid #d62728;
padding:.6rem .9rem}.warning{background:#fff6e5;padding:.5rem .8rem}
.tiles{display:flex;gap:1rem;margin:1rem 0}
.tile{flex:1;border:1px solid #ddd;border-radius:6px;padding:.7rem .9rem}
.tile .label{font-size:.8rem;color:#555;text-transform:uppercase;letter-spacing:.03em}
.tile .value{font-size:1.6rem;font-weight:600;margin:.2rem 0}
.tile .value.long{font-size:1.05rem}.tile .detail{font-size:.8rem;color:#444}
table{border-collapse:collapse;width:100%;font-size:.8rem;margin:.6rem 0}th,td{border:1px solid #e1e1e1;
padding:.3rem .45rem;vertical-align:top;text-align:left}th{background:#f3f4f6}td.num{text-align:right;
white-space:nowrap}caption{caption-side:bottom;text-align:left;color:#555;font-size:.78rem;padding-top:.3rem}
figure{margin:1rem 0}figure img{max-width:100%}figcaption{font-size:.8rem;color:#555}
"""


def _block(block: Block) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{escape(block.text)}</h{block.level}>"
    if isinstance(block, Para):
        css = f' class="{block.kind}"' if block.kind != "normal" else ""
        return f"<p{css}>{escape(block.text)}</p>"
    if isinstance(block, Tiles):
        tiles = "".join(
            f'<div class="tile"><div class="label">{escape(t.label)}</div>'
            f'<div class="value{" long" if len(t.value) > 18 else ""}">{escape(t.value)}</div>'
            f'<div class="detail">{escape(t.detail)}</div></div>'
            for t in block.tiles
        )
        return f'<div class="tiles">{tiles}</div>'
    if isinstance(block, Table):
        head = "".join(f"<th>{escape(c)}</th>" for c in block.columns)
        body = "".join(
            "<tr>"
            + "".join(
                f'<td class="num">{escape(v)}</td>' if i in block.numeric else f"<td>{escape(v)}</td>"
                for i, v in enumerate(row)
            )
            + "</tr>"
            for row in block.rows
        )
        caption = f"<caption>{escape(block.note)}</caption>" if block.note else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    chart = block.chart
    data = base64.b64encode(chart.png).decode("ascii")
    return (
        f'<figure><img alt="{escape(chart.alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption><b>{escape(chart.title)}.</b> {escape(chart.alt)}</figcaption></figure>"
    )


def render_html(report: AuditReport, blocks: list[Block]) -> str:
    body = "\n".join(_block(b) for b in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title(report))}</title>\n"
        '<meta name="generator" content="phasefit report">\n'
        f"<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )
