"""A worker moved to GPUs of another model mid-range: found in the bucket rows and judged apart."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.moves import gpu_moves
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, Worker

CATALOG = load_catalog()
HOURS = 24.0
MOVED = (
    "node00/decode-1",
    "node01/prefill-1",
)  # they trade GPUs: decode onto the H200, prefill onto the H100


def _fleet(swapped: bool) -> Fleet:
    def gpu(worker: str, home: str) -> str:
        other = H200 if home == H100 else H100
        return other if swapped and worker in MOVED else home

    workers = [
        Worker("node00/decode-1", gpu("node00/decode-1", H100), "decode"),
        Worker("node00/decode-2", H100, "decode"),
        Worker("node01/prefill-1", gpu("node01/prefill-1", H200), "prefill"),
        Worker("node01/prefill-2", H200, "prefill"),
    ]
    return Fleet(workers, hours=HOURS, rate_rps=lambda h: 30.0)


def _columns() -> tuple[dict[str, Any], dict[str, Any]]:
    """A day on the first GPUs, then a day after the two workers traded GPUs (new UUIDs)."""
    (g0, e0), (g1, e1) = _fleet(False).columns(), _fleet(True).columns()
    shift = HOURS * 3600.0

    def renamed(uuid: str) -> str:
        return f"{uuid}-moved" if any(uuid.startswith(f"GPU-{w.replace('/', '-')}-") for w in MOVED) else uuid

    g1 = {**g1, "ts": list(np.asarray(g1["ts"]) + shift), "gpu_uuid": [renamed(u) for u in g1["gpu_uuid"]]}
    e1 = {
        **e1,
        "ts": list(np.asarray(e1["ts"]) + shift),
        "gpu_uuids": [[renamed(u) for u in uuids] for uuids in e1["gpu_uuids"]],
    }
    gpu = {k: list(g0[k]) + list(g1[k]) for k in g0}
    engine = {k: list(e0[k]) + list(e1[k]) for k in e0}
    return gpu, engine


def test_the_bucket_rows_show_who_moved_and_when() -> None:
    gpu, engine = _columns()
    data = input_from_samples(gpu, engine)
    moves = gpu_moves(data.gpu_buckets, data.inventory.worker_ids)
    assert [m.worker_id for m in moves] == sorted(MOVED)
    assert {m.at for m in moves} == {min(gpu["ts"]) - 3600.0 + HOURS * 3600.0} or len(
        {m.at for m in moves}
    ) == 1
    assert all(
        set(m.before).isdisjoint(m.after) and all(u.endswith("-moved") for u in m.after) for m in moves
    )


def test_a_move_across_gpu_models_is_judged_like_a_role_change() -> None:
    result = analyze(input_from_samples(*_columns()), CATALOG)
    (pool,) = result.typed_summary.pools
    moved = [c for c in pool.changes if any(m.from_sku for m in c.moved)]
    assert len(moved) == 1, [c.model_dump() for c in pool.changes]
    (change,) = moved
    assert {(m.worker_id, m.from_sku, m.to_sku) for m in change.moved} == {
        ("node00/decode-1", "H100-SXM", "H200-SXM"),
        ("node01/prefill-1", "H200-SXM", "H100-SXM"),
    }
    assert all(m.from_role == m.to_role for m in change.moved)  # the roles stayed; the GPUs changed
    assert change.verdict != "not comparable" and change.predicted_tokens_per_s is not None
    # The synthetic pool serves a constant demand with room to spare on both sides: what the move realized
    # cannot be measured (it would be the model's own figure), so it waits.
    assert change.verdict == "not measurable yet" and change.realized_tokens_per_s is None
    assert "served all its demand after" in change.reason
