"""Names are data: worker ids, pods, models, clusters, SKUs and labels come from the fleet and are shown as
the text they are. Streamlit renders GitHub-flavored Markdown (and its own directives: ``:red[...]``,
``:material/icon:``, emoji short codes, ``$`` maths) in ``st.markdown``, ``st.caption``, the alerts, the
cells of ``st.table`` and a metric's value and help; a name holding ``![x](https://host/a.png)`` would
make the browser fetch that image, ``[link](https://host)`` would render a link.

:func:`plain` escapes with a backslash each ASCII punctuation character that could open a construct
(CommonMark: any of them may be escaped, and then stands for itself), which leaves nothing for a renderer
to find: no link, image, emphasis, HTML tag, autolinked URL (``https\\://``, ``www\\.``, ``a\\@b``),
directive (``\\:red\\[``) or maths (``\\$``). Streamlit's GFM autolinking runs on the text after
escapes are resolved (``https\\://host`` is still linked there, as Chromium showed), so a zero-width space
also goes after a URL scheme's colon, after ``www`` and after an ``@``: invisible, and nothing left to link.
Line breaks become spaces, so a name cannot open a block (a heading, a list) of its own.
``st.dataframe`` and the CSV download show text as it is: they take the names unescaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analyzer.report.markdown import escape


def plain(text: object) -> str:
    """``text`` as Markdown that renders exactly as ``text`` (on one line), whatever it holds; names made
    of letters, digits, "-", "." and "/" read as they are (:func:`analyzer.report.markdown.escape`, the
    audit report's own rule, autolinks broken by a zero-width space)."""
    return escape(text)


def plain_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows for ``st.table`` (whose cells are Markdown): every text cell escaped (the column names are the
    pages' own); numbers, None and the like kept."""
    return [
        {key: plain(value) if isinstance(value, str) else value for key, value in row.items()} for row in rows
    ]
