"""GPU SKUs (memory, bandwidth, dense compute) and resolution of the names NVML and dcgm-exporter report.

Figures are in base units (bytes, bytes/s, FLOP/s, W); ``None`` means no citable source gave the figure,
never zero. The name patterns live in the catalog data (``fleet/data/gpus.yaml``), not in this module.

A MIG instance is a SKU of its own, derived from its parent SKU and its profile (``<g>g.<mem>gb``, NVIDIA's
MIG device names): its compute is the parent's times ``g`` over the parent's compute slices (7 GPCs on
A100, H100, H200 and B200), its HBM bandwidth the parent's times its memory slices over the parent's (8),
its memory the profile's. The parent's catalog entry lists the profiles it supports (``mig``); a profile it
does not list, a compute instance that shares its GPU instance's memory (``1c.3g.40gb``) or a parent the
catalog does not know resolve to the explicit unknown SKU with the reason, never to the parent's figures.
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
MIG_KEY_SEPARATOR = "/"  # a MIG SKU's key is "<parent key>/<profile>"; catalog keys never hold a "/"
_RESOLVE_CACHE_LIMIT = 4096
_GB = 1e9
# NVIDIA's MIG device names: "[<c>c.]<g>g.<mem>gb" with optional engine extensions ("+me", "+me.all",
# "-me", "+gfx"), which add media or graphics engines and change neither the SMs nor the memory.
_MIG_PROFILE = re.compile(
    r"(?:(?P<ci>\d+)c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb(?P<ext>(?:[+-][a-z]+(?:\.[a-z]+)*)*)", re.IGNORECASE
)


@dataclass(frozen=True)
class MigProfile:
    """A MIG device name taken apart: ``compute_instance_slices`` is set for a compute instance that
    shares a GPU instance (``1c.3g.40gb``), ``extensions`` are the engine suffixes (``+me``)."""

    name: str  # the GPU instance's profile, "<g>g.<mem>gb", lower case
    compute_slices: int
    memory_gb: int
    compute_instance_slices: int | None = None
    extensions: str = ""


def is_mig_key(key: str) -> bool:
    """Whether a SKU key names a MIG instance (``<parent>/<profile>``; catalog keys hold no "/")."""
    return MIG_KEY_SEPARATOR in key


def mig_key(parent_key: str, profile_text: str) -> str:
    """The key a MIG instance of ``parent_key`` with this profile is known by (its GPU-instance profile,
    engine extensions dropped); the profile as given where it is not a MIG profile name."""
    profile = parse_mig_profile(profile_text)
    name = profile.name if profile is not None and profile.compute_instance_slices is None else profile_text
    return f"{parent_key}{MIG_KEY_SEPARATOR}{name.strip().lower()}"


def parse_mig_profile(text: str) -> MigProfile | None:
    """The parts of a MIG profile name ("1g.10gb", "1g.10gb+me", "1c.3g.40gb"); ``None`` if it is not one."""
    match = _MIG_PROFILE.fullmatch(text.strip())
    if match is None:
        return None
    g, gb = int(match.group("g")), int(match.group("gb"))
    if g < 1 or gb < 1:
        return None
    ci = int(match.group("ci")) if match.group("ci") else None
    return MigProfile(f"{g}g.{gb}gb", g, gb, None if ci == g else ci, match.group("ext").lower())


@dataclass(frozen=True)
class MigGeometry:
    """How a GPU divides under MIG: its compute slices (GPCs) and memory slices, and the GPU-instance
    profiles it supports (profile name -> memory slices it takes), with where those facts come from."""

    compute_slices: int
    memory_slices: int
    profiles: Mapping[str, int]
    sources: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "profiles", dict(self.profiles))  # its own copy (picklable, unlike a proxy)

    def __hash__(self) -> int:  # SKUs are hashable values: the table hashes by its content
        return hash(
            (self.compute_slices, self.memory_slices, tuple(sorted(self.profiles.items())), self.sources)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MigGeometry):
            return NotImplemented
        return (self.compute_slices, self.memory_slices, dict(self.profiles), self.sources) == (
            other.compute_slices,
            other.memory_slices,
            dict(other.profiles),
            other.sources,
        )

    def check(self, sku_key: str, hbm_bytes: int | None) -> None:
        """Refuse a table that cannot be right: a profile with more slices than the GPU has, a name that is
        not a MIG profile, or more memory than the GPU holds."""
        if self.compute_slices < 1 or self.memory_slices < 1:
            raise ValueError(f"{sku_key}: MIG compute and memory slices must be >= 1")
        for name, memory_slices in self.profiles.items():
            profile = parse_mig_profile(name)
            if (
                profile is None
                or profile.name != name
                or profile.extensions
                or profile.compute_instance_slices
            ):
                raise ValueError(f"{sku_key}: MIG profile {name!r} is not a '<g>g.<mem>gb' GPU-instance name")
            if not 1 <= profile.compute_slices <= self.compute_slices:
                raise ValueError(
                    f"{sku_key}: MIG profile {name!r} takes more than {self.compute_slices} GPCs"
                )
            if not 1 <= memory_slices <= self.memory_slices:
                raise ValueError(
                    f"{sku_key}: MIG profile {name!r} takes {memory_slices} of {self.memory_slices} "
                    "memory slices"
                )
            if hbm_bytes is not None and profile.memory_gb * _GB > hbm_bytes * 1.01:
                raise ValueError(f"{sku_key}: MIG profile {name!r} holds more memory than the GPU")


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
    mig: MigGeometry | None = None  # on a whole GPU: how it divides under MIG (None: no table)
    # On a MIG instance: the parent SKU's key, the GPU-instance profile, and its shares of the parent's
    # compute (GPCs) and of its HBM bandwidth (memory slices). None on a whole GPU.
    parent_key: str | None = None
    mig_profile: str | None = None
    compute_share: float | None = None
    bandwidth_share: float | None = None

    @property
    def is_mig(self) -> bool:
        """A MIG instance (of a known or unknown profile), not a whole GPU."""
        return self.mig_profile is not None

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


def unknown_sku(
    reported_name: str, reason: str = "", *, parent_key: str | None = None, mig_profile: str | None = None
) -> GpuSku:
    """The explicit stand-in for a GPU the catalog does not know: every figure unknown, ``notes`` the reason
    where there is one. A MIG instance keeps its profile (it is still an instance, not a whole GPU)."""
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
        notes=reason,
        parent_key=parent_key,
        mig_profile=mig_profile,
    )


def _share(value: float | None, share: float) -> float | None:
    return None if value is None else float(value) * share


def mig_sku(parent: GpuSku, profile_text: str) -> GpuSku:
    """The SKU of a MIG instance of ``parent`` with profile ``profile_text`` (see the module docstring):
    derived figures where the parent's table lists the profile, else the explicit unknown with the reason."""
    profile = parse_mig_profile(profile_text)
    shown = profile_text.strip().lower()
    name = f"{parent.name} MIG {shown}"
    if profile is None:
        return unknown_sku(
            name,
            f"{shown!r} is not a MIG profile name ('<g>g.<mem>gb'): its figures are unknown",
            parent_key=parent.key if parent.known else None,
            mig_profile=shown or "?",
        )
    if not parent.known:
        return unknown_sku(
            name,
            f"a MIG instance ({profile.name}) of a GPU the catalog does not know ({parent.name!r})",
            mig_profile=profile.name,
        )
    geometry = parent.mig
    if geometry is None:
        return unknown_sku(
            name,
            f"the catalog has no MIG profile table for {parent.key}: the {profile.name} instance's share of "
            "its compute and bandwidth is unknown (never the whole GPU's)",
            parent_key=parent.key,
            mig_profile=profile.name,
        )
    if profile.compute_instance_slices is not None:
        return unknown_sku(
            name,
            f"a compute instance ({shown}) shares its {profile.name} GPU instance's memory and bandwidth "
            "with the instance's other compute instances: its share of them is unknown",
            parent_key=parent.key,
            mig_profile=shown,
        )
    memory_slices = geometry.profiles.get(profile.name)
    if memory_slices is None:
        return unknown_sku(
            name,
            f"MIG profile {profile.name!r} is not in the {parent.key} MIG table "
            f"({', '.join(geometry.profiles)}): its figures are unknown, never the whole GPU's",
            parent_key=parent.key,
            mig_profile=profile.name,
        )
    compute = profile.compute_slices / geometry.compute_slices
    bandwidth = memory_slices / geometry.memory_slices
    return GpuSku(
        key=f"{parent.key}{MIG_KEY_SEPARATOR}{profile.name}",
        name=f"{parent.name} MIG {profile.name}",
        hbm_bytes=round(profile.memory_gb * _GB),
        hbm_bandwidth_bytes_per_s=_share(parent.hbm_bandwidth_bytes_per_s, bandwidth),
        bf16_dense_flops=_share(parent.bf16_dense_flops, compute),
        fp8_dense_flops=_share(parent.fp8_dense_flops, compute),
        fp4_dense_flops=_share(parent.fp4_dense_flops, compute),
        tdp_w=None,  # an instance has no power limit of its own
        interconnect=None,  # MIG instances have no GPU-to-GPU peer-to-peer (NVLink) between them
        interconnect_bytes_per_s=None,
        hourly_price_usd=None,  # a price per instance is not in the catalog: "price not set", never $0
        sources=(
            f"derived from {parent.key} ({parent.name}) and MIG profile {profile.name}: compute x "
            f"{profile.compute_slices}/{geometry.compute_slices} GPCs, HBM bandwidth x "
            f"{memory_slices}/{geometry.memory_slices} memory slices, {profile.memory_gb} GB from the "
            f"profile name. MIG geometry: {geometry.sources}"
        ),
        known=True,
        vendor=parent.vendor,
        form_factor=parent.form_factor,
        hbm_type=parent.hbm_type,
        notes=(
            f"MIG {profile.name} instance of {parent.key}. The compute share is NVIDIA's nominal fraction of "
            "SMs (GPCs over 7); an instance may hold a few SMs less (an A100 1g slice has 14 of 108 SMs)."
        ),
        parent_key=parent.key,
        mig_profile=profile.name,
        compute_share=compute,
        bandwidth_share=bandwidth,
    )


def _normalise(name: str) -> str:
    return " ".join(name.split())


class GpuCatalog:
    """The known SKUs, and resolution of reported device names to them.

    A name resolves when it equals (ignoring case and repeated spaces) one of a SKU's ``nvml_names``, its
    key or its display name, or fully matches one of its ``name_patterns``. A MIG device name (the
    parent's name plus a suffix matched by ``mig_suffix_pattern``, whose group ``profile`` is the MIG
    profile), or a name given with a ``mig_profile`` (dcgm-exporter reports the parent's name and the
    profile apart), resolves to the MIG SKU derived from the parent's (:func:`mig_sku`). Anything else,
    including a name two SKUs claim, resolves to an explicit unknown SKU with a warning logged once per
    name.
    """

    def __init__(self, skus: Mapping[str, GpuSku], *, mig_suffix_pattern: str) -> None:
        for key, sku in skus.items():
            if key != sku.key:
                raise ValueError(f"GPU SKU registered as {key!r} carries key {sku.key!r}")
            if key == UNKNOWN_SKU_KEY:
                raise ValueError(f"{UNKNOWN_SKU_KEY!r} is reserved for GPUs the catalog does not know")
            if MIG_KEY_SEPARATOR in key:
                raise ValueError(f"GPU SKU key {key!r}: {MIG_KEY_SEPARATOR!r} is reserved for MIG instances")
            if sku.mig is not None:
                sku.mig.check(key, sku.hbm_bytes)
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
        self._resolved: dict[tuple[str, str | None], GpuSku] = {}
        self._derived: dict[tuple[str, str], GpuSku] = {}
        self._warned: set[str] = set()

    @property
    def skus(self) -> Mapping[str, GpuSku]:
        """The whole-GPU SKUs (MIG SKUs are derived from these: :meth:`lookup`, :meth:`mig_sku`)."""
        return self._skus

    def get(self, key: str) -> GpuSku:
        """The SKU with this catalog key, or the MIG SKU of a ``<parent>/<profile>`` key; ``KeyError``
        naming the known keys (or why the MIG profile is unknown) otherwise."""
        sku = self.lookup(key)
        if sku is None:
            raise KeyError(f"unknown GPU SKU {key!r}; known: {', '.join(sorted(self._skus))}")
        if not sku.known:
            raise KeyError(f"GPU SKU {key!r}: {sku.notes}")
        return sku

    def lookup(self, key: str) -> GpuSku | None:
        """The SKU a stored key names: a whole GPU's key, or ``<parent>/<profile>`` for a MIG instance (its
        derived SKU, or the explicit unknown with the reason); ``None`` where the key names no catalog SKU."""
        whole = self._skus.get(key)
        if whole is not None or MIG_KEY_SEPARATOR not in key:
            return whole
        parent_key, profile = key.split(MIG_KEY_SEPARATOR, 1)
        parent = self._skus.get(parent_key)
        return None if parent is None else self.mig_sku(parent, profile)

    def mig_sku(self, parent: GpuSku, profile: str) -> GpuSku:
        """The SKU of a MIG instance of ``parent`` (cached); see :func:`mig_sku`."""
        cache_key = (parent.key if parent.known else f"?{parent.name}", profile.strip().lower())
        cached = self._derived.get(cache_key)
        if cached is not None:
            return cached
        sku = mig_sku(parent, profile)
        if not sku.known:  # its own subject: the parent's name may have been warned about already
            self._warn(f"MIG instance {sku.name}", "%s: %s", sku.name, sku.notes)
        if len(self._derived) < _RESOLVE_CACHE_LIMIT:
            self._derived[cache_key] = sku
        return sku

    def mig_profile(self, reported_name: str) -> str | None:
        """The MIG profile in a MIG device name ("1g.10gb"), ``None`` for a whole GPU."""
        match = self._mig_suffix.search(_normalise(reported_name))
        return match.group("profile").lower() if match else None

    def resolve(self, reported_name: str, mig_profile: str | None = None) -> GpuSku:
        """The SKU of a reported device name; an explicit unknown SKU (``known=False``) when none fits.

        ``mig_profile`` names the MIG profile where the source reports it apart from the name (a name that
        carries a MIG suffix needs none); the result is then the MIG instance's SKU."""
        cache_key = (reported_name, mig_profile.strip().lower() if mig_profile else None)
        cached = self._resolved.get(cache_key)
        if cached is not None:
            return cached
        sku = self._match(reported_name, cache_key[1])
        if len(self._resolved) < _RESOLVE_CACHE_LIMIT:
            self._resolved[cache_key] = sku
        return sku

    def _match(self, reported_name: str, mig_profile: str | None) -> GpuSku:
        name = _normalise(reported_name)
        mig = self._mig_suffix.search(name)
        if mig:
            name = name[: mig.start()].strip()
            mig_profile = mig_profile or mig.group("profile").lower()
        parent = self._match_whole(reported_name, name)
        return parent if mig_profile is None else self.mig_sku(parent, mig_profile)

    def _match_whole(self, reported_name: str, name: str) -> GpuSku:
        folded = name.casefold()
        exact = self._exact.get(folded)
        if exact is not None:
            return self._skus[exact]
        candidates = sorted({key for pattern, key in self._patterns if pattern.fullmatch(name)})
        if len(candidates) == 1:
            return self._skus[candidates[0]]
        if candidates:
            self._warn(
                reported_name,
                "GPU name %r matches several SKUs (%s); treating it as unknown",
                reported_name,
                ", ".join(candidates),
            )
        else:
            self._warn(
                reported_name,
                "GPU name %r matches no catalogued SKU; its figures are unknown "
                "(add it in the operator catalog file, PHASEFIT_CATALOG_PATH)",
                reported_name,
            )
        # A MIG device's parent is named without the MIG suffix: the instance's name adds it back once.
        return unknown_sku(reported_name if name == _normalise(reported_name) else name)

    def _warn(self, subject: str, message: str, *args: object) -> None:
        """Log a warning once per subject (names repeat every window)."""
        if subject not in self._warned and len(self._warned) < _RESOLVE_CACHE_LIMIT:
            self._warned.add(subject)
            logger.warning(message, *args)
