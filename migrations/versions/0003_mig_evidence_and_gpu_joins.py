"""utilisation counters and evidence level on GPU samples; how an engine's GPUs were found; TP may be unknown

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ROLLUPS = ("gpu_samples_1m", "gpu_samples_1h")


def upgrade() -> None:
    op.add_column("gpu_samples", sa.Column("gr_engine_active", sa.Float(), nullable=True))
    op.add_column("gpu_samples", sa.Column("mem_copy_util", sa.Float(), nullable=True))
    op.add_column("gpu_samples", sa.Column("activity_evidence", sa.String(length=32), nullable=True))
    for table in _ROLLUPS:
        op.add_column(table, sa.Column("gr_engine_active_avg", sa.Float(), nullable=True))
        op.add_column(table, sa.Column("mem_copy_util_avg", sa.Float(), nullable=True))
    op.add_column("workers", sa.Column("gpu_join", sa.String(length=32), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.alter_column("tp", existing_type=sa.Integer(), nullable=True)
    # Samples stored before this revision carried SM/tensor/DRAM activity or nothing: mark them so.
    op.execute(
        "UPDATE gpu_samples SET activity_evidence = 'profiling' WHERE sm_active IS NOT NULL "
        "OR tensor_active IS NOT NULL OR dram_active IS NOT NULL"
    )
    op.execute(
        "UPDATE gpu_samples SET activity_evidence = 'utilisation' WHERE activity_evidence IS NULL "
        "AND gpu_util IS NOT NULL"
    )


def downgrade() -> None:
    # An unknown TP cannot go back into a NOT NULL column as a guess: such workers block the downgrade.
    bind = op.get_bind()
    unknown = bind.execute(sa.text("SELECT count(*) FROM workers WHERE tp IS NULL")).scalar_one()
    if unknown:
        raise RuntimeError(
            f"{unknown} worker(s) have no known TP degree: set tp or delete them before going below 0003"
        )
    with op.batch_alter_table("workers") as batch:
        batch.alter_column("tp", existing_type=sa.Integer(), nullable=False)
        batch.drop_column("gpu_join")
    for table in reversed(_ROLLUPS):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("mem_copy_util_avg")
            batch.drop_column("gr_engine_active_avg")
    with op.batch_alter_table("gpu_samples") as batch:
        batch.drop_column("activity_evidence")
        batch.drop_column("mem_copy_util")
        batch.drop_column("gr_engine_active")
