"""A fleet on the roofline: each SKU's roof from the catalog, each worker as a point from its counters.

A point is a counter-derived estimate (tensor and DRAM activity x the SKU's peaks), not a kernel
measurement. Reasoning: docs/analyzer.md#fleet_roofline
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fleet.catalog import Catalog
from fleet.gpus import GpuSku
from fleet.precision import Precision, parse_precision

DEFAULT_PRECISION = Precision.BF16


@dataclass(frozen=True)
class Roof:
    """One SKU's roofline at one precision: flat at the dense peak, sloped at the HBM bandwidth."""

    sku: str
    name: str
    precision: Precision
    peak_flops: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/byte) where the slope meets the flat roof."""
        return self.peak_flops / self.bandwidth

    @property
    def label(self) -> str:
        return f"{self.name} {self.precision.value.upper()}"

    def attainable(self, intensity: float) -> float:
        return min(self.peak_flops, self.bandwidth * intensity)

    def curve(self, lo: float, hi: float, points: int = 48) -> list[tuple[float, float]]:
        """(intensity, attainable FLOP/s) pairs, log-spaced over [lo, hi], with the ridge included."""
        xs = {lo * (hi / lo) ** (i / (points - 1)) for i in range(points)}
        if lo < self.ridge < hi:
            xs.add(self.ridge)
        return [(x, self.attainable(x)) for x in sorted(xs)]


@dataclass(frozen=True)
class WorkerPoint:
    worker_id: str
    pool: str
    sku: str
    role: str
    precision: Precision
    tensor_active: float
    dram_active: float
    flops: float  # achieved FLOP/s per GPU (estimate)
    bytes_per_s: float  # achieved HBM bytes/s per GPU (estimate)
    roof: Roof
    misplaced: bool = False
    weight: float = 1.0  # e.g. GPU-hours in the range, for marker size

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes_per_s

    @property
    def share_of_roof(self) -> float:
        """Achieved over attainable at this intensity on the worker's own SKU."""
        return self.flops / self.roof.attainable(self.intensity)

    @property
    def bound(self) -> str:
        """Which side of its own SKU's ridge the point sits on."""
        return "compute" if self.intensity >= self.roof.ridge else "memory"

    def gain_on(self, other: Roof) -> float:
        """How much higher ``other``'s roof is than this worker's own at the same intensity."""
        return other.attainable(self.intensity) / self.roof.attainable(self.intensity)


def precision_of(text: str | None) -> Precision:
    if not text:
        return DEFAULT_PRECISION
    try:
        return parse_precision(text)
    except ValueError:
        return DEFAULT_PRECISION


def roof_for(sku: GpuSku, precision: Precision) -> Roof | None:
    """The SKU's roof, or None where the catalog lacks its peak or bandwidth."""
    peak = sku.peak_flops(precision)
    if not sku.known or peak is None or not sku.hbm_bandwidth_bytes_per_s:
        return None
    return Roof(sku.key, sku.name, precision, peak, sku.hbm_bandwidth_bytes_per_s)


def roofs_for(catalog: Catalog, pairs: Iterable[tuple[str, Precision]]) -> list[Roof]:
    """Roofs of the (SKU key, precision) pairs the catalog can draw, highest bandwidth first."""
    out = {}
    for key, precision in pairs:
        sku = catalog.gpus.lookup(key)
        roof = roof_for(sku, precision) if sku is not None else None
        if roof is not None:
            out[(key, precision)] = roof
    return sorted(out.values(), key=lambda r: (-r.bandwidth, -r.peak_flops, r.sku))


def worker_point(
    *,
    worker_id: str,
    pool: str,
    sku: GpuSku | None,
    role: str,
    precision: Precision,
    tensor_active: float | None,
    dram_active: float | None,
    misplaced: bool = False,
    weight: float = 1.0,
) -> WorkerPoint | None:
    """The worker's point, or None where it cannot be placed (no counters, no DRAM traffic, SKU without
    catalog figures): such workers are listed, not drawn."""
    if sku is None or tensor_active is None or dram_active is None or dram_active <= 0 or tensor_active <= 0:
        return None
    roof = roof_for(sku, precision)
    if roof is None:
        return None
    flops = tensor_active * roof.peak_flops
    traffic = dram_active * roof.bandwidth
    if not (math.isfinite(flops) and math.isfinite(traffic)):
        return None
    return WorkerPoint(
        worker_id=worker_id,
        pool=pool,
        sku=sku.key,
        role=role,
        precision=precision,
        tensor_active=tensor_active,
        dram_active=dram_active,
        flops=flops,
        bytes_per_s=traffic,
        roof=roof,
        misplaced=misplaced,
        weight=weight,
    )


def intensity_span(points: Iterable[WorkerPoint], roofs: Iterable[Roof]) -> tuple[float, float]:
    """An x range in whole decades that holds every point and every ridge."""
    xs = [p.intensity for p in points] + [r.ridge for r in roofs]
    if not xs:
        return 1.0, 1e4
    lo = 10 ** math.floor(math.log10(max(min(xs) / 2, 1e-3)))
    hi = 10 ** math.ceil(math.log10(max(xs) * 2))
    return lo, max(hi, lo * 100)
