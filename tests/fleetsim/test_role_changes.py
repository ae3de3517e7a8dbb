"""Scheduled role changes: validation, the records of a worker that changes role, and the truth of what a
carried-out change realized (short fleets: a day or two of 1-5 minute windows)."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.catalog import Catalog
from fleet.contract import EngineSample, GpuSample, Role, parse_record
from fleetsim.examine import simulate
from fleetsim.fleet_sim import FleetSimulation
from fleetsim.layout import build_layout
from fleetsim.records import RecordBuilder, to_records
from fleetsim.role_changes import keys_by_worker_id, with_role_changes
from fleetsim.scenario import (
    RoleChangeSpec,
    Scenario,
    ScenarioError,
    builtin_scenarios,
    load_scenario,
    parse_scenario,
    worker_keys,
)
from fleetsim.source import jsonl_batches
from fleetsim.truth import compute_truth

# Two nodes serving long answers: decode is what the H200's memory is for (carried-out.yaml, smaller).
_FLEET = """
name: swap
description: one H100 node and one H200 node, each half prefill and half decode
days: 2
pools:
  - name: llama-70b
    cluster: sim-west
    model: meta-llama/Llama-3.1-70B-Instruct
    max_batch: 1024
    traffic: {{rate_rps: 24, output_scale: 5}}
nodes:
  - {{sku: H100-SXM, pool: llama-70b, workers: {h100}}}
  - {{sku: H200-SXM, pool: llama-70b, workers: {h200}}}
"""
QUIET = "life: {restarts_per_worker_week: 0, collector_gaps_per_node_week: 0}\n"  # no random restarts
INVERTED = {"h100": "{prefill: 2, decode: 2}", "h200": "{prefill: 2, decode: 2}"}
MENDED = {"h100": "{prefill: 4}", "h200": "{decode: 4}"}


def _fleet(workers: dict[str, str], extra: str = "") -> Scenario:
    return parse_scenario(_FLEET.format(**workers) + extra, "swap.yaml")


def _swap(at_hour: float, *pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"worker": w, "to_role": role, "at_hour": at_hour} for w, role in pairs]


MEND = (
    ("node00/decode-1", "prefill"),
    ("node00/decode-2", "prefill"),
    ("node01/prefill-1", "decode"),
    ("node01/prefill-2", "decode"),
)
WORSEN = (
    ("node00/prefill-1", "decode"),
    ("node00/prefill-2", "decode"),
    ("node01/decode-1", "prefill"),
    ("node01/decode-2", "prefill"),
)

# --- validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            [{"worker": "node07/decode-1", "to_role": "prefill", "at_hour": 3}],
            r"changes\[0\]\.worker: no worker",
        ),
        ([{"worker": "node00", "to_role": "prefill", "at_hour": 3}], r"changes\.0\.worker"),
        ([{"worker": "node00/decode-1", "to_role": "mixed", "at_hour": 3}], r"changes\.0\.to_role"),
        (
            [{"worker": "node00/decode-1", "to_role": "decode", "at_hour": 3}],
            r"changes\[0\]\.to_role: .* already",
        ),
        ([{"worker": "node00/decode-1", "to_role": "prefill", "at_hour": 0}], r"changes\.0\.at_hour"),
        ([{"worker": "node00/decode-1", "to_role": "prefill", "at_hour": 48}], r"changes\[0\]\.at_hour: 48"),
        (
            [{"worker": "node00/decode-1", "to_role": "prefill", "at_hour": 3, "restart_minutes": 0}],
            r"changes\.0\.restart_minutes",
        ),
        (
            _swap(3, ("node00/decode-1", "prefill"), ("node00/decode-2", "prefill"))
            + _swap(4, ("node01/decode-1", "prefill"), ("node01/decode-2", "prefill")),
            r"changes\[3\]: leaves pool 'llama-70b' without decode",
        ),
        (
            _swap(3, ("node00/decode-1", "prefill")) + _swap(3.05, ("node00/decode-1", "decode")),
            r"changes\[1\]\.at_hour: .* still restarting",
        ),
    ],
)
def test_bad_changes_name_the_field(changes: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        with_role_changes(_fleet(INVERTED), changes)


def test_changes_in_a_file_are_checked_against_pools_and_labels() -> None:
    colocated = _FLEET.replace("max_batch: 1024", "serving: colocated").format(
        h100="{mixed: 4}", h200="{mixed: 4}"
    )
    with pytest.raises(ScenarioError, match=r"(?s)swap.yaml is invalid.*changes\[0\]\.worker: .* colocated"):
        parse_scenario(
            colocated + "changes: [{worker: node00/mixed-1, to_role: prefill, at_hour: 2}]", "swap.yaml"
        )
    labelled = (
        "labels: [{node: node00, role: decode}]\n"
        "changes: [{worker: node00/decode-1, to_role: prefill, at_hour: 2}]\n"
    )
    with pytest.raises(ScenarioError, match=r"changes\[0\]\.worker: .* role label"):
        _fleet(INVERTED, labelled)


def test_with_role_changes_returns_a_copy_and_leaves_its_input_alone(catalog: Catalog) -> None:
    base = _fleet(INVERTED)
    before = base.model_dump()
    first = with_role_changes(base, [RoleChangeSpec(worker="node00/decode-1", to_role="prefill", at_hour=5)])
    both = with_role_changes(first, _swap(6, ("node01/prefill-1", "decode")))
    assert base.model_dump() == before and base.changes == []
    assert [c.worker for c in first.changes] == ["node00/decode-1"]
    assert [(c.worker, c.at_hour, c.restart_minutes) for c in both.changes] == [
        ("node00/decode-1", 5.0, 5.0),
        ("node01/prefill-1", 6.0, 5.0),
    ]
    assert {k: v for k, v in both.model_dump().items() if k != "changes"} == {
        k: v for k, v in before.items() if k != "changes"
    }
    assert keys_by_worker_id(base, catalog) == {k: k for k in worker_keys(base)}  # nodeNN: ids are keys


def test_worker_keys_are_the_layouts_for_every_built_in(catalog: Catalog) -> None:
    for name in builtin_scenarios():
        scenario = load_scenario(name)
        layout = build_layout(scenario, catalog)
        keys = worker_keys(scenario)
        assert list(keys) == [w.key for w in layout.workers], name
        assert [role for _, role in keys.values()] == [w.role.value for w in layout.workers], name


# --- records -------------------------------------------------------------------------------------------


def _records(scenario: Scenario, catalog: Catalog, days: float, window_s: float) -> list[Any]:
    data = b"".join(jsonl_batches(scenario, catalog, days=days, window_s=window_s))
    return [parse_record(line) for line in data.splitlines()]


def test_records_show_the_change_at_its_time_under_the_same_id(catalog: Catalog) -> None:
    scenario = with_role_changes(_fleet(INVERTED, QUIET), _swap(1.0, ("node00/decode-1", "prefill")))
    records = _records(scenario, catalog, days=2 / 24, window_s=60.0)
    mine = [r for r in records if isinstance(r, EngineSample) and r.worker_id == "node00/decode-1"]
    change = scenario.start.timestamp() + 3600.0
    early = [r for r in mine if r.ts.timestamp() <= change]
    late = [r for r in mine if r.ts.timestamp() > change]
    assert len(early) == 60 and {r.role for r in early} == {Role.DECODE}
    assert all(r.tpot_p50_s is not None for r in early if r.generation_tokens > 0)
    # Down for its 5-minute restart: the windows ending in (change, change + 5 min] send no engine sample.
    ends = sorted(r.ts.timestamp() - change for r in late)
    assert ends[0] == 360.0 and len(late) == 60 - 5
    assert {r.role for r in late} == {Role.PREFILL}
    assert sum(r.prompt_tokens for r in late) > 0 and all(r.tpot_p50_s is None for r in late)  # it prefills
    assert len({tuple(r.gpu_uuids) for r in mine}) == 1  # the same GPUs
    gpus = [r for r in records if isinstance(r, GpuSample) and r.worker_id == "node00/decode-1"]
    assert len(gpus) == 2 * 120  # its GPUs report throughout, idle while it restarts
    restarting = [g for g in gpus if 0 < g.ts.timestamp() - change <= 300]
    assert len(restarting) == 10 and all((g.sm_active or 0) < 0.05 for g in restarting)
    others = {r.role for r in records if isinstance(r, EngineSample) and r.worker_id == "node00/decode-2"}
    assert others == {Role.DECODE}


def test_dict_and_json_paths_agree_across_a_change(catalog: Catalog) -> None:
    scenario = with_role_changes(_fleet(INVERTED), _swap(0.5, *MEND))
    sim = FleetSimulation(scenario, catalog, window_s=300.0)
    builder = RecordBuilder(sim)
    chunk = next(sim.chunks(sim.windows_in(2 / 24)))
    parsed = [parse_record(line) for line in builder.chunk_jsonl(chunk).splitlines()]
    assert parsed == to_records(builder.chunk_dicts(chunk))
    roles = {(r.worker_id, r.role) for r in parsed if isinstance(r, EngineSample)}
    assert ("node01/prefill-1", Role.PREFILL) in roles and ("node01/prefill-1", Role.DECODE) in roles


def test_a_pod_named_worker_keeps_its_name_and_reports_its_new_role(catalog: Catalog) -> None:
    eks = load_scenario("eks-inverted")
    keys = keys_by_worker_id(eks, catalog)
    pod = next(w for w, key in keys.items() if "/decode-" in key)
    assert "-decode-" in pod  # the name carries the role the worker started with
    changed = with_role_changes(eks, _swap(0.5, (keys[pod], "prefill")))
    records = _records(changed, catalog, days=1 / 24, window_s=300.0)
    roles = [r.role for r in records if isinstance(r, EngineSample) and r.worker_id == pod]
    assert roles[0] is Role.DECODE and roles[-1] is Role.PREFILL and set(roles) == {Role.DECODE, Role.PREFILL}


def _replace(at_hour: float, *pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [{**c, "replace_pods": True} for c in _swap(at_hour, *pairs)]


def test_a_replaced_pod_reports_under_a_new_id_on_the_same_gpus(catalog: Catalog) -> None:
    scenario = with_role_changes(_fleet(INVERTED, QUIET), _replace(1.0, ("node00/decode-1", "prefill")))
    layout = build_layout(scenario, catalog)
    assert layout.change_ids == ("node00/prefill-3",)  # node00 runs prefill-1 and prefill-2 already
    assert keys_by_worker_id(scenario, catalog)["node00/prefill-3"] == "node00/decode-1"
    records = _records(scenario, catalog, days=2 / 24, window_s=60.0)
    change = scenario.start.timestamp() + 3600.0
    old = [r for r in records if isinstance(r, EngineSample) and r.worker_id == "node00/decode-1"]
    new = [r for r in records if isinstance(r, EngineSample) and r.worker_id == "node00/prefill-3"]
    assert (
        len(old) == 60
        and all(r.ts.timestamp() <= change for r in old)
        and {r.role for r in old} == {Role.DECODE}
    )
    ends = sorted(r.ts.timestamp() - change for r in new)
    assert ends[0] == 360.0 and len(new) == 60 - 5  # the new pod starts after the 5-minute restart
    assert {r.role for r in new} == {Role.PREFILL} and sum(r.prompt_tokens for r in new) > 0
    assert {tuple(r.gpu_uuids) for r in old} == {tuple(r.gpu_uuids) for r in new}  # the same GPUs
    (gpus,) = {tuple(r.gpu_uuids) for r in old}
    owners = [
        (g.ts.timestamp() > change, g.worker_id)
        for g in records
        if isinstance(g, GpuSample) and g.gpu_uuid in gpus
    ]
    assert len(owners) == 2 * 120  # the GPUs report throughout, their worker id following the pod
    assert {(after, w) for after, w in owners} == {(False, "node00/decode-1"), (True, "node00/prefill-3")}
    others = {r.worker_id for r in records if isinstance(r, EngineSample)} - {"node00/prefill-3"}
    assert others == set(worker_keys(scenario))  # no other worker is renamed


def test_dict_and_json_paths_agree_across_a_replacement(catalog: Catalog) -> None:
    scenario = with_role_changes(_fleet(INVERTED), _replace(0.5, *MEND))
    sim = FleetSimulation(scenario, catalog, window_s=300.0)
    builder = RecordBuilder(sim)
    chunk = next(sim.chunks(sim.windows_in(2 / 24)))
    parsed = [parse_record(line) for line in builder.chunk_jsonl(chunk).splitlines()]
    assert parsed == to_records(builder.chunk_dicts(chunk))
    ids = {(r.worker_id, r.role) for r in parsed if isinstance(r, EngineSample)}
    assert {("node01/prefill-1", Role.PREFILL), ("node01/decode-3", Role.DECODE)} <= ids
    assert ("node01/prefill-1", Role.DECODE) not in ids
    gpu_ids = {r.worker_id for r in parsed if isinstance(r, GpuSample)}
    assert {"node00/prefill-3", "node00/prefill-4", "node01/decode-3", "node01/decode-4"} <= gpu_ids


def test_a_worker_replaced_twice_never_reuses_an_id(catalog: Catalog) -> None:
    changes = _replace(1.0, ("node00/decode-1", "prefill")) + _replace(2.0, ("node00/decode-1", "decode"))
    scenario = with_role_changes(_fleet(INVERTED), changes)
    assert build_layout(scenario, catalog).change_ids == ("node00/prefill-3", "node00/decode-3")
    schedule = FleetSimulation(scenario, catalog, window_s=300.0).schedule
    assert [(s.worker_id, s.new_worker_id) for s in schedule.switches] == [
        ("node00/decode-1", "node00/prefill-3"),
        ("node00/prefill-3", "node00/decode-3"),
    ]
    worker = schedule.switches[0].worker
    windows = (11, 12, 23, 24, 30)  # 5-minute windows: the changes start windows 12 and 24
    assert [schedule.worker_id_in(worker, w, "node00/decode-1") for w in windows] == [
        "node00/decode-1", "node00/prefill-3", "node00/prefill-3", "node00/decode-3", "node00/decode-3",
    ]  # fmt: skip
    in_place = with_role_changes(scenario, _swap(3.0, ("node00/decode-1", "prefill")))
    assert build_layout(in_place, catalog).change_ids == ("node00/prefill-3", "node00/decode-3", None)


def test_a_replaced_pod_takes_a_new_pod_name_of_its_new_role(catalog: Catalog) -> None:
    eks = load_scenario("eks-inverted")
    keys = keys_by_worker_id(eks, catalog)
    pod = next(w for w, key in keys.items() if "/decode-" in key)
    prefill_hash = next(w for w in keys if "-prefill-" in w).split("-")[-2]
    changed = with_role_changes(eks, _replace(0.5, (keys[pod], "prefill")))
    (new,) = set(keys_by_worker_id(changed, catalog)) - set(keys)
    assert new.startswith(f"chat-70b-prefill-{prefill_hash}-") and new not in keys
    assert {w.worker_id for w in build_layout(changed, catalog).workers} == set(keys)  # nobody else renamed
    records = _records(changed, catalog, days=1 / 24, window_s=300.0)
    roles = {
        (r.worker_id, r.role) for r in records if isinstance(r, EngineSample) and r.worker_id in (pod, new)
    }
    assert roles == {(pod, Role.DECODE), (new, Role.PREFILL)}


# --- truth ---------------------------------------------------------------------------------------------


def _truth(scenario: Scenario, catalog: Catalog) -> dict[str, Any]:
    return compute_truth(scenario, catalog, 0, 2.0, window_s=300)


def test_a_swap_that_mends_an_inverted_placement_realizes_a_gain(catalog: Catalog) -> None:
    truth = _truth(with_role_changes(_fleet(INVERTED), _swap(24.0, *MEND)), catalog)
    before, after = truth["segments"]
    assert before["end"] == after["start"] == "2024-06-04T00:00:00Z"
    assert not before["current_is_best"] and after["current_is_best"]
    assert {m["worker_id"] for m in before["misplaced_workers"]} == {w for w, _ in MEND}
    (change,) = truth["changes"]
    assert change["at"] == change["window_start"] == "2024-06-04T00:00:00Z"
    assert [(w["worker_id"], w["from_role"], w["to_role"]) for w in change["workers"]] == [
        ("node00/decode-1", "decode", "prefill"),
        ("node00/decode-2", "decode", "prefill"),
        ("node01/prefill-1", "prefill", "decode"),
        ("node01/prefill-2", "prefill", "decode"),
    ]
    assert change["before_placement"] == before["current_placement"]
    assert (
        change["after_placement"]
        == after["current_placement"]
        == {
            "H100-SXM": {"prefill": 4, "decode": 0},
            "H200-SXM": {"prefill": 0, "decode": 4},
        }
    )
    noise = change["noise_tokens_per_s"]
    assert 0 < noise < 0.2 * change["realized_gain_tokens_per_s"]
    assert change["realized_gain_output_tokens_per_s"] > 0 and change["realized_gain_requests_per_s"] > 0
    assert change["beyond_noise"] and change["after_is_best"] and not change["before_was_best"]
    on_after, on_before = change["by_traffic"]["after"], change["by_traffic"]["before"]
    assert (
        change["primary"] == "after" and change["realized_gain_tokens_per_s"] == on_after["gain_tokens_per_s"]
    )
    assert on_after["after_tokens_per_s"] == after["current_tokens_per_s"]  # the same re-simulation
    assert on_before["before_tokens_per_s"] == before["current_tokens_per_s"]
    assert on_before["gain_tokens_per_s"] == pytest.approx(before["lost_tokens_per_s"], abs=0.2)
    for figures in (on_before, on_after):
        assert figures["after_among_best"] and figures["gain_tokens_per_s"] > figures["noise_tokens_per_s"]
        assert figures["gain_tokens_per_s"] == pytest.approx(
            figures["after_tokens_per_s"] - figures["before_tokens_per_s"], abs=0.2
        )


def test_a_change_by_pod_replacement_names_both_ids_in_the_truth(catalog: Catalog) -> None:
    truth = _truth(with_role_changes(_fleet(INVERTED), _replace(24.0, *MEND)), catalog)
    (change,) = truth["changes"]
    assert [(w["worker_id"], w["new_worker_id"], w["key"]) for w in change["workers"]] == [
        ("node00/decode-1", "node00/prefill-3", "node00/decode-1"),
        ("node00/decode-2", "node00/prefill-4", "node00/decode-2"),
        ("node01/prefill-1", "node01/decode-3", "node01/prefill-1"),
        ("node01/prefill-2", "node01/decode-4", "node01/prefill-2"),
    ]
    in_place = _truth(with_role_changes(_fleet(INVERTED), _swap(24.0, *MEND)), catalog)
    assert {w["new_worker_id"] for w in in_place["changes"][0]["workers"]} == {None}
    same = ("realized_gain_tokens_per_s", "noise_tokens_per_s", "beyond_noise", "after_is_best")
    assert {k: change[k] for k in same} == {k: in_place["changes"][0][k] for k in same}  # only names differ


def test_a_swap_that_inverts_a_good_placement_realizes_a_loss(catalog: Catalog) -> None:
    truth = _truth(with_role_changes(_fleet(MENDED), _swap(24.0, *WORSEN)), catalog)
    before, after = truth["segments"]
    assert before["current_is_best"] and not after["current_is_best"]
    (change,) = truth["changes"]
    assert change["realized_gain_tokens_per_s"] < -change["noise_tokens_per_s"] < 0
    assert change["realized_gain_output_tokens_per_s"] < 0 and change["realized_gain_requests_per_s"] < 0
    assert change["beyond_noise"] and change["before_was_best"] and not change["after_is_best"]
    assert not change["by_traffic"]["before"]["after_among_best"]
    assert after["lost_tokens_per_s"] == pytest.approx(-change["realized_gain_tokens_per_s"], abs=0.2)


def test_a_change_outside_the_run_splits_nothing(catalog: Catalog) -> None:
    scenario = with_role_changes(_fleet(INVERTED), _swap(30.0, *MEND))
    truth = compute_truth(scenario, catalog, 0, 1.0, window_s=300)
    assert truth["changes"] == [] and len(truth["segments"]) == 1
    assert compute_truth(_fleet(INVERTED), catalog, 0, 0.5, window_s=300)["changes"] == []


def test_the_carried_out_scenario(catalog: Catalog) -> None:
    scenario = load_scenario("carried-out")
    assert scenario.intent and {(c.worker, c.to_role, c.at_hour) for c in scenario.changes} == {
        (w, role, 84.0) for w, role in MEND
    }
    truth = compute_truth(scenario, catalog, 0, window_s=300)
    before, after = truth["segments"]
    counts = {(r["sku"], r["from_role"], r["to_role"]): r["count"] for r in before["misplaced_counts"][0]}
    assert len(before["misplaced_counts"]) == 1
    assert counts == {("H100-SXM", "decode", "prefill"): 2, ("H200-SXM", "prefill", "decode"): 2}
    assert after["current_is_best"] and after["misplaced_workers"] == []
    (change,) = truth["changes"]
    assert change["beyond_noise"] and change["after_is_best"]
    assert change["realized_gain_tokens_per_s"] > 0.1 * change["by_traffic"]["after"]["before_tokens_per_s"]


def test_the_examiner_takes_a_changed_scenario_as_it_is(catalog: Catalog) -> None:
    scenario = with_role_changes(_fleet(INVERTED), _swap(2.0, *MEND))
    run = simulate(scenario, catalog, days=4 / 24, window_s=300.0)
    assert run.scenario == "swap" and len(run.truth["changes"]) == 1
    roles = {
        (w, r)
        for w, r in zip(run.engine_columns["worker_id"], run.engine_columns["role"], strict=True)
        if w == "node00/decode-1"
    }
    assert roles == {("node00/decode-1", "decode"), ("node00/decode-1", "prefill")}
