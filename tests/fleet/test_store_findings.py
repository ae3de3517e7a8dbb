"""Findings: deduplicated across analyzer runs, resolved when no longer reported, listed with filters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine

from fleet.contract import Finding, FindingKind, FindingStatus, Recommendation, Severity
from fleet.store.engine import writing
from fleet.store.findings import (
    FindingCounts,
    finding_subject,
    list_findings,
    resolve_findings,
    upsert_findings,
)
from tests.fleet.store_factories import T0

DECODE = FindingKind.DECODE_ON_LOW_BANDWIDTH
HOUR = timedelta(hours=1)


def finding(worker: str | None = "worker-1", start: int = 0, end: int = 1, **fields: Any) -> Finding:
    values: dict[str, Any] = {
        "kind": DECODE,
        "worker_id": worker,
        "pool": "prod/llama-70b",
        "gpu_sku": "H100-SXM",
        "role": "decode",
        "bottleneck": "memory-bandwidth",
        "evidence": {"dram_active_p50": 0.82, "source": "dcgm"},
        "lost_tokens_per_s": 900.0,
        "lost_tokens_per_s_low": 700.0,
        "lost_tokens_per_s_high": 1100.0,
        "recommendation": Recommendation(action="swap-roles-in-place", counterpart_worker_id="worker-7"),
        "first_seen": T0 + start * HOUR,
        "last_seen": T0 + end * HOUR,
    }
    values.update(fields)
    return Finding.model_validate(values)


def test_reruns_extend_one_episode_instead_of_adding_rows(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        first = upsert_findings(connection, [finding(start=0, end=1)], now=T0 + HOUR)
    with writing(store_engine) as connection:  # the next run sees it again, from its own window start
        again = upsert_findings(
            connection, [finding(start=1, end=2, severity=Severity.CRITICAL)], now=T0 + 2 * HOUR
        )
    with store_engine.connect() as connection:
        stored = list_findings(connection)
    assert (first, again) == (FindingCounts(1, 0), FindingCounts(0, 1))
    assert len(stored) == 1
    episode = stored[0].finding
    assert (episode.first_seen, episode.last_seen, episode.severity) == (T0, T0 + 2 * HOUR, Severity.CRITICAL)
    assert episode.recommendation is not None and episode.recommendation.counterpart_worker_id == "worker-7"
    assert episode.evidence == {"dram_active_p50": 0.82, "source": "dcgm"}
    assert stored[0].updated_at == T0 + 2 * HOUR and stored[0].resolved_at is None


def test_resolution_closes_an_episode_and_a_recurrence_opens_a_new_one(store_engine: Engine) -> None:
    pool_finding = finding(worker=None, kind=FindingKind.POOL_RATIO_DRIFT)
    with writing(store_engine) as connection:
        upsert_findings(connection, [finding(), finding(worker="worker-2"), pool_finding], now=T0 + HOUR)
        closed = resolve_findings(
            connection, still_open=[(DECODE, "worker:worker-2")], at=T0 + 3 * HOUR, kinds=[DECODE]
        )
    assert closed == 1
    with writing(store_engine) as connection:
        counts = upsert_findings(connection, [finding(start=5, end=6)], now=T0 + 6 * HOUR)
    assert counts == FindingCounts(1, 0)
    with store_engine.connect() as connection:
        worker_1 = list_findings(connection, worker_id="worker-1")
        open_now = list_findings(connection, status=FindingStatus.OPEN)
        drift = list_findings(connection, kind=FindingKind.POOL_RATIO_DRIFT)
    assert [(f.finding.status, f.finding.first_seen) for f in worker_1] == [
        (FindingStatus.OPEN, T0 + 5 * HOUR), (FindingStatus.RESOLVED, T0),
    ]  # fmt: skip
    assert worker_1[1].resolved_at == T0 + 3 * HOUR
    assert {finding_subject(f.finding) for f in open_now} == {
        "worker:worker-1",
        "worker:worker-2",
        "pool:prod/llama-70b",
    }
    assert len(drift) == 1 and drift[0].finding.worker_id is None


def test_resolving_one_pool_leaves_other_pools_open(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        upsert_findings(connection, [finding(pool="a"), finding(worker="worker-9", pool="b")], now=T0)
        assert resolve_findings(connection, still_open=[], at=T0 + HOUR, pool="a") == 1
    with store_engine.connect() as connection:
        assert [f.finding.pool for f in list_findings(connection, status="open")] == ["b"]


def test_a_resolved_report_of_a_known_episode_resolves_it(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        upsert_findings(connection, [finding()], now=T0)
        upsert_findings(connection, [finding(end=4, status=FindingStatus.RESOLVED)], now=T0 + 4 * HOUR)
    with store_engine.connect() as connection:
        (stored,) = list_findings(connection)
    assert stored.finding.status is FindingStatus.RESOLVED and stored.resolved_at == T0 + 4 * HOUR


def test_time_window_and_paging(store_engine: Engine) -> None:
    with writing(store_engine) as connection:
        upsert_findings(connection, [finding(worker=f"w{i}", start=i, end=i + 1) for i in range(5)], now=T0)
    with store_engine.connect() as connection:
        window = list_findings(connection, since=T0 + 2 * HOUR, until=T0 + 3 * HOUR)
        page = list_findings(connection, limit=2, offset=1)
    assert sorted(f.finding.worker_id or "" for f in window) == ["w1", "w2"]
    assert [f.finding.worker_id for f in page] == ["w3", "w2"]


def test_a_finding_that_estimates_no_loss_is_stored_and_read_back_as_null(store_engine: Engine) -> None:
    unknown = {f"lost_tokens_per_s{bound}": None for bound in ("", "_low", "_high")}
    degraded = finding("worker-2", kind=FindingKind.TELEMETRY_DEGRADED, recommendation=None, **unknown)
    zero = finding("worker-3", lost_tokens_per_s=0.0, lost_tokens_per_s_low=0.0, lost_output_tokens_per_s=0.0)
    with writing(store_engine) as connection:
        upsert_findings(connection, [degraded, zero], now=T0 + HOUR)
    with store_engine.connect() as connection:
        stored = {s.finding.worker_id: s.finding for s in list_findings(connection)}
    read = stored["worker-2"]
    assert [read.lost_tokens_per_s, read.lost_tokens_per_s_low, read.lost_tokens_per_s_high] == [None] * 3
    assert stored["worker-3"].lost_tokens_per_s == 0.0  # a loss estimated as 0 stays 0
