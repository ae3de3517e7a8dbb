"""byte counts as 4-byte floats, a unique index per open day partition instead of the tables' primary keys

PostgreSQL only (SQLite's tables are unchanged): a GPU sample's byte counts (memory used, NVLink and PCIe
bytes) become 4-byte floats, read back through the ``gpu_samples`` view as the integer the float is; a count
beyond 2**63 - 2**39 (the largest such float a 64-bit integer holds) is stored as that. The raw tables'
primary keys, one index over every partition, give way to a unique ``(ts, key)`` index on each partition,
so that a closed day (fleet/store/closing.py) can trade its own for a BRIN index; every partition this
revision finds is left open, and ``phasefit db partitions`` / ``prune`` close the days behind the ingest
horizon. The downgrade reopens every partition and gives the counts back as integers (the float's value).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here (not imported) so this revision never changes with the application code.
COUNTS = ("mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes")
FLOAT4_INT64_MAX = 2**63 - 2**39
KEYS = {"raw_gpu_samples": "gpu_key", "raw_engine_samples": "worker_key"}
CODES = {
    "state": {"ok": 0, "lost": 1, "degraded": 2},
    "source": {"nvml-gpm": 0, "nvml-basic": 1, "dcgm": 2, "prometheus": 3, "sim": 4},
    "activity_evidence": {"profiling": 0, "utilisation": 1},
}
GPU_COLUMNS = (
    "gpu_uuid", "ts", "window_s", "worker_id", "sm_active", "tensor_active", "dram_active", "gpu_util",
    "mem_used_bytes", "power_w", "sm_clock_mhz", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes",
    "pcie_rx_bytes", "state", "source", "gr_engine_active", "mem_copy_util", "activity_evidence",
)  # fmt: skip


def _partitions(table: str) -> list[str]:
    return list(
        op.get_bind()
        .execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = CAST(:table AS regclass) ORDER BY c.relname"
            ),
            {"table": table},
        )
        .scalars()
    )


def _gpu_view(count: str) -> None:
    """The ``gpu_samples`` view as revision 0005 made it, the byte counts read through ``count``."""
    decoded = {
        column: f"CASE s.{column} "
        + " ".join(f"WHEN {code} THEN '{value}'" for value, code in codes.items())
        + " END"
        for column, codes in CODES.items()
    }
    selected = {c: f"s.{c}" for c in GPU_COLUMNS} | {
        "gpu_uuid": "k.gpu_uuid",
        "worker_id": "w.worker_id",
        **decoded,
        **{c: count.format(f"s.{c}") for c in COUNTS},
    }
    op.execute(
        f"CREATE VIEW gpu_samples AS SELECT {', '.join(f'{e} AS {c}' for c, e in selected.items())} "
        "FROM raw_gpu_samples s LEFT JOIN gpu_keys k ON k.id = s.gpu_key "
        "LEFT JOIN worker_keys w ON w.id = s.worker_key"
    )


def _clamped(column: str) -> str:
    """The count as a 4-byte float that reads back as a 64-bit integer (LEAST would turn NULL into the
    bound: it ignores NULLs)."""
    return f"CAST(CASE WHEN {column} > {FLOAT4_INT64_MAX} THEN {FLOAT4_INT64_MAX} ELSE {column} END AS real)"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP VIEW gpu_samples")
    for table in KEYS:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}")
    op.execute(
        "ALTER TABLE raw_gpu_samples "
        + ", ".join(f"ALTER COLUMN {c} TYPE real USING {_clamped(c)}" for c in COUNTS)
    )
    for table, key in KEYS.items():
        for partition in _partitions(table):
            op.execute(f"CREATE UNIQUE INDEX {partition}_key ON {partition} (ts, {key})")
    _gpu_view("CAST({} AS bigint)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP VIEW gpu_samples")
    for table, key in KEYS.items():
        for partition in _partitions(table):
            op.execute(f"DROP INDEX IF EXISTS {partition}_key")
            op.execute(f"DROP INDEX IF EXISTS {partition}_ts")
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY (ts, {key})")
    op.execute(
        "ALTER TABLE raw_gpu_samples "
        + ", ".join(f"ALTER COLUMN {c} TYPE bigint USING CAST({c} AS bigint)" for c in COUNTS)
    )
    _gpu_view("{}")
