"""The audit as Markdown: the same headings, tables and numbers as the HTML. Charts are PNG files written
next to the ``.md`` and linked relatively, each with alt text stating its main number, so the document is
complete without them (some renderers drop ``data:`` images)."""

from __future__ import annotations

import re

from analyzer.report.blocks import Block, Figure, Heading, Para, Table, Tiles
from analyzer.report.model import AuditReport

# ASCII punctuation that opens or closes a Markdown construct anywhere in a line (CommonMark, GFM, the
# dashboard's Streamlit directives and maths): always escaped; "(", ")", "!" and quotes only act after a "["
# (escaped), ">" only after a "<" (escaped) or at the start of a line, so prose keeps them. A ":" is escaped
# before a letter or "/" (a URL scheme, ":red[", ":smile:"), so is the "." of "www." (an autolink), and at
# the start of a line whatever would open a block ("-", "+", "1.", ">", ...).
_OPENS = re.compile(r"([\\`*_\[\]<#|~$&@]|:(?=[A-Za-z/]))")
_WWW = re.compile(r"(?i)(?<=www)\.")
# What opens a block at the start of a line: a quote (">"), a list item ("-", "+" then a space; "1." or
# "1)" then a space) or a rule ("---").
_LEADING = re.compile(r"^(>|[-+](?=\s|$|-)|\d{1,9}(?=[.)](?:\s|$)))")
_BREAKS = re.compile(r"[\r\n\u2028\u2029\u0085\v\f]+")


def escape(text: object, *, line_start: bool = True) -> str:
    """``text`` as Markdown that renders exactly as ``text``, on one line, whatever it holds: a worker id,
    a pod, a model, a cluster or a label is data, and one holding ``![x](https://host/a.png)`` must never
    make a reader's renderer fetch that image, nor ``[x](https://host)`` render a link. Each ASCII
    punctuation character that could open a construct is backslash-escaped (CommonMark: any of them may be,
    and then stands for itself): no link, image, emphasis, HTML tag, autolinked URL (``https\\://``,
    ``www\\.``, ``a\\@b``), directive or maths is left; line breaks become spaces. ``line_start``: the
    text may begin a line, where "-", "+", "1." and the like would open a block, so a leading one is escaped
    too. Names of letters, digits, "-", "." and "/" read as they are. GFM autolinks URLs, "www." and e-mail
    addresses in text after escapes are resolved (Streamlit's renderer; cmark-gfm for "www." and e-mails),
    so a zero-width space also follows a scheme's colon, "www" and "@": invisible, nothing left to link."""
    out = _OPENS.sub(r"\\\1", _BREAKS.sub(" ", str(text)))
    out = _WWW.sub(r"\\.", out)
    if line_start:
        out = _LEADING.sub(_escape_leading, out, count=1)
    return _UNLINKABLE.sub("\\g<0>\u200b", out)


# What GFM's literal autolinking finds once escapes are resolved: a scheme's "://" (escaped: "\:" then
# "//"), "www." (escaped: "www\."), an e-mail's "@" (escaped: "\@").
_UNLINKABLE = re.compile(r"(?i)(?:\\:(?=//)|www(?=\\\.)|\\@)")


def _escape_leading(match: re.Match[str]) -> str:
    opener = match.group(1)
    return f"{opener}\\" if opener[0].isdigit() else f"\\{opener}"  # "1\. x", "\- x", "\> x"


def _cell(text: str) -> str:
    return escape(text, line_start=False)


def chart_file(week: str, name: str) -> str:
    return f"phasefit-audit-{week}-{name}.png"


def _block(block: Block, week: str) -> str:
    # Every text is data as far as Markdown goes (names are inside it): escaped, the markup is ours.
    if isinstance(block, Heading):
        return f"{'#' * block.level} {escape(block.text, line_start=False)}"
    if isinstance(block, Para):
        return (
            f"> {escape(block.text)}"
            if block.kind == "verdict"
            else (f"_{escape(block.text, line_start=False)}_" if block.kind == "note" else escape(block.text))
        )
    if isinstance(block, Tiles):
        return "\n".join(f"- **{_cell(t.label)}: {_cell(t.value)}**: {_cell(t.detail)}" for t in block.tiles)
    if isinstance(block, Table):
        lines = [
            "| " + " | ".join(_cell(c) for c in block.columns) + " |",
            "|" + "|".join("---:" if i in block.numeric else "---" for i in range(len(block.columns))) + "|",
        ]
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in block.rows]
        if block.note:
            lines.append(f"\n_{_cell(block.note)}_")
        return "\n".join(lines)
    assert isinstance(block, Figure)
    chart = block.chart
    return f"![{_cell(chart.alt)}]({chart_file(week, chart.name)})\n\n_{_cell(chart.title)}._"


def render_markdown(report: AuditReport, blocks: list[Block]) -> str:
    return "\n\n".join(_block(b, report.week) for b in blocks) + "\n"
