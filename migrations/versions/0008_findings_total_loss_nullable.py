"""a finding's total lost tokens/s (and its range) null where the finding estimates no loss

Unknown is never 0: a finding that is no throughput loss (telemetry degraded, not serving, a pool condition)
stored 0 total tokens/s beside null output tokens/s and requests/s. The three total columns become nullable
and those rows' zeros become null (the rows ``analyzer.findings.loss.states_loss`` already read as stating no
loss); a loss estimated as 0 next to an output or requests figure stays 0. SQLite alters the table in batch
mode (a copy of the table); the findings table is not partitioned on PostgreSQL. The downgrade writes the 0
the older code wrote for unknown and makes the columns NOT NULL again.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05 22:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here (not imported) so this revision never changes with the application code.
TOTAL = ("lost_tokens_per_s", "lost_tokens_per_s_low", "lost_tokens_per_s_high")


def _nullable(nullable: bool) -> None:
    with op.batch_alter_table("findings") as batch:
        for name in TOTAL:
            batch.alter_column(name, existing_type=sa.Float(), nullable=nullable)


def upgrade() -> None:
    _nullable(True)
    op.execute(
        "UPDATE findings SET "
        + ", ".join(f"{name} = NULL" for name in TOTAL)
        + " WHERE lost_output_tokens_per_s IS NULL AND lost_requests_per_s IS NULL"
        " AND NOT lost_tokens_per_s > 0"
    )


def downgrade() -> None:
    op.execute("UPDATE findings SET " + ", ".join(f"{name} = COALESCE({name}, 0)" for name in TOTAL))
    _nullable(False)
