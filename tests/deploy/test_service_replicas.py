"""The service on Kubernetes runs as several replicas on one PostgreSQL: two replicas spread over nodes, a
PodDisruptionBudget that keeps one up through a drain, and nothing a replica would keep for itself."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.deploy_kustomize import containers, pod_specs
from tests.deploy.test_kubernetes_manifests import OVERLAYS, find, objects

Obj = dict[str, Any]
SERVICE = "phasefit-service"


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, "only matchLabels selectors are checked here"
    return bool(selector["matchLabels"]) and selector["matchLabels"].items() <= labels.items()


def _pod_labels(obj: Obj) -> dict[str, str]:
    spec = obj.get("spec", {})
    template = spec.get("jobTemplate", {}).get("spec", spec).get("template", {})
    labels: dict[str, str] = template.get("metadata", {}).get("labels", {})
    return labels


@pytest.mark.parametrize("folder", OVERLAYS)
def test_the_service_runs_two_replicas_spread_over_nodes(folder: str) -> None:
    deployment = find(objects(folder), "Deployment", SERVICE)
    assert deployment["spec"]["replicas"] == 2
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0  # a rollout never drops below two
    [spread] = pod_specs(deployment)[0]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    assert _selects(spread["labelSelector"], _pod_labels(deployment))


@pytest.mark.parametrize("folder", OVERLAYS)
def test_a_disruption_budget_keeps_a_replica_up_and_selects_only_the_service(folder: str) -> None:
    objs = objects(folder)
    deployment = find(objs, "Deployment", SERVICE)
    budgets = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    [budget] = [b for b in budgets if _selects(b["spec"]["selector"], _pod_labels(deployment))]
    assert budget["apiVersion"] == "policy/v1"
    spec = budget["spec"]
    replicas = deployment["spec"]["replicas"]
    if "maxUnavailable" in spec:
        assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
    else:
        assert 1 <= spec["minAvailable"] < replicas  # one may go, one stays
    others = [o for o in objs if o is not deployment and _pod_labels(o)]
    assert others, "no other workload to compare with"
    for other in others:
        where = f"{other['kind']}/{other['metadata']['name']}"
        assert not _selects(spec["selector"], _pod_labels(other)), f"the budget also selects {where}"


@pytest.mark.parametrize("folder", OVERLAYS)
def test_replicas_share_only_postgresql(folder: str) -> None:
    """No volume a replica could keep data on (a ReadWriteOnce claim, a host path): its only state is the
    store, read from the Secret phasefit-database, which in the committed demo is PostgreSQL."""
    objs = objects(folder)
    deployment = find(objs, "Deployment", SERVICE)
    for volume in pod_specs(deployment)[0]["volumes"]:
        kinds = set(volume) - {"name"}
        assert kinds <= {"secret", "configMap", "emptyDir"}, f"volume {volume['name']}: {kinds}"
    [container] = containers(deployment)
    env = {e["name"]: e for e in container["env"]}
    database = env["PHASEFIT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert database == {"name": "phasefit-database", "key": "url"}
    config = find(objs, "ConfigMap", SERVICE)["data"]
    assert "PHASEFIT_DATABASE_URL" not in config
    secrets = [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == "phasefit-database"]
    for secret in secrets:  # committed only in the demo; production's is the operator's
        assert secret["stringData"]["url"].startswith("postgresql+psycopg://"), folder
    assert "--workers" not in container["args"]  # one process per pod: scale with replicas
