"""One serving instance: a model at a precision on TP GPUs of one SKU, resolved through the catalog.

Accepts catalog keys, display names, NVML names and served model ids. Anything unknown, or a SKU missing a
figure the model needs, is an error that names what is missing. Reasoning: docs/analyzer.md#deployment
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.catalog import Catalog
from fleet.gpus import GpuSku
from fleet.models import ModelArch
from fleet.precision import Precision, parse_precision


class DeploymentError(ValueError):
    """A model, GPU or precision the performance model cannot work with; the message says why."""


@dataclass(frozen=True)
class Deployment:
    """What one serving instance runs on: ``tp`` GPUs of ``gpu`` holding ``model``.

    ``tp`` is every GPU of the instance. ``ep`` spreads a MoE model's routed experts over that many of them
    (1: split across all, the default); ``attention_dp`` runs attention data-parallel. Serving stacks do not
    report these, so the fleet's deployments keep the defaults. Reasoning: docs/analyzer.md#deployment
    """

    model: ModelArch
    gpu: GpuSku
    precision: Precision
    kv_precision: Precision
    tp: int
    ep: int = 1
    attention_dp: bool = False

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise DeploymentError(f"tp must be >= 1, got {self.tp}")
        if self.ep < 1 or self.tp % self.ep:
            raise DeploymentError(f"ep must divide tp ({self.tp}), got {self.ep}")
        if (self.ep > 1 or self.attention_dp) and not self.model.experts_total:
            raise DeploymentError(
                f"{self.model.key} is a dense model: expert parallelism and attention data parallelism "
                "apply to mixture-of-experts models"
            )
        missing = [
            name
            for name, value in (
                ("hbm_bytes", self.gpu.hbm_bytes),
                ("hbm_bandwidth_bytes_per_s", self.gpu.hbm_bandwidth_bytes_per_s),
                (f"dense {self.precision} FLOP/s", self.gpu.peak_flops(self.precision)),
            )
            if not value
        ]
        if missing:
            raise DeploymentError(
                f"GPU {self.gpu.key!r} ({self.gpu.name}) lacks catalog figure(s) {', '.join(missing)}; "
                "add them in the operator catalog file (PHASEFIT_CATALOG_PATH)"
            )
        if self.kv_precision in (Precision.FP4, Precision.INT4):
            raise DeploymentError(f"a {self.kv_precision} KV cache is not supported; use fp8 or bf16")

    @property
    def is_moe(self) -> bool:
        return bool(self.model.experts_total)

    @property
    def layout(self) -> str:
        """How the instance is cut: ``TP8``, ``TP8 EP8``, ``TP8 EP8 attention-DP``."""
        parts = [f"TP{self.tp}"]
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.attention_dp:
            parts.append("attention-DP")
        return " ".join(parts)

    @property
    def hbm_bytes(self) -> float:
        assert self.gpu.hbm_bytes is not None
        return float(self.gpu.hbm_bytes)

    @property
    def hbm_bandwidth(self) -> float:
        assert self.gpu.hbm_bandwidth_bytes_per_s is not None
        return self.gpu.hbm_bandwidth_bytes_per_s

    @property
    def matmul_peak_flops(self) -> float:
        peak = self.gpu.peak_flops(self.precision)
        assert peak is not None
        return peak

    @property
    def attention_peak_flops(self) -> float:
        """Attention runs in FP8 where the cache is FP8 and the GPU has FP8 tensor cores, else 16-bit."""
        fp8 = self.gpu.peak_flops(Precision.FP8) if self.kv_precision is Precision.FP8 else None
        return fp8 or self.gpu.bf16_dense_flops or self.matmul_peak_flops


def default_kv_precision(precision: Precision) -> Precision:
    """The KV-cache precision engines pair with a weight precision: FP8 with FP8 and FP4 checkpoints
    (trtllm-bench forces it), 16-bit otherwise (weight-only INT4 keeps a BF16 cache)."""
    if precision in (Precision.FP8, Precision.FP4):
        return Precision.FP8
    if precision is Precision.INT4:
        return Precision.BF16
    return precision


def resolve_gpu(catalog: Catalog, name: str) -> GpuSku:
    """The SKU a key, display name or NVML name denotes; ``DeploymentError`` listing the keys if none."""
    try:
        return catalog.gpus.get(name)
    except KeyError:
        pass
    sku = catalog.gpus.resolve(name)
    if not sku.known:
        known = ", ".join(sorted(catalog.gpus.skus))
        raise DeploymentError(f"unknown GPU {name!r}; known SKUs: {known} (or an NVML name they report)")
    return sku


def resolve_model(catalog: Catalog, name: str) -> ModelArch:
    """The architecture a catalog key or served model id denotes; ``DeploymentError`` if none."""
    try:
        return catalog.models.get(name)
    except KeyError:
        pass
    model = catalog.models.resolve(name)
    if model is None:
        known = ", ".join(sorted(catalog.models.models))
        raise DeploymentError(f"unknown model {name!r}; known models: {known} (or a served id they resolve)")
    return model


def make_deployment(
    catalog: Catalog,
    *,
    model: str,
    gpu: str,
    precision: str | Precision,
    tp: int,
    kv_precision: str | Precision | None = None,
    ep: int = 1,
    attention_dp: bool = False,
) -> Deployment:
    """Resolve names through the catalog into a :class:`Deployment`."""
    try:
        weights = precision if isinstance(precision, Precision) else parse_precision(precision)
        if kv_precision is None:
            cache = default_kv_precision(weights)
        else:
            cache = kv_precision if isinstance(kv_precision, Precision) else parse_precision(kv_precision)
    except ValueError as exc:
        raise DeploymentError(str(exc)) from exc
    return Deployment(
        model=resolve_model(catalog, model),
        gpu=resolve_gpu(catalog, gpu),
        precision=weights,
        kv_precision=cache,
        tp=tp,
        ep=ep,
        attention_dp=attention_dp,
    )
