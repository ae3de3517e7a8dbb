"""The scenario corpus beyond the simulator's habits: naming styles, clusters and deployments, weak
telemetry, unlabelled and mislabelled workers, idle workers, MIG slices, and the findings each plants."""

from __future__ import annotations

import re

import pytest

from fleet.catalog import Catalog
from fleet.contract import EngineSample, FindingKind, GpuSample, Role, parse_record
from fleetsim.layout import build_layout
from fleetsim.planted import planted_findings
from fleetsim.scenario import builtin_scenarios, load_scenario
from fleetsim.source import jsonl_batches

CORPUS = (
    "eks-inverted", "gke-two-pools", "fqdn-balanced", "tp-mix", "moe", "no-profiling", "unknown-roles",
    "far-below-capacity", "healthy-not-serving", "role-drift", "telemetry-degraded", "kv-fabric", "mig",
)  # fmt: skip
POD = re.compile(r"^[a-z0-9-]+-(prefill|decode|mixed)-[0-9a-f]{10}-[bcdfghjklmnpqrstvwxz2456789]{5}$")
NODE = {
    "eks-inverted": re.compile(r"^ip-10-0-\d{1,3}-\d{1,3}\.ec2\.internal$"),
    "gke-two-pools": re.compile(r"^gke-ml-prod-h[12]00-a3u?-[0-9a-f]{8}-[a-z0-9]{4}$"),
    "fqdn-balanced": re.compile(r"^[a-z]+-r\d+u\d+\.dc\d\.example\.net$"),
}
_RUNS: dict[str, list[GpuSample | EngineSample]] = {}


def _records(name: str, catalog: Catalog, days: float = 2 / 24) -> list[GpuSample | EngineSample]:
    """Two simulated hours at 5-minute windows, every line parsed by the contract (cached per scenario)."""
    if name not in _RUNS:
        lines = b"".join(jsonl_batches(load_scenario(name), catalog, days=days, window_s=300.0)).splitlines()
        _RUNS[name] = [parse_record(line) for line in lines]
    return _RUNS[name]


def _gpus(records: list[GpuSample | EngineSample]) -> list[GpuSample]:
    return [r for r in records if isinstance(r, GpuSample)]


def _engines(records: list[GpuSample | EngineSample]) -> list[EngineSample]:
    return [r for r in records if isinstance(r, EngineSample)]


def _planted(name: str, catalog: Catalog, days: float = 2.0) -> set[tuple[str, str, str | None]]:
    scenario = load_scenario(name)
    found = planted_findings(scenario, build_layout(scenario, catalog), catalog, days=days, window_s=30.0)
    return {(f["kind"], f["pool"], f["worker_id"]) for f in found}


def test_the_corpus_is_built_in_and_described() -> None:
    assert set(CORPUS) <= set(builtin_scenarios())
    for name in CORPUS:
        scenario = load_scenario(name)
        assert scenario.description and scenario.intent
        assert 4 <= sum(g.count for g in scenario.nodes) <= 16


@pytest.mark.parametrize("name", CORPUS)
def test_every_scenario_runs_and_its_records_carry_cluster_and_deployment(
    name: str, catalog: Catalog
) -> None:
    scenario = load_scenario(name)
    records = _records(name, catalog)
    engines, gpus = _engines(records), _gpus(records)
    assert engines and gpus
    pools = {p.deployment_name: p for p in scenario.pools}
    assert {e.deployment for e in engines} == set(pools)
    assert all(e.cluster == pools[e.deployment or ""].cluster for e in engines)
    assert {g.cluster for g in gpus} == {p.cluster for p in scenario.pools}
    # Every engine reports the KV cache it holds (a whole number of tokens), one figure per worker.
    budgets: dict[str, set[int | None]] = {}
    for e in engines:
        budgets.setdefault(e.worker_id, set()).add(e.kv_capacity_tokens)
    assert all(len(b) == 1 and next(iter(b)) is not None for b in budgets.values()), name
    caps = {(e.worker_id, e.max_running_requests) for e in engines}  # and its concurrency cap, one per worker
    assert len(caps) == len(budgets) and all(cap is not None for _, cap in caps), name


@pytest.mark.parametrize("name", sorted(NODE))
def test_naming_styles(name: str, catalog: Catalog) -> None:
    scenario = load_scenario(name)
    layout = build_layout(scenario, catalog)
    assert all(NODE[name].match(n) for n in layout.nodes), layout.nodes
    assert all(POD.match(w.worker_id) for w in layout.workers), [w.worker_id for w in layout.workers]
    assert len(set(layout.nodes)) == len(layout.nodes)
    assert len({w.worker_id for w in layout.workers}) == len(layout.workers)
    again = build_layout(load_scenario(name), catalog)
    assert again.nodes == layout.nodes and [w.worker_id for w in again.workers] == [
        w.worker_id for w in layout.workers
    ]
    records = _records(name, catalog)
    assert {r.node for r in records} <= set(layout.nodes)


def test_default_naming_is_unchanged(catalog: Catalog) -> None:
    layout = build_layout(load_scenario("demo"), catalog)
    assert layout.nodes[3] == "node03" and layout.workers[-1].worker_id == "node07/decode-2"


def test_no_profiling_reports_utilisation_only(catalog: Catalog) -> None:
    gpus = _gpus(_records("no-profiling", catalog))
    assert all(g.source == "dcgm" for g in gpus)
    assert all(g.sm_active is None and g.tensor_active is None and g.dram_active is None for g in gpus)
    assert any(g.gpu_util is not None and g.gpu_util > 0.05 for g in gpus)
    planted = _planted("no-profiling", catalog)
    assert {k for k, _, _ in planted} == {FindingKind.TELEMETRY_DEGRADED.value} and len(planted) == 16


def test_unknown_roles(catalog: Catalog) -> None:
    engines = _engines(_records("unknown-roles", catalog))
    unknown = {e.worker_id for e in engines if e.role is Role.UNKNOWN}
    assert unknown == {f"node01/prefill-{k}" for k in range(1, 5)} | {"node03/decode-1"}
    assert all(e.role_source == "none" for e in engines if e.role is Role.UNKNOWN)
    decode = [e for e in engines if e.worker_id == "node03/decode-1"]
    assert sum(e.generation_tokens for e in decode) > 0  # it really decodes
    assert _planted("unknown-roles", catalog) == set()


def test_healthy_not_serving(catalog: Catalog) -> None:
    engines = [
        e for e in _engines(_records("healthy-not-serving", catalog)) if e.worker_id == "node00/prefill-2"
    ]
    late = [e for e in engines if e.ts.hour >= 1]
    assert late and all(e.prompt_tokens == 0 and e.generation_tokens == 0 for e in late)
    gpus = [g for g in _gpus(_records("healthy-not-serving", catalog)) if g.worker_id == "node00/prefill-2"]
    assert all(g.mem_used_bytes and g.mem_used_bytes > 50e9 for g in gpus if g.ts.hour >= 1)
    assert _planted("healthy-not-serving", catalog) == {
        (FindingKind.HEALTHY_NOT_SERVING.value, "llama-70b", "node00/prefill-2")
    }


def test_role_drift(catalog: Catalog) -> None:
    engines = [e for e in _engines(_records("role-drift", catalog)) if e.worker_id == "node03/decode-1"]
    early = {e.role for e in engines if e.ts.hour == 0 and e.ts.minute <= 30}
    late = [e for e in engines if e.ts.hour >= 1]
    assert early == {Role.DECODE} and {e.role for e in late} == {Role.PREFILL}
    assert all(e.tpot_p50_s is not None for e in late if e.generation_tokens > 0)  # still decoding
    assert _planted("role-drift", catalog) == {(FindingKind.ROLE_DRIFT.value, "llama-70b", "node03/decode-1")}


def test_telemetry_degraded(catalog: Catalog) -> None:
    gpus = _gpus(_records("telemetry-degraded", catalog))
    degraded = [g for g in gpus if g.state == "degraded"]
    assert degraded and {g.node for g in degraded} == {"node02"}
    assert all(g.sm_active is None and g.power_w is None and g.gpu_util is not None for g in degraded)
    assert any(g.state == "lost" and g.node == "node01" and g.gpu_index == 2 for g in gpus)
    planted = _planted("telemetry-degraded", catalog)
    assert {k for k, _, _ in planted} == {FindingKind.TELEMETRY_DEGRADED.value}
    assert {w for _, _, w in planted} == {
        "node01/prefill-2",
        "node02/prefill-1",
        "node02/prefill-2",
        "node02/prefill-3",
        "node02/decode-1",
    }


def test_kv_fabric(catalog: Catalog) -> None:
    scenario = load_scenario("kv-fabric")
    assert scenario.kv_link_gb_s == 1.0 and all(p.kv_link_gb_s == 1.0 for p in scenario.pools)
    assert (FindingKind.KV_FABRIC_UNDERPROVISIONED.value, "llama-70b", None) in _planted("kv-fabric", catalog)


def test_far_below_capacity_and_two_pools(catalog: Catalog) -> None:
    assert _planted("far-below-capacity", catalog) == {
        (FindingKind.UNDERUTILISED_POOL.value, "llama-70b", None)
    }
    assert _planted("gke-two-pools", catalog) == {
        (FindingKind.DISAGGREGATION_NOT_PAYING.value, "llama-8b", None)
    }
    for name in ("fqdn-balanced", "eks-inverted", "tp-mix", "mig", "balanced", "inverted"):
        assert _planted(name, catalog) == set(), name


def test_tp_mix_and_moe(catalog: Catalog) -> None:
    engines = _engines(_records("tp-mix", catalog))
    assert {e.tp for e in engines} == {1, 2, 4, 8}
    assert all(len(e.gpu_uuids) == e.tp for e in engines)
    moe = build_layout(load_scenario("moe"), catalog)
    assert moe.pools[0].model.experts_total == 128
    assert sum(e.generation_tokens for e in _engines(_records("moe", catalog))) > 0


def test_mig_slices(catalog: Catalog) -> None:
    gpus = _gpus(_records("mig", catalog))
    slices = [g for g in gpus if g.mig_profile is not None]
    assert {g.mig_profile for g in slices} == {"3g.40gb"} and len({g.gpu_uuid for g in slices}) == 16
    assert all(g.gpu_name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb" and g.parent_gpu_uuid for g in slices)
    assert all(g.gpu_uuid.startswith("MIG-") and g.power_w is None for g in slices)
    assert catalog.gpus.mig_profile(slices[0].gpu_name) == "3g.40gb"
    assert catalog.gpus.resolve(slices[0].gpu_name).key == "H100-SXM/3g.40gb"
    assert len({g.parent_gpu_uuid for g in slices}) == 8
    assert len({g.gpu_uuid for g in slices if g.worker_id is None}) == 4
    engines = [e for e in _engines(_records("mig", catalog)) if e.deployment == "llama-8b-mig"]
    assert len({e.worker_id for e in engines}) == 12 and sum(e.generation_tokens for e in engines) > 0


def test_planted_entries_have_the_promised_shape(catalog: Catalog) -> None:
    kinds = {k.value for k in FindingKind}
    for name in CORPUS:
        scenario = load_scenario(name)
        for entry in planted_findings(
            scenario, build_layout(scenario, catalog), catalog, days=1.0, window_s=30.0
        ):
            assert set(entry) == {"kind", "pool", "worker_id", "why"}
            assert entry["kind"] in kinds and entry["pool"] in {p.name for p in scenario.pools}
            assert entry["kind"] not in {"pool-ratio-drift", "decode-on-low-bandwidth"}


def test_dict_and_json_paths_agree_on_the_new_fields(catalog: Catalog) -> None:
    from fleetsim.fleet_sim import FleetSimulation
    from fleetsim.records import RecordBuilder, to_records

    for name in ("role-drift", "telemetry-degraded", "mig", "no-profiling"):
        sim = FleetSimulation(load_scenario(name), catalog, window_s=300.0)
        builder = RecordBuilder(sim)
        chunk = next(sim.chunks(sim.windows_in(2 / 24)))
        parsed = [parse_record(line) for line in builder.chunk_jsonl(chunk).splitlines()]
        assert parsed == to_records(builder.chunk_dicts(chunk)), name
