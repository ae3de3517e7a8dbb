"""lean raw samples (integer keys, REAL, SMALLINT codes, one (ts, key) index), daily partitions on PostgreSQL

The rows of ``gpu_samples`` / ``engine_samples`` move into ``raw_gpu_samples`` / ``raw_engine_samples``
(keys from ``gpu_keys`` / ``worker_keys``, codes for the enumerations), and views of the old names and
columns take the tables' place (fleet/store/schema.py). On PostgreSQL the raw tables are partitioned by day
on ``ts``: a partition for every day that holds samples, and a DEFAULT partition; later days' partitions are
``phasefit db upgrade``'s (fleet/store/partitions.py). Ratios, gauges and latencies go from 8-byte to
4-byte floats (7 significant digits); the downgrade gives them back as the shortest decimal that reads as
the stored value (0.1 stays 0.1).

The copy runs in the migration's transaction: a store of N samples needs room for about the old tables'
size again until it commits.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here (not imported) so this revision never changes with the application code.
UTC_TIMESTAMP = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
CODES = {  # column -> (text -> code), as fleet/store/codes.py had them at this revision
    "state": {"ok": 0, "lost": 1, "degraded": 2},
    "source": {"nvml-gpm": 0, "nvml-basic": 1, "dcgm": 2, "prometheus": 3, "sim": 4},
    "activity_evidence": {"profiling": 0, "utilisation": 1},
    "role": {"prefill": 0, "decode": 1, "mixed": 2, "unknown": 3},
    "role_source": {
        "engine": 0, "pod-label": 1, "component": 2, "cmdline": 3, "config": 4, "sim": 5, "none": 6,
    },
}  # fmt: skip
GPU_COLUMNS = (  # the views' columns: the tables' at revision 0004, in order
    "gpu_uuid", "ts", "window_s", "worker_id", "sm_active", "tensor_active", "dram_active", "gpu_util",
    "mem_used_bytes", "power_w", "sm_clock_mhz", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes",
    "pcie_rx_bytes", "state", "source", "gr_engine_active", "mem_copy_util", "activity_evidence",
)  # fmt: skip
ENGINE_COLUMNS = (
    "worker_id", "ts", "window_s", "role", "role_source", "prompt_tokens", "generation_tokens",
    "requests_running", "requests_waiting", "kv_cache_usage", "preemptions", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s",
)  # fmt: skip
GPU_REALS = ("window_s", "sm_active", "tensor_active", "dram_active", "gpu_util", "power_w", "sm_clock_mhz",
             "gr_engine_active", "mem_copy_util")  # fmt: skip
ENGINE_REALS = ("window_s", "kv_cache_usage", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
GPU_INTS = ("mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes")
ENGINE_INTS = ("prompt_tokens", "generation_tokens", "requests_running", "requests_waiting", "preemptions")
RAW_TABLES = ("raw_gpu_samples", "raw_engine_samples")


def _postgres() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _raw_table(name: str, key: str, ints: Sequence[str], reals: Sequence[str], codes: Sequence[str]) -> None:
    """A lean raw table: 8-byte columns first (no alignment padding), then 4-byte, then 2-byte."""
    required = {"prompt_tokens", "generation_tokens", "window_s", "state", "source", "role", "role_source"}
    columns: list[sa.Column[Any]] = [sa.Column("ts", UTC_TIMESTAMP, nullable=False)]
    columns += [sa.Column(c, sa.BigInteger(), nullable=c not in required) for c in ints]
    columns += [sa.Column(key, sa.Integer(), nullable=False)]
    if key == "gpu_key":
        columns += [sa.Column("worker_key", sa.Integer(), nullable=True)]
    columns += [sa.Column(c, sa.REAL(), nullable=c not in required) for c in reals]
    columns += [sa.Column(c, sa.SmallInteger(), nullable=c not in required) for c in codes]
    op.create_table(
        name,
        *columns,
        sa.PrimaryKeyConstraint("ts", key, name=f"pk_{name}"),
        postgresql_partition_by="RANGE (ts)",
        sqlite_with_rowid=False,
    )


def _key_table(name: str, column: str) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column(column, sa.String(length=253), nullable=False),
        sa.PrimaryKeyConstraint("id", name=f"pk_{name}"),
        sa.UniqueConstraint(column, name=f"uq_{name}_{column}"),
    )


def _decode(column: str) -> str:
    whens = " ".join(f"WHEN {code} THEN '{value}'" for value, code in CODES[column].items())
    return f"CASE s.{column} {whens} END"


def _encode(column: str) -> str:
    whens = " ".join(f"WHEN '{value}' THEN {code}" for value, code in CODES[column].items())
    return f"CASE s.{column} {whens} END"


def _check_codes(table: str, columns: Sequence[str]) -> None:
    """Refuse to migrate a stored value that has no code (it would become NULL, or fail NOT NULL)."""
    bind = op.get_bind()
    for column in columns:
        known = ", ".join(f"'{value}'" for value in CODES[column])
        unknown = bind.execute(
            sa.text(f"SELECT DISTINCT {column} FROM {table} WHERE {column} NOT IN ({known})")
        ).scalars()
        values = sorted(str(value) for value in unknown)
        if values:
            raise RuntimeError(
                f"{table}.{column} holds {values}, which revision 0005 has no code for: update or delete "
                "those rows, then upgrade again"
            )


def _day_partitions() -> None:
    """A DEFAULT partition per raw table, and a day partition for every UTC day that holds samples within
    the years the contract accepts (2000-2099); rows stored before it bounded them (year 1, year 9999) go
    to DEFAULT."""
    bind = op.get_bind()
    days = (
        bind.execute(
            sa.text(
                "SELECT day FROM (SELECT date_trunc('day', ts, 'UTC') AS day FROM gpu_samples UNION "
                "SELECT date_trunc('day', ts, 'UTC') FROM engine_samples) AS days "
                "WHERE day >= '2000-01-01T00:00:00+00:00' AND day < '2100-01-01T00:00:00+00:00' ORDER BY day"
            )
        )
        .scalars()
        .all()
    )
    for table in RAW_TABLES:
        op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
    for day in days:
        start = day.astimezone(UTC)
        end = start + timedelta(days=1)
        for table in RAW_TABLES:
            op.execute(
                f"CREATE TABLE {table}_p{start:%Y%m%d} PARTITION OF {table} "
                f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )


def upgrade() -> None:
    _check_codes("gpu_samples", ("state", "source", "activity_evidence"))
    _check_codes("engine_samples", ("role", "role_source"))
    _key_table("gpu_keys", "gpu_uuid")
    _key_table("worker_keys", "worker_id")
    op.execute("INSERT INTO gpu_keys (gpu_uuid) SELECT DISTINCT gpu_uuid FROM gpu_samples ORDER BY gpu_uuid")
    op.execute(
        "INSERT INTO worker_keys (worker_id) SELECT worker_id FROM (SELECT worker_id FROM engine_samples "
        "UNION SELECT worker_id FROM gpu_samples WHERE worker_id IS NOT NULL) AS named ORDER BY worker_id"
    )
    _raw_table("raw_gpu_samples", "gpu_key", GPU_INTS, GPU_REALS, ("state", "source", "activity_evidence"))
    _raw_table("raw_engine_samples", "worker_key", ENGINE_INTS, ENGINE_REALS, ("role", "role_source"))
    if _postgres():
        _day_partitions()
    _copy_gpu_samples()
    _copy_engine_samples()
    op.drop_table("gpu_samples")
    op.drop_table("engine_samples")
    _create_views()


def _copy_gpu_samples() -> None:
    plain = ("ts", *GPU_INTS, *GPU_REALS)
    op.execute(
        f"INSERT INTO raw_gpu_samples ({', '.join(plain)}, gpu_key, worker_key, state, source, "
        f"activity_evidence) SELECT {', '.join(f's.{c}' for c in plain)}, k.id, w.id, {_encode('state')}, "
        f"{_encode('source')}, {_encode('activity_evidence')} FROM gpu_samples s "
        "JOIN gpu_keys k ON k.gpu_uuid = s.gpu_uuid LEFT JOIN worker_keys w ON w.worker_id = s.worker_id "
        "ORDER BY s.ts, k.id"
    )
    _same_count("gpu_samples", "raw_gpu_samples")


def _copy_engine_samples() -> None:
    plain = ("ts", *ENGINE_INTS, *ENGINE_REALS)
    op.execute(
        f"INSERT INTO raw_engine_samples ({', '.join(plain)}, worker_key, role, role_source) "
        f"SELECT {', '.join(f's.{c}' for c in plain)}, w.id, {_encode('role')}, {_encode('role_source')} "
        "FROM engine_samples s JOIN worker_keys w ON w.worker_id = s.worker_id ORDER BY s.ts, w.id"
    )
    _same_count("engine_samples", "raw_engine_samples")


def _same_count(old: str, new: str) -> None:
    bind = op.get_bind()
    before = bind.execute(sa.text(f"SELECT count(*) FROM {old}")).scalar_one()
    after = bind.execute(sa.text(f"SELECT count(*) FROM {new}")).scalar_one()
    if before != after:
        raise RuntimeError(f"{old} held {before} rows but {after} reached {new}: nothing was changed")


def _create_views() -> None:
    gpu = {c: f"s.{c}" for c in GPU_COLUMNS} | {
        "gpu_uuid": "k.gpu_uuid",
        "worker_id": "w.worker_id",
        **{c: _decode(c) for c in ("state", "source", "activity_evidence")},
    }
    op.execute(
        f"CREATE VIEW gpu_samples AS SELECT {', '.join(f'{e} AS {c}' for c, e in gpu.items())} "
        "FROM raw_gpu_samples s LEFT JOIN gpu_keys k ON k.id = s.gpu_key "
        "LEFT JOIN worker_keys w ON w.id = s.worker_key"
    )
    engine = {c: f"s.{c}" for c in ENGINE_COLUMNS} | {
        "worker_id": "w.worker_id",
        **{c: _decode(c) for c in ("role", "role_source")},
    }
    op.execute(
        f"CREATE VIEW engine_samples AS SELECT {', '.join(f'{e} AS {c}' for c, e in engine.items())} "
        "FROM raw_engine_samples s LEFT JOIN worker_keys w ON w.id = s.worker_key"
    )


def downgrade() -> None:
    _legacy_table("gpu_samples_0004", GPU_COLUMNS, GPU_REALS, GPU_INTS, key="gpu_uuid")
    _legacy_table("engine_samples_0004", ENGINE_COLUMNS, ENGINE_REALS, ENGINE_INTS, key="worker_id")
    for view, columns, reals in (
        ("gpu_samples", GPU_COLUMNS, GPU_REALS),
        ("engine_samples", ENGINE_COLUMNS, ENGINE_REALS),
    ):
        selected = ", ".join(_as_double(c) if c in reals else c for c in columns)
        op.execute(f"INSERT INTO {view}_0004 ({', '.join(columns)}) SELECT {selected} FROM {view}")
        _same_count(view, f"{view}_0004")
        op.execute(f"DROP VIEW {view}")
        op.rename_table(f"{view}_0004", view)
    op.create_index("ix_gpu_samples_ts", "gpu_samples", ["ts"], unique=False)
    op.create_index("ix_gpu_samples_worker_id_ts", "gpu_samples", ["worker_id", "ts"], unique=False)
    op.create_index("ix_engine_samples_ts", "engine_samples", ["ts"], unique=False)
    for table in (*RAW_TABLES, "gpu_keys", "worker_keys"):
        op.drop_table(table)  # on PostgreSQL, with its partitions


def _as_double(column: str) -> str:
    """A REAL column as the double its shortest decimal reads as (PostgreSQL; SQLite's REAL is a double)."""
    if _postgres():
        return f"CAST(CAST({column} AS TEXT) AS DOUBLE PRECISION)"
    return column


def _legacy_table(
    name: str, columns: Sequence[str], reals: Sequence[str], ints: Sequence[str], *, key: str
) -> None:
    """The sample table as revision 0004 had it (primary key named for its final name)."""
    required = {key, "ts", "window_s", "state", "source", "role", "role_source", "prompt_tokens",
                "generation_tokens"}  # fmt: skip
    built = []
    for column in columns:
        kind: sa.types.TypeEngine[Any]
        if column == "ts":
            kind = UTC_TIMESTAMP
        elif column in reals:
            kind = sa.Float()
        elif column in ints:
            kind = sa.BigInteger()
        else:
            kind = sa.String(length=253 if column in ("gpu_uuid", "worker_id") else 32)
        built.append(sa.Column(column, kind, nullable=column not in required))
    final = name.removesuffix("_0004")
    op.create_table(name, *built, sa.PrimaryKeyConstraint(key, "ts", name=f"pk_{final}"))
