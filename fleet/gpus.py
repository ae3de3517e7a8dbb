"""GPU SKUs (memory, bandwidth, dense compute) and resolution of the names NVML and dcgm-exporter report.

Figures are in base units (bytes, bytes/s, FLOP/s, W); ``None`` means no citable source gave the figure,
never zero. The name patterns live in the catalog data (``fleet/data/gpus.yaml``), not in this module.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fleet.precision import Precision

logger = logging.getLogger(__name__)

UNKNOWN_SKU_KEY = "unknown"
_RESOLVE_CACHE_LIMIT = 4096


@dataclass(frozen=True)
class GpuSku:
    """One GPU model. Compute figures are dense (never the 2:4-sparsity headline figures)."""

    key: str
    name: str
    hbm_bytes: int | None
    hbm_bandwidth_bytes_per_s: float | None
    bf16_dense_flops: float | None
    fp8_dense_flops: float | None
    tdp_w: float | None
    interconnect: str | None
    interconnect_bytes_per_s: float | None
    hourly_price_usd: float | None
    sources: str
    known: bool
    fp4_dense_flops: float | None = None
    vendor: str | None = None
    form_factor: str | None = None
    hbm_type: str | None = None
    notes: str = ""
    nvml_names: tuple[str, ...] = ()
    name_patterns: tuple[str, ...] = ()

    def peak_flops(self, precision: Precision) -> float | None:
        """Dense tensor-core peak for matmuls at ``precision``; ``None`` where unknown or unsupported.

        FP16 runs at the BF16 rate on every catalogued GPU. INT4 here is weight-only quantisation
        (AWQ, GPTQ, W4A16): weights are dequantised and the matmuls run at the 16-bit rate.
        """
        if precision in (Precision.BF16, Precision.FP16, Precision.INT4):
            return self.bf16_dense_flops
        if precision is Precision.FP8:
            return self.fp8_dense_flops
        return self.fp4_dense_flops

    def ridge_point(self, precision: Precision) -> float | None:
        """Roofline ridge point ``P / B`` in FLOP per byte of HBM traffic; ``None`` where one is unknown."""
        flops = self.peak_flops(precision)
        if flops is None or not self.hbm_bandwidth_bytes_per_s:
            return None
        return flops / self.hbm_bandwidth_bytes_per_s


def unknown_sku(reported_name: str) -> GpuSku:
    """The explicit stand-in for a GPU the catalog does not know: every figure unknown."""
    return GpuSku(
        key=UNKNOWN_SKU_KEY,
        name=reported_name,
        hbm_bytes=None,
        hbm_bandwidth_bytes_per_s=None,
        bf16_dense_flops=None,
        fp8_dense_flops=None,
        tdp_w=None,
        interconnect=None,
        interconnect_bytes_per_s=None,
        hourly_price_usd=None,
        sources="",
        known=False,
    )


def _normalise(name: str) -> str:
    return " ".join(name.split())


class GpuCatalog:
    """The known SKUs, and resolution of reported device names to them.

    A name resolves when it equals (ignoring case and repeated spaces) one of a SKU's ``nvml_names``, its
    key or its display name, or fully matches one of its ``name_patterns``. A MIG device name (the
    parent's name plus a suffix matched by ``mig_suffix_pattern``, whose group ``profile`` is the MIG
    profile) resolves to the parent SKU. Anything else, including a name two SKUs claim, resolves to
    an explicit unknown SKU with a warning logged once per name.
    """

    def __init__(self, skus: Mapping[str, GpuSku], *, mig_suffix_pattern: str) -> None:
        for key, sku in skus.items():
            if key != sku.key:
                raise ValueError(f"GPU SKU registered as {key!r} carries key {sku.key!r}")
            if key == UNKNOWN_SKU_KEY:
                raise ValueError(f"{UNKNOWN_SKU_KEY!r} is reserved for GPUs the catalog does not know")
        self._skus: Mapping[str, GpuSku] = MappingProxyType(dict(skus))
        self._mig_suffix = re.compile(mig_suffix_pattern, re.IGNORECASE)
        if "profile" not in self._mig_suffix.groupindex:
            raise ValueError(f"mig_suffix_pattern {mig_suffix_pattern!r} needs a named group 'profile'")
        self._exact: dict[str, str] = {}
        self._patterns: list[tuple[re.Pattern[str], str]] = []
        for sku in self._skus.values():
            for name in (sku.key, sku.name, *sku.nvml_names):
                folded = _normalise(name).casefold()
                claimed_by = self._exact.setdefault(folded, sku.key)
                if claimed_by != sku.key:
                    raise ValueError(f"GPU name {name!r} is claimed by both {claimed_by!r} and {sku.key!r}")
            for pattern in sku.name_patterns:
                try:
                    compiled = re.compile(pattern, re.IGNORECASE)
                except re.error as exc:
                    raise ValueError(f"GPU SKU {sku.key!r}: bad name pattern {pattern!r}: {exc}") from exc
                self._patterns.append((compiled, sku.key))
        for name, key in self._exact.items():
            others = sorted({k for p, k in self._patterns if k != key and p.fullmatch(name)})
            if others:
                raise ValueError(f"GPU name {name!r} of {key!r} also matches patterns of {', '.join(others)}")
        self._resolved: dict[str, GpuSku] = {}
        self._warned: set[str] = set()

    @property
    def skus(self) -> Mapping[str, GpuSku]:
        return self._skus

    def get(self, key: str) -> GpuSku:
        """The SKU with this catalog key; ``KeyError`` naming the known keys otherwise."""
        try:
            return self._skus[key]
        except KeyError:
            raise KeyError(f"unknown GPU SKU {key!r}; known: {', '.join(sorted(self._skus))}") from None

    def mig_profile(self, reported_name: str) -> str | None:
        """The MIG profile in a MIG device name ("1g.10gb"), ``None`` for a whole GPU."""
        match = self._mig_suffix.search(_normalise(reported_name))
        return match.group("profile").lower() if match else None

    def resolve(self, reported_name: str) -> GpuSku:
        """The SKU of a reported device name; an explicit unknown SKU (``known=False``) when none fits."""
        cached = self._resolved.get(reported_name)
        if cached is not None:
            return cached
        sku = self._match(reported_name)
        if len(self._resolved) < _RESOLVE_CACHE_LIMIT:
            self._resolved[reported_name] = sku
        return sku

    def _match(self, reported_name: str) -> GpuSku:
        name = _normalise(reported_name)
        mig = self._mig_suffix.search(name)
        if mig:
            name = name[: mig.start()].strip()
        folded = name.casefold()
        exact = self._exact.get(folded)
        if exact is not None:
            return self._skus[exact]
        candidates = sorted({key for pattern, key in self._patterns if pattern.fullmatch(name)})
        if len(candidates) == 1:
            return self._skus[candidates[0]]
        if reported_name not in self._warned:
            self._warned.add(reported_name)
            if candidates:
                logger.warning(
                    "GPU name %r matches several SKUs (%s); treating it as unknown",
                    reported_name,
                    ", ".join(candidates),
                )
            else:
                logger.warning(
                    "GPU name %r matches no catalogued SKU; its figures are unknown "
                    "(add it in the operator catalog file, PHASEFIT_CATALOG_PATH)",
                    reported_name,
                )
        return unknown_sku(reported_name)
