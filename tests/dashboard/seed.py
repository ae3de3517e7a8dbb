"""A seeded store for the dashboard and report tests: the simulator's demo fleet, ingested and analysed.

The demo scenario (64 GPUs, H100 and H200 SXM, Llama 3.1 70B FP8 in prefill and decode pools) has three
decode workers on H100 (node03) and a mid-week drift to long prompts; its ground truth names them. The
store is built the way production builds it: records ingested, hourly rollups computed (``phasefit db
prune``'s step), the analyzer run over the range and its findings and summary written back, one
Alertmanager episode delivered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DEMO_START = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48


@dataclass(frozen=True)
class Seeded:
    url: str
    truth: dict[str, Any]
    start: datetime
    end: datetime
    misplaced: list[str]  # worker ids the analyzer reported misplaced


_SHARED: dict[str, Seeded] = {}


def shared_seed(folder_factory: Any) -> Seeded:
    """One seeded SQLite store per test session (``folder_factory``: pytest's tmp_path_factory), with the
    weekly report of 2026-W48 stored: the dashboard and report tests read it, never write it."""
    if "store" not in _SHARED:
        folder = folder_factory.mktemp("seeded-store")
        seeded = seed_store(f"sqlite:///{folder / 'phasefit.db'}", folder)
        store_week_report(seeded.url, "2026-W48")
        _SHARED["store"] = seeded
    return _SHARED["store"]


def store_week_report(url: str, week: str) -> None:
    from analyzer.report.build import build_audit
    from analyzer.report.publish import render, store_report
    from fleet.catalog import load_catalog
    from fleet.store.engine import make_engine, writing

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            audit = build_audit(connection, week, load_catalog(), version="test")
        with writing(engine) as connection:
            store_report(connection, week, render(audit), created_at=datetime(2026, 11, 30, 6, tzinfo=UTC))
    finally:
        engine.dispose()


def seed_store(
    url: str,
    folder: Path,
    *,
    days: float = 3.0,
    window_s: int = 600,
    start: datetime = DEMO_START,
    analyze: bool = True,
    alert: bool = True,
) -> Seeded:
    from analyzer.pipeline import analyze as run_analysis
    from analyzer.sources.store import read_input, write_result
    from fleet.catalog import load_catalog
    from fleet.contract import FindingKind
    from fleet.ingest import catalog_sku_resolver, ingest_file
    from fleet.store import migrate
    from fleet.store.engine import make_engine, writing
    from fleet.store.retention import refresh_rollups
    from fleetsim.scenario import load_scenario
    from fleetsim.source import jsonl_batches
    from fleetsim.truth import compute_truth

    catalog = load_catalog()
    scenario = load_scenario("demo")
    records = folder / "records.jsonl"
    with records.open("wb") as fh:
        for chunk in jsonl_batches(scenario, catalog, seed=0, days=days, window_s=window_s, start=start):
            fh.write(chunk)
    truth = compute_truth(scenario, catalog, 0, days, window_s=window_s, start=start)
    (folder / "truth.json").write_text(json.dumps(truth))
    end = start + timedelta(days=days)
    engine = make_engine(url)
    misplaced: list[str] = []
    try:
        migrate.ensure_schema(engine)
        ingest_file(engine, records, sku_resolver=catalog_sku_resolver(None), jobs=0)
        with writing(engine) as connection:
            refresh_rollups(connection, start, end)
        if analyze:
            with engine.connect() as connection:
                data = read_input(connection, start, end)
            result = run_analysis(data, catalog)
            with writing(engine) as connection:
                write_result(connection, result, now=end)
            misplacement = {FindingKind.DECODE_ON_LOW_BANDWIDTH, FindingKind.PREFILL_ON_HIGH_BANDWIDTH}
            misplaced = sorted(
                {f.worker_id for f in result.findings if f.worker_id and f.kind in misplacement}
            )
        if alert:
            with writing(engine) as connection:
                seed_alerts(connection, start, "node/meta-llama/Llama-3.1-70B-Instruct")
    finally:
        engine.dispose()
    return Seeded(url, truth, start, end, misplaced)


def seed_alerts(connection: Any, start: datetime, pool: str) -> None:
    """Two Alertmanager episodes as the webhook receiver stores them: one firing, one resolved."""
    from fleetsim.alert_episodes import store_alert_episodes

    store_alert_episodes(connection, start, pool)
