"""the windows' latency histograms: TTFT, TPOT and end to end, raw and summed in the engine rollups

A pool's p90 is the quantile of its workers' merged histograms (``histogram_quantile`` over ``sum by
(le)``), not a mean of their p90s, so each engine sample keeps its window's histograms, re-binned onto one
shared grid of bucket bounds and encoded as a short byte string (``fleet.histograms``: a few dozen bytes),
and each engine rollup the bucket-wise sum of its windows' histograms, encoded the same way. The columns are
added nullable (no rewrite of stored rows: older samples have none, which reads as unknown); the
``engine_samples`` view is recreated with them. On PostgreSQL a column added to the partitioned parent
reaches every day partition.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-13 04:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here (not imported) so this revision never changes with the application code.
HISTOGRAMS = ("ttft_histogram", "tpot_histogram", "e2e_histogram")
ROLLUPS = ("engine_samples_1m", "engine_samples_1h")
ENGINE_COLUMNS = (  # the view's columns at revision 0009, in order
    "worker_id", "ts", "window_s", "role", "role_source", "prompt_tokens", "generation_tokens",
    "requests_running", "requests_waiting", "kv_cache_usage", "preemptions", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s", "ttft_p90_s", "tpot_p90_s", "e2e_p90_s",
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
    for table in ("raw_engine_samples", *ROLLUPS):
        for name in HISTOGRAMS:  # BYTEA on PostgreSQL, BLOB on SQLite
            op.add_column(table, sa.Column(name, sa.LargeBinary(), nullable=True))
    _create_view((*ENGINE_COLUMNS, *HISTOGRAMS))


def downgrade() -> None:
    op.execute("DROP VIEW engine_samples")
    for table in ("raw_engine_samples", *ROLLUPS):
        with op.batch_alter_table(table) as batch:
            for name in HISTOGRAMS:
                batch.drop_column(name)
    _create_view(ENGINE_COLUMNS)
