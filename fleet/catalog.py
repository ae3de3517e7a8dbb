"""The GPU and model catalogs: built-in YAML data merged with an operator's catalog file.

The operator's file (``PHASEFIT_CATALOG_PATH``) has top-level ``gpus:``, ``models:`` and ``engines:``
mappings keyed by SKU, model or engine key, in the built-in files' fields and units. ``engines:`` says how
each serving engine sizes its KV cache (the knob, what it is a fraction of, the memory it keeps outside
weights and KV cache): the named assumptions of a modelled KV budget (``analyzer.model.kv_budget``), used only
where no engine reports its budget. An entry for a known key overrides only the
fields it names (``gpus: {H100-SXM: {hourly_price_usd: 2.9}}``; a list such as ``nvml_names`` is
replaced, not extended, and so is a ``mig`` table); a new key adds a SKU or model and must give every
required field (``null`` states an unknown figure). A GPU's ``mig`` table (compute and memory slices, and
the GPU-instance profiles it supports with the memory slices each takes) is what MIG instances of it are
derived from (``fleet.gpus.mig_sku``); a GPU without one has no MIG SKUs (its instances are unknown).
The file may also hold a ``targets:`` list of per-pool latency targets (``fleet.targets``: match keys
``cluster``, ``deployment``, ``model``; targets ``ttft_p90_s``, ``tpot_p90_s``, ``e2e_p90_s`` in seconds),
which the analyzer applies below the settings' own rules of equal specificity.
Unknown fields, wrong types and malformed YAML raise ``CatalogError`` naming the file and the key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet.gpus import UNKNOWN_SKU_KEY, GpuCatalog, GpuSku, MigGeometry
from fleet.models import ModelArch, ModelCatalog
from fleet.targets import PlacedRule, TargetError, parse_rules

_GB = 1e9
_TERA = 1e12
_BILLION = 1e9
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class CatalogError(ValueError):
    """A catalog file is unreadable, malformed or inconsistent; the message names the file and key."""


KvMemoryBasis = Literal["free", "total", "static"]


@dataclass(frozen=True)
class EngineSettings:
    """How one serving engine sizes its KV cache, as the engine's documentation and code say.

    ``kv_memory_basis`` says what ``kv_memory_fraction`` is a fraction of:
    - ``free``: of the memory left after the weights and the engine's reserve (TensorRT-LLM's
      ``free_gpu_memory_fraction``): KV = fraction x (HBM - weights - reserve);
    - ``total``: of the device, weights and reserve included (vLLM's ``gpu_memory_utilization``):
      KV = fraction x HBM - weights - reserve;
    - ``static``: of the device for weights plus KV cache, activations and CUDA graphs living in the rest
      (SGLang's ``mem_fraction_static``): KV = fraction x HBM - weights - reserve, the reserve being only
      what is held before the pool is sized (CUDA context, communication buffers).
    ``kv_memory_fraction_by_tp`` gives the default per TP degree where the engine derives it so (the
    largest listed degree not above the instance's). ``runtime_reserve_bytes`` is per GPU; None means the
    reserve calibrated on published measurements (``analyzer.model.efficiency.CALIBRATED``). The ranges span
    what releases and common settings do: a modelled budget carries them as its uncertainty.
    """

    key: str
    name: str
    kv_memory_basis: KvMemoryBasis
    kv_memory_fraction: float
    kv_memory_fraction_range: tuple[float, float]
    runtime_reserve_bytes: float | None
    runtime_reserve_range: tuple[float, float]  # multiples of the reserve
    kv_memory_fraction_by_tp: Mapping[int, float] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    sources: str = ""
    notes: str = ""

    def fraction_for(self, tp: int) -> float:
        """The default fraction at this TP degree."""
        listed = [degree for degree in sorted(self.kv_memory_fraction_by_tp) if degree <= tp]
        return self.kv_memory_fraction_by_tp[listed[-1]] if listed else self.kv_memory_fraction


class EngineCatalog:
    """The engines' KV-memory settings, resolved from what engine_sample ``engine`` says (case ignored,
    a key or an alias)."""

    def __init__(self, engines: Mapping[str, EngineSettings], default: str | None = None) -> None:
        self._engines: Mapping[str, EngineSettings] = MappingProxyType(dict(engines))
        self._index: dict[str, str] = {}
        for key, engine in self._engines.items():
            for name in (key, *engine.aliases):
                claimed = self._index.setdefault(name.casefold(), key)
                if claimed != key:
                    raise ValueError(f"engine name {name!r} is claimed by both {claimed!r} and {key!r}")
        if default is not None and default not in self._engines:
            raise ValueError(f"default engine {default!r} is not in the catalog")
        self._default = default

    @property
    def engines(self) -> Mapping[str, EngineSettings]:
        return self._engines

    @property
    def default(self) -> EngineSettings | None:
        """The engine assumed where a worker's engine is unknown (None: no engines catalogued)."""
        return self._engines[self._default] if self._default is not None else None

    def resolve(self, name: str | None) -> EngineSettings | None:
        """The settings of an engine name, or None when the catalog does not know it."""
        if not name:
            return None
        key = self._index.get(name.strip().casefold())
        return self._engines[key] if key is not None else None


@dataclass(frozen=True)
class Catalog:
    gpus: GpuCatalog
    models: ModelCatalog
    engines: EngineCatalog = field(default_factory=lambda: EngineCatalog({}))
    targets: tuple[PlacedRule, ...] = ()  # the operator file's latency targets, in the order written


Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MigEntry(_Entry):
    """How a GPU divides under MIG: compute slices (GPCs), memory slices, and the GPU-instance profiles it
    supports as ``{"1g.10gb": <memory slices>}``; ``sources`` says where the facts come from."""

    compute_slices: PositiveInt
    memory_slices: PositiveInt
    profiles: dict[str, PositiveInt]
    sources: str


class GpuEntry(_Entry):
    """One SKU as catalog files write it: GB = 1e9 bytes, TB/s = 1e12 bytes/s, TFLOP/s = 1e12 (dense)."""

    name: str | None = None
    vendor: str | None = None
    form_factor: str | None = None
    hbm_type: str | None = None
    hbm_gb: Positive | None = None
    hbm_bandwidth_tb_s: Positive | None = None
    bf16_dense_tflops: Positive | None = None
    fp8_dense_tflops: Positive | None = None
    fp4_dense_tflops: Positive | None = None
    tdp_w: Positive | None = None
    interconnect: str | None = None
    interconnect_gb_s: Positive | None = None
    hourly_price_usd: NonNegative | None = None
    nvml_names: list[str] | None = None
    name_patterns: list[str] | None = None
    mig: MigEntry | None = None
    sources: str | None = None
    notes: str | None = None


_GPU_REQUIRED = (
    "name",
    "sources",
    "hbm_gb",
    "hbm_bandwidth_tb_s",
    "bf16_dense_tflops",
    "fp8_dense_tflops",
    "tdp_w",
)


class ModelEntry(_Entry):
    """One model as catalog files write it: the config's integers; published counts in billions."""

    name: str | None = None
    hf_ids: list[str] | None = None
    aliases: list[str] | None = None
    layers: PositiveInt | None = None
    hidden: PositiveInt | None = None
    heads: PositiveInt | None = None
    kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    intermediate: PositiveInt | None = None
    moe_intermediate: PositiveInt | None = None
    vocab: PositiveInt | None = None
    experts_total: PositiveInt | None = None
    experts_active: PositiveInt | None = None
    shared_experts: NonNegativeInt | None = None
    shared_expert_intermediate: PositiveInt | None = None
    dense_layers: NonNegativeInt | None = None
    attention: Literal["gqa", "mla"] | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    q_lora_rank: PositiveInt | None = None
    qkv_bias: bool | None = None
    qk_norm: bool | None = None
    tie_word_embeddings: bool | None = None
    attention_chunk_size: PositiveInt | None = None
    global_attention_every: PositiveInt | None = None
    published_total_params_b: Positive | None = None
    published_active_params_b: Positive | None = None
    sources: str | None = None
    notes: str | None = None


_MODEL_REQUIRED = (
    "name",
    "sources",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "attention",
)


Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class EngineEntry(_Entry):
    """One engine as catalog files write it: fractions in (0, 1], the reserve in GB (1e9 bytes) per GPU
    (null: the calibrated reserve), its range as multiples of the reserve."""

    name: str | None = None
    aliases: list[str] | None = None
    kv_memory_basis: Literal["free", "total", "static"] | None = None
    kv_memory_fraction: Fraction | None = None
    kv_memory_fraction_range: Annotated[list[Fraction], Field(min_length=2, max_length=2)] | None = None
    kv_memory_fraction_by_tp: dict[PositiveInt, Fraction] | None = None
    runtime_reserve_gb: NonNegative | None = None
    runtime_reserve_range: Annotated[list[NonNegative], Field(min_length=2, max_length=2)] | None = None
    sources: str | None = None
    notes: str | None = None


_ENGINE_REQUIRED = (
    "name",
    "sources",
    "kv_memory_basis",
    "kv_memory_fraction",
    "kv_memory_fraction_range",
    "runtime_reserve_gb",
    "runtime_reserve_range",
)


def _engine_settings(key: str, e: EngineEntry) -> EngineSettings:
    assert e.name and e.kv_memory_basis and e.kv_memory_fraction
    assert e.kv_memory_fraction_range and e.runtime_reserve_range
    low, high = e.kv_memory_fraction_range
    by_tp = dict(e.kv_memory_fraction_by_tp or {})
    if (
        not low
        <= min([e.kv_memory_fraction, *by_tp.values()])
        <= max([e.kv_memory_fraction, *by_tp.values()])
        <= high
    ):
        raise ValueError("kv_memory_fraction (and every kv_memory_fraction_by_tp) must lie in its range")
    r_low, r_high = e.runtime_reserve_range
    if not r_low <= 1.0 <= r_high:
        raise ValueError("runtime_reserve_range must contain 1 (multiples of the reserve)")
    return EngineSettings(
        key=key,
        name=e.name,
        kv_memory_basis=e.kv_memory_basis,
        kv_memory_fraction=e.kv_memory_fraction,
        kv_memory_fraction_range=(low, high),
        runtime_reserve_bytes=_scaled(e.runtime_reserve_gb, _GB),
        runtime_reserve_range=(r_low, r_high),
        kv_memory_fraction_by_tp=MappingProxyType(by_tp),
        aliases=tuple(e.aliases or ()),
        sources=e.sources or "",
        notes=e.notes or "",
    )


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else float(round(value * factor))


def _gpu_sku(key: str, e: GpuEntry) -> GpuSku:
    hbm_bytes = None if e.hbm_gb is None else round(e.hbm_gb * _GB)
    mig = None
    if e.mig is not None:
        mig = MigGeometry(e.mig.compute_slices, e.mig.memory_slices, dict(e.mig.profiles), e.mig.sources)
        mig.check(key, hbm_bytes)  # a ValueError names the file and key (see _build)
    return GpuSku(
        key=key,
        name=e.name or key,
        hbm_bytes=hbm_bytes,
        hbm_bandwidth_bytes_per_s=_scaled(e.hbm_bandwidth_tb_s, _TERA),
        bf16_dense_flops=_scaled(e.bf16_dense_tflops, _TERA),
        fp8_dense_flops=_scaled(e.fp8_dense_tflops, _TERA),
        fp4_dense_flops=_scaled(e.fp4_dense_tflops, _TERA),
        tdp_w=e.tdp_w,
        interconnect=e.interconnect,
        interconnect_bytes_per_s=_scaled(e.interconnect_gb_s, _GB),
        hourly_price_usd=e.hourly_price_usd,
        sources=e.sources or "",
        known=True,
        vendor=e.vendor,
        form_factor=e.form_factor,
        hbm_type=e.hbm_type,
        notes=e.notes or "",
        nvml_names=tuple(e.nvml_names or ()),
        name_patterns=tuple(e.name_patterns or ()),
        mig=mig,
    )


def _model_arch(key: str, e: ModelEntry) -> ModelArch:
    assert e.name and e.layers and e.hidden and e.heads and e.kv_heads and e.head_dim and e.vocab
    return ModelArch(
        key=key,
        name=e.name,
        layers=e.layers,
        hidden=e.hidden,
        heads=e.heads,
        kv_heads=e.kv_heads,
        head_dim=e.head_dim,
        vocab=e.vocab,
        hf_ids=tuple(e.hf_ids or ()),
        aliases=tuple(e.aliases or ()),
        intermediate=e.intermediate,
        moe_intermediate=e.moe_intermediate,
        experts_total=e.experts_total,
        experts_active=e.experts_active,
        shared_experts=e.shared_experts or 0,
        shared_expert_intermediate=e.shared_expert_intermediate,
        dense_layers=e.dense_layers or 0,
        attention=e.attention or "gqa",
        kv_lora_rank=e.kv_lora_rank,
        qk_rope_head_dim=e.qk_rope_head_dim,
        qk_nope_head_dim=e.qk_nope_head_dim,
        v_head_dim=e.v_head_dim,
        q_lora_rank=e.q_lora_rank,
        qkv_bias=bool(e.qkv_bias),
        qk_norm=bool(e.qk_norm),
        tie_word_embeddings=bool(e.tie_word_embeddings),
        attention_chunk_size=e.attention_chunk_size,
        global_attention_every=e.global_attention_every,
        published_total_params=_scaled(e.published_total_params_b, _BILLION),
        published_active_params=_scaled(e.published_active_params_b, _BILLION),
        sources=e.sources or "",
        notes=e.notes or "",
    )


# --- reading ----------------------------------------------------------------------------------------


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


class _StrictLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe loader that refuses a key written twice in one mapping (PyYAML keeps the last silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _parse(text: str, origin: str) -> dict[str, Any]:
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise CatalogError(f"{origin}: malformed YAML: {exc}") from exc
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise CatalogError(f"{origin}: expected a mapping at the top level, got {type(document).__name__}")
    return document


def _builtin(name: str) -> tuple[dict[str, Any], str]:
    origin = f"built-in fleet/data/{name}"
    return _parse(resources.files("fleet").joinpath("data", name).read_text(encoding="utf-8"), origin), origin


def _section(document: Mapping[str, Any], section: str, origin: str) -> dict[str, dict[str, Any]]:
    entries = document.get(section) or {}
    if not isinstance(entries, dict):
        raise CatalogError(f"{origin}: {section}: expected a mapping keyed by {section[:-1]} key")
    for key, fields in entries.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise CatalogError(f"{origin}: {section}: bad key {key!r} (letters, digits, '.', '_', '+', '-')")
        if section == "gpus" and key == UNKNOWN_SKU_KEY:
            raise CatalogError(f"{origin}: gpus.{key}: the key {UNKNOWN_SKU_KEY!r} is reserved")
        if not isinstance(fields, dict):
            raise CatalogError(f"{origin}: {section}.{key}: expected a mapping of fields")
    return entries


def _check_top_level(document: Mapping[str, Any], allowed: tuple[str, ...], origin: str) -> None:
    unknown = sorted(str(k) for k in document if k not in allowed)
    if unknown:
        raise CatalogError(
            f"{origin}: unknown top-level key(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )


def _describe(error: ValidationError, entry: type[BaseModel]) -> str:
    problems = []
    for detail in error.errors():
        field = ".".join(str(part) for part in detail["loc"])
        if detail["type"] == "extra_forbidden":
            problems.append(f"unknown field {field!r} (known: {', '.join(entry.model_fields)})")
        else:
            problems.append(f"field {field!r}: {detail['msg']}")
    return "; ".join(problems)


E = TypeVar("E", bound=_Entry)
T = TypeVar("T")


@dataclass(frozen=True)
class _Source:
    document: Mapping[str, Any]
    origin: str


def _merge(
    builtin: _Source, extra: _Source, section: str, entry: type[E]
) -> dict[str, tuple[dict[str, Any], str]]:
    """Each key's merged fields and the file that last touched it (named in errors)."""
    merged = {
        key: (dict(fields), builtin.origin)
        for key, fields in _section(builtin.document, section, builtin.origin).items()
    }
    for key, fields in _section(extra.document, section, extra.origin).items():
        try:
            entry.model_validate(fields)
        except ValidationError as exc:
            raise CatalogError(f"{extra.origin}: {section}.{key}: {_describe(exc, entry)}") from exc
        base = merged[key][0] if key in merged else {}
        merged[key] = ({**base, **fields}, extra.origin)
    return merged


def _build(
    merged: dict[str, tuple[dict[str, Any], str]],
    section: str,
    entry: type[E],
    required: tuple[str, ...],
    make: Callable[[str, E], T],
) -> dict[str, T]:
    built: dict[str, T] = {}
    for key, (fields, origin) in merged.items():
        missing = [name for name in required if name not in fields]
        if missing:
            raise CatalogError(
                f"{origin}: {section}.{key}: missing required field(s) {', '.join(missing)} "
                "(write null for a figure that is unknown)"
            )
        try:
            built[key] = make(key, entry.model_validate(fields))
        except ValidationError as exc:
            raise CatalogError(f"{origin}: {section}.{key}: {_describe(exc, entry)}") from exc
        except ValueError as exc:
            raise CatalogError(f"{origin}: {section}.{key}: {exc}") from exc
    return built


def _read_extra(extra_path: Path | None) -> _Source:
    if extra_path is None:
        return _Source({}, "")
    origin = str(extra_path)
    try:
        text = Path(extra_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{origin}: cannot read the catalog file: {exc}") from exc
    document = _parse(text, origin)
    _check_top_level(document, ("gpus", "models", "engines", "targets"), origin)
    return _Source(document, origin)


def _targets(extra: _Source) -> tuple[PlacedRule, ...]:
    if not extra.origin:
        return ()
    try:
        return parse_rules(extra.document.get("targets"), "catalog", f"{extra.origin}: targets")
    except TargetError as exc:
        raise CatalogError(str(exc)) from exc


def load_catalog(extra_path: Path | None = None) -> Catalog:
    """The built-in catalogs, with the operator's file at ``extra_path`` (if any) merged over them."""
    gpu_file = _Source(*_builtin("gpus.yaml"))
    model_file = _Source(*_builtin("models.yaml"))
    _check_top_level(gpu_file.document, ("mig_suffix_pattern", "gpus"), gpu_file.origin)
    _check_top_level(
        model_file.document, ("variant_suffixes", "default_engine", "models", "engines"), model_file.origin
    )
    extra = _read_extra(extra_path)
    skus = _build(_merge(gpu_file, extra, "gpus", GpuEntry), "gpus", GpuEntry, _GPU_REQUIRED, _gpu_sku)
    models = _build(
        _merge(model_file, extra, "models", ModelEntry), "models", ModelEntry, _MODEL_REQUIRED, _model_arch
    )
    engines = _build(
        _merge(model_file, extra, "engines", EngineEntry),
        "engines",
        EngineEntry,
        _ENGINE_REQUIRED,
        _engine_settings,
    )
    with_extra = f" + {extra.origin}" if extra.origin else ""
    try:
        gpus = GpuCatalog(skus, mig_suffix_pattern=str(gpu_file.document.get("mig_suffix_pattern", "")))
    except (ValueError, re.error) as exc:
        raise CatalogError(f"{gpu_file.origin}{with_extra}: gpus: {exc}") from exc
    suffixes = [str(s) for s in model_file.document.get("variant_suffixes") or []]
    try:
        model_catalog = ModelCatalog(models, variant_suffixes=suffixes)
    except (ValueError, re.error) as exc:
        raise CatalogError(f"{model_file.origin}{with_extra}: models: {exc}") from exc
    default_engine = model_file.document.get("default_engine")
    try:
        engine_catalog = EngineCatalog(
            engines, default=None if default_engine is None else str(default_engine)
        )
    except ValueError as exc:
        raise CatalogError(f"{model_file.origin}{with_extra}: engines: {exc}") from exc
    return Catalog(gpus=gpus, models=model_catalog, engines=engine_catalog, targets=_targets(extra))
