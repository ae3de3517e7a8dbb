"""Analyzer findings: one row per episode of (kind, subject), deduplicated across analyzer runs.

The subject is the worker (``worker:<id>``), else the pool (``pool:<pool>``), else ``fleet``. Storing a
finding whose (kind, subject) has an open episode extends that episode (first seen = earliest, last seen =
latest, everything else from the newer report); a finding for the same episode start that was resolved
updates (and may reopen) that row; anything else opens a new episode. :func:`resolve_findings` closes the
open episodes an analyzer run no longer reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from fleet.contract import Finding, FindingKind, FindingStatus, Recommendation
from fleet.store.schema import FindingRow

LOSS_FIELDS = tuple(
    f"lost_{unit}_per_s{bound}" for unit in ("output_tokens", "requests") for bound in ("", "_low", "_high")
)


@dataclass(frozen=True)
class StoredFinding:
    id: int
    finding: Finding
    resolved_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class FindingCounts:
    inserted: int = 0
    updated: int = 0


def finding_subject(finding: Finding) -> str:
    if finding.worker_id is not None:
        return f"worker:{finding.worker_id}"
    if finding.pool is not None:
        return f"pool:{finding.pool}"
    return "fleet"


def _values(finding: Finding, now: datetime) -> dict[str, Any]:
    resolved = finding.status is FindingStatus.RESOLVED
    return {
        "kind": finding.kind.value,
        "subject": finding_subject(finding),
        "worker_id": finding.worker_id,
        "pool": finding.pool,
        "status": finding.status.value,
        "severity": finding.severity.value,
        "gpu_sku": finding.gpu_sku,
        "role": finding.role.value,
        "bottleneck": finding.bottleneck.value,
        "evidence": dict(finding.evidence),
        "tokens_per_s": finding.tokens_per_s,
        "lost_tokens_per_s": finding.lost_tokens_per_s,
        "lost_tokens_per_s_low": finding.lost_tokens_per_s_low,
        "lost_tokens_per_s_high": finding.lost_tokens_per_s_high,
        **{name: getattr(finding, name) for name in LOSS_FIELDS},
        "recommendation": finding.recommendation.model_dump(mode="json") if finding.recommendation else None,
        "first_seen": finding.first_seen,
        "last_seen": finding.last_seen,
        "resolved_at": finding.last_seen if resolved else None,
        "updated_at": now,
    }


def upsert_findings(connection: Connection, findings: Iterable[Finding], *, now: datetime) -> FindingCounts:
    """Store findings (see the module docstring for how episodes are merged); ``now`` stamps updated_at."""
    inserted = updated = 0
    table = FindingRow
    for finding in findings:
        values = _values(finding, now)
        same = (table.kind == values["kind"]) & (table.subject == values["subject"])
        existing = connection.execute(
            select(table.id, table.first_seen, table.last_seen)
            .where(same, table.status == FindingStatus.OPEN.value)
            .order_by(table.first_seen.desc())
            .limit(1)
        ).first()
        if existing is None:
            existing = connection.execute(
                select(table.id, table.first_seen, table.last_seen).where(
                    same, table.first_seen == finding.first_seen
                )
            ).first()
        if existing is None:
            connection.execute(insert(table).values(**values))
            inserted += 1
            continue
        values["first_seen"] = min(existing.first_seen, finding.first_seen)
        values["last_seen"] = max(existing.last_seen, finding.last_seen)
        if values["resolved_at"] is not None:
            values["resolved_at"] = values["last_seen"]
        connection.execute(update(table).where(table.id == existing.id).values(**values))
        updated += 1
    return FindingCounts(inserted, updated)


def resolve_findings(
    connection: Connection,
    *,
    still_open: Iterable[tuple[FindingKind | str, str]],
    at: datetime,
    kinds: Iterable[FindingKind | str] | None = None,
    pool: str | None = None,
) -> int:
    """Resolve open findings not in ``still_open`` ((kind, subject) pairs), limited to ``kinds`` and to one
    ``pool`` when given (an analyzer run over one pool must not close another pool's findings)."""
    keep = {(str(kind), subject) for kind, subject in still_open}
    statement = select(FindingRow.id, FindingRow.kind, FindingRow.subject).where(
        FindingRow.status == FindingStatus.OPEN.value
    )
    if kinds is not None:
        statement = statement.where(FindingRow.kind.in_([str(kind) for kind in kinds]))
    if pool is not None:
        statement = statement.where(FindingRow.pool == pool)
    stale = [row.id for row in connection.execute(statement) if (row.kind, row.subject) not in keep]
    for start in range(0, len(stale), 500):
        connection.execute(
            update(FindingRow)
            .where(FindingRow.id.in_(stale[start : start + 500]))
            .values(status=FindingStatus.RESOLVED.value, resolved_at=at, updated_at=at)
        )
    return len(stale)


def list_findings(
    connection: Connection,
    *,
    status: FindingStatus | str | None = None,
    kind: FindingKind | str | None = None,
    worker_id: str | None = None,
    pool: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[StoredFinding]:
    """Findings, newest last_seen first; ``since``/``until`` keep episodes overlapping [since, until)."""
    statement = select(FindingRow).order_by(FindingRow.last_seen.desc(), FindingRow.id.desc())
    if status is not None:
        statement = statement.where(FindingRow.status == str(status))
    if kind is not None:
        statement = statement.where(FindingRow.kind == str(kind))
    if worker_id is not None:
        statement = statement.where(FindingRow.worker_id == worker_id)
    if pool is not None:
        statement = statement.where(FindingRow.pool == pool)
    if since is not None:
        statement = statement.where(FindingRow.last_seen >= since)
    if until is not None:
        statement = statement.where(FindingRow.first_seen < until)
    rows = connection.execute(statement.offset(offset).limit(limit)).mappings()
    return [_stored(row) for row in rows]


def _stored(row: Any) -> StoredFinding:
    recommendation = row["recommendation"]
    fields = dict(
        kind=row["kind"],
        worker_id=row["worker_id"],
        pool=row["pool"],
        severity=row["severity"],
        status=row["status"],
        gpu_sku=row["gpu_sku"],
        role=row["role"],
        bottleneck=row["bottleneck"],
        evidence=row["evidence"],
        tokens_per_s=row["tokens_per_s"],
        lost_tokens_per_s=row["lost_tokens_per_s"],
        lost_tokens_per_s_low=row["lost_tokens_per_s_low"],
        lost_tokens_per_s_high=row["lost_tokens_per_s_high"],
        **{name: row[name] for name in LOSS_FIELDS},
        recommendation=Recommendation.model_validate(recommendation) if recommendation is not None else None,
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
    )
    # Rows stored before the contract bounded its times (year 1, 9999) must still read.
    finding = Finding.model_validate(fields, context={"stored": True})
    return StoredFinding(row["id"], finding, row["resolved_at"], row["updated_at"])
