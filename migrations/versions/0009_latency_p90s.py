"""the windows' 90th-percentile latencies: TTFT, TPOT and end to end, raw and in the engine rollups

Latency targets are stated at the 90th percentile (Dynamo's SLA planner, llm-d, AI Configurator), so each
engine sample carries its window's ``ttft_p90_s``, ``tpot_p90_s`` and ``e2e_p90_s`` (from the engines'
histograms, as ``histogram_quantile`` interpolates them) beside the p50s and p99s, and each engine rollup
their averages over the bucket. The columns are added nullable (no rewrite of stored rows: older samples
have none, which reads as unknown); the ``engine_samples`` view is recreated with them. On PostgreSQL a
column added to the partitioned parent reaches every day partition.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 04:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here (not imported) so this revision never changes with the application code.
P90S = ("ttft_p90_s", "tpot_p90_s", "e2e_p90_s")
ROLLUPS = ("engine_samples_1m", "engine_samples_1h")
ENGINE_COLUMNS = (  # the view's columns at revision 0008, in order
    "worker_id", "ts", "window_s", "role", "role_source", "prompt_tokens", "generation_tokens",
    "requests_running", "requests_waiting", "kv_cache_usage", "preemptions", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s",
)  # fmt: skip
CODES = {  # column -> (text -> code), as fleet/store/codes.py has them at this revision
    "role": {"prefill": 0, "decode": 1, "mixed": 2, "unknown": 3},
    "role_source": {
        "engine": 0, "pod-label": 1, "component": 2, "cmdline": 3, "config": 4, "sim": 5, "none": 6,
    },
}  # fmt: skip


def _decode(column: str) -> str:
    whens = " ".join(f"WHEN {code} THEN '{value}'" for value, code in CODES[column].items())
    return f"CASE s.{column} {whens} END"


def _create_view(columns: Sequence[str]) -> None:
    engine = {c: f"s.{c}" for c in columns} | {
        "worker_id": "w.worker_id",
        **{c: _decode(c) for c in ("role", "role_source")},
    }
    op.execute(
        f"CREATE VIEW engine_samples AS SELECT {', '.join(f'{e} AS {c}' for c, e in engine.items())} "
        "FROM raw_engine_samples s LEFT JOIN worker_keys w ON w.id = s.worker_key"
    )


def upgrade() -> None:
    op.execute("DROP VIEW engine_samples")
    for name in P90S:
        op.add_column("raw_engine_samples", sa.Column(name, sa.REAL(), nullable=True))
    for table in ROLLUPS:
        for name in P90S:
            op.add_column(table, sa.Column(f"{name}_avg", sa.Float(), nullable=True))
    _create_view((*ENGINE_COLUMNS, *P90S))


def downgrade() -> None:
    op.execute("DROP VIEW engine_samples")
    for table in ("raw_engine_samples", *ROLLUPS):
        suffix = "" if table == "raw_engine_samples" else "_avg"
        with op.batch_alter_table(table) as batch:
            for name in P90S:
                batch.drop_column(f"{name}{suffix}")
    _create_view(ENGINE_COLUMNS)
