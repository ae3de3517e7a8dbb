"""Zero-agent pools: cluster and deployment from the series' labels (or the server's external label), two
clusters' workers of one model in two pools, and a note for each label that is missing."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from analyzer.pools.pool import build_pools
from analyzer.settings import AnalyzerSettings
from analyzer.sources.prometheus.client import read_fleet
from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.inventory import inventory
from analyzer.sources.prometheus.labels import resolve_deployment
from analyzer.sources.prometheus.source import map_fleet
from fleet.catalog import load_catalog
from tests.analyzer.prometheus_fixtures import H200_UUID
from tests.analyzer.sources.prometheus.test_client import URL, ScriptedPrometheus, Series, constant
from tests.analyzer.sources.prometheus.test_source import (
    DECODE,
    GRID,
    H100_UUID,
    PREFILL,
    Answers,
    answers_to_results,
    two_node_answers,
)

MODEL = "Qwen/Qwen3-0.6B"  # what both real captures serve


def relabel(answers: Answers, extra: Mapping[str, Mapping[str, str]]) -> Answers:
    """Add labels to every series of the pod (``exported_pod`` or ``pod``) named in ``extra``."""
    out: Answers = {}
    for name, series in answers.items():
        out[name] = []
        for labels, pts in series:
            pod = labels.get("exported_pod") or labels.get("pod") or ""
            out[name].append(({**labels, **extra.get(pod, {})}, pts))
    return out


def read(answers: Answers, **options: object) -> PrometheusFleet:
    return map_fleet(answers_to_results(answers), GRID, gpu_catalog=load_catalog().gpus, **options)  # type: ignore[arg-type]


def pools_of(fleet: PrometheusFleet) -> list[str]:
    inv = inventory(fleet)
    rows = {w: i for i, w in enumerate(inv.worker_ids)}
    return [pool.key for pool in build_pools(inv, rows, load_catalog())]


TWO_CLUSTERS = {"llama-decode-0": {"cluster": "east"}, "llama-prefill-0": {"cluster": "west"}}


def test_two_clusters_workers_of_one_model_form_two_pools() -> None:
    fleet = read(relabel(two_node_answers(), TWO_CLUSTERS))
    by_id = {w.worker_id: w for w in fleet.workers}
    assert (by_id[DECODE].cluster, by_id[PREFILL].cluster) == ("east", "west")
    assert {g.gpu_uuid: g.cluster for g in fleet.gpus if g.worker_id} == {
        H100_UUID: "east",
        H200_UUID: "west",
    }
    inv = inventory(fleet)
    assert {w.worker_id: w.cluster for w in inv.workers} == {DECODE: "east", PREFILL: "west"}
    assert {g.gpu_uuid: g.cluster for g in inv.gpus if g.worker_id} == {H100_UUID: "east", H200_UUID: "west"}
    assert pools_of(fleet) == [f"east/{MODEL}", f"west/{MODEL}"]
    assert not any("'cluster' label" in note for note in fleet.notes)


def test_without_a_cluster_label_one_pool_and_a_note_that_says_so() -> None:
    fleet = read(two_node_answers())
    assert all(w.cluster is None for w in fleet.workers)
    assert pools_of(fleet) == [f"default/{MODEL}"]
    [note] = [n for n in fleet.notes if "'cluster' label" in n]
    assert "every worker is in one cluster" in note
    [note] = [n for n in fleet.notes if "deployment label" in n]
    assert note.startswith("2 worker(s) without a deployment label ('nvidia.com/dynamo-namespace'")


def test_some_workers_without_the_cluster_label_are_named() -> None:
    fleet = read(relabel(two_node_answers(), {"llama-decode-0": {"cluster": "east"}}))
    [note] = [n for n in fleet.notes if "'cluster' label" in n]
    assert note.startswith(f"1 worker(s) without a 'cluster' label ({PREFILL})")


def test_a_configured_cluster_label() -> None:
    answers = relabel(two_node_answers(), {"llama-decode-0": {"k8s_cluster": "a"}, "llama-prefill-0": {}})
    fleet = read(answers, cluster_label="k8s_cluster")
    assert {w.worker_id: w.cluster for w in fleet.workers} == {DECODE: "a", PREFILL: None}
    assert all(w.cluster is None for w in read(answers).workers)  # not the default label


def test_deployment_from_pod_labels_as_exporters_and_kube_state_metrics_name_them() -> None:
    extra = {
        # kube-state-metrics' kube_pod_labels joined onto the engine series
        "llama-decode-0": {"label_llm_d_ai_inferencepool": "qwen-pool"},
        # dcgm-exporter's sanitised pod labels on the GPU series
        "llama-prefill-0": {
            "serving_kserve_io_inferenceservice": "qwen-isvc",
            **TWO_CLUSTERS["llama-prefill-0"],
        },
    }
    fleet = read(relabel(two_node_answers(), extra))
    assert {w.worker_id: w.deployment for w in fleet.workers} == {DECODE: "qwen-pool", PREFILL: "qwen-isvc"}
    inv = inventory(fleet)
    assert {w.worker_id: w.deployment for w in inv.workers} == {DECODE: "qwen-pool", PREFILL: "qwen-isvc"}
    assert pools_of(fleet) == [f"default/qwen-pool/{MODEL}", f"west/qwen-isvc/{MODEL}"]
    assert not any("deployment label" in note for note in fleet.notes)


def test_two_deployments_of_one_model_in_one_cluster_are_two_pools() -> None:
    extra = {
        "llama-decode-0": {"cluster": "east", "nvidia_com_dynamo_namespace": "qwen-a"},
        "llama-prefill-0": {"cluster": "east", "nvidia_com_dynamo_namespace": "qwen-b"},
    }
    assert pools_of(read(relabel(two_node_answers(), extra))) == [
        f"east/qwen-a/{MODEL}",
        f"east/qwen-b/{MODEL}",
    ]


def test_deployment_from_namespace_and_owner_and_configured_labels() -> None:
    owner = {"owner_kind": "ReplicaSet", "owner_name": "llama-decode-6c9f", "label_pod_template_hash": "6c9f"}
    fleet = read(relabel(two_node_answers(), {"llama-decode-0": owner, "llama-prefill-0": {"app": "qwen"}}))
    by_id = {w.worker_id: w.deployment for w in fleet.workers}
    assert by_id == {DECODE: "llm/llama-decode", PREFILL: None}
    fleet = read(
        relabel(two_node_answers(), {"llama-prefill-0": {"app": "qwen"}}), deployment_labels=("app",)
    )
    assert {w.worker_id: w.deployment for w in fleet.workers} == {DECODE: None, PREFILL: "qwen"}
    [note] = [n for n in fleet.notes if "deployment label" in n]
    assert note.startswith(
        f"1 worker(s) without a deployment label ('app') or a namespace and owner_name ({DECODE})"
    )


def test_resolve_deployment_prefers_label_order_then_recency() -> None:
    newer = {"nvidia_com_dynamo_namespace": "dyn"}
    older = {"label_llm_d_ai_inferencepool": "pool", "nvidia.com/dynamo-namespace": "dyn-old"}
    labels = ("nvidia.com/dynamo-namespace", "llm-d.ai/inferencepool")
    assert resolve_deployment([newer, older], labels, "llm") == "dyn"
    assert resolve_deployment([older, newer], labels, "llm") == "dyn-old"
    owner = {"owner_kind": "StatefulSet", "owner_name": "qwen-prefill"}
    assert resolve_deployment([owner], labels, "llm") == "llm/qwen-prefill"
    assert resolve_deployment([owner], labels, None) is None


T0 = datetime(2026, 1, 13, 0, 0, tzinfo=UTC)


def constant_answers(answers: Answers) -> dict[str, Series]:
    return {
        name: [(dict(labels), constant(pts[0][1])) for labels, pts in series]
        for name, series in answers.items()
    }


def test_read_fleet_takes_the_cluster_from_the_servers_external_label() -> None:
    prometheus = ScriptedPrometheus(
        constant_answers(two_node_answers()), external_labels={"cluster": "central"}
    )
    with httpx.Client(transport=httpx.MockTransport(prometheus)) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=10), 60.0, client=http)
    assert len(prometheus.config_requests) == 1
    assert {w.cluster for w in fleet.workers} == {"central"}
    assert {g.cluster for g in fleet.gpus} == {"central"}
    assert not any("'cluster' label" in note for note in fleet.notes)


def test_read_fleet_reads_labelled_series_without_asking_for_the_config() -> None:
    answers = relabel(
        two_node_answers(), {"llama-decode-0": {"region": "r1"}, "llama-prefill-0": {"region": "r2"}}
    )
    prometheus = ScriptedPrometheus(constant_answers(answers), external_labels={"region": "ignored"})
    with httpx.Client(transport=httpx.MockTransport(prometheus)) as http:
        fleet = read_fleet(
            URL,
            T0,
            T0 + timedelta(minutes=10),
            60.0,
            client=http,
            cluster_label="region",
            deployment_labels=(),
        )
    assert prometheus.config_requests == []
    assert {w.worker_id: w.cluster for w in fleet.workers} == {DECODE: "r1", PREFILL: "r2"}


def test_read_fleet_without_a_config_endpoint_notes_the_missing_label() -> None:
    prometheus = ScriptedPrometheus(constant_answers(two_node_answers()))
    with httpx.Client(transport=httpx.MockTransport(prometheus)) as http:
        fleet = read_fleet(URL, T0, T0 + timedelta(minutes=10), 60.0, client=http)
    assert all(w.cluster is None for w in fleet.workers)
    assert any("every worker is in one cluster" in note for note in fleet.notes)


def test_analyzer_settings_name_the_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = AnalyzerSettings()
    assert settings.cluster_label == "cluster"
    assert settings.deployment_labels[0] == "nvidia.com/dynamo-namespace"
    monkeypatch.setenv("PHASEFIT_ANALYZER_CLUSTER_LABEL", "k8s_cluster")
    monkeypatch.setenv("PHASEFIT_ANALYZER_DEPLOYMENT_LABELS", '["app", "team"]')
    settings = AnalyzerSettings()
    assert (settings.cluster_label, settings.deployment_labels) == ("k8s_cluster", ["app", "team"])
