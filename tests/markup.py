"""Rendering checks shared by the report's and the dashboard's hostile-name tests: CommonMark with tables
(markdown-it, skipped where it is not installed) and an HTML tag and text collector."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest


def markdown_it() -> Any:
    module = pytest.importorskip("markdown_it")
    return module.MarkdownIt("commonmark").enable(["table", "strikethrough"])


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text, of an HTML document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []  # as rendered, zero-width spaces included (what an autolinker scans)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def visible(self) -> str:
        """The text as a reader sees it: the zero-width spaces that break autolinks are invisible."""
        return "".join(self.text).replace("\u200b", "")


def parse_html(document: str) -> Tags:
    parser = Tags()
    parser.feed(document)
    parser.close()
    return parser
