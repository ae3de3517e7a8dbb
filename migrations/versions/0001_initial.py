"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 19:21:09.033574
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# An aware UTC instant: TIMESTAMPTZ on PostgreSQL, integer microseconds since the epoch on SQLite
# (fleet/store/columns.py). Spelled out here so this revision never changes with the application code.
UTC_TIMESTAMP = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "analysis_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("created_at", UTC_TIMESTAMP, nullable=False),
        sa.Column("from_ts", UTC_TIMESTAMP, nullable=False),
        sa.Column("to_ts", UTC_TIMESTAMP, nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analysis_runs")),
    )
    op.create_index("ix_analysis_runs_created_at", "analysis_runs", ["created_at"], unique=False)
    op.create_table(
        "alert_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("starts_at", UTC_TIMESTAMP, nullable=False),
        sa.Column("ends_at", UTC_TIMESTAMP, nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("alertname", sa.String(length=253), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("receiver", sa.String(length=253), nullable=False),
        sa.Column("generator_url", sa.Text(), nullable=True),
        sa.Column("raw", sa.JSON(), nullable=False),
        sa.Column("received_at", UTC_TIMESTAMP, nullable=False),
        sa.Column("updated_at", UTC_TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_events")),
        sa.UniqueConstraint("fingerprint", "starts_at", name=op.f("uq_alert_events_fingerprint_starts_at")),
    )
    op.create_index(op.f("ix_alert_events_alertname"), "alert_events", ["alertname"], unique=False)
    op.create_index("ix_alert_events_status_starts_at", "alert_events", ["status", "starts_at"], unique=False)

    op.create_table(
        "engine_samples",
        sa.Column("worker_id", sa.String(length=253), nullable=False),
        sa.Column("ts", UTC_TIMESTAMP, nullable=False),
        sa.Column("window_s", sa.Float(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("role_source", sa.String(length=32), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("generation_tokens", sa.BigInteger(), nullable=False),
        sa.Column("requests_running", sa.BigInteger(), nullable=True),
        sa.Column("requests_waiting", sa.BigInteger(), nullable=True),
        sa.Column("kv_cache_usage", sa.Float(), nullable=True),
        sa.Column("preemptions", sa.BigInteger(), nullable=True),
        sa.Column("ttft_p50_s", sa.Float(), nullable=True),
        sa.Column("ttft_p99_s", sa.Float(), nullable=True),
        sa.Column("tpot_p50_s", sa.Float(), nullable=True),
        sa.Column("tpot_p99_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("worker_id", "ts", name=op.f("pk_engine_samples")),
    )
    op.create_index("ix_engine_samples_ts", "engine_samples", ["ts"], unique=False)

    op.create_table(
        "engine_samples_1h",
        sa.Column("worker_id", sa.String(length=253), nullable=False),
        sa.Column("bucket", UTC_TIMESTAMP, nullable=False),
        sa.Column("role", sa.String(length=32), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("window_s_sum", sa.Float(), nullable=False),
        sa.Column("prompt_tokens_sum", sa.BigInteger(), nullable=False),
        sa.Column("generation_tokens_sum", sa.BigInteger(), nullable=False),
        sa.Column("preemptions_sum", sa.BigInteger(), nullable=True),
        sa.Column("requests_running_avg", sa.Float(), nullable=True),
        sa.Column("requests_waiting_avg", sa.Float(), nullable=True),
        sa.Column("requests_waiting_max", sa.BigInteger(), nullable=True),
        sa.Column("kv_cache_usage_avg", sa.Float(), nullable=True),
        sa.Column("kv_cache_usage_max", sa.Float(), nullable=True),
        sa.Column("ttft_p50_s_avg", sa.Float(), nullable=True),
        sa.Column("ttft_p99_s_max", sa.Float(), nullable=True),
        sa.Column("tpot_p50_s_avg", sa.Float(), nullable=True),
        sa.Column("tpot_p99_s_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("worker_id", "bucket", name=op.f("pk_engine_samples_1h")),
    )
    op.create_index("ix_engine_samples_1h_bucket", "engine_samples_1h", ["bucket"], unique=False)

    op.create_table(
        "engine_samples_1m",
        sa.Column("worker_id", sa.String(length=253), nullable=False),
        sa.Column("bucket", UTC_TIMESTAMP, nullable=False),
        sa.Column("role", sa.String(length=32), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("window_s_sum", sa.Float(), nullable=False),
        sa.Column("prompt_tokens_sum", sa.BigInteger(), nullable=False),
        sa.Column("generation_tokens_sum", sa.BigInteger(), nullable=False),
        sa.Column("preemptions_sum", sa.BigInteger(), nullable=True),
        sa.Column("requests_running_avg", sa.Float(), nullable=True),
        sa.Column("requests_waiting_avg", sa.Float(), nullable=True),
        sa.Column("requests_waiting_max", sa.BigInteger(), nullable=True),
        sa.Column("kv_cache_usage_avg", sa.Float(), nullable=True),
        sa.Column("kv_cache_usage_max", sa.Float(), nullable=True),
        sa.Column("ttft_p50_s_avg", sa.Float(), nullable=True),
        sa.Column("ttft_p99_s_max", sa.Float(), nullable=True),
        sa.Column("tpot_p50_s_avg", sa.Float(), nullable=True),
        sa.Column("tpot_p99_s_max", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("worker_id", "bucket", name=op.f("pk_engine_samples_1m")),
    )
    op.create_index("ix_engine_samples_1m_bucket", "engine_samples_1m", ["bucket"], unique=False)

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=261), nullable=False),
        sa.Column("worker_id", sa.String(length=253), nullable=True),
        sa.Column("pool", sa.String(length=253), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("gpu_sku", sa.String(length=64), nullable=True),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("bottleneck", sa.String(length=32), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("lost_tokens_per_s", sa.Float(), nullable=False),
        sa.Column("lost_tokens_per_s_low", sa.Float(), nullable=False),
        sa.Column("lost_tokens_per_s_high", sa.Float(), nullable=False),
        sa.Column("recommendation", sa.JSON(), nullable=True),
        sa.Column("first_seen", UTC_TIMESTAMP, nullable=False),
        sa.Column("last_seen", UTC_TIMESTAMP, nullable=False),
        sa.Column("resolved_at", UTC_TIMESTAMP, nullable=True),
        sa.Column("updated_at", UTC_TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
        sa.UniqueConstraint(
            "kind", "subject", "first_seen", name=op.f("uq_findings_kind_subject_first_seen")
        ),
    )
    op.create_index("ix_findings_last_seen", "findings", ["last_seen"], unique=False)
    op.create_index("ix_findings_status_kind", "findings", ["status", "kind"], unique=False)
    op.create_index(op.f("ix_findings_worker_id"), "findings", ["worker_id"], unique=False)

    op.create_table(
        "gpu_samples",
        sa.Column("gpu_uuid", sa.String(length=253), nullable=False),
        sa.Column("ts", UTC_TIMESTAMP, nullable=False),
        sa.Column("window_s", sa.Float(), nullable=False),
        sa.Column("worker_id", sa.String(length=253), nullable=True),
        sa.Column("sm_active", sa.Float(), nullable=True),
        sa.Column("tensor_active", sa.Float(), nullable=True),
        sa.Column("dram_active", sa.Float(), nullable=True),
        sa.Column("gpu_util", sa.Float(), nullable=True),
        sa.Column("mem_used_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("sm_clock_mhz", sa.Float(), nullable=True),
        sa.Column("nvlink_tx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("nvlink_rx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("pcie_tx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("pcie_rx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("gpu_uuid", "ts", name=op.f("pk_gpu_samples")),
    )
    op.create_index("ix_gpu_samples_ts", "gpu_samples", ["ts"], unique=False)
    op.create_index("ix_gpu_samples_worker_id_ts", "gpu_samples", ["worker_id", "ts"], unique=False)

    op.create_table(
        "gpu_samples_1h",
        sa.Column("gpu_uuid", sa.String(length=253), nullable=False),
        sa.Column("bucket", UTC_TIMESTAMP, nullable=False),
        sa.Column("worker_id", sa.String(length=253), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("window_s_sum", sa.Float(), nullable=False),
        sa.Column("sm_active_avg", sa.Float(), nullable=True),
        sa.Column("tensor_active_avg", sa.Float(), nullable=True),
        sa.Column("dram_active_avg", sa.Float(), nullable=True),
        sa.Column("gpu_util_avg", sa.Float(), nullable=True),
        sa.Column("power_w_avg", sa.Float(), nullable=True),
        sa.Column("mem_used_bytes_max", sa.BigInteger(), nullable=True),
        sa.Column("lost_samples", sa.Integer(), nullable=False),
        sa.Column("degraded_samples", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("gpu_uuid", "bucket", name=op.f("pk_gpu_samples_1h")),
    )
    op.create_index("ix_gpu_samples_1h_bucket", "gpu_samples_1h", ["bucket"], unique=False)
    op.create_index(
        "ix_gpu_samples_1h_worker_id_bucket", "gpu_samples_1h", ["worker_id", "bucket"], unique=False
    )

    op.create_table(
        "gpu_samples_1m",
        sa.Column("gpu_uuid", sa.String(length=253), nullable=False),
        sa.Column("bucket", UTC_TIMESTAMP, nullable=False),
        sa.Column("worker_id", sa.String(length=253), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("window_s_sum", sa.Float(), nullable=False),
        sa.Column("sm_active_avg", sa.Float(), nullable=True),
        sa.Column("tensor_active_avg", sa.Float(), nullable=True),
        sa.Column("dram_active_avg", sa.Float(), nullable=True),
        sa.Column("gpu_util_avg", sa.Float(), nullable=True),
        sa.Column("power_w_avg", sa.Float(), nullable=True),
        sa.Column("mem_used_bytes_max", sa.BigInteger(), nullable=True),
        sa.Column("lost_samples", sa.Integer(), nullable=False),
        sa.Column("degraded_samples", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("gpu_uuid", "bucket", name=op.f("pk_gpu_samples_1m")),
    )
    op.create_index("ix_gpu_samples_1m_bucket", "gpu_samples_1m", ["bucket"], unique=False)
    op.create_index(
        "ix_gpu_samples_1m_worker_id_bucket", "gpu_samples_1m", ["worker_id", "bucket"], unique=False
    )

    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("first_seen", UTC_TIMESTAMP, nullable=False),
        sa.Column("last_seen", UTC_TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "reports",
        sa.Column("week", sa.String(length=8), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC_TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("week", name=op.f("pk_reports")),
    )
    op.create_table(
        "gpus",
        sa.Column("gpu_uuid", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("gpu_name", sa.String(length=253), nullable=False),
        sa.Column("sku", sa.String(length=64), nullable=True),
        sa.Column("parent_gpu_uuid", sa.String(length=253), nullable=True),
        sa.Column("mig_profile", sa.String(length=64), nullable=True),
        sa.Column("worker_id", sa.String(length=253), nullable=True),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("first_seen", UTC_TIMESTAMP, nullable=False),
        sa.Column("last_seen", UTC_TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.name"], name=op.f("fk_gpus_node_nodes")),
        sa.PrimaryKeyConstraint("gpu_uuid", name=op.f("pk_gpus")),
    )
    op.create_index(op.f("ix_gpus_node"), "gpus", ["node"], unique=False)
    op.create_index(op.f("ix_gpus_worker_id"), "gpus", ["worker_id"], unique=False)

    op.create_table(
        "workers",
        sa.Column("worker_id", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("engine", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=253), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("role_source", sa.String(length=32), nullable=False),
        sa.Column("precision", sa.String(length=64), nullable=True),
        sa.Column("tp", sa.Integer(), nullable=False),
        sa.Column("gpu_uuids", sa.JSON(), nullable=False),
        sa.Column("first_seen", UTC_TIMESTAMP, nullable=False),
        sa.Column("last_seen", UTC_TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.name"], name=op.f("fk_workers_node_nodes")),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_workers")),
    )
    op.create_index(op.f("ix_workers_model"), "workers", ["model"], unique=False)
    op.create_index(op.f("ix_workers_node"), "workers", ["node"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_workers_node"), table_name="workers")
    op.drop_index(op.f("ix_workers_model"), table_name="workers")

    op.drop_table("workers")
    op.drop_index(op.f("ix_gpus_worker_id"), table_name="gpus")
    op.drop_index(op.f("ix_gpus_node"), table_name="gpus")

    op.drop_table("gpus")
    op.drop_table("reports")
    op.drop_index("ix_analysis_runs_created_at", table_name="analysis_runs")
    op.drop_table("analysis_runs")
    op.drop_table("nodes")
    op.drop_index("ix_gpu_samples_1m_worker_id_bucket", table_name="gpu_samples_1m")
    op.drop_index("ix_gpu_samples_1m_bucket", table_name="gpu_samples_1m")

    op.drop_table("gpu_samples_1m")
    op.drop_index("ix_gpu_samples_1h_worker_id_bucket", table_name="gpu_samples_1h")
    op.drop_index("ix_gpu_samples_1h_bucket", table_name="gpu_samples_1h")

    op.drop_table("gpu_samples_1h")
    op.drop_index("ix_gpu_samples_worker_id_ts", table_name="gpu_samples")
    op.drop_index("ix_gpu_samples_ts", table_name="gpu_samples")

    op.drop_table("gpu_samples")
    op.drop_index(op.f("ix_findings_worker_id"), table_name="findings")
    op.drop_index("ix_findings_status_kind", table_name="findings")
    op.drop_index("ix_findings_last_seen", table_name="findings")

    op.drop_table("findings")
    op.drop_index("ix_engine_samples_1m_bucket", table_name="engine_samples_1m")

    op.drop_table("engine_samples_1m")
    op.drop_index("ix_engine_samples_1h_bucket", table_name="engine_samples_1h")

    op.drop_table("engine_samples_1h")
    op.drop_index("ix_engine_samples_ts", table_name="engine_samples")

    op.drop_table("engine_samples")
    op.drop_index("ix_alert_events_status_starts_at", table_name="alert_events")
    op.drop_index(op.f("ix_alert_events_alertname"), table_name="alert_events")

    op.drop_table("alert_events")
