"""Evidence measured on a peer deployment: a pool that decodes on one SKU only borrows the TPOT another pool
measured on the same deployment on the other SKU, before the model's cross-SKU ratio; one whose prefill never
queued borrows the factor a peer's saturated prefill workers showed, before the model's figure."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from analyzer.model.deployment import make_deployment
from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.peer_evidence import PeerEvidence, PoolEvidence, deployment_key
from analyzer.pools.pool import Pool, SkuGroup
from fleet.catalog import load_catalog
from tests.analyzer.synthetic import H100, H200, Fleet, workers

CATALOG = load_catalog()


def _group(gpu: str, rows: tuple[int, ...], tp: int = 2) -> SkuGroup:
    d = make_deployment(CATALOG, model="llama-3.1-70b", gpu=gpu, precision="fp8", tp=tp)
    return SkuGroup(d.gpu, tp, rows, d)


def _pool(key: str, *groups: SkuGroup) -> Pool:
    d = groups[0].deployment
    assert d is not None
    rows = tuple(r for g in groups for r in g.members)
    return Pool(key, "c", "meta-llama/Llama-3.1-70B-Instruct", d.model, d.precision, rows, groups, ())


def _points(n: int, tpot: float) -> tuple[Any, Any, Any]:
    return (np.full(n, 64.0), np.full(n, 1500.0), np.full(n, tpot))


def _decode_only(group: SkuGroup, points: tuple[Any, Any, Any]) -> PoolEvidence:
    return PoolEvidence({group.key: points}, {})


def test_a_group_borrows_only_other_pools_evidence_on_the_very_same_deployment() -> None:
    h200_a, h200_b = _group("H200 SXM", (0, 1)), _group("H200 SXM", (4, 5))
    h100_b, h200_tp4 = _group("H100 SXM", (6, 7)), _group("H200 SXM", (8,), tp=4)
    a, b, c = _pool("c/a", h200_a), _pool("c/b", h100_b, h200_b), _pool("c/c", h200_tp4)
    engines = {0: "vllm", 1: "vllm", 4: "vllm", 5: "vllm", 6: "vllm", 7: "vllm", 8: "vllm"}
    own_a = PoolEvidence({h200_a.key: _points(5, 0.03)}, {h200_a.key: 0.8})
    own_b = _decode_only(h100_b, _points(3, 0.04))
    peers = PeerEvidence.gather([(a, own_a), (b, own_b)], engines)
    names, (batch, _, tpot) = peers.borrowed_decode(b, h200_b) or ((), _points(0, 0.0))
    assert names == ("c/a",) and batch.size == 5 and float(tpot[0]) == 0.03
    assert peers.borrowed_prefill(b, h200_b) == (("c/a",), 0.8)
    assert peers.borrowed_decode(a, h200_a) is None  # its own points are not a peer's
    assert peers.borrowed_prefill(a, h200_a) is None
    assert peers.borrowed_decode(c, h200_tp4) is None  # another TP degree steps differently
    assert peers.wanted(b, own_b) and not peers.wanted(a, own_a)
    sglang = {**engines, 4: "sglang", 5: "sglang"}
    assert PeerEvidence.gather([(a, own_a)], sglang).borrowed_decode(b, h200_b) is None
    mixed = {**engines, 5: "sglang"}
    assert deployment_key(b, h200_b, mixed) is None  # its workers run two engines: no one key


def _columns(fleet: Fleet, deployment: str) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu, engine = fleet.columns()
    prefix = deployment + "-"
    gpu["worker_id"] = [prefix + w for w in gpu["worker_id"]]
    gpu["gpu_uuid"] = [prefix + u for u in gpu["gpu_uuid"]]
    gpu["node"] = [prefix + n for n in gpu["node"]]
    engine["worker_id"] = [prefix + w for w in engine["worker_id"]]
    engine["gpu_uuids"] = [[prefix + u for u in uuids] for uuids in engine["gpu_uuids"]]
    engine["node"] = [prefix + n for n in engine["node"]]
    engine["deployment"] = [deployment] * len(engine["worker_id"])
    return gpu, engine


def _joined(*parts: tuple[dict[str, Any], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    gpu = {k: [v for p in parts for v in p[0][k]] for k in parts[0][0]}
    engine = {k: [v for p in parts for v in p[1][k]] for k in parts[0][1]}
    return gpu, engine


def _recommended(
    deployment: str, group: str, *parts: tuple[dict[str, Any], dict[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """``group``'s recommended block and the notes of ``deployment``'s pool, ``parts`` analysed together."""
    pools = analyze(input_from_samples(*_joined(*parts)), CATALOG).summary["pools"]
    (pool,) = [p for p in pools if p["deployment"] == deployment]
    return pool["recommended"][group], pool["notes"]


def test_a_pool_decoding_on_one_sku_is_calibrated_on_a_peer_deployment_on_the_other() -> None:
    textbook = Fleet(workers([("node00", H100, 4, 0), ("node01", H200, 0, 4)]), rate_rps=lambda hour: 30.0)
    backwards = Fleet(workers([("node00", H100, 0, 4), ("node01", H200, 4, 0)]), rate_rps=lambda hour: 30.0)

    alone, alone_notes = _recommended("backwards", "H200-SXM/tp2", _columns(backwards, "backwards"))
    assert alone["decode_source"] == "transferred"
    assert not any("calibrated on the TPOT of the same deployment" in n for n in alone_notes)
    both = (_columns(backwards, "backwards"), _columns(textbook, "textbook"))
    peer, notes = _recommended("backwards", "H200-SXM/tp2", *both)
    assert peer["decode_source"] == "calibrated"
    assert any("calibrated on the TPOT of the same deployment" in n and "textbook" in n for n in notes)


def test_a_pool_whose_prefill_never_queued_takes_the_factor_a_peer_saw_saturated() -> None:
    """Both deployments' prefill workers run at 6,000 prompt tokens per busy second, about half the model's.
    The quiet one alone keeps the model's figure (its speed is only a floor); beside the busy one, whose
    prefill queued at its limit, it takes the busy one's measured factor."""
    spec = workers([("node00", H100, 2, 0), ("node01", H200, 0, 2)])
    busy = Fleet(spec, rate_rps=lambda hour: 8.5, prefill_speed=6_000.0, prefill_waiting=3.0)
    quiet = Fleet(spec, rate_rps=lambda hour: 3.0, prefill_speed=6_000.0)

    alone, _ = _recommended("quiet", "H100-SXM/tp2", _columns(quiet, "quiet"))
    assert alone["prefill_source"] == "calibrated"
    assert alone["prefill_tokens_per_s_per_worker"] > 1.5 * 6_000.0
    peer, notes = _recommended("quiet", "H100-SXM/tp2", _columns(quiet, "quiet"), _columns(busy, "busy"))
    assert peer["prefill_source"] == "calibrated"
    assert peer["prefill_tokens_per_s_per_worker"] == pytest.approx(6_000.0, rel=0.05)
    assert any(
        n.startswith("prefill on 2 x H100 SXM calibrated on the prefill speed seen saturated") for n in notes
    )
