"""The report's building blocks: what :mod:`analyzer.report.document` produces and the HTML and Markdown
renderers print."""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.report.figures import Chart


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str
    kind: str = "normal"  # normal | verdict | note | warning


@dataclass(frozen=True)
class Tile:
    label: str
    value: str
    detail: str


@dataclass(frozen=True)
class Tiles:
    tiles: list[Tile]


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    numeric: set[int] = field(default_factory=set)  # right-aligned column indexes


@dataclass(frozen=True)
class Figure:
    chart: Chart


Block = Heading | Para | Tiles | Table | Figure
