"""Published measurements (data/benchmarks/published.csv) as typed rows, and what each row asks of
the performance model.

Parsing is pure; ``load_published`` is the file adapter. GPU labels map to catalog SKUs by exact
comparison, never by fuzzy matching. Reasoning: docs/analyzer.md#published
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from fleet.catalog import Catalog
from fleet.gpus import GpuSku

THROUGHPUT_METRICS = ("output_tokens_per_s", "output_tokens_per_s_per_gpu")
LATENCY_METRICS = ("ttft_ms", "tpot_ms")
_REQUIRED = (
    "source", "model", "precision", "gpu", "num_gpus", "tp", "input_len", "output_len",
    "batch_or_concurrency", "metric", "value", "notes",
)  # fmt: skip
_LEADING_INT = re.compile(r"\s*(\d+)")


class RowKind(StrEnum):
    """How a row was measured, in the reliability tiers of reference/performance.md section 5."""

    MAX_THROUGHPUT = "max-throughput"  # engine-chosen batch, in-flight batching (tier 1)
    FIXED_CONCURRENCY = "fixed-concurrency"  # a client holding N requests in flight (tier 1)
    STATIC_BATCH = "static-batch"  # same batch on both GPUs, static batching (tier 2)
    LATENCY = "latency"  # batch-1 TTFT / TPOT anchors (tier 1 anchors, other software stacks)


@dataclass(frozen=True)
class PublishedRow:
    line: int  # 1-based line in the CSV (the header is line 1)
    source: str
    model: str
    precision: str
    gpu: str
    num_gpus: int
    tp: int
    input_len: int
    output_len: int
    batch: int | None  # None: engine-chosen
    metric: str
    value: float
    notes: str
    tp_text: str = ""  # the tp cell as written ("8", "8 (EP 8)"): the layout may be stated there

    @property
    def kind(self) -> RowKind:
        if self.metric in LATENCY_METRICS:
            return RowKind.LATENCY
        if self.batch is None:
            return RowKind.MAX_THROUGHPUT
        if "static batching" in self.notes.lower():
            return RowKind.STATIC_BATCH
        return RowKind.FIXED_CONCURRENCY

    @property
    def release(self) -> str:
        """The software release that produced the row (rows compare only within one release)."""
        match = re.search(r"\bv(\d+\.\d+(?:\.\d+)?)", self.source)
        return f"{self.source.split()[0]}@{match.group(1)}" if match else self.source

    @property
    def label(self) -> str:
        batch = "max" if self.batch is None else str(self.batch)
        lengths = f"{self.input_len}/{self.output_len}"
        return f"{self.model} {self.gpu.split()[0]} TP{self.tp} {lengths} b={batch} {self.metric}"


class PublishedFormatError(ValueError):
    """The CSV lacks a column or a cell does not parse; the message names the line."""


def _leading_int(text: str, column: str, line: int) -> int:
    match = _LEADING_INT.match(text)
    if not match:
        raise PublishedFormatError(f"line {line}: {column} {text!r} is not a number")
    return int(match.group(1))


def parse_published(text: str) -> list[PublishedRow]:
    """Rows of a published-measurements CSV. ``output_len`` like "1 (TTFT)" reads as 1; a batch that is
    not a number ("max (engine-chosen)") means the engine chose it."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise PublishedFormatError(f"missing column(s): {', '.join(missing)}")
    rows = []
    for number, raw in enumerate(reader, start=2):
        batch_text = raw["batch_or_concurrency"].strip()
        try:
            value = float(raw["value"])
        except ValueError:
            raise PublishedFormatError(f"line {number}: value {raw['value']!r} is not a number") from None
        rows.append(
            PublishedRow(
                line=number,
                source=raw["source"].strip(),
                model=raw["model"].strip(),
                precision=raw["precision"].strip(),
                gpu=raw["gpu"].strip(),
                num_gpus=_leading_int(raw["num_gpus"], "num_gpus", number),
                tp=_leading_int(raw["tp"], "tp", number),
                input_len=_leading_int(raw["input_len"], "input_len", number),
                output_len=_leading_int(raw["output_len"], "output_len", number),
                batch=int(batch_text) if batch_text.isdigit() else None,
                metric=raw["metric"].strip(),
                value=value,
                notes=raw["notes"].strip(),
                tp_text=raw["tp"].strip(),
            )
        )
    return rows


def load_published(path: Path) -> list[PublishedRow]:
    """Read and parse a published-measurements CSV file."""
    return parse_published(Path(path).read_text(encoding="utf-8"))


def _fold(name: str) -> str:
    return " ".join(name.split()).casefold()


def match_gpu_label(catalog: Catalog, label: str) -> GpuSku | None:
    """The SKU a benchmark's GPU label names, or None."""
    base = label.split("(", 1)[0].strip()
    no_capacity = re.sub(r"[\s-]*\d+\s*GB$", "", base, flags=re.IGNORECASE).strip()
    candidates = [_fold(c) for c in (label, base, no_capacity, f"NVIDIA {base}") if c]
    for sku in catalog.gpus.skus.values():
        names = {_fold(n) for n in (sku.key, sku.name, *sku.nvml_names)}
        if any(c in names for c in candidates):
            return sku
    return None
