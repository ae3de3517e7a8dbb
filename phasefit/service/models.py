"""Typed request and response models of the HTTP API (what the OpenAPI document shows).

Lists are paginated with ``limit``/``offset``; ``next`` is the URL of the following page, or null on the
last one. Errors are ``{"detail": "..."}``, except ingest's 422/403/413, whose ``detail`` lists the records
and fields at fault.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema

from fleet.contract import Recommendation
from phasefit.service.wire import AS_DATETIME, InstantRange, json_integer

_OUT = ConfigDict(extra="forbid")


class ErrorMessage(BaseModel):
    model_config = _OUT
    detail: str


class RecordErrorOut(BaseModel):
    model_config = _OUT
    index: int | None = Field(description="Position of the record in 'records'; null for the envelope.")
    field: str | None = Field(description="The field at fault (dotted for nested values), or null.")
    message: str


class RecordErrors(BaseModel):
    model_config = _OUT
    detail: list[RecordErrorOut]


class IngestResult(BaseModel):
    model_config = _OUT
    accepted: int = Field(description="Records in the batch (all valid).")
    stored: int = Field(description="Records newly stored.")
    duplicates: int = Field(description="Records already stored (a re-sent batch stores nothing twice).")


class Health(BaseModel):
    model_config = _OUT
    status: Literal["ok"]


class Readiness(BaseModel):
    model_config = _OUT
    status: Literal["ready", "not-ready"]
    store: Literal["reachable", "unreachable"]
    schema_state: str | None = Field(description="empty, current, behind, ahead or unmanaged.")
    schema_revision: str | None
    head_revision: str
    detail: str | None = None


class Gpu(BaseModel):
    model_config = _OUT
    gpu_uuid: str
    node: str
    gpu_index: int
    gpu_name: str
    sku: str | None
    parent_gpu_uuid: str | None
    mig_profile: str | None
    cluster: str | None = Field(description="The cluster its collector reported (null: none configured).")
    worker_id: str | None
    state: str
    source: str
    first_seen: datetime
    last_seen: datetime


class Worker(BaseModel):
    model_config = _OUT
    worker_id: str
    node: str
    engine: str
    model: str
    role: str
    role_source: str
    precision: str | None
    tp: int | None = Field(description="Tensor-parallel degree (null: neither the engine nor its GPUs said).")
    gpu_uuids: list[str]
    gpu_join: str | None = Field(
        description="How its GPUs were found: pod-resources, process, engine-labels, mapping or declared "
        "(null: they were not)."
    )
    cluster: str | None = Field(description="The cluster its collector reported (null: none configured).")
    deployment: str | None = Field(
        description="The serving deployment or router group its labels name (null: not known)."
    )
    kv_capacity_tokens: int | None = Field(
        default=None, description="The KV cache the engine reports holding, in tokens (null: not reported)."
    )
    max_running_requests: int | None = Field(
        default=None, description="The most requests the engine reports running at once (null: not reported)."
    )
    first_seen: datetime
    last_seen: datetime


class FleetGroup(BaseModel):
    model_config = _OUT
    sku: str = Field(description="Catalog SKU key, or 'unresolved'.")
    role: str = Field(description="The role of the GPU's worker, or 'unattributed' without one.")
    state: str
    gpus: int


class FleetSummary(BaseModel):
    """GPUs counted by SKU, role and state (a bounded aggregate: not paginated)."""

    model_config = _OUT
    gpus: int
    workers: int
    nodes: int
    unattributed_gpus: int = Field(description="GPUs whose worker (and so role) is not known.")
    groups: list[FleetGroup]
    data_from: datetime | None = Field(
        description="Start of the stored telemetry (raw samples, or the hourly rollups that outlive them); "
        "null when none is stored."
    )
    data_until: datetime | None = Field(
        description="End of the stored telemetry (exclusive: a second after the newest raw sample, or the "
        "end of the last rolled-up hour); null when none is stored."
    )


class Page(BaseModel):
    model_config = _OUT
    limit: int
    offset: int
    next: str | None = Field(description="URL of the next page; null on the last one.")


class WorkerPage(Page):
    items: list[Worker]


class FindingOut(BaseModel):
    model_config = _OUT
    id: int
    kind: str
    status: str
    severity: str
    worker_id: str | None
    pool: str | None
    gpu_sku: str | None
    role: str
    bottleneck: str
    evidence: dict[str, float | str | None]
    tokens_per_s: float | None
    lost_tokens_per_s: float | None = Field(
        default=None,
        description="Secondary: lost prompt + output tokens/s (null: the finding estimates no loss).",
    )
    lost_tokens_per_s_low: float | None = None
    lost_tokens_per_s_high: float | None = None
    lost_output_tokens_per_s: float | None = Field(
        default=None, description="Lost output tokens/s (null: not a throughput loss)."
    )
    lost_output_tokens_per_s_low: float | None = None
    lost_output_tokens_per_s_high: float | None = None
    lost_requests_per_s: float | None = Field(
        default=None, description="Lost requests/s (null: not a throughput loss)."
    )
    lost_requests_per_s_low: float | None = None
    lost_requests_per_s_high: float | None = None
    recommendation: Recommendation | None
    first_seen: datetime
    last_seen: datetime
    resolved_at: datetime | None
    updated_at: datetime


class FindingPage(Page):
    items: list[FindingOut]


class WorkerDetail(Worker):
    gpus: list[Gpu]
    open_findings: list[FindingOut]


class EnginePoint(BaseModel):
    """One engine sample, or the aggregate of the samples in one bucket (``samples`` > 1)."""

    model_config = _OUT
    ts: datetime = Field(description="Window end (raw) or bucket start (with step).")
    samples: int
    window_s: float = Field(description="Seconds of telemetry covered (summed over the bucket).")
    role: str | None
    prompt_tokens: int
    generation_tokens: int
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    requests_running: float | None
    requests_waiting: float | None
    kv_cache_usage: float | None
    preemptions: int | None
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    ttft_p90_s: float | None = Field(
        default=None, description="The windows' 90th-percentile TTFT, their mean over a bucket (seconds)."
    )
    tpot_p90_s: float | None = Field(
        default=None, description="The windows' 90th-percentile TPOT, their mean over a bucket (seconds)."
    )
    e2e_p90_s: float | None = Field(
        default=None,
        description="The windows' 90th-percentile end-to-end latency, their mean over a bucket (seconds).",
    )


class GpuPoint(BaseModel):
    """One GPU sample, or the mean over one bucket (``mem_used_bytes``: the maximum)."""

    model_config = _OUT
    ts: datetime
    gpu_uuid: str
    samples: int
    sm_active: float | None
    tensor_active: float | None
    dram_active: float | None
    gpu_util: float | None
    power_w: float | None
    mem_used_bytes: int | None
    lost_samples: int
    degraded_samples: int


class WorkerSamples(BaseModel):
    model_config = _OUT
    worker_id: str
    from_: datetime = Field(alias="from")
    to: datetime
    step_s: float | None = Field(description="Bucket width; null for raw samples.")
    source: Literal["raw", "rollup-1m", "rollup-1h"]
    engine: list[EnginePoint]
    gpus: list[GpuPoint]
    next: str | None = Field(description="URL of the rest of the range when the page was cut; else null.")
    notices: list[str] = Field(
        default_factory=list,
        description="What the reader should know about the points, e.g. that the part of the range older "
        "than PHASEFIT_ROLLUP_MINUTE_RETENTION_DAYS is shown from hourly rollups.",
    )


class LostTokensPoint(BaseModel):
    model_config = _OUT
    ts: datetime = Field(description="Bucket start.")
    lost_tokens_per_s: float | None = Field(
        description="Secondary: fleet-wide prompt + output tokens/s; null when nothing covers the bucket."
    )
    lost_tokens_per_s_low: float | None
    lost_tokens_per_s_high: float | None
    lost_output_tokens_per_s: float | None = Field(
        default=None,
        description="Fleet-wide lost output tokens/s; null when unknown or nothing covers the bucket.",
    )
    lost_requests_per_s: float | None = Field(
        default=None,
        description="Fleet-wide lost requests/s; null when unknown or nothing covers the bucket.",
    )
    pools: dict[str, float] = Field(description="Lost tokens per second (prompt + output) by pool.")


class LostTokensSeries(BaseModel):
    model_config = _OUT
    from_: datetime = Field(alias="from")
    to: datetime
    step_s: float
    source: Literal["analysis-runs", "findings"] = Field(
        description="analysis-runs: the analyzer's fleet totals per run; findings: the sum over open "
        "worker findings (used when the range holds no analyzer run)."
    )
    points: list[LostTokensPoint]


class ReportInfo(BaseModel):
    model_config = _OUT
    week: str
    format: str
    created_at: datetime
    summary: dict[str, Any]
    url: str


class ReportPage(Page):
    items: list[ReportInfo]


class Report(ReportInfo):
    body: str


ALERTMANAGER_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time: Alertmanager's endsAt while firing
STILL_FIRING = datetime(1, 1, 1, tzinfo=UTC)
# Alert times: the contract's years (2000-2099, as written); endsAt also Alertmanager's zero time.
ALERT_TIME = InstantRange(2000, 2099, numbers=False)
ALERT_END = InstantRange(2000, 2099, numbers=False, extra={ALERTMANAGER_ZERO_TIME: STILL_FIRING})
_NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL
_NO_NUL_TEXT = {"type": "string", "pattern": _NO_NUL}


def _labels(value: dict[str, str]) -> dict[str, str]:
    if any("\x00" in text for text in (*value, *value.values())):
        raise ValueError("label names and values must not contain NUL characters")
    if len(value.get("alertname", "")) > 253:
        raise ValueError("alertname is longer than 253 characters")
    return value


Labels = Annotated[
    dict[str, str],
    AfterValidator(_labels),
    WithJsonSchema({
        "type": "object", "propertyNames": _NO_NUL_TEXT, "additionalProperties": _NO_NUL_TEXT,
        "properties": {"alertname": {"type": "string", "maxLength": 253, "pattern": _NO_NUL}},
    }),
]  # fmt: skip
AlertTime = Annotated[
    datetime,
    PlainValidator(ALERT_TIME),
    AS_DATETIME,
    WithJsonSchema(ALERT_TIME.json_schema(), mode="validation"),
]
AlertEnd = Annotated[
    datetime,
    PlainValidator(ALERT_END),
    AS_DATETIME,
    WithJsonSchema(ALERT_END.json_schema(), mode="validation"),
]
Count = Annotated[
    int,
    PlainValidator(json_integer(0, 2**63 - 1)),
    WithJsonSchema({"type": "integer", "minimum": 0, "maximum": 2**63 - 1}, mode="validation"),
]
# Strict: what the JSON Schema says is all that is accepted (no "1" for 1, no true for 1, no number for a
# time); unknown fields are kept, as newer Alertmanagers add some.
_ALERTMANAGER = ConfigDict(extra="allow", strict=True, validate_by_alias=True, validate_by_name=False)


class AlertmanagerAlert(BaseModel):
    """One alert of a webhook notification (unknown fields are kept: newer Alertmanagers add some)."""

    model_config = _ALERTMANAGER
    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AlertTime = Field(alias="startsAt")
    ends_at: AlertEnd | None = Field(
        default=None,
        alias="endsAt",
        description=f"{ALERTMANAGER_ZERO_TIME} (Go's zero time) while firing; else a time of the years "
        "2000-2099, as written.",
    )
    generator_url: Annotated[str, Field(max_length=4096, pattern=_NO_NUL)] | None = Field(
        default=None, alias="generatorURL"
    )
    fingerprint: Annotated[str, Field(min_length=1, max_length=64, pattern=_NO_NUL)]


class AlertmanagerPayload(BaseModel):
    """Alertmanager's webhook body, version "4" (notify/webhook/webhook.go); extra fields tolerated."""

    model_config = _ALERTMANAGER
    version: Literal["4"]
    receiver: Annotated[str, Field(min_length=1, max_length=253, pattern=_NO_NUL)]
    status: Literal["firing", "resolved"]
    alerts: Annotated[list[AlertmanagerAlert], Field(max_length=10_000)]
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str | None = Field(default=None, alias="externalURL")
    group_key: str | None = Field(default=None, alias="groupKey")
    truncated_alerts: Count = Field(default=0, alias="truncatedAlerts")


class AlertmanagerResult(BaseModel):
    model_config = _OUT
    alerts: int
    inserted: int
    updated: int


class EngineMetricsNeeded(BaseModel):
    """What one serving engine must expose (and Prometheus or the collector scrape) for placement to be
    judged."""

    model_config = _OUT
    engine: str = Field(description="vllm, sglang or trtllm.")
    metrics: list[str] = Field(description="The engine's metric names, as phasefit reads them.")
    labels: list[str] = Field(description="The labels those series must carry.")


class GpuViewGpu(BaseModel):
    """One GPU (or MIG instance) over the range. Ratios are 0..1 means over the hours that reported them;
    null where never reported (``activity_unknown_reason`` says why), never 0."""

    model_config = _OUT
    gpu_uuid: str
    node: str | None = Field(description="Its node (null: not in the inventory).")
    gpu_name: str | None = Field(description="The name the driver reports (null: not in the inventory).")
    sku: str | None = Field(description="Catalog SKU key (null: not resolved).")
    worker_id: str | None = Field(description="The pod (namespace/pod) dcgm-exporter named, or null.")
    hours: float = Field(description="Hours of samples received.")
    sm_active: float | None = Field(description="DCGM_FI_PROF_SM_ACTIVE mean, 0..1; null: never reported.")
    tensor_active: float | None = Field(
        description="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE mean, 0..1; null: never reported."
    )
    dram_active: float | None = Field(
        description="DCGM_FI_PROF_DRAM_ACTIVE mean, 0..1; null: never reported."
    )
    gpu_util: float | None = Field(description="DCGM_FI_DEV_GPU_UTIL mean, 0..1; null: never reported.")
    mem_used_bytes_max: float | None = Field(description="Most framebuffer memory used; null: not reported.")
    profiling_share: float = Field(description="Share of its hours with any DCGM profiling field.")
    activity_unknown_reason: str | None = Field(description="Why its activity is unknown; null: it is known.")
    bottleneck: str = Field(
        description="compute, memory-bandwidth, underutilised or unknown (without DRAM and SM or tensor "
        "activity)."
    )
    bottleneck_reason: str | None = Field(description="Why the bottleneck is unknown; null: it is known.")
    idle_gpu_hours: float | None = Field(
        description="Hours with activity under totals.idle_below; null: no activity field reported."
    )
    idle: bool | None = Field(description="Idle in every hour it reported; null: unknown.")
    degraded_share: float = Field(description="Share of its samples with degraded telemetry.")
    lost_share: float = Field(description="Share of its samples from a lost GPU (Xid 79).")
    state: str | None = Field(description="Its state in the inventory (null: not in the inventory).")


class GpuViewSku(BaseModel):
    """One SKU's GPUs; activity means over its GPUs that reported it (null: none did)."""

    model_config = _OUT
    sku: str = Field(description="Catalog SKU key, else the GPU's name, else 'unknown'.")
    gpus: int
    gpu_hours: float
    sm_active: float | None
    tensor_active: float | None
    dram_active: float | None
    gpus_without_profiling: int
    idle_gpus: int
    idle_gpu_hours: float | None = Field(description="Null where none of its GPUs reported activity.")
    idle_unknown_gpus: int = Field(description="GPUs whose idleness is unknown (no activity field).")
    degraded_gpus: int = Field(description="GPUs with degraded or lost samples.")
    bottlenecks: dict[str, int] = Field(description="GPUs per bottleneck class.")


class GpuViewTotals(BaseModel):
    """The view's fleet totals."""

    model_config = _OUT
    gpus: int
    gpu_hours: float
    idle_gpus: int
    idle_gpu_hours: float | None = Field(description="Null where no GPU reported an activity field.")
    idle_unknown_gpus: int
    gpus_without_profiling: int
    degraded_gpus: int
    silent_gpus: int = Field(description="GPUs in the inventory that sent no sample in the range.")
    idle_below: float = Field(description="Activity under this share in an hour counts that hour idle.")


class GpuView(BaseModel):
    """What a fleet with GPU telemetry and no serving engine (dcgm-exporter alone) still shows: the GPU view
    of ``phasefit analyze``."""

    model_config = _OUT
    from_: datetime = Field(alias="from", description="Start of the range read (aligned to its hour).")
    to: datetime = Field(description="End of the range read (exclusive).")
    reason: str = Field(description="Why this is the GPU view alone.")
    gpus: list[GpuViewGpu]
    skus: list[GpuViewSku]
    totals: GpuViewTotals
    warnings: list[str]
    profiling_help: str | None = Field(
        description="How to enable the DCGM profiling fields; null when every GPU reported some."
    )
    engine_metrics_needed: list[EngineMetricsNeeded]
    engine_join_help: str = Field(description="How engines' series join the GPUs dcgm-exporter reports.")
