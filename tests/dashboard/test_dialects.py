"""The dashboard's store reads and the weekly report on both store dialects (SQLite, and PostgreSQL when
PHASEFIT_TEST_POSTGRES_URL is set; under CI=true PostgreSQL must be there). The SQL differs per dialect
(hour buckets, epoch seconds, JSON, integer sums that PostgreSQL returns as Decimal), the figures must not.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from analyzer.report.build import build_audit
from analyzer.report.publish import render
from dashboard.store_source import StoreSource
from dashboard.views import Scope
from fleet.catalog import load_catalog
from fleet.store.engine import make_engine
from tests.dashboard.seed import seed_store


def test_reads_and_report(store_url: str, tmp_path: Path) -> None:
    seeded = seed_store(store_url, tmp_path, days=1.0, window_s=1200)
    engine = make_engine(store_url)
    try:
        source = StoreSource(engine)
        scope = Scope(seeded.start, seeded.end + timedelta(hours=1))
        inventory = source.inventory()
        assert len(inventory.workers) == 32 and sum(g.gpus for g in inventory.groups) == 64
        utilisation = source.utilisation(scope, None)
        assert {(p.sku, p.role) for p in utilisation} == {
            ("H100-SXM", "prefill"),
            ("H100-SXM", "decode"),
            ("H200-SXM", "prefill"),
            ("H200-SXM", "decode"),
        }
        assert all(0 <= (p.dram_active or 0) <= 1 for p in utilisation)
        hours = {p.ts for p in utilisation}
        assert 24 <= len(hours) <= 25
        activity = {a.worker_id: a for a in source.worker_activity(scope, None)}
        assert activity["node03/decode-1"].gpu_hours == pytest.approx(48, rel=0.05)
        pool = "sim-east/llama-70b/meta-llama/Llama-3.1-70B-Instruct"  # the scenario's cluster, deployment
        workers = [w.record.worker_id for w in inventory.workers]
        traffic = source.traffic(scope, {pool: workers})
        assert len(traffic) >= 24 and all(p.prompt_tokens_per_s > 0 for p in traffic)
        assert {f.worker_id for f in source.findings(scope) if f.worker_id} >= set(seeded.misplaced)
        lost = [p for p in source.lost_tokens(scope) if p.lost is not None]
        assert len(lost) >= 24 and all(p.low is not None and p.low <= p.lost for p in lost)
        analysis = source.analysis(scope)
        assert analysis is not None and analysis.pools[0].pool == pool
        alerts = source.alerts(
            Scope(seeded.start, seeded.start + timedelta(days=3))
        )  # seeded at 30 h and 62 h
        assert {a.status for a in alerts} == {"firing", "resolved"}
        with engine.connect() as connection:
            audit = build_audit(connection, "2026-W48", load_catalog(), version="test")
        assert audit.this_week.misplaced_workers == len(seeded.misplaced) == 3
        html = render(audit).html
        assert "node03/decode-1" in html and "https://" not in html
    finally:
        engine.dispose()
