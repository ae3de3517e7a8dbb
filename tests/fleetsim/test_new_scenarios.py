"""The built-in scenarios of overload, light load, pod replacement, seed agreement, large models, utilisation
-only telemetry and diurnal prompt drift: each loads, simulates, and its ground truth matches its intent.

Each check runs a short span at 60 s windows (a day, or two where the scenario's event lies past the first
day), so every test takes seconds."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from datetime import datetime
from typing import Any

import numpy as np
import pytest

from fleet.catalog import Catalog
from fleetsim.fleet_sim import FleetSimulation
from fleetsim.layout import build_layout
from fleetsim.role_changes import keys_by_worker_id
from fleetsim.scenario import Scenario, load_scenario
from fleetsim.source import dict_batches
from fleetsim.truth import compute_truth

NEW = (
    "over-demand",
    "misplaced-quarter-load",
    "pod-replacement",
    "seed-twins",
    "llama-405b-tp8",
    "qwen3-moe-ep8",
    "utilisation-only-misplaced",
    "diurnal-prompt-shift",
)
WINDOW_S = 60


def _truth(name: str, catalog: Catalog, days: float = 1.0, seed: int = 0) -> dict[str, Any]:
    return compute_truth(load_scenario(name), catalog, seed, days, window_s=WINDOW_S)


def _records(scenario: Scenario, catalog: Catalog, days: float, kind: str) -> list[dict[str, Any]]:
    batches = dict_batches(scenario, catalog, days=days, window_s=WINDOW_S)
    return [r for batch in batches for r in batch if r["kind"] == kind]


def _counts(segment: dict[str, Any]) -> list[set[tuple[str, str, str, str, int]]]:
    """Each equivalent best's moves as a set of (sku, from, to, kind, count)."""
    return [
        {(r["sku"], r["from_role"], r["to_role"], r["kind"], r["count"]) for r in option}
        for option in segment["misplaced_counts"]
    ]


@pytest.mark.parametrize("name", NEW)
def test_each_new_scenario_is_a_short_described_built_in(name: str, catalog: Catalog) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name and scenario.description and scenario.intent
    assert scenario.window_s in (30, 60) and 2.0 <= scenario.days <= 3.0
    build_layout(scenario, catalog)


def test_over_demand_saturates_and_pins_decode_at_its_batch_cap(catalog: Catalog) -> None:
    scenario = load_scenario("over-demand")
    truth = _truth("over-demand", catalog)
    (seg,) = truth["segments"]
    assert not truth["demand_limited"] and not seg["demand_limited"]
    assert seg["saturated_share"] > 0.95 and seg["utilisation"] > 0.97
    assert seg["current_is_best"] and truth["misplaced_workers"] == []
    assert 1.1 < seg["offered_tokens_per_s"] / seg["current_tokens_per_s"] < 1.3
    # What the pool sustains, from the simulator's per-window capacities: the slower stage, in requests.
    sim = FleetSimulation(scenario, catalog, 0, window_s=WINDOW_S)
    model, windows = sim.models[0], sim.windows_in(1.0)
    chunk = sim.pool_chunk(0, 0, 0, windows)
    roles = np.array([sim.layout.workers[w].role.value for w in model.pool.workers])
    mix = chunk.traffic.mix
    prefill = chunk.capacities.prefill[:, roles == "prefill"].sum(axis=1) / mix.mean_prompt
    decode = chunk.capacities.decode[:, roles == "decode"].sum(axis=1) / mix.mean_output
    assert np.mean(decode < prefill) > 0.95  # decode binds
    sustained = float(np.mean(np.minimum(prefill, decode) * (mix.mean_prompt + mix.mean_output)))
    assert sustained == pytest.approx(seg["current_tokens_per_s"], rel=0.03)
    assert 1.1 < seg["offered_tokens_per_s"] / sustained < 1.3
    # The records: decode engines at the 128 cap, their queues growing.
    decode_samples = [r for r in _records(scenario, catalog, 0.5, "engine_sample") if r["role"] == "decode"]
    assert np.mean([r["requests_running"] == scenario.pools[0].max_batch for r in decode_samples]) > 0.98
    waiting: dict[str, list[int]] = defaultdict(list)
    for r in decode_samples:
        waiting[r["worker_id"]].append(r["requests_waiting"])
    for series in waiting.values():
        hours = np.array_split(np.array(series, dtype=float), 12)
        means = [h.mean() for h in hours]
        assert all(b > a for a, b in itertools.pairwise(means)) and means[-1] > 1000


def test_misplaced_quarter_load_is_demand_limited_and_still_misplaced(catalog: Catalog) -> None:
    truth = _truth("misplaced-quarter-load", catalog)
    (seg,) = truth["segments"]
    assert truth["demand_limited"] and 0.2 < seg["utilisation"] < 0.3
    assert not seg["current_is_best"] and truth["lost_output_tokens_per_s"] > 0
    assert seg["lost_tokens_per_s"] > 10 * seg["noise_tokens_per_s"]
    kinds = {(m["sku"], m["role"], m["kind"]) for m in truth["misplaced_workers"]}
    assert kinds == {
        ("H100-SXM", "decode", "decode-on-low-bandwidth"),
        ("H200-SXM", "prefill", "prefill-on-high-bandwidth"),
    }


_POD = re.compile(r"^chat-70b-(prefill|decode)-[0-9a-f]{10}-[bcdfghjklmnpqrstvwxz2456789]{5}$")


def test_pod_replacement_renames_the_swapped_workers_on_the_same_gpus(catalog: Catalog) -> None:
    scenario = load_scenario("pod-replacement")
    assert scenario.naming == "gke" and all(c.replace_pods for c in scenario.changes)
    layout = build_layout(scenario, catalog)
    to_role = {c.worker: c.to_role for c in scenario.changes}
    old = {w.key: w.worker_id for w in layout.workers if w.key in to_role}
    new = {c.worker: pod for c, pod in zip(scenario.changes, layout.change_ids, strict=True) if pod}
    assert new.keys() == old.keys() == to_role.keys()
    assert keys_by_worker_id(scenario, catalog).items() >= {(pod, key) for key, pod in new.items()}
    hashes = {
        role: {w.worker_id.split("-")[-2] for w in layout.workers if w.role.value == role}
        for role in to_role.values()
    }
    for key, pod in new.items():
        role = to_role[key]
        assert _POD.match(pod) and pod != old[key] and f"-{role}-" in pod
        assert pod.split("-")[-2] in hashes[role]  # the template hash of the new role's pods
    truth = _truth("pod-replacement", catalog, days=2.0)
    (change,) = truth["changes"]
    assert {(w["worker_id"], w["new_worker_id"]) for w in change["workers"]} == {
        (old[k], new[k]) for k in old
    }
    assert change["beyond_noise"] and change["after_is_best"] and not change["before_was_best"]
    before, after = truth["segments"]
    assert {m["worker_id"] for m in before["misplaced_workers"]} == set(old.values())
    assert after["current_is_best"]
    # The records around the change (hour 36): the old ids until it, the new ones after, on the same GPUs.
    at = scenario.start.timestamp() + 36 * 3600.0
    owners: dict[str, set[str | None]] = defaultdict(set)  # GPU -> ids, after the change
    for g in _records(scenario, catalog, 1.6, "gpu_sample"):
        if _epoch(g["ts"]) > at:
            owners[g["gpu_uuid"]].add(g["worker_id"])
    gpus_of: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for r in _records(scenario, catalog, 1.6, "engine_sample"):
        gpus_of[r["worker_id"]].add(tuple(r["gpu_uuids"]))
        if r["worker_id"] in old.values():
            assert _epoch(r["ts"]) <= at
    for key, pod in new.items():
        (gpus,) = gpus_of[old[key]]
        assert gpus_of[pod] == {gpus} and all(owners[g] == {pod} for g in gpus)


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def test_seed_twins_agree_under_seeds_0_and_1(catalog: Catalog) -> None:
    assert "seeds 0 and 1" in load_scenario("seed-twins").intent
    truths = [_truth("seed-twins", catalog, seed=seed) for seed in (0, 1)]
    for truth in truths:
        (seg,) = truth["segments"]
        assert not seg["current_is_best"] and seg["lost_tokens_per_s"] > 20 * seg["noise_tokens_per_s"]
    assert (
        _counts(truths[0]["segments"][0])
        == _counts(truths[1]["segments"][0])
        == [
            {
                ("H100-SXM", "decode", "prefill", "decode-on-low-bandwidth", 2),
                ("H200-SXM", "prefill", "decode", "prefill-on-high-bandwidth", 2),
            }
        ]
    )
    ids = [{(m["worker_id"], m["kind"]) for m in t["misplaced_workers"]} for t in truths]
    assert ids[0] == ids[1] and len(ids[0]) == 4


def test_llama_405b_tp8_runs_one_worker_per_node_and_is_placed_backwards(catalog: Catalog) -> None:
    scenario = load_scenario("llama-405b-tp8")
    layout = build_layout(scenario, catalog)
    assert layout.pools[0].model.key == "llama-3.1-405b"
    assert len(layout.workers) == len(layout.nodes) == 6 and {len(w.gpus) for w in layout.workers} == {8}
    truth = _truth("llama-405b-tp8", catalog)
    (seg,) = truth["segments"]
    assert truth["demand_limited"] and seg["lost_tokens_per_s"] > 10 * seg["noise_tokens_per_s"]
    assert _counts(seg) == [
        {
            ("H100-SXM", "decode", "prefill", "decode-on-low-bandwidth", 3),
            ("H200-SXM", "prefill", "decode", "prefill-on-high-bandwidth", 3),
        }
    ]


def test_qwen3_moe_ep8_is_expert_parallel_and_correctly_placed(catalog: Catalog) -> None:
    scenario = load_scenario("qwen3-moe-ep8")
    layout = build_layout(scenario, catalog)
    assert scenario.pools[0].ep == 8 and scenario.pools[0].tp == 8
    assert layout.pools[0].model.experts_total == 128
    assert {layout.hardware(w).ep for w in layout.workers} == {8}
    truth = _truth("qwen3-moe-ep8", catalog)
    (seg,) = truth["segments"]
    assert seg["current_is_best"] and truth["misplaced_workers"] == [] and truth["lost_tokens_per_s"] == 0
    assert truth["demand_limited"] and 0.3 < seg["utilisation"] < 0.8


def test_utilisation_only_misplaced_reports_no_profiling_and_is_misplaced(catalog: Catalog) -> None:
    scenario = load_scenario("utilisation-only-misplaced")
    gpus = _records(scenario, catalog, 2 / 24, "gpu_sample")
    assert gpus and {g["source"] for g in gpus} == {"dcgm"}
    assert all(
        g["sm_active"] is None and g["tensor_active"] is None and g["dram_active"] is None for g in gpus
    )
    assert all(g["gpu_util"] is not None for g in gpus if g["state"] == "ok")
    truth = _truth("utilisation-only-misplaced", catalog)
    (seg,) = truth["segments"]
    assert not seg["current_is_best"] and seg["lost_tokens_per_s"] > 10 * seg["noise_tokens_per_s"]
    for option in seg["misplaced_counts"]:
        moves = {(r["sku"], r["from_role"], r["kind"]): r["count"] for r in option}
        assert moves.keys() == {
            ("H100-SXM", "decode", "decode-on-low-bandwidth"),
            ("H200-SXM", "prefill", "prefill-on-high-bandwidth"),
        }
        assert moves[("H100-SXM", "decode", "decode-on-low-bandwidth")] >= 3


def test_diurnal_prompt_shift_has_nothing_misplaced_across_the_drift(catalog: Catalog) -> None:
    scenario = load_scenario("diurnal-prompt-shift")
    assert {p.traffic.diurnal_amplitude for p in scenario.pools} == {0.8}
    truth = _truth("diurnal-prompt-shift", catalog, days=2.0)
    assert len(truth["drift_events"]) == 2 and truth["misplaced_workers"] == []
    assert truth["demand_limited"] and truth["lost_tokens_per_s"] == 0
    by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for seg in truth["segments"]:
        assert seg["current_is_best"], (seg["pool"], seg["start"])
        by_pool[seg["pool"]].append(seg)
    for segments in by_pool.values():
        assert len(segments) == 3  # before, during and after the drift
        first, last = segments[0], segments[-1]
        assert last["mean_prompt_tokens"] > 1.1 * first["mean_prompt_tokens"]
