"""The dashboard's chart builders (validated against the Vega-Lite schema here, since the pages skip that
for speed), the roofline geometry they draw, and the pure steps between reads and pages."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from analyzer.report.fleet_roofline import intensity_span, roofs_for, worker_point
from dashboard import charts, compute, roofline_chart
from dashboard.lost import lost_from_episodes
from dashboard.store_source import StoreSource
from dashboard.views import FindingView, Scope, TrafficPoint
from fleet.catalog import load_catalog
from fleet.precision import Precision
from fleet.store.engine import make_engine
from fleet.store.stored_summary import StoredPool
from tests.dashboard.seed import Seeded

T0 = datetime(2026, 11, 23, tzinfo=UTC)


@pytest.fixture(scope="module")
def source(seeded: Seeded) -> Iterator[StoreSource]:
    engine = make_engine(seeded.url)
    yield StoreSource(engine)
    engine.dispose()


def test_every_chart_is_valid_vega_lite(source: StoreSource, seeded: Seeded) -> None:
    scope = Scope(seeded.start, seeded.end + timedelta(hours=1))
    inventory = source.inventory()
    findings = source.findings(scope)
    view = compute.roofline_view(
        inventory.workers, source.worker_activity(scope, None), findings, load_catalog()
    )
    analysis = source.analysis(scope)
    assert analysis is not None
    pool = analysis.pools[0]
    assert pool.pool is not None
    traffic = source.traffic(scope, {pool.pool: [w.record.worker_id for w in inventory.workers]})
    rows, changes = compute.ratio_series(traffic, pool)
    utilisation = source.utilisation(scope, None)
    built = [
        charts.gpu_groups(inventory.groups),
        charts.utilisation(utilisation, "tensor_active", "tensor"),
        charts.lost_tokens(source.lost_tokens(scope)),
        roofline_chart.roofline(view.roofs, view.points),
        roofline_chart.speed_of_light(view.points),
        charts.traffic_mix(traffic),
        charts.ratio_over_time(rows, changes),
        charts.alert_timeline(source.alerts(scope), scope.since, scope.until),
    ]
    for chart in built:
        spec = chart.to_dict(validate=True)  # raises on a spec Vega-Lite would reject
        assert spec["$schema"].endswith(".json")


def test_roofline_geometry() -> None:
    catalog = load_catalog()
    h100, h200 = catalog.gpus.get("H100-SXM"), catalog.gpus.get("H200-SXM")
    roofs = roofs_for(catalog, [("H100-SXM", Precision.BF16), ("H200-SXM", Precision.BF16)])
    assert [r.sku for r in roofs] == ["H200-SXM", "H100-SXM"]  # highest bandwidth first
    assert roofs[1].ridge == pytest.approx(295, rel=0.01) and roofs[0].ridge == pytest.approx(206, rel=0.01)
    decode = worker_point(
        worker_id="d",
        pool="p",
        sku=h100,
        role="decode",
        precision=Precision.BF16,
        tensor_active=0.1,
        dram_active=0.6,
    )
    prefill = worker_point(
        worker_id="p",
        pool="p",
        sku=h200,
        role="prefill",
        precision=Precision.BF16,
        tensor_active=0.7,
        dram_active=0.05,
    )
    assert decode is not None and prefill is not None
    assert decode.bound == "memory" and prefill.bound == "compute"
    assert decode.share_of_roof == pytest.approx(0.6) and prefill.share_of_roof == pytest.approx(0.7)
    assert decode.gain_on(roofs[0]) == pytest.approx(4.8 / 3.35, rel=1e-3)  # H200's slope over H100's
    assert prefill.gain_on(roofs[1]) == pytest.approx(1.0)  # same compute roof: a move gains nothing
    lo, hi = intensity_span([decode, prefill], roofs)
    assert lo <= decode.intensity and hi >= prefill.intensity and hi / lo >= 100
    assert (
        worker_point(
            worker_id="x",
            pool="p",
            sku=h100,
            role="decode",
            precision=Precision.BF16,
            tensor_active=0.2,
            dram_active=None,
        )
        is None
    )


def _finding(subject: str, lost: float, start: float, end: float) -> FindingView:
    return FindingView(
        id=1,
        kind="decode-on-low-bandwidth",
        status="open",
        severity="warning",
        worker_id=subject,
        pool="c/m",
        gpu_sku="H100-SXM",
        role="decode",
        bottleneck="memory-bandwidth",
        evidence={},
        tokens_per_s=None,
        lost_tokens_per_s=lost,
        lost_tokens_per_s_low=lost / 2,
        lost_tokens_per_s_high=lost * 2,
        action=None,
        action_detail="",
        counterpart_worker_id=None,
        target_sku=None,
        expected_gain_tokens_per_s=None,
        first_seen=T0 + timedelta(hours=start),
        last_seen=T0 + timedelta(hours=end),
        resolved_at=None,
    )


def test_lost_tokens_from_overlapping_findings() -> None:
    findings = [_finding("w1", 100, 0, 2.5), _finding("w1", 300, 1, 1.5), _finding("w2", 50, 2, 3)]
    points = lost_from_episodes(findings, T0, T0 + timedelta(hours=5), 3600)
    assert [p.lost for p in points] == [100, 300, 150, 50, None]  # per subject the largest, subjects added
    assert points[2].low == 75 and points[2].high == 300


def test_ratio_series() -> None:
    stored = {
        "recommended": {
            "H100-SXM/tp2": {
                "prefill_now": 3,
                "decode_now": 1,
                "prefill_tokens_per_s_per_worker": 10_000,
                "decode_tokens_per_s_per_worker": 2_000,
            }
        },
        "segments": [
            {
                "start": "2026-11-23T00:00:00Z",
                "end": "2026-11-23T02:00:00Z",
                "best_placement": {"H100-SXM": {"prefill": 3, "decode": 1}},
            }
        ],
        "drift_events": [{"start": "2026-11-23T01:00:00Z", "description": "longer prompts"}],
    }
    traffic = [TrafficPoint(T0, "c/m", 30_000, 2_000, 3, 1, 0)]
    rows, changes = compute.ratio_series(traffic, StoredPool.model_validate(stored))
    by_series = {r["series"]: r["value"] for r in rows}
    assert by_series["provisioned"] == 3 and by_series["recommended (analyzer)"] == 3
    assert by_series["traffic needs"] == pytest.approx(3.0)  # 3 prefill workers' worth against 1 decode
    assert changes == [{"ts": "2026-11-23T01:00:00+00:00", "what": "longer prompts"}]


def test_a_finding_that_states_no_loss_adds_nothing_and_sorts_last() -> None:
    """A telemetry-degraded finding carries a null total: the lost series skips it (never a 0 point, never a
    crash) and the findings table ranks it after every stated loss, its total shown as unknown."""
    from dataclasses import replace

    stated = _finding("w1", 100, 0, 2)
    unknown = replace(
        _finding("w2", 0, 0, 2),
        kind="telemetry-degraded",
        lost_tokens_per_s=None,
        lost_tokens_per_s_low=None,
        lost_tokens_per_s_high=None,
    )
    points = lost_from_episodes([unknown], T0, T0 + timedelta(hours=2), 3600)
    assert all(p.lost is None for p in points)
    both = lost_from_episodes([unknown, stated], T0, T0 + timedelta(hours=2), 3600)
    assert [p.lost for p in both] == [100, 100]
    rows = compute.finding_rows([unknown, stated])
    assert [r["worker"] for r in rows] == ["w1", "w2"]
    assert compute.total_lost(unknown) is None
