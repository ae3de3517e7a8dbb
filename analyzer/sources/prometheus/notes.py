"""The warnings a zero-agent read gives when the series lack a label it needs, each saying which label, what
is unknown without it and how to add it (docs/zero-agent.md states the same requirements for SREs).

They reach the summary's ``warnings`` (and ``phasefit analyze --json``) through the pipeline's
``extra_warnings``.
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.sources.prometheus.fleet import PrometheusGpu, PrometheusWorker
from analyzer.sources.prometheus.labels import DEFAULT_ROLE_LABELS
from fleet.contract import Role

DOC = "docs/zero-agent.md"


def _shown(ids: Sequence[str]) -> str:
    return ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")


def _quoted(names: Sequence[str], limit: int = 3) -> str:
    return ", ".join(repr(n) for n in names[:limit]) + (", ..." if len(names) > limit else "")


def unattributed_note(gpus: Sequence[PrometheusGpu]) -> list[str]:
    """GPUs whose dcgm-exporter series name no pod."""
    unattributed = {g.gpu_uuid for g in gpus if g.windows} - {g.gpu_uuid for g in gpus if g.worker_id}
    if not unattributed:
        return []
    return [
        f"{len(unattributed)} GPU(s) carry no pod label and stay unattributed (dcgm-exporter without "
        "Kubernetes mapping, or GPUs no pod holds): run dcgm-exporter with its Kubernetes mapping and keep "
        "its 'pod'/'namespace' labels (honor_labels, or they arrive as 'exported_pod'/'exported_namespace'); "
        f"{DOC}"
    ]


def join_notes(workers: Sequence[PrometheusWorker], gpus: Sequence[PrometheusGpu]) -> list[str]:
    """Engine targets that cannot be joined to the pods dcgm-exporter maps GPUs to, and the reverse."""
    if not any(g.pod for g in gpus):
        return []  # no Kubernetes mapping on the GPUs: the unattributed note says it
    notes: list[str] = []
    by_instance = [w.worker_id for w in workers if w.pod is None]
    if by_instance:
        notes.append(
            f"{len(by_instance)} engine target(s) carry no 'namespace'/'pod' labels ({_shown(by_instance)}): "
            "they cannot be joined to the GPUs dcgm-exporter maps to pods, so their GPUs' activity is "
            "unknown; "
            "keep the pod's namespace and name as target labels (relabel __meta_kubernetes_namespace to "
            f"'namespace' and __meta_kubernetes_pod_name to 'pod'); {DOC}"
        )
    served = {w.worker_id for w in workers}
    silent = sorted({g.worker_id for g in gpus if g.windows and g.worker_id and g.worker_id not in served})
    if silent:
        notes.append(
            f"{len(silent)} pod(s) hold GPUs but no vLLM, SGLang or TensorRT-LLM series carry their "
            f"'namespace'/'pod' ({_shown(silent)}): they are no workers here (if they serve a model, it is "
            "not analysed); scrape the engine's /metrics with the pod's namespace and pod as target labels; "
            f"{DOC}"
        )
    return notes


def role_notes(workers: Sequence[PrometheusWorker], role_label: str | None) -> list[str]:
    unknown = [w.worker_id for w in workers if w.role is Role.UNKNOWN]
    if not unknown:
        return []
    names = (role_label, *DEFAULT_ROLE_LABELS) if role_label else DEFAULT_ROLE_LABELS
    return [
        f"{len(unknown)} worker(s) without a role label ({_shown(unknown)}): none of {_quoted(names, 4)} "
        "(raw, sanitised or kube-state-metrics' label_...) nor SGLang's engine_type is on their engine or "
        f"GPU series; name the label that carries it with --role-label; {DOC}"
    ]


def pool_notes(
    workers: Sequence[PrometheusWorker], cluster_label: str, deployment_labels: Sequence[str]
) -> list[str]:
    """What the pools will lack: a cluster or deployment label the series did not carry."""
    notes: list[str] = []
    if not workers:
        return notes
    label = cluster_label
    no_cluster = [w.worker_id for w in workers if w.cluster is None]
    if len(no_cluster) == len(workers):
        notes.append(
            f"no {label!r} label on the engine or GPU series (nor a {label!r} external label on the "
            "Prometheus server): every worker is in one cluster; name the label that carries it, or map "
            f"nodes to clusters; {DOC}"
        )
    elif no_cluster:
        notes.append(
            f"{len(no_cluster)} worker(s) without a {label!r} label ({_shown(no_cluster)}): they join the "
            f"default cluster; {DOC}"
        )
    no_deployment = [w.worker_id for w in workers if w.deployment is None]
    if no_deployment:
        notes.append(
            f"{len(no_deployment)} worker(s) without a deployment label ({_quoted(deployment_labels)}) or a "
            f"namespace and owner_name ({_shown(no_deployment)}): the workers of a model in a cluster form "
            f"one pool; {DOC}"
        )
    return notes
