"""Prometheus text exposition (0.0.4, and the OpenMetrics subset engines emit) -> flat samples.

A small line parser rather than ``prometheus_client.parser``: it runs every window on every scraped
endpoint (the overhead goal is < 5 ms of CPU per cycle) and the collector only needs flat samples, not
metric families.  Tests check it against ``prometheus_client``'s parser on real captures.  Bad input
raises :class:`PromParseError` with the line number; it never yields half-parsed garbage.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

# name, optional {label block} (quotes may hold "}" or ","), value, optional timestamp, optional exemplar
_LINE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[^"}]+|"(?:[^"\\]+|\\.)*")*)\})?'
    r"[ \t]+(\S+)(?:[ \t]+(-?\d+(?:\.\d*)?))?(?:[ \t]+#.*)?[ \t]*"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]+|\\.)*)"\s*(?:,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE_RE = re.compile(r"\\[\\\"n]")
_SPECIAL_VALUES = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}


class PromParseError(ValueError):
    def __init__(self, line_no: int, message: str) -> None:
        super().__init__(f"line {line_no}: {message}")
        self.line_no = line_no


class Sample(NamedTuple):
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass
class Exposition:
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # metric family name -> counter/gauge/histogram/...

    def by_name(self) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = defaultdict(list)
        for sample in self.samples:
            out[sample.name].append(sample)
        return dict(out)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)


def _value(text: str, line_no: int) -> float:
    special = _SPECIAL_VALUES.get(text)
    if special is not None:
        return special
    try:
        return float(text)
    except ValueError:
        raise PromParseError(line_no, f"value {text[:40]!r} is not a number") from None


def parse(text: str) -> Exposition:
    """Parse a whole exposition.  Raises PromParseError on the first malformed line."""
    out = Exposition()
    label_cache: dict[str, Mapping[str, str]] = {}  # exporters repeat one label set across many metrics
    samples = out.samples
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                out.types[parts[2]] = parts[3].strip()
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise PromParseError(line_no, f"not a sample line: {line[:80]!r}")
        name, block, value = match.group(1), match.group(2), match.group(3)
        labels: Mapping[str, str]
        if not block:
            labels = _NO_LABELS
        else:
            cached = label_cache.get(block)
            if cached is None:
                cached = label_cache[block] = _labels(block, line_no)
            labels = cached
        samples.append(Sample(name, labels, _value(value, line_no)))
    return out


_NO_LABELS: Mapping[str, str] = {}


def _labels(block: str, line_no: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos, end = 0, len(block)
    while pos < end:
        match = _LABEL.match(block, pos)
        if match is None:
            if block[pos:].strip(" \t,") == "":
                break
            raise PromParseError(line_no, f"malformed labels in {{{block[:80]}}}")
        labels[match.group(1)] = _unescape(match.group(2))
        pos = match.end()
    return labels
