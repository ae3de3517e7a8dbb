"""Names are data in the weekly report (issue 29, C): a worker id, pool, model or cluster holding Markdown or
HTML renders as the text it is in both outputs: no link, no image fetched from the name's URL, no emphasis.

The Markdown is rendered with markdown-it (CommonMark plus GFM tables and strikethrough) and the HTML parsed,
and every link, image and emphasis in them is checked."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

import pytest

from analyzer.report.blocks import Block, Heading, Para, Table, Tile, Tiles
from analyzer.report.html import _block as html_block
from analyzer.report.markdown import escape, render_markdown
from analyzer.report.model import AuditReport
from analyzer.report.publish import Rendered, render
from fleet.catalog import load_catalog
from fleet.store.engine import make_engine
from tests.dashboard.seed import Seeded, shared_seed
from tests.markup import Tags, markdown_it, parse_html

HOSTILE = [
    "![x](https://evil.example/a.png)",
    "[link](https://evil.example)",
    "<img src=https://evil.example/x>",
    "**bold**",
    "[/bold]c",
    "https://evil.example/bare",
    "www.evil.example",
    "ops@evil.example",
    "_em_ `code` ~~gone~~ | pipe",
    "- item",
    "1. first",
    "> quoted",
    "# heading",
    ":red[red] :smile: $x^2$",
    "line\n# break",
    "&lt;b&gt;entity",
    "back\\slash\\*",
]
WEEK = "2026-W48"


MARKUP = ("a", "img", "strong", "em", "code", "s", "del", "script", "iframe", "blockquote", "li", "h1")


def _assert_inert(document: str, *, allowed_img: str, forbidden: tuple[str, ...] = MARKUP) -> Tags:
    """None of the ``forbidden`` tags, no attribute naming the evil host, images only our own (src starting
    with ``allowed_img``)."""
    tags = parse_html(document)
    names = [tag for tag, _ in tags.tags]
    for tag in forbidden:
        assert tag not in names, (tag, document[:2000])
    for tag, attrs in tags.tags:
        for value in attrs.values():
            assert "evil.example" not in value, (tag, attrs)
        if tag == "img":
            assert attrs["src"].startswith(allowed_img), attrs
    return tags


@pytest.mark.parametrize("name", HOSTILE)
def test_escape_renders_the_name_as_it_is(name: str) -> None:
    md = markdown_it()
    for line_start in (True, False):
        text = escape(name, line_start=line_start)
        prefix = "" if line_start else "worker "
        out = md.render(prefix + text)
        tags = _assert_inert(out, allowed_img="-")
        assert [t for t, _ in tags.tags] == ["p"], out
        assert tags.visible.strip() == (prefix + name.replace("\n", " ")).strip()


def test_the_renderers_escape_every_block() -> None:
    md = markdown_it()
    name = " ".join(HOSTILE[:5])
    blocks: list[Block] = [
        Heading(2, f"Pool {name}"),
        Para(name),
        Para(name, kind="verdict"),
        Para(name, kind="note"),
        Tiles([Tile(name, name, name)]),
        Table(["worker", "what"], [[name, f"move {name}"]], note=name),
    ]
    report: Any = dataclasses.make_dataclass("R", [("week", str)])(WEEK)
    markdown = render_markdown(report, blocks)
    # Our own markup only: the verdict's quote, the tiles' list and bold, the notes' italics.
    tags = _assert_inert(
        md.render(markdown), allowed_img="-", forbidden=("a", "img", "code", "del", "s", "h1")
    )
    assert [t for t, _ in tags.tags].count("strong") == 1 and [t for t, _ in tags.tags].count("em") == 2
    assert html.unescape(tags.visible).count(name) == 10
    assert "!\\[x\\](https\\:\u200b//evil.example/a.png)" in markdown
    document = "\n".join(
        html_block(b) for b in blocks
    )  # render_html adds the head: its title is checked below
    tags = _assert_inert(document, allowed_img="-", forbidden=MARKUP[:-1])
    assert tags.visible.count(name) == 10


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return shared_seed(tmp_path_factory)


def _swap(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every seeded name replaced by a hostile one, wherever a string holds it."""
    if type(value) is str:  # not an enum member: its value is a fixed word, never a name
        for old, new in names.items():
            value = value.replace(old, new)
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _swap(getattr(value, f.name), names) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, list):
        return [_swap(v, names) for v in value]
    if isinstance(value, tuple):
        return tuple(_swap(v, names) for v in value)
    if isinstance(value, dict):
        return {_swap(k, names): _swap(v, names) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def hostile(seeded: Seeded) -> tuple[Rendered, dict[str, str]]:
    from analyzer.report.build import build_audit

    engine = make_engine(seeded.url)
    try:
        with engine.connect() as connection:
            audit: AuditReport = build_audit(connection, WEEK, load_catalog(None), version="test")
    finally:
        engine.dispose()
    names = {worker: f"{worker} {HOSTILE[i % 5]}" for i, worker in enumerate(sorted(seeded.misplaced))}
    # Pools and SKUs label the charts too: "$\\foo{$" would be mathtext (and fail the drawing).
    names |= {pool.pool: f"{pool.pool} {HOSTILE[2]} $\\foo{{$" for pool in audit.pools}
    swapped = _swap(audit, names)
    assert swapped.actions and any(HOSTILE[0] in a.subject or HOSTILE[0] in a.detail for a in swapped.actions)
    return render(swapped), names


def test_the_markdown_report_shows_hostile_names_as_text(hostile: tuple[Rendered, dict[str, str]]) -> None:
    rendered, names = hostile
    out = markdown_it().render(rendered.markdown)
    tags = parse_html(out)
    assert not [t for t, _ in tags.tags if t == "a"], "no link in the report"
    for tag, attrs in tags.tags:
        assert all("evil.example" not in v for v in attrs.values()), (tag, attrs)
        if tag == "img":
            assert attrs["src"].startswith(f"phasefit-audit-{WEEK}-"), attrs  # our own charts only
    text = html.unescape(tags.visible)
    for name in names.values():
        assert name in text


def test_the_html_report_shows_hostile_names_as_text(hostile: tuple[Rendered, dict[str, str]]) -> None:
    rendered, names = hostile
    tags = parse_html(rendered.html)
    assert not [t for t, _ in tags.tags if t == "a"]
    for tag, attrs in tags.tags:
        assert all("evil.example" not in v for v in attrs.values()), (tag, attrs)
        if tag == "img":
            assert attrs["src"].startswith("data:image/png;base64,"), tag
    text = tags.visible
    for name in names.values():
        assert name in text
