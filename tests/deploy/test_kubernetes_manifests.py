"""The Kubernetes manifests: every object valid against the API schemas, the kustomizations complete, and the
properties an SRE relies on (no GPU requested by the collector, read-only mounts, non-root, probes...).

Objects are checked through the ``kubernetes`` client's typed models plus a strict walk that rejects unknown
fields (deploy_k8s_schema); overlays are resolved by a small Kustomize resolver (deploy_kustomize) and, where
``kubectl`` exists, compared with ``kubectl kustomize``.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.availability import unavailable
from tests.deploy.deploy_cli import argv_from_shell, parse
from tests.deploy.deploy_k8s_schema import validate
from tests.deploy.deploy_kustomize import (
    KustomizeError,
    Resolution,
    build,
    containers,
    load_kustomization,
    load_objects,
    pod_specs,
    split_image,
)

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
PROMETHEUS_RULE = ROOT / "deploy" / "prometheus" / "phasefit-prometheusrule.yaml"
OVERLAYS = ["base", "overlays/production", "overlays/demo"]
COMPONENTS = sorted(p.parent.name for p in (KUBE / "components").glob("*/kustomization.yaml"))
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
POD_RESOURCES = "/var/lib/kubelet/pod-resources"

Obj = dict[str, Any]


@functools.cache
def resolve(folder: str) -> Resolution:
    return build(KUBE / folder, may_be_absent=lambda path: path == PROMETHEUS_RULE)


def objects(folder: str) -> list[Obj]:
    return resolve(folder).objects


def find(objs: list[Obj], kind: str, name: str) -> Obj:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def with_component(tmp_path: Path, component: str) -> list[Obj]:
    """The base with one component applied, as an operator would compose it in an overlay."""
    overlay = tmp_path / component
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(KUBE / "base")],
                "components": [str(KUBE / "components" / component)],
            }
        ),
        encoding="utf-8",
    )
    return build(overlay, may_be_absent=lambda path: path == PROMETHEUS_RULE).objects


def manifest_files() -> Iterator[Path]:
    for path in sorted(KUBE.rglob("*.y*ml")):
        if path.name not in {"kustomization.yaml", "kustomization.yml"}:
            yield path


# --- every object is a valid Kubernetes object ------------------------------------------------------------


@pytest.mark.parametrize("path", list(manifest_files()), ids=lambda p: str(p.relative_to(KUBE)))
def test_every_manifest_file_validates_against_the_api_schema(path: Path) -> None:
    docs = list(load_objects(path))
    assert docs, f"{path} holds no object"
    problems = [problem for doc in docs for problem in validate(doc)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("folder", OVERLAYS)
def test_resolved_overlay_validates_and_has_no_duplicates(folder: str) -> None:
    objs = objects(folder)
    problems = [problem for obj in objs for problem in validate(obj)]
    assert not problems, "\n".join(problems)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), f"duplicate objects in {folder}"
    for obj in objs:
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"].get("namespace") == "phasefit", f"{obj['kind']}/{obj['metadata']['name']}"


def test_prometheus_rule_validates() -> None:
    docs = list(load_objects(PROMETHEUS_RULE))
    assert [d["kind"] for d in docs] == ["PrometheusRule"]
    problems = validate(docs[0])
    assert not problems, "\n".join(problems)
    assert any(o["kind"] == "PrometheusRule" for o in objects("overlays/production"))


def test_schema_check_rejects_unknown_fields_wrong_types_and_missing_required_fields() -> None:
    """The validator is the test's instrument: prove it catches the mistakes it exists for."""
    daemonset = find(objects("base"), "DaemonSet", "phasefit-collector")
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = True  # typo of readOnlyRootFilesystem
    container["ports"][0]["containerPort"] = "9401"
    del broken["spec"]["selector"]
    text = "\n".join(validate(broken))
    assert "unknown field 'readOnlyRootFileSystem'" in text
    assert "containerPort: expected int" in text
    assert "required field 'selector' missing" in text
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "podMetricsEndpoint": []},
    }
    text = "\n".join(validate(monitor))
    assert "unknown field 'podMetricsEndpoint'" in text and "'podMetricsEndpoints' missing" in text


# --- the kustomizations ------------------------------------------------------------------------------------


def kustomization_folders() -> list[Path]:
    return sorted(p.parent for p in KUBE.rglob("kustomization.yaml"))


@pytest.mark.parametrize("folder", kustomization_folders(), ids=lambda p: str(p.relative_to(KUBE)))
def test_kustomization_lists_every_file_in_its_folder(folder: Path) -> None:
    data = load_kustomization(folder)
    listed = {str(r) for r in data.get("resources", [])} | {
        p["path"] for p in data.get("patches", []) if "path" in p
    }
    local = {p.name for p in folder.iterdir() if p.suffix in {".yaml", ".yml"} and p.stem != "kustomization"}
    unlisted = sorted(local - listed)
    assert not unlisted, f"{folder.relative_to(ROOT)}: files not in the kustomization: {unlisted}"
    for entry in listed:
        target = (folder / entry).resolve()
        if target == PROMETHEUS_RULE and not target.exists():
            continue
        assert target.exists(), f"{folder.relative_to(ROOT)}: {entry} does not exist"
    for entry in data.get("components", []):
        assert (folder / entry / "kustomization.yaml").is_file(), f"{folder}: component {entry} missing"


def test_prometheus_rule_is_reached_through_a_kustomization() -> None:
    """kustomize refuses file resources outside a kustomization's root: the rule's own folder has one."""
    data = load_kustomization(PROMETHEUS_RULE.parent)
    assert PROMETHEUS_RULE.name in data["resources"]
    component = load_kustomization(KUBE / "components" / "prometheus-operator")
    assert "../../../prometheus" in component["resources"]
    assert any(path == PROMETHEUS_RULE for path in resolve("overlays/production").files)


def test_resolver_refuses_what_it_does_not_support(tmp_path: Path) -> None:
    (tmp_path / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", encoding="utf-8"
    )
    (tmp_path / "kustomization.yaml").write_text("resources: [cm.yaml]\nhelmCharts: []\n", encoding="utf-8")
    with pytest.raises(KustomizeError, match="unsupported kustomization keys"):
        build(tmp_path)
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "kustomization.yaml").write_text("resources: [../cm.yaml]\n", encoding="utf-8")
    with pytest.raises(KustomizeError, match="outside the kustomization root"):
        build(inner)


def _kubectl_kustomize(folder: Path) -> list[Obj] | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("folder", OVERLAYS)
def test_resolver_agrees_with_kubectl_kustomize(folder: str) -> None:
    theirs = _kubectl_kustomize(KUBE / folder)
    if theirs is None:
        unavailable(
            "kubectl >= 1.21 is missing (pkgs.k8s.io; Debian's kubernetes-client 1.20 lacks components)",
            "the kustomize comparison",
        )

    def key(o: Obj) -> tuple[str, str, str]:
        return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])

    mine = {key(o): o for o in objects(folder)}
    by_kubectl = {key(o): o for o in theirs}
    assert sorted(mine) == sorted(by_kubectl)
    for k, obj in mine.items():
        assert obj == by_kubectl[k], f"{k} differs from kubectl kustomize"


# --- the collector DaemonSet ----------------------------------------------------------------------------


def _resources(container: Obj) -> dict[str, dict[str, str]]:
    resources: dict[str, dict[str, str]] = container.get("resources", {})
    return resources


@pytest.mark.parametrize("folder", ["base", "overlays/production"])
def test_collector_never_requests_a_gpu(folder: str) -> None:
    daemonset = find(objects(folder), "DaemonSet", "phasefit-collector")
    for container in containers(daemonset):
        for section in ("requests", "limits"):
            gpu = [r for r in _resources(container).get(section, {}) if r.startswith("nvidia.com/")]
            assert not gpu, f"{container['name']} {section} {gpu}: monitoring must not take a GPU"


@pytest.mark.parametrize("folder", ["base", "overlays/production"])
def test_collector_placement_on_gpu_nodes(folder: str) -> None:
    spec = pod_specs(find(objects(folder), "DaemonSet", "phasefit-collector"))[0]
    assert spec["nodeSelector"] == GPU_NODE_SELECTOR
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    node = next(e for e in spec["containers"][0]["env"] if e["name"] == "NODE_NAME")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC")


@pytest.mark.parametrize("folder", ["base", "overlays/production"])
def test_collector_mounts_pod_resources_read_only_and_spools_on_the_node(folder: str) -> None:
    spec = pod_specs(find(objects(folder), "DaemonSet", "phasefit-collector"))[0]
    volumes = {v["name"]: v for v in spec["volumes"]}
    container = spec["containers"][0]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    # The directory, read-only (a kubelet restart recreates the socket inside it).
    pod_resources = [n for n, v in volumes.items() if v.get("hostPath", {}).get("path") == POD_RESOURCES]
    assert len(pod_resources) == 1
    assert mounts[pod_resources[0]]["readOnly"] is True
    assert mounts[pod_resources[0]]["mountPath"] == POD_RESOURCES
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PHASEFIT_COLLECTOR_POD_RESOURCES_SOCKET"] == f"{POD_RESOURCES}/kubelet.sock"
    # Every hostPath except the spool is mounted read-only.
    spool_mount = mounts["spool"]
    assert env["PHASEFIT_COLLECTOR_SPOOL_PATH"].startswith(spool_mount["mountPath"] + "/")
    for name, volume in volumes.items():
        if "hostPath" in volume and name != "spool":
            assert mounts[name].get("readOnly") is True, f"hostPath volume {name} is writable"
    # Token from a Secret (a file), settings from a ConfigMap.
    token = volumes[mounts["ingest-token"]["name"]]["secret"]["secretName"]
    assert token == "phasefit-collector-token" and mounts["ingest-token"]["readOnly"] is True
    assert env["PHASEFIT_COLLECTOR_TOKEN_FILE"].startswith(mounts["ingest-token"]["mountPath"] + "/")
    assert {"configMapRef": {"name": "phasefit-collector"}} in container["envFrom"]


@pytest.mark.parametrize("folder", ["base", "overlays/production"])
def test_collector_is_confined(folder: str) -> None:
    spec = pod_specs(find(objects(folder), "DaemonSet", "phasefit-collector"))[0]
    container = spec["containers"][0]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}, "no capability is added in the base"
    # UID 0 only to open the root-only pod-resources socket (see the manifest's comment).
    assert security["runAsUser"] == 0 and security["runAsNonRoot"] is False
    ports = [p for p in container["ports"] if p["containerPort"] == 9401]
    assert ports == [{"name": "metrics", "containerPort": 9401, "protocol": "TCP"}]
    for section in ("requests", "limits"):
        assert set(_resources(container)[section]) == {"cpu", "memory"}


def test_collector_rbac_reads_pods_only() -> None:
    objs = objects("base")
    role = find(objs, "ClusterRole", "phasefit-collector")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    binding = find(objs, "ClusterRoleBinding", "phasefit-collector")
    assert binding["roleRef"]["name"] == "phasefit-collector"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "phasefit-collector", "namespace": "phasefit"}
    ]
    spec = pod_specs(find(objs, "DaemonSet", "phasefit-collector"))[0]
    assert spec["serviceAccountName"] == "phasefit-collector"
    lines = (KUBE / "base" / "collector-rbac.yaml").read_text(encoding="utf-8").splitlines()
    text = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    assert "spec.nodeName" in text and "cannot restrict" in text and "NodeRestriction" in text


def test_nonroot_component_runs_unprivileged_without_pod_resources(tmp_path: Path) -> None:
    spec = pod_specs(find(with_component(tmp_path, "collector-nonroot"), "DaemonSet", "phasefit-collector"))[
        0
    ]
    security = spec["containers"][0]["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert all(v.get("hostPath", {}).get("path") != POD_RESOURCES for v in spec["volumes"])
    assert all(e["name"] != "PHASEFIT_COLLECTOR_POD_RESOURCES_SOCKET" for e in spec["containers"][0]["env"])
    assert "hostPath" not in next(v for v in spec["volumes"] if v["name"] == "spool")
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_host_processes_component_only_adds_host_pid(tmp_path: Path) -> None:
    base = pod_specs(find(objects("base"), "DaemonSet", "phasefit-collector"))[0]
    spec = pod_specs(
        find(with_component(tmp_path, "collector-host-processes"), "DaemonSet", "phasefit-collector")
    )[0]
    assert spec.pop("hostPID") is True
    assert spec == base


def test_profiling_admin_component_adds_only_sys_admin(tmp_path: Path) -> None:
    objs = with_component(tmp_path, "collector-profiling-admin")
    security = pod_specs(find(objs, "DaemonSet", "phasefit-collector"))[0]["containers"][0]["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_applies_to_the_base_and_validates(tmp_path: Path, component: str) -> None:
    problems = [p for obj in with_component(tmp_path, component) for p in validate(obj)]
    assert not problems, "\n".join(problems)


# --- every workload ----------------------------------------------------------------------------------------


def workloads(folder: str) -> list[Obj]:
    return [o for o in objects(folder) if pod_specs(o)]


@pytest.mark.parametrize("folder", OVERLAYS)
def test_every_container_is_hardened_and_sized(folder: str) -> None:
    for obj in workloads(folder):
        spec = pod_specs(obj)[0]
        pod_security = spec.get("securityContext", {})
        assert pod_security.get("seccompProfile") == {"type": "RuntimeDefault"}, obj["metadata"]["name"]
        for container in containers(obj):
            where = f"{obj['kind']}/{obj['metadata']['name']}/{container['name']}"
            security = container.get("securityContext", {})
            assert security.get("readOnlyRootFilesystem") is True, where
            assert security.get("allowPrivilegeEscalation") is False, where
            assert "ALL" in security.get("capabilities", {}).get("drop", []), where
            for level in (pod_security, security):
                if "runAsNonRoot" in level and obj["metadata"]["name"] != "phasefit-collector":
                    assert level["runAsNonRoot"] is True, where
            if obj["metadata"]["name"] != "phasefit-collector":
                assert security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True, where
                assert security.get("runAsUser", pod_security.get("runAsUser", 0)) != 0, where
            for section in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(_resources(container).get(section, {})), f"{where} {section}"
            _name, tag, digest = split_image(container["image"])
            assert (tag and tag != "latest") or digest, f"{where}: image {container['image']} is not pinned"
            assert container.get("imagePullPolicy") == "IfNotPresent", where


@pytest.mark.parametrize("folder", OVERLAYS)
def test_only_the_collector_and_the_demo_database_write_outside_tmp(folder: str) -> None:
    for obj in workloads(folder):
        spec = pod_specs(obj)[0]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in containers(obj):
            for mount in container.get("volumeMounts", []):
                volume = volumes[mount["name"]]
                if "secret" in volume or "configMap" in volume:
                    assert mount.get("readOnly") is True, f"{container['name']}: {mount['name']} writable"
                if "hostPath" in volume:
                    assert obj["metadata"]["name"] == "phasefit-collector", (
                        f"hostPath in {obj['metadata']['name']}"
                    )


def test_no_secret_value_in_plain_environment() -> None:
    for folder in OVERLAYS:
        for obj in workloads(folder):
            for container in containers(obj):
                for env in container.get("env", []):
                    value = str(env.get("value", ""))
                    assert not re.search(r"://[^/\s]*:[^/\s]*@", value), (
                        f"{env['name']}: credentials in a URL"
                    )
                    if re.search(r"(TOKEN|PASSWORD|SECRET|DATABASE_URL)$", env["name"]):
                        assert "value" not in env, f"{env['name']} is a literal; use a Secret"


# --- the service, dashboard and jobs -----------------------------------------------------------------------


def test_service_deployment_probes_port_and_secrets() -> None:
    objs = objects("base")
    deployment = find(objs, "Deployment", "phasefit-service")
    container = pod_specs(deployment)[0]["containers"][0]
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    env = {e["name"]: e for e in container["env"]}
    assert env["PHASEFIT_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "phasefit-database"
    volumes = {v["name"]: v for v in pod_specs(deployment)[0]["volumes"]}
    secrets = {v["secret"]["secretName"] for v in volumes.values() if "secret" in v}
    assert {"phasefit-ingest-tokens", "phasefit-alertmanager-tokens", "phasefit-read-tokens"} <= secrets
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for variable, volume in (
        ("PHASEFIT_INGEST_TOKENS_FILE", "ingest-tokens"),
        ("PHASEFIT_ALERTMANAGER_TOKENS_FILE", "alertmanager-tokens"),
        ("PHASEFIT_READ_TOKENS_FILE", "read-tokens"),
    ):
        assert env[variable]["value"].startswith(mounts[volume]["mountPath"] + "/"), variable
        assert mounts[volume]["readOnly"] is True
    assert container["args"][:1] == ["serve"]
    service = find(objs, "Service", "phasefit-service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize("folder", OVERLAYS)
def test_the_service_is_closed_by_default_its_settings_refuse_open_reads(
    folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Deployment's own environment, token files replaced by local ones, gives token reads on the address
    it binds, and the same environment with PHASEFIT_READ_ACCESS=open refuses to start."""
    from pydantic import ValidationError

    from phasefit.service.settings import ServiceSettings

    objs = objects(folder)
    container = pod_specs(find(objs, "Deployment", "phasefit-service"))[0]["containers"][0]
    args = container["args"]
    env = {e["name"]: e.get("value") for e in container["env"] if "value" in e}
    assert env["PHASEFIT_SERVICE_BIND_HOST"] == args[args.index("--host") + 1] == "0.0.0.0"
    assert env["PHASEFIT_READ_ACCESS"] == "token"
    for name in [n for n in os.environ if n.startswith("PHASEFIT_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        local = tmp_path / name.lower()
        if name.endswith("_TOKENS_FILE"):
            local.write_text("a-plain-token-for-this-test-0123\n", encoding="utf-8")
        monkeypatch.setenv(name, str(local) if name.endswith("_TOKENS_FILE") else value)
    monkeypatch.setenv("PHASEFIT_DATABASE_URL", "postgresql+psycopg://phasefit@db.invalid/phasefit")
    assert ServiceSettings().read_mode == "token"
    monkeypatch.setenv("PHASEFIT_READ_ACCESS", "open")
    with pytest.raises(
        ValidationError, match="PHASEFIT_READ_ACCESS=open is refused on the non-loopback address"
    ):
        ServiceSettings()
    monkeypatch.delenv("PHASEFIT_READ_ACCESS")
    monkeypatch.delenv("PHASEFIT_READ_TOKENS_FILE")
    with pytest.raises(ValidationError, match="no read token is configured"):
        ServiceSettings()


def test_demo_read_token_secret_holds_digests() -> None:
    from phasefit.service.tokens import parse_tokens

    secret = find(objects("overlays/demo"), "Secret", "phasefit-read-tokens")
    tokens = parse_tokens(secret["stringData"]["tokens"], source="demo read tokens")
    assert [t.name for t in tokens.values()] == ["demo-reader"]


def test_prometheus_sends_a_read_token_to_the_service(tmp_path: Path) -> None:
    monitor = find(with_component(tmp_path, "prometheus-operator"), "ServiceMonitor", "phasefit-service")
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "phasefit-metrics-token", "key": "token"},
    }


def test_dashboard_is_reachable_only_through_a_cluster_ip_service() -> None:
    objs = objects("base")
    deployment = find(objs, "Deployment", "phasefit-dashboard")
    args = pod_specs(deployment)[0]["containers"][0]["args"]
    assert args[0] == "dashboard" and "--host" in args
    service = find(objs, "Service", "phasefit-dashboard")
    assert service["spec"]["type"] == "ClusterIP"
    for obj in objs:
        if obj["kind"] == "Service":
            assert obj["spec"].get("type", "ClusterIP") == "ClusterIP", obj["metadata"]["name"]
        assert obj["kind"] not in {"Ingress", "Route"}, "exposure beyond the cluster is the operator's choice"


def test_weekly_report_cronjob() -> None:
    cronjob = find(objects("base"), "CronJob", "phasefit-report")
    spec = cronjob["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["schedule"] == "0 6 * * 1" and spec["timeZone"] == "Etc/UTC"
    container = pod_specs(cronjob)[0]["containers"][0]
    script = " ".join(container["command"] + container["args"])
    assert "phasefit report --week" in script
    assert "date -u -d 'last week' +%G-W%V" in script


def test_week_expression_gives_the_previous_iso_week() -> None:
    """The CronJob's shell expression, run by GNU date as the container would (skipped without GNU date)."""
    date = shutil.which("date")
    probe = subprocess.run([date, "--version"], capture_output=True, text=True, check=False) if date else None
    if probe is None or "GNU" not in probe.stdout:
        unavailable("GNU date is not available here (Debian package 'coreutils')", "the CronJob week test")
    cases = {"2026-11-30 06:00": "2026-W48", "2027-01-04 06:00": "2026-W53", "2026-01-05 06:00": "2026-W01"}
    for now, expected in cases.items():
        out = subprocess.run(
            ["date", "-u", "-d", f"{now} UTC last week", "+%G-W%V"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "TZ": "UTC"},
        ).stdout.strip()
        assert out == expected, f"{now}: {out}"


def test_analyze_cronjob_never_overlaps() -> None:
    cronjob = find(objects("base"), "CronJob", "phasefit-analyze")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert pod_specs(cronjob)[0]["containers"][0]["args"][0] == "analyze"


def test_migrations_run_once_as_a_job() -> None:
    job = find(objects("base"), "Job", "phasefit-db-upgrade")
    assert pod_specs(job)[0]["containers"][0]["args"] == ["db", "upgrade"]
    for deployment in ("phasefit-service", "phasefit-dashboard"):
        assert not pod_specs(find(objects("base"), "Deployment", deployment))[0].get("initContainers")


# --- Prometheus Operator objects ---------------------------------------------------------------------------


def _rule_jobs() -> set[str]:
    """The phasefit job names the rendered alert and recording rules select on (job="phasefit-...")."""
    rule = next(load_objects(PROMETHEUS_RULE))
    exprs = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    return {job for expr in exprs for job in re.findall(r'job="(phasefit-[^"]*)"', expr)}


def test_monitors_select_the_pods_and_ports_and_give_the_jobs_the_rules_expect(tmp_path: Path) -> None:
    objs = with_component(tmp_path, "prometheus-operator")
    rule_jobs = _rule_jobs()

    pod_monitor = find(objs, "PodMonitor", "phasefit-collector")
    daemonset = find(objs, "DaemonSet", "phasefit-collector")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    port_names = {p["name"] for c in containers(daemonset) for p in c.get("ports", [])}
    assert {e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]} <= port_names
    collector_job = pod_labels[pod_monitor["spec"]["jobLabel"]]

    service_monitor = find(objs, "ServiceMonitor", "phasefit-service")
    service = find(objs, "Service", "phasefit-service")
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in service_monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    # Without jobLabel, a ServiceMonitor's job is the Service's name.
    assert "jobLabel" not in service_monitor["spec"]
    service_job = service["metadata"]["name"]
    # The rules select exactly the jobs these monitors create: no rule waits on a job nobody scrapes.
    assert rule_jobs == {collector_job, service_job}, rule_jobs


def test_production_includes_the_prometheus_operator_objects_and_the_base_does_not() -> None:
    crds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not crds & {o["kind"] for o in objects("base")}
    expected = crds if PROMETHEUS_RULE.is_file() else crds - {"PrometheusRule"}
    assert expected <= {o["kind"] for o in objects("overlays/production")}


# --- settings named in manifests are real settings ---------------------------------------------------------


def _phasefit_env_names() -> set[str]:
    names: set[str] = set()
    for folder in OVERLAYS:
        for obj in objects(folder):
            if obj["kind"] == "ConfigMap":
                names.update(k for k in obj.get("data", {}) if k.startswith("PHASEFIT_"))
            for container in containers(obj):
                names.update(e["name"] for e in container.get("env", []) if e["name"].startswith("PHASEFIT_"))
    return names


def test_every_phasefit_variable_in_the_manifests_is_a_documented_setting() -> None:
    from phasefit.confdoc import discover, document_class

    found = discover()
    known = {
        env
        for path, cls in found.classes
        for setting in document_class(path, cls).settings
        for env in setting.env_vars
    }
    unknown = sorted(_phasefit_env_names() - known)
    assert not found.missing, f"settings classes that could not be imported: {found.missing}"
    assert not unknown, f"manifests set variables no settings class reads: {unknown}"


# --- command lines parse against the real CLI --------------------------------------------------------------


def _phasefit_command_lines() -> list[tuple[str, list[str]]]:
    """Each distinct phasefit command line of every overlay, with the first place it appears."""
    lines: list[tuple[str, list[str]]] = []
    for folder in OVERLAYS:
        for obj in objects(folder):
            for container in containers(obj):
                if not split_image(container["image"])[0].startswith("phasefit-"):
                    continue
                where = f"{folder}: {obj['kind']}/{obj['metadata']['name']}/{container['name']}"
                command = container.get("command")
                if command is None:
                    lines.append((where, list(container["args"])))
                elif command == ["/bin/sh", "-c"]:
                    lines.append((where, argv_from_shell(container["args"][0])))
                else:
                    lines.append((where, ["<unsupported command>", *command]))
    unique: dict[str, tuple[str, list[str]]] = {}
    for where, argv in lines:
        unique.setdefault(shlex.join(argv), (where, argv))
    return list(unique.values())


@pytest.mark.parametrize(
    ("where", "argv"), _phasefit_command_lines(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_container_command_lines_parse_against_the_cli(where: str, argv: list[str]) -> None:
    try:
        parse(argv)
    except Exception as exc:  # the CLI's usage errors: an unknown option, a bad choice
        pytest.fail(f"{where}: `phasefit {' '.join(argv)}` does not parse: {exc}")
