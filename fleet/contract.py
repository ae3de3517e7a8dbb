"""The data contract: typed records that cross process boundaries (docs/architecture.md, "The data contract").

Records are strict: an unknown field, a ratio outside 0..1, a negative count, a number sent as a string
or a boolean, a timestamp without a time zone or outside [2000, 2100), a name with control or
direction-changing characters is an error, never silently repaired. A field a source does not provide is
``None``, never 0. A caller that knows "now" (the service) narrows the accepted timestamps further by
passing ``{"ts_window": (earliest, latest)}`` as the validation context; a reader of stored records passes
``{"stored": True}`` so rows stored before a bound existed still read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationInfo,
    model_validator,
)
from pydantic_core import ErrorDetails

from fleet import histogram_grid

# No C0/C1 controls, no zero-width, bidirectional or other invisible format characters: names end up in
# labels, logs and HTML, where such characters hide or reorder text.
_VISIBLE = (
    r"^[^\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    r"\ufeff\ufff9-\ufffb]+$"
)
# Bounded strings keep label cardinality and row sizes sane; 253 is the Kubernetes name limit.
Name = Annotated[str, Field(min_length=1, max_length=253, pattern=_VISIBLE)]
ShortText = Annotated[str, Field(min_length=1, max_length=64, pattern=_VISIBLE)]
# Numbers are JSON numbers (Strict: never "0.5" or true), finite and bounded.
MAX_FLOAT = 1e15
Ratio = Annotated[float, Strict(), Field(ge=0.0, le=1.0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Strict(), Field(ge=0.0, le=MAX_FLOAT, allow_inf_nan=False)]
# Counts are JSON integers written as such (``5``, not ``5.0``): accepting integral floats too would cost a
# Python call per field on the ingest path (+39% parse time measured on the demo's records).
NonNegInt = Annotated[int, Strict(), Field(ge=0, le=2**63 - 1)]
# A count of requests an engine runs at once: at least 1 (0 would be "runs nothing", which no engine reports),
# at most what a 32-bit integer column holds.
REQUEST_CAP_MAX = 2**31 - 1
RequestCap = Annotated[int, Strict(), Field(ge=1, le=REQUEST_CAP_MAX)]
# A sample's window: at least a millisecond (no collector samples faster; rates divide by it, and a
# subnormal window would store as another number and make them explode), at most a day.
MIN_WINDOW_S = 0.001
WindowSeconds = Annotated[float, Strict(), Field(ge=MIN_WINDOW_S, le=86_400.0, allow_inf_nan=False)]

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)  # exclusive


def _to_utc(value: datetime, info: ValidationInfo) -> datetime:
    """UTC, inside [2000, 2100) and inside the caller's ``ts_window`` when it passes one."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"timestamp {value.isoformat()} is outside the years 2000-2099") from None
    earliest, latest = EARLIEST, LATEST
    context = info.context
    if isinstance(context, dict) and context.get("stored"):
        return utc  # read back from the store: what was accepted then is read as it is, never refused
    if isinstance(context, dict) and "ts_window" in context:
        earliest, latest = max(earliest, context["ts_window"][0]), min(latest, context["ts_window"][1])
    if not earliest <= utc < latest:
        raise ValueError(
            f"timestamp {utc.isoformat()} is outside the accepted window "
            f"[{earliest.isoformat()}, {latest.isoformat()})"
        )
    return utc


def _no_number(value: object) -> object:
    """RFC 3339 strings (or datetimes, in Python) only: a bare number is not a timestamp."""
    if isinstance(value, int | float):
        raise ValueError("a timestamp is an RFC 3339 string with a time zone, not a number")
    return value


UtcTimestamp = Annotated[AwareDatetime, BeforeValidator(_no_number), AfterValidator(_to_utc)]


def error_message(error: ErrorDetails) -> str:
    """A validation error in words an operator reads (the name pattern's regex is no help to them)."""
    if error["type"] == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == _VISIBLE:
        return "contains a control, invisible or direction-changing character"
    return error["msg"]


class GpuState(StrEnum):
    OK = "ok"
    LOST = "lost"  # Xid 79 / NVML_ERROR_GPU_IS_LOST
    DEGRADED = "degraded"  # some fields missing or untrustworthy


class TelemetrySource(StrEnum):
    """Where a sample's ratios came from; how much to trust them."""

    NVML_GPM = "nvml-gpm"
    NVML_BASIC = "nvml-basic"  # "a kernel was running", not compute pressure
    DCGM = "dcgm"
    PROMETHEUS = "prometheus"
    SIM = "sim"


class ActivityEvidence(StrEnum):
    """How much a GPU sample's activity says about its bottleneck."""

    # SM, tensor-pipe and DRAM activity (DCGM profiling fields, NVML GPM): which unit is busy.
    PROFILING = "profiling"
    # Only busy-time counters (GPU_UTIL, MEM_COPY_UTIL, GR_ENGINE_ACTIVE): how often something ran, not
    # whether the math or the memory limited it. Bottleneck calls on them are weaker and say so.
    UTILISATION = "utilisation"


class GpuJoin(StrEnum):
    """How an engine's GPUs were found (``gpu_uuids``); absent when they could not be."""

    POD_RESOURCES = "pod-resources"  # kubelet PodResources: the device plugin's assignment to the pod
    PROCESS = "process"  # NVML's compute processes joined to the PID listening on the engine's port
    ENGINE_LABELS = "engine-labels"  # GPU UUIDs or indices the engine reports about itself
    MAPPING = "mapping"  # the operator's mapping file
    DECLARED = "declared"  # the producer knows it by construction (the simulator, a test fixture)


class Role(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"
    UNKNOWN = "unknown"


class RoleSource(StrEnum):
    """How a worker's phase role was learned, strongest evidence first."""

    ENGINE = "engine"  # SGLang engine_type label and similar engine-reported roles
    POD_LABEL = "pod-label"  # llm-d.ai/role, nvidia.com/dynamo-sub-component-type, operator key
    COMPONENT = "component"  # Dynamo component names
    CMDLINE = "cmdline"  # --disaggregation-mode, --is-prefill-worker, kv_role
    CONFIG = "config"  # a static mapping file
    SIM = "sim"
    NONE = "none"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


# Bounds of a latency histogram: positive seconds, finite; at most 128 of them (engines use 15-25).
BucketBound = Annotated[float, Strict(), Field(gt=0.0, le=MAX_FLOAT, allow_inf_nan=False)]


class LatencyHistogram(BaseModel):
    """A latency histogram's increments over one window, as the engine buckets it: ``le`` the finite upper
    bounds in seconds (positive, strictly rising), ``counts`` the observations at or below each (one per
    bound, cumulative: never falling) and ``count`` all of them (the ``+Inf`` bucket: at least the last
    of ``counts``). A histogram that breaks these is refused. Merged across workers on one shared grid
    (:mod:`fleet.histograms`), it gives a pool's quantile as ``histogram_quantile`` over ``sum by (le)``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    le: Annotated[list[BucketBound], Field(max_length=128)]
    counts: Annotated[list[NonNegFloat], Field(max_length=128)]
    count: NonNegFloat

    @model_validator(mode="after")
    def _is_a_histogram(self) -> LatencyHistogram:
        try:
            histogram_grid.check(self.le, self.counts, self.count)
        except histogram_grid.HistogramError as exc:
            raise ValueError(str(exc)) from None
        return self


class GpuSample(_Record):
    """One GPU over one window."""

    kind: Literal["gpu_sample"] = "gpu_sample"
    ts: UtcTimestamp  # window end
    window_s: WindowSeconds
    node: Name
    gpu_uuid: Name
    gpu_index: NonNegInt
    gpu_name: Name
    worker_id: Name | None = None
    sm_active: Ratio | None = None
    tensor_active: Ratio | None = None
    dram_active: Ratio | None = None
    gpu_util: Ratio | None = None
    mem_used_bytes: NonNegInt | None = None
    power_w: NonNegFloat | None = None
    sm_clock_mhz: NonNegFloat | None = None
    nvlink_tx_bytes: NonNegInt | None = None
    nvlink_rx_bytes: NonNegInt | None = None
    pcie_tx_bytes: NonNegInt | None = None
    pcie_rx_bytes: NonNegInt | None = None
    state: GpuState = GpuState.OK
    source: TelemetrySource
    parent_gpu_uuid: Name | None = None
    mig_profile: ShortText | None = None
    cluster: Name | None = None  # the collector's configured cluster; pools never come from node names
    gr_engine_active: Ratio | None = None  # DCGM_FI_PROF_GR_ENGINE_ACTIVE, GPM graphics util (per MIG slice)
    mem_copy_util: Ratio | None = None  # DCGM_FI_DEV_MEM_COPY_UTIL / NVML memory utilisation (busy time)
    # None: derive from the fields present (profiling when any of sm/tensor/dram is set).
    activity_evidence: ActivityEvidence | None = None


class EngineSample(_Record):
    """One serving worker over one window."""

    kind: Literal["engine_sample"] = "engine_sample"
    ts: UtcTimestamp
    window_s: WindowSeconds
    worker_id: Name
    node: Name
    engine: ShortText
    role: Role = Role.UNKNOWN
    role_source: RoleSource = RoleSource.NONE
    model: Name
    precision: ShortText | None = None
    # The tensor-parallel degree as the engine reports it or as the GPUs its process holds; None when
    # neither is known, never a default.
    tp: Annotated[int, Strict(), Field(ge=1, le=1024)] | None = None
    gpu_uuids: Annotated[list[Name], Field(max_length=1024)] = Field(default_factory=list)
    gpu_join: GpuJoin | None = None  # how gpu_uuids were found; None with gpu_uuids empty when they were not
    prompt_tokens: NonNegInt = 0
    generation_tokens: NonNegInt = 0
    requests_running: NonNegInt | None = None
    requests_waiting: NonNegInt | None = None
    kv_cache_usage: Ratio | None = None
    preemptions: NonNegInt | None = None
    ttft_p50_s: NonNegFloat | None = None
    ttft_p99_s: NonNegFloat | None = None
    tpot_p50_s: NonNegFloat | None = None
    tpot_p99_s: NonNegFloat | None = None
    # The window's 90th percentiles, what latency targets are stated in; end to end: arrival to last token.
    ttft_p90_s: NonNegFloat | None = None
    tpot_p90_s: NonNegFloat | None = None
    e2e_p90_s: NonNegFloat | None = None
    # The window's histogram increments behind those quantiles (the engine's own buckets), so a pool's p90
    # comes from its merged buckets rather than from a mean of its workers' p90s; None when not read.
    ttft_histogram: LatencyHistogram | None = None
    tpot_histogram: LatencyHistogram | None = None
    e2e_histogram: LatencyHistogram | None = None
    cluster: Name | None = None
    # The serving deployment or router group: Dynamo namespace, llm-d InferencePool, KServe
    # InferenceService, else "<namespace>/<owner>". With the cluster and the served model it names the pool.
    deployment: Name | None = None
    # The KV cache the engine holds, in tokens, as it reports it (vLLM's cache_config_info num_gpu_blocks x
    # block_size, SGLang's max_total_num_tokens, TensorRT-LLM's KV-cache statistics); None when it does not.
    kv_capacity_tokens: NonNegInt | None = None
    # The most requests the engine runs at once, as it reports it (SGLang's max_running_requests gauge, vLLM's
    # max_num_seqs label of an info gauge, TensorRT-LLM's max_num_active_requests or max batch size); None
    # when it does not.
    max_running_requests: RequestCap | None = None


class Bottleneck(StrEnum):
    """A worker's measured bottleneck: from its counters, not from its role label."""

    COMPUTE = "compute"
    MEMORY_BANDWIDTH = "memory-bandwidth"
    CAPACITY = "capacity"  # KV cache full, preemptions, growing queue
    UNDERUTILISED = "underutilised"  # no resource near its limit
    UNKNOWN = "unknown"  # telemetry too weak to say


class FindingKind(StrEnum):
    DECODE_ON_LOW_BANDWIDTH = "decode-on-low-bandwidth"
    PREFILL_ON_HIGH_BANDWIDTH = "prefill-on-high-bandwidth"
    CAPACITY_ON_SMALL_MEMORY = "capacity-on-small-memory"
    ROLE_DRIFT = "role-drift"
    POOL_RATIO_DRIFT = "pool-ratio-drift"
    UNDERUTILISED_POOL = "underutilised-pool"
    DISAGGREGATION_NOT_PAYING = "disaggregation-not-paying"
    HEALTHY_NOT_SERVING = "healthy-not-serving"
    KV_FABRIC_UNDERPROVISIONED = "kv-fabric-underprovisioned"
    TELEMETRY_DEGRADED = "telemetry-degraded"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class FindingStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class Recommendation(_Record):
    """What to do and what it costs."""

    action: Literal[
        "swap-roles-in-place",
        "move-same-sku",
        "move-across-sku",
        "rebalance-pool",
        "colocate",
        "investigate",
        "none",
    ]
    detail: Annotated[str, Field(max_length=2000)] = ""
    counterpart_worker_id: Name | None = None
    target_sku: ShortText | None = None
    expected_gain_tokens_per_s: NonNegFloat | None = None


class Finding(_Record):
    """What the analyzer concludes about one worker (or, with worker_id None, a pool or the fleet)."""

    kind: FindingKind
    worker_id: Name | None = None
    pool: Name | None = None  # the model pool ("<cluster>/<deployment>/<model>", see analyzer.pools.pool)
    severity: Severity = Severity.WARNING
    status: FindingStatus = FindingStatus.OPEN
    gpu_sku: ShortText | None = None
    role: Role = Role.UNKNOWN
    bottleneck: Bottleneck = Bottleneck.UNKNOWN
    evidence: dict[str, float | str | None] = Field(default_factory=dict)
    tokens_per_s: NonNegFloat | None = None
    # Prompt + output tokens: secondary, see the two below. None where the finding estimates no loss (not a
    # throughput loss: telemetry degraded, not serving, a pool condition); 0 only where a loss was estimated
    # as 0.
    lost_tokens_per_s: NonNegFloat | None = None
    lost_tokens_per_s_low: NonNegFloat | None = None
    lost_tokens_per_s_high: NonNegFloat | None = None
    # What an SRE acts on: output tokens and requests per second; None where not a throughput loss.
    lost_output_tokens_per_s: NonNegFloat | None = None
    lost_output_tokens_per_s_low: NonNegFloat | None = None
    lost_output_tokens_per_s_high: NonNegFloat | None = None
    lost_requests_per_s: NonNegFloat | None = None
    lost_requests_per_s_low: NonNegFloat | None = None
    lost_requests_per_s_high: NonNegFloat | None = None
    recommendation: Recommendation | None = None
    first_seen: UtcTimestamp
    last_seen: UtcTimestamp


def activity_evidence(sample: GpuSample) -> ActivityEvidence | None:
    """The sample's evidence level: as marked, else from the fields present; None when it has no activity."""
    if sample.activity_evidence is not None:
        return sample.activity_evidence
    if sample.sm_active is not None or sample.tensor_active is not None or sample.dram_active is not None:
        return ActivityEvidence.PROFILING
    if sample.gpu_util is not None or sample.mem_copy_util is not None or sample.gr_engine_active is not None:
        return ActivityEvidence.UTILISATION
    return None


Record = Annotated[GpuSample | EngineSample, Field(discriminator="kind")]
RECORD_ADAPTER: TypeAdapter[GpuSample | EngineSample] = TypeAdapter(Record)

RECORD_KINDS = ("gpu_sample", "engine_sample")


def parse_record(line: str | bytes) -> GpuSample | EngineSample:
    """Validate one JSON object (one line of a JSONL file) into a record; raises pydantic.ValidationError."""
    return RECORD_ADAPTER.validate_json(line)


def dump_record(record: GpuSample | EngineSample) -> str:
    """One JSON line, the inverse of :func:`parse_record` (nulls included so the line is self-describing)."""
    return record.model_dump_json()
