"""pools from data (cluster, deployment) and lost capacity in output tokens and requests

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 17:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LOSS = tuple(
    f"lost_{unit}_per_s{bound}" for unit in ("output_tokens", "requests") for bound in ("", "_low", "_high")
)


def upgrade() -> None:
    op.add_column("gpus", sa.Column("cluster", sa.String(length=253), nullable=True))
    op.add_column("workers", sa.Column("cluster", sa.String(length=253), nullable=True))
    op.add_column("workers", sa.Column("deployment", sa.String(length=253), nullable=True))
    for name in _LOSS:
        op.add_column("findings", sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("findings") as batch:
        for name in reversed(_LOSS):
            batch.drop_column(name)
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("deployment")
        batch.drop_column("cluster")
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("cluster")
