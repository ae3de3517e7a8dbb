"""The store's tables (SQLAlchemy 2.x typed declarative models). Schema changes go through Alembic only.

Design choices, with the reason for each:

- Raw samples are stored lean, in ``raw_gpu_samples`` / ``raw_engine_samples``: the GPU and worker are
  integer keys (``gpu_keys`` / ``worker_keys`` map them to the UUID and worker id, each unique there),
  ratios, gauges, watts, clocks and latencies are 4-byte ``REAL`` (7 significant digits: more than any
  counter measures), enumerations are ``SMALLINT`` codes (:mod:`fleet.store.codes`), timestamps and token
  and request counts stay exact. A GPU sample's byte counts (memory used, NVLink and PCIe traffic) are
  4-byte floats on PostgreSQL too: their sources measure no finer (DCGM reports framebuffer use in MiB
  and NVLink/PCIe traffic as sampled rates), and the 20 bytes saved are what brings a stored sample under
  120 bytes; SQLite keeps them as exact integers (:data:`BYTE_COUNTERS`). An engine sample's latency
  histograms are short byte strings (``BYTEA`` / ``BLOB``): :func:`fleet.histograms.encode` of the window's
  histogram re-binned onto the shared grid, summed bucket by bucket into the rollups.
- ``(ts, key)`` is unique and is the only key: it makes a re-sent sample a no-op (the exactly-once
  guarantee). On SQLite it is the primary key of a ``WITHOUT ROWID`` table clustered on it. On PostgreSQL
  the raw tables are partitioned by day on ``ts`` (:mod:`fleet.store.partitions`), so retention drops
  whole days, and each day partition carries its own unique ``(ts, key)`` index while it is open, which
  serves ``ON CONFLICT DO NOTHING`` and every time-range read; once the day is behind the ingest
  horizon it is closed (:mod:`fleet.store.closing`): a BRIN index on ``ts`` (a few bytes per thousand
  rows) replaces the unique one (31 bytes per row), and the rare write into a closed day checks for the
  stored keys itself, one writer per day at a time.
- The key tables are apart from ``gpus`` / ``workers`` because a GPU sample may name a worker that has no
  ``workers`` row (no engine sample yet, or ever), and JSONL ingest writes samples before dimensions.
- Readers see ``gpu_samples`` / ``engine_samples``: views with the natural keys and the enumerations' text,
  column for column what the tables held before revision 0005 (``LEFT JOIN`` on unique keys: a read that
  needs neither key nor text, such as ``count(*)`` or ``min(ts)``, skips the joins). They are read-only;
  their models (``info={"view": True}``) exist to build queries, never to create tables.
- A sample row keeps what changes window to window (ratios, counters, worker, role, state); what identifies
  the GPU or worker (node, index, reported name, SKU, model, engine, TP) lives once in ``gpus`` /
  ``workers``, upserted from the samples with "latest window wins" and first/last seen.
- The sample tables carry no foreign keys: FK checks would slow COPY and stop retention from dropping whole
  partitions.
- Rollups (per minute and per hour) have the same shape at both resolutions and outlive raw retention.
- Enumerations outside raw samples are stored as short strings (validated at the edge by
  ``fleet.contract``), JSON as JSON (not JSONB: Alertmanager payloads may carry ``\\u0000``, which JSONB
  refuses).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    REAL,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

from fleet.store.columns import UtcDateTime

NAME = 253  # contract's Name (the Kubernetes name limit)
SHORT = 64  # contract's ShortText
ENUM = 32

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UtcDateTime(), dict[str, Any]: JSON(), list[str]: JSON()}  # noqa: RUF012


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class GpuRow(Base):
    """One GPU (or MIG instance) as last reported."""

    __tablename__ = "gpus"

    gpu_uuid: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    node: Mapped[str] = mapped_column(String(NAME), ForeignKey("nodes.name"), index=True)
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_name: Mapped[str] = mapped_column(String(NAME))
    sku: Mapped[str | None] = mapped_column(String(SHORT))  # catalog key, resolved at write time
    parent_gpu_uuid: Mapped[str | None] = mapped_column(String(NAME))
    mig_profile: Mapped[str | None] = mapped_column(String(SHORT))
    cluster: Mapped[str | None] = mapped_column(String(NAME))
    worker_id: Mapped[str | None] = mapped_column(String(NAME), index=True)
    state: Mapped[str] = mapped_column(String(ENUM))
    source: Mapped[str] = mapped_column(String(ENUM))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class WorkerRow(Base):
    """One serving worker (engine instance) as last reported."""

    __tablename__ = "workers"

    worker_id: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    node: Mapped[str] = mapped_column(String(NAME), ForeignKey("nodes.name"), index=True)
    engine: Mapped[str] = mapped_column(String(SHORT))
    model: Mapped[str] = mapped_column(String(NAME), index=True)
    role: Mapped[str] = mapped_column(String(ENUM))
    role_source: Mapped[str] = mapped_column(String(ENUM))
    precision: Mapped[str | None] = mapped_column(String(SHORT))
    tp: Mapped[int | None] = mapped_column(Integer)  # None: neither the engine nor its GPUs said
    gpu_uuids: Mapped[list[str]]
    gpu_join: Mapped[str | None] = mapped_column(String(ENUM))  # how gpu_uuids were found
    cluster: Mapped[str | None] = mapped_column(String(NAME))
    deployment: Mapped[str | None] = mapped_column(String(NAME))
    kv_capacity_tokens: Mapped[int | None] = mapped_column(BigInteger)  # as the engine last reported it
    max_running_requests: Mapped[int | None] = mapped_column(Integer)  # as the engine last reported it
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class GpuKeyRow(Base):
    """The integer key raw GPU samples store for a GPU UUID (assigned on first sight, never reused)."""

    __tablename__ = "gpu_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu_uuid: Mapped[str] = mapped_column(String(NAME), unique=True)


class WorkerKeyRow(Base):
    """The integer key raw samples store for a worker id (assigned on first sight, never reused)."""

    __tablename__ = "worker_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    worker_id: Mapped[str] = mapped_column(String(NAME), unique=True)


_RAW_TABLE_ARGS = {"postgresql_partition_by": "RANGE (ts)", "sqlite_with_rowid": False}
# 4-byte float on PostgreSQL, exact integer on SQLite (module docstring).
_BYTE_COUNT: REAL[float] = REAL().with_variant(BigInteger(), "sqlite")
BYTE_COUNTERS = ("mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes")


class RawGpuSampleRow(Base):
    """One GPU over one window, stored lean (module docstring); the 8-byte column first, so no padding.

    On PostgreSQL the primary key is each open day partition's unique index, not a constraint of the
    partitioned table (a closed day has none; Alembic does not compare primary keys)."""

    __tablename__ = "raw_gpu_samples"
    __table_args__ = (_RAW_TABLE_ARGS | {"info": {"rows_of": "gpu_samples"}},)

    ts: Mapped[datetime] = mapped_column(primary_key=True)
    mem_used_bytes: Mapped[int | None] = mapped_column(_BYTE_COUNT)
    nvlink_tx_bytes: Mapped[int | None] = mapped_column(_BYTE_COUNT)
    nvlink_rx_bytes: Mapped[int | None] = mapped_column(_BYTE_COUNT)
    pcie_tx_bytes: Mapped[int | None] = mapped_column(_BYTE_COUNT)
    pcie_rx_bytes: Mapped[int | None] = mapped_column(_BYTE_COUNT)
    gpu_key: Mapped[int] = mapped_column(Integer, primary_key=True)  # gpu_keys.id
    worker_key: Mapped[int | None] = mapped_column(Integer)  # worker_keys.id
    window_s: Mapped[float] = mapped_column(REAL)
    sm_active: Mapped[float | None] = mapped_column(REAL)
    tensor_active: Mapped[float | None] = mapped_column(REAL)
    dram_active: Mapped[float | None] = mapped_column(REAL)
    gpu_util: Mapped[float | None] = mapped_column(REAL)
    power_w: Mapped[float | None] = mapped_column(REAL)
    sm_clock_mhz: Mapped[float | None] = mapped_column(REAL)
    gr_engine_active: Mapped[float | None] = mapped_column(REAL)
    mem_copy_util: Mapped[float | None] = mapped_column(REAL)
    state: Mapped[int] = mapped_column(SmallInteger)  # fleet.store.codes.STATE
    source: Mapped[int] = mapped_column(SmallInteger)  # fleet.store.codes.SOURCE
    activity_evidence: Mapped[int | None] = mapped_column(SmallInteger)  # fleet.store.codes.EVIDENCE


class RawEngineSampleRow(Base):
    """One serving worker over one window, stored lean (module docstring)."""

    __tablename__ = "raw_engine_samples"
    __table_args__ = (_RAW_TABLE_ARGS | {"info": {"rows_of": "engine_samples"}},)

    ts: Mapped[datetime] = mapped_column(primary_key=True)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    generation_tokens: Mapped[int] = mapped_column(BigInteger)
    requests_running: Mapped[int | None] = mapped_column(BigInteger)
    requests_waiting: Mapped[int | None] = mapped_column(BigInteger)
    preemptions: Mapped[int | None] = mapped_column(BigInteger)
    worker_key: Mapped[int] = mapped_column(Integer, primary_key=True)  # worker_keys.id
    window_s: Mapped[float] = mapped_column(REAL)
    kv_cache_usage: Mapped[float | None] = mapped_column(REAL)
    ttft_p50_s: Mapped[float | None] = mapped_column(REAL)
    ttft_p99_s: Mapped[float | None] = mapped_column(REAL)
    tpot_p50_s: Mapped[float | None] = mapped_column(REAL)
    tpot_p99_s: Mapped[float | None] = mapped_column(REAL)
    role: Mapped[int] = mapped_column(SmallInteger)  # fleet.store.codes.ROLE
    role_source: Mapped[int] = mapped_column(SmallInteger)  # fleet.store.codes.ROLE_SOURCE
    # Migration 0009 (added after the codes: a REAL after two SMALLINTs needs no padding).
    ttft_p90_s: Mapped[float | None] = mapped_column(REAL)
    tpot_p90_s: Mapped[float | None] = mapped_column(REAL)
    e2e_p90_s: Mapped[float | None] = mapped_column(REAL)
    # Migration 0010: the window's latency histograms on the shared grid, fleet.histograms.encode()d (a few
    # dozen bytes each, stored inline); None where the engine's histogram was not read (unknown).
    ttft_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    tpot_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    e2e_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)


_VIEW = {"info": {"view": True}}


class GpuSampleRow(Base):
    """The ``gpu_samples`` view: raw GPU samples with the GPU UUID, worker id and text values (read-only)."""

    __tablename__ = "gpu_samples"
    __table_args__ = (_VIEW,)

    gpu_uuid: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    ts: Mapped[datetime] = mapped_column(primary_key=True)
    window_s: Mapped[float] = mapped_column(REAL)
    worker_id: Mapped[str | None] = mapped_column(String(NAME))
    sm_active: Mapped[float | None] = mapped_column(REAL)
    tensor_active: Mapped[float | None] = mapped_column(REAL)
    dram_active: Mapped[float | None] = mapped_column(REAL)
    gpu_util: Mapped[float | None] = mapped_column(REAL)
    mem_used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    power_w: Mapped[float | None] = mapped_column(REAL)
    sm_clock_mhz: Mapped[float | None] = mapped_column(REAL)
    nvlink_tx_bytes: Mapped[int | None] = mapped_column(BigInteger)
    nvlink_rx_bytes: Mapped[int | None] = mapped_column(BigInteger)
    pcie_tx_bytes: Mapped[int | None] = mapped_column(BigInteger)
    pcie_rx_bytes: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(ENUM))
    source: Mapped[str] = mapped_column(String(ENUM))
    gr_engine_active: Mapped[float | None] = mapped_column(REAL)
    mem_copy_util: Mapped[float | None] = mapped_column(REAL)
    activity_evidence: Mapped[str | None] = mapped_column(String(ENUM))  # fleet.contract.ActivityEvidence


class EngineSampleRow(Base):
    """The ``engine_samples`` view: raw engine samples with the worker id and text values (read-only)."""

    __tablename__ = "engine_samples"
    __table_args__ = (_VIEW,)

    worker_id: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    ts: Mapped[datetime] = mapped_column(primary_key=True)
    window_s: Mapped[float] = mapped_column(REAL)
    role: Mapped[str] = mapped_column(String(ENUM))
    role_source: Mapped[str] = mapped_column(String(ENUM))
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    generation_tokens: Mapped[int] = mapped_column(BigInteger)
    requests_running: Mapped[int | None] = mapped_column(BigInteger)
    requests_waiting: Mapped[int | None] = mapped_column(BigInteger)
    kv_cache_usage: Mapped[float | None] = mapped_column(REAL)
    preemptions: Mapped[int | None] = mapped_column(BigInteger)
    ttft_p50_s: Mapped[float | None] = mapped_column(REAL)
    ttft_p99_s: Mapped[float | None] = mapped_column(REAL)
    tpot_p50_s: Mapped[float | None] = mapped_column(REAL)
    tpot_p99_s: Mapped[float | None] = mapped_column(REAL)
    ttft_p90_s: Mapped[float | None] = mapped_column(REAL)
    tpot_p90_s: Mapped[float | None] = mapped_column(REAL)
    e2e_p90_s: Mapped[float | None] = mapped_column(REAL)
    ttft_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    tpot_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    e2e_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)


class _GpuRollup:
    """Per-GPU aggregate over one bucket: averages of ratios (over non-null samples), counts, maxima."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Index, ...]:  # noqa: N805
        name = cls.__tablename__  # type: ignore[attr-defined]
        return (
            Index(f"ix_{name}_bucket", "bucket"),
            Index(f"ix_{name}_worker_id_bucket", "worker_id", "bucket"),
        )

    gpu_uuid: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    bucket: Mapped[datetime] = mapped_column(primary_key=True)  # bucket start
    worker_id: Mapped[str | None] = mapped_column(String(NAME))  # greatest worker id seen in the bucket
    samples: Mapped[int] = mapped_column(Integer)
    window_s_sum: Mapped[float] = mapped_column(Float)
    sm_active_avg: Mapped[float | None] = mapped_column(Float)
    tensor_active_avg: Mapped[float | None] = mapped_column(Float)
    dram_active_avg: Mapped[float | None] = mapped_column(Float)
    gpu_util_avg: Mapped[float | None] = mapped_column(Float)
    gr_engine_active_avg: Mapped[float | None] = mapped_column(Float)
    mem_copy_util_avg: Mapped[float | None] = mapped_column(Float)
    power_w_avg: Mapped[float | None] = mapped_column(Float)
    mem_used_bytes_max: Mapped[int | None] = mapped_column(BigInteger)
    lost_samples: Mapped[int] = mapped_column(Integer)
    degraded_samples: Mapped[int] = mapped_column(Integer)


class _EngineRollup:
    """Per-worker aggregate over one bucket: token sums, averages and maxima of gauges, counts."""

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Index, ...]:  # noqa: N805
        return (Index(f"ix_{cls.__tablename__}_bucket", "bucket"),)  # type: ignore[attr-defined]

    worker_id: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    bucket: Mapped[datetime] = mapped_column(primary_key=True)
    role: Mapped[str | None] = mapped_column(String(ENUM))  # greatest role seen in the bucket
    samples: Mapped[int] = mapped_column(Integer)
    window_s_sum: Mapped[float] = mapped_column(Float)
    prompt_tokens_sum: Mapped[int] = mapped_column(BigInteger)
    generation_tokens_sum: Mapped[int] = mapped_column(BigInteger)
    preemptions_sum: Mapped[int | None] = mapped_column(BigInteger)
    requests_running_avg: Mapped[float | None] = mapped_column(Float)
    requests_waiting_avg: Mapped[float | None] = mapped_column(Float)
    requests_waiting_max: Mapped[int | None] = mapped_column(BigInteger)
    kv_cache_usage_avg: Mapped[float | None] = mapped_column(Float)
    kv_cache_usage_max: Mapped[float | None] = mapped_column(Float)
    ttft_p50_s_avg: Mapped[float | None] = mapped_column(Float)
    ttft_p99_s_max: Mapped[float | None] = mapped_column(Float)
    tpot_p50_s_avg: Mapped[float | None] = mapped_column(Float)
    tpot_p99_s_max: Mapped[float | None] = mapped_column(Float)
    # The mean of the bucket's window p90s (a bucket's own p90 is not recoverable from its windows').
    ttft_p90_s_avg: Mapped[float | None] = mapped_column(Float)
    tpot_p90_s_avg: Mapped[float | None] = mapped_column(Float)
    e2e_p90_s_avg: Mapped[float | None] = mapped_column(Float)
    # The bucket's window histograms summed bucket by bucket (fleet.histograms.merged, then encode()d), so
    # a bucket's quantiles, and a pool's, are exact on the shared grid; None where no window had one.
    ttft_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    tpot_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    e2e_histogram: Mapped[bytes | None] = mapped_column(LargeBinary)
    # Migration 0011: the share of the bucket's samples (of those reporting a queue) with a request
    # waiting (fleet.store.retention.queued_share); NULL where none reported one, and in buckets rolled up
    # before 0011 (unknown: pool state then reads the queue's size alone).
    queued_share: Mapped[float | None] = mapped_column(Float)


class GpuSample1mRow(_GpuRollup, Base):
    __tablename__ = "gpu_samples_1m"


class GpuSample1hRow(_GpuRollup, Base):
    __tablename__ = "gpu_samples_1h"


class EngineSample1mRow(_EngineRollup, Base):
    __tablename__ = "engine_samples_1m"


class EngineSample1hRow(_EngineRollup, Base):
    __tablename__ = "engine_samples_1h"


class FindingRow(Base):
    """An analyzer finding; one row per episode of (kind, subject), deduplicated across analyzer runs."""

    __tablename__ = "findings"
    __table_args__ = (
        UniqueConstraint("kind", "subject", "first_seen"),
        Index("ix_findings_status_kind", "status", "kind"),
        Index("ix_findings_last_seen", "last_seen"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(SHORT))
    subject: Mapped[str] = mapped_column(String(NAME + 8))  # "worker:<id>", "pool:<pool>" or "fleet"
    worker_id: Mapped[str | None] = mapped_column(String(NAME), index=True)
    pool: Mapped[str | None] = mapped_column(String(NAME))
    status: Mapped[str] = mapped_column(String(ENUM))
    severity: Mapped[str] = mapped_column(String(ENUM))
    gpu_sku: Mapped[str | None] = mapped_column(String(SHORT))
    role: Mapped[str] = mapped_column(String(ENUM))
    bottleneck: Mapped[str] = mapped_column(String(ENUM))
    evidence: Mapped[dict[str, Any]]
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    lost_tokens_per_s: Mapped[float | None] = mapped_column(Float)  # None: the finding estimates no loss
    lost_tokens_per_s_low: Mapped[float | None] = mapped_column(Float)
    lost_tokens_per_s_high: Mapped[float | None] = mapped_column(Float)
    lost_output_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    lost_output_tokens_per_s_low: Mapped[float | None] = mapped_column(Float)
    lost_output_tokens_per_s_high: Mapped[float | None] = mapped_column(Float)
    lost_requests_per_s: Mapped[float | None] = mapped_column(Float)
    lost_requests_per_s_low: Mapped[float | None] = mapped_column(Float)
    lost_requests_per_s_high: Mapped[float | None] = mapped_column(Float)
    recommendation: Mapped[dict[str, Any] | None]
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class AlertEventRow(Base):
    """One Alertmanager alert episode, idempotent on (fingerprint, starts_at)."""

    __tablename__ = "alert_events"
    __table_args__ = (
        UniqueConstraint("fingerprint", "starts_at"),
        Index("ix_alert_events_status_starts_at", "status", "starts_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(SHORT))
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime | None]  # None while firing (Alertmanager's 0001-01-01)
    status: Mapped[str] = mapped_column(String(ENUM))
    alertname: Mapped[str | None] = mapped_column(String(NAME), index=True)
    labels: Mapped[dict[str, Any]]
    annotations: Mapped[dict[str, Any]]
    receiver: Mapped[str] = mapped_column(String(NAME))
    generator_url: Mapped[str | None] = mapped_column(Text)
    raw: Mapped[dict[str, Any]]
    received_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ReportRow(Base):
    """The weekly placement audit, one per ISO week."""

    __tablename__ = "reports"

    week: Mapped[str] = mapped_column(String(8), primary_key=True)  # "2026-W48"
    format: Mapped[str] = mapped_column(String(16))
    body: Mapped[str] = mapped_column(Text)
    summary: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class AnalysisRunRow(Base):
    """One analyzer run: the range it read and its summary (pools, fleet totals)."""

    __tablename__ = "analysis_runs"
    __table_args__ = (Index(None, "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime]
    from_ts: Mapped[datetime]
    to_ts: Mapped[datetime]
    summary: Mapped[dict[str, Any]]


SAMPLE_TABLES = ("gpu_samples", "engine_samples")  # the views readers query
RAW_SAMPLE_TABLES = ("raw_gpu_samples", "raw_engine_samples")  # what stores them (partitioned on PostgreSQL)
ROLLUP_TABLES = ("gpu_samples_1m", "gpu_samples_1h", "engine_samples_1m", "engine_samples_1h")


def table_of(model: type[Base]) -> Table:
    """The Core ``Table`` of a model (typed, for insert/delete statements)."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


def is_view(table: Table) -> bool:
    """Whether ``table`` models a view (read-only; created by a migration, never by ``create_all``)."""
    return bool(table.info.get("view"))
