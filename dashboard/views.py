"""What the dashboard's pages show, as plain frozen records (picklable, so ``st.cache_data`` can keep them).

Both data sources (:mod:`dashboard.store_source`, :mod:`dashboard.api_source`) return these; pages and
charts never see SQL rows or JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.inventory import WorkerRecord
from fleet.store.stored_summary import StoredFleet, StoredPool, StoredReportSummary, StoredSummary

ALL = "All"


class NotServedError(RuntimeError):
    """The chosen data source cannot answer this read (the message says what to do instead)."""


@dataclass(frozen=True)
class Scope:
    """The filters every page applies: a half-open time range, and optionally one cluster and one model."""

    since: datetime
    until: datetime
    cluster: str | None = None
    model: str | None = None

    def pool_matches(self, pool: str | None) -> bool:
        """Whether a pool key (``<cluster>/<model>`` or ``<cluster>/<deployment>/<model>``) is inside this
        scope. The cluster is the key's first part; model ids hold "/" themselves, so the model is matched
        as the key's whole rest or its tail after a deployment."""
        if self.cluster is None and self.model is None:
            return True
        if pool is None or "/" not in pool:
            return False
        cluster, rest = pool.split("/", 1)
        return (self.cluster is None or cluster == self.cluster) and (
            self.model is None or rest == self.model or rest.endswith("/" + self.model)
        )


@dataclass(frozen=True)
class WorkerView:
    """A worker as the dashboard shows it: its record, the cluster it counts in (the record's, else the
    analyzer's default) and the SKU most of its GPUs resolve to (None where unknown: an API without GPU
    details)."""

    record: WorkerRecord
    cluster: str
    sku: str | None

    @property
    def pool(self) -> str:
        """The analyzer's pool key: ``<cluster>/<model>`` or ``<cluster>/<deployment>/<model>``."""
        r = self.record
        return f"{self.cluster}/{r.deployment}/{r.model}" if r.deployment else f"{self.cluster}/{r.model}"


@dataclass(frozen=True)
class GpuGroup:
    """GPUs of one SKU whose workers hold one role (``unattributed`` without a worker), in one state.

    A MIG SKU's group (``mig``) counts MIG instances in ``gpus``, never physical GPUs."""

    sku: str
    role: str
    state: str
    gpus: int
    mig: bool = False


@dataclass(frozen=True)
class Inventory:
    workers: tuple[WorkerView, ...]
    groups: tuple[GpuGroup, ...]
    data_until: datetime | None  # end of the newest telemetry (None when there is none)
    data_from: datetime | None = None
    # Physical GPUs: whole GPUs plus those carved into MIG instances; None where unknown (an instance that
    # does not name its GPU, or a source that does not say).
    physical_gpus: int | None = None
    mig_parent_gpus: int | None = None

    @property
    def whole_gpus(self) -> int:
        return sum(g.gpus for g in self.groups if not g.mig)

    @property
    def mig_instances(self) -> int:
        return sum(g.gpus for g in self.groups if g.mig)

    @property
    def clusters(self) -> list[str]:
        return sorted({w.cluster for w in self.workers})

    @property
    def models(self) -> list[str]:
        return sorted({w.record.model for w in self.workers})

    def in_scope(self, scope: Scope) -> list[WorkerView]:
        return [
            w
            for w in self.workers
            if (scope.cluster is None or w.cluster == scope.cluster)
            and (scope.model is None or w.record.model == scope.model)
        ]


@dataclass(frozen=True)
class UtilisationPoint:
    """Hourly mean activity of the GPUs of one SKU whose workers hold one role."""

    ts: datetime
    sku: str
    role: str
    gpus: int
    tensor_active: float | None
    dram_active: float | None
    sm_active: float | None


@dataclass(frozen=True)
class WorkerActivity:
    """A worker's mean counters over the range (its GPUs averaged), for the roofline."""

    worker_id: str
    gpu_hours: float
    tensor_active: float | None
    dram_active: float | None
    sm_active: float | None
    kv_cache_usage: float | None


@dataclass(frozen=True)
class FindingView:
    id: int
    kind: str
    status: str
    severity: str
    worker_id: str | None
    pool: str | None
    gpu_sku: str | None
    role: str
    bottleneck: str
    evidence: dict[str, Any]
    tokens_per_s: float | None
    lost_tokens_per_s: float | None  # null where the finding estimates no loss
    lost_tokens_per_s_low: float | None
    lost_tokens_per_s_high: float | None
    action: str | None
    action_detail: str
    counterpart_worker_id: str | None
    target_sku: str | None
    expected_gain_tokens_per_s: float | None
    first_seen: datetime
    last_seen: datetime
    resolved_at: datetime | None
    # What an SRE acts on (None: not a throughput loss, or a source that does not carry them yet).
    lost_output_tokens_per_s: float | None = None
    lost_output_tokens_per_s_low: float | None = None
    lost_output_tokens_per_s_high: float | None = None
    lost_requests_per_s: float | None = None

    @property
    def subject(self) -> str:
        return self.worker_id or self.pool or "fleet"


@dataclass(frozen=True)
class LostPoint:
    ts: datetime
    lost: float | None  # total (prompt + output) tokens/s: secondary
    low: float | None
    high: float | None
    output: float | None = None  # output (generated) tokens/s: what leads; None where not known


@dataclass(frozen=True)
class TrafficPoint:
    """One pool's traffic and provisioned workers per role over one hour."""

    ts: datetime
    pool: str
    prompt_tokens_per_s: float  # counted where real: prefill and mixed workers
    generation_tokens_per_s: float  # decode and mixed workers
    prefill_workers: float  # workers reporting the role, averaged over the hour
    decode_workers: float
    mixed_workers: float


@dataclass(frozen=True)
class AnalysisView:
    """The latest stored analyzer run inside the range, its summary read through the tolerant views."""

    created_at: datetime
    since: datetime
    until: datetime
    summary: StoredSummary = field(default_factory=StoredSummary)

    @property
    def pools(self) -> list[StoredPool]:
        return self.summary.pools

    @property
    def fleet(self) -> StoredFleet | None:
        return self.summary.fleet


@dataclass(frozen=True)
class AlertView:
    fingerprint: str
    alertname: str
    status: str
    severity: str
    starts_at: datetime
    ends_at: datetime | None
    summary: str
    labels: dict[str, str]
    receiver: str


@dataclass(frozen=True)
class ReportListing:
    week: str
    format: str
    created_at: datetime
    summary: dict[str, Any]  # as stored, for the download; read it through ``figures``

    @property
    def figures(self) -> StoredReportSummary:
        return StoredReportSummary.model_validate(self.summary)


def mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
