"""Typed request and response models of the HTTP API (what the OpenAPI document shows).

Lists are paginated with ``limit``/``offset``; ``next`` is the URL of the following page, or null on the
last one. Errors are ``{"detail": "..."}``, except ingest's 422/403/413, whose ``detail`` lists the records
and fields at fault.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from fleet.contract import Recommendation

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
    lost_tokens_per_s: float
    lost_tokens_per_s_low: float
    lost_tokens_per_s_high: float
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


class AlertmanagerAlert(BaseModel):
    """One alert of a webhook notification (unknown fields are kept: newer Alertmanagers add some)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AwareDatetime = Field(alias="startsAt")
    ends_at: AwareDatetime | None = Field(
        default=None, alias="endsAt", description="0001-01-01T00:00:00Z while firing."
    )
    generator_url: str | None = Field(default=None, alias="generatorURL", max_length=4096)
    fingerprint: Annotated[str, Field(min_length=1, max_length=64)]

    @model_validator(mode="after")
    def _storable(self) -> AlertmanagerAlert:
        texts = [self.fingerprint, self.generator_url or "", *self.labels, *self.labels.values()]
        if any("\x00" in text for text in texts):
            raise ValueError("labels, fingerprint and generatorURL must not contain NUL characters")
        if len(self.labels.get("alertname", "")) > 253:
            raise ValueError("alertname is longer than 253 characters")
        return self


class AlertmanagerPayload(BaseModel):
    """Alertmanager's webhook body, version "4" (notify/webhook/webhook.go); extra fields tolerated."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    version: Literal["4"]
    receiver: Annotated[str, Field(min_length=1, max_length=253)]
    status: Literal["firing", "resolved"]
    alerts: Annotated[list[AlertmanagerAlert], Field(max_length=10_000)]
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str | None = Field(default=None, alias="externalURL")
    group_key: str | None = Field(default=None, alias="groupKey")
    truncated_alerts: Annotated[int, Field(ge=0)] = Field(default=0, alias="truncatedAlerts")

    @model_validator(mode="after")
    def _storable(self) -> AlertmanagerPayload:
        if "\x00" in self.receiver:
            raise ValueError("receiver must not contain NUL characters")
        return self


class AlertmanagerResult(BaseModel):
    model_config = _OUT
    alerts: int
    inserted: int
    updated: int
