"""Decode steps measured on a peer deployment: a pool that decodes on one SKU only borrows the TPOT another
pool measured on the same deployment on the other SKU, before the model's cross-SKU ratio."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.model.deployment import make_deployment
from analyzer.pipeline import analyze, input_from_samples
from analyzer.pools.peer_decode import DecodePeers, decode_peer_key
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


def test_a_group_borrows_only_other_pools_points_on_the_very_same_deployment() -> None:
    h200_a, h200_b = _group("H200 SXM", (0, 1)), _group("H200 SXM", (4, 5))
    h100_b, h200_tp4 = _group("H100 SXM", (6, 7)), _group("H200 SXM", (8,), tp=4)
    a, b, c = _pool("c/a", h200_a), _pool("c/b", h100_b, h200_b), _pool("c/c", h200_tp4)
    engines = {0: "vllm", 1: "vllm", 4: "vllm", 5: "vllm", 6: "vllm", 7: "vllm", 8: "vllm"}
    peers = DecodePeers.gather(
        [(a, {h200_a.key: _points(5, 0.03)}), (b, {h100_b.key: _points(3, 0.04)})], engines
    )
    names, (batch, _, tpot) = peers.borrowed(b, h200_b) or ((), _points(0, 0.0))
    assert names == ("c/a",) and batch.size == 5 and float(tpot[0]) == 0.03
    assert peers.borrowed(a, h200_a) is None  # its own points are not a peer's
    assert peers.borrowed(c, h200_tp4) is None  # another TP degree steps differently
    assert peers.wanted(b, {h100_b.key: _points(3, 0.04)}) and not peers.wanted(
        a, {h200_a.key: _points(5, 0.03)}
    )
    sglang = {**engines, 4: "sglang", 5: "sglang"}
    assert DecodePeers.gather([(a, {h200_a.key: _points(5, 0.03)})], sglang).borrowed(b, h200_b) is None
    mixed = {**engines, 5: "sglang"}
    assert decode_peer_key(b, h200_b, mixed) is None  # its workers run two engines: no one key


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


def test_a_pool_decoding_on_one_sku_is_calibrated_on_a_peer_deployment_on_the_other() -> None:
    textbook = Fleet(workers([("node00", H100, 4, 0), ("node01", H200, 0, 4)]), rate_rps=lambda hour: 30.0)
    backwards = Fleet(workers([("node00", H100, 0, 4), ("node01", H200, 4, 0)]), rate_rps=lambda hour: 30.0)

    def h200_decode(*parts: tuple[dict[str, Any], dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
        pools = analyze(input_from_samples(*_joined(*parts)), CATALOG).summary["pools"]
        (pool,) = [p for p in pools if p["deployment"] == "backwards"]
        return pool["recommended"]["H200-SXM/tp2"], pool["notes"]

    alone, alone_notes = h200_decode(_columns(backwards, "backwards"))
    assert alone["decode_source"] == "transferred"
    assert not any("calibrated on the TPOT of the same deployment" in n for n in alone_notes)
    peer, notes = h200_decode(_columns(backwards, "backwards"), _columns(textbook, "textbook"))
    assert peer["decode_source"] == "calibrated"
    assert any("calibrated on the TPOT of the same deployment" in n and "textbook" in n for n in notes)
