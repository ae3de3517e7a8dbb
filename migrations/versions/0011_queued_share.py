"""the engine rollups' queued share: in what share of a bucket's samples a request waited

A pool's state reads its queues: the median hour's mean queue says whether requests waited. A pool whose
queues fill in bursts and empty between them (long prompts arriving together) has as large a mean queue
as one that holds a backlog all hour, yet it serves what arrives. Each engine rollup (per minute and per
hour) now keeps the share of its samples, of those that report a queue, with a request waiting. The column
is added nullable, with no rewrite: buckets rolled up before this revision read as unknown (the state then
reads the queue's size alone), and `phasefit db prune` fills it as it rolls up again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here (not imported) so this revision never changes with the application code.
ROLLUPS = ("engine_samples_1m", "engine_samples_1h")
COLUMN = "queued_share"


def upgrade() -> None:
    for table in ROLLUPS:
        op.add_column(table, sa.Column(COLUMN, sa.Float(), nullable=True))


def downgrade() -> None:
    for table in ROLLUPS:
        with op.batch_alter_table(table) as batch:
            batch.drop_column(COLUMN)
