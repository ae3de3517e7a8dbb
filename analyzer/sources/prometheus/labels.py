"""What a zero-agent worker's series labels say: its phase role, its cluster and its serving deployment (with
the model, its pool).

Words come from the shared vocabulary; the order of evidence follows the collector's (collector/roles.py).
Reasoning: docs/analyzer.md#labels
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from fleet.contract import Role, RoleSource
from fleet.labels import (
    DEPLOYMENT_LABELS,
    DYNAMO_COMPONENT,
    DYNAMO_COMPONENT_METRIC_LABEL,
    DYNAMO_COMPONENT_TYPE,
    DYNAMO_NAMESPACE_METRIC_LABEL,
    DYNAMO_WORKER_TYPE,
    ENGINE_TYPE_LABEL,
    LLMD_LABEL_PREFIX,
    POD_TEMPLATE_HASH,
    ROLE_POD_LABELS,
    sanitise_label,
)
from fleet.vocabulary.roles import role_from_component_names, role_from_text


class Family(StrEnum):
    """Which exporter a series comes from; an engine family's value names the engine. ``dynamo``: Dynamo's
    own worker metrics, read for their labels only."""

    GPU = "gpu"
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    DYNAMO = "dynamo"

    @property
    def is_engine(self) -> bool:
        return self not in (Family.GPU, Family.DYNAMO)


# The role labels tried after the operator's own (--role-label): ``role``, the name phasefit's docs and alert
# rules suggest relabelling a role to, then the serving stacks' pod labels.
RELABELLED_ROLE_LABEL = "role"
DEFAULT_ROLE_LABELS: tuple[str, ...] = (RELABELLED_ROLE_LABEL, *ROLE_POD_LABELS)

# A worker's pool is (cluster, deployment, model): never from node or pod names. The cluster label is the
# operator's choice (default "cluster", the usual external label a Thanos / Mimir / federated query returns).
DEFAULT_CLUSTER_LABEL = "cluster"
# The deployment labels, strongest first: the collector's table plus Dynamo's ``dynamo_namespace`` label.
DEFAULT_DEPLOYMENT_LABELS: tuple[str, ...] = (*DEPLOYMENT_LABELS, DYNAMO_NAMESPACE_METRIC_LABEL)
# Else "<namespace>/<owner>": kube-state-metrics' kube_pod_owner labels where a rule joins them in; a
# Deployment's ReplicaSet loses its pod-template-hash suffix when the pod's hash label says so.
OWNER_KIND_LABEL = "owner_kind"
OWNER_NAME_LABEL = "owner_name"
MAX_NAME = 253

EngineLabels = Sequence[tuple[float, Family, Mapping[str, str]]]  # (last timestamp, family, labels)
GpuLabels = Sequence[tuple[float, Mapping[str, str]]]


def label_value(labels: Mapping[str, str], name: str) -> str | None:
    """A pod label raw, sanitised, or as kube-state-metrics' ``label_<sanitised>``."""
    safe = sanitise_label(name)
    return labels.get(name) or labels.get(safe) or labels.get(f"label_{safe}") or None


def _recent(items: Iterable[tuple[float, Mapping[str, str]]]) -> list[Mapping[str, str]]:
    return [labels for _, labels in sorted(items, key=lambda item: -item[0])]


def resolve_role(
    engine_labels: EngineLabels, gpu_labels: GpuLabels, role_label: str | None
) -> tuple[Role, RoleSource]:
    """A worker's role from the labels of its engine (and Dynamo) series and its GPU series.

    Strongest first: SGLang's ``engine_type`` prefill/decode, the role labels, Dynamo's pod and component
    names, ``engine_type`` unified, an llm-d pod without a role label. Order: docs/analyzer.md#labels
    """
    engines = _recent((ts, labels) for ts, _, labels in engine_labels)
    types = [role_from_text(labels.get(ENGINE_TYPE_LABEL)) for labels in engines]
    for role in types:
        if role in (Role.PREFILL, Role.DECODE):
            return role, RoleSource.ENGINE
    label_sets = [*engines, *_recent(gpu_labels)]
    names = (role_label, *DEFAULT_ROLE_LABELS) if role_label else DEFAULT_ROLE_LABELS
    for name in names:
        for labels in label_sets:
            role = role_from_text(label_value(labels, name))
            if role is not None:
                return role, RoleSource.POD_LABEL
    if any(
        (label_value(labels, DYNAMO_COMPONENT_TYPE) or "").lower() == DYNAMO_WORKER_TYPE
        for labels in label_sets
    ):
        return Role.MIXED, RoleSource.POD_LABEL
    components = [
        value
        for labels in label_sets
        for value in (labels.get(DYNAMO_COMPONENT_METRIC_LABEL), label_value(labels, DYNAMO_COMPONENT))
        if value
    ]
    role = role_from_component_names(components)
    if role is not None:
        return role, RoleSource.COMPONENT
    if Role.MIXED in types:
        return Role.MIXED, RoleSource.ENGINE
    llmd = sanitise_label(LLMD_LABEL_PREFIX)
    if any(k.startswith((llmd, f"label_{llmd}")) for labels in label_sets for k in labels):
        return Role.DECODE, RoleSource.POD_LABEL
    return Role.UNKNOWN, RoleSource.NONE


def resolve_cluster(label_sets: Sequence[Mapping[str, str]], cluster_label: str) -> str | None:
    """The first label set's value of ``cluster_label`` (most recent series first)."""
    for labels in label_sets:
        value = labels.get(cluster_label)
        if value:
            return value[:MAX_NAME]
    return None


def resolve_deployment(
    label_sets: Sequence[Mapping[str, str]],
    deployment_labels: Sequence[str],
    namespace: str | None,
) -> str | None:
    """A worker's deployment from its series' labels: the first of ``deployment_labels`` any set carries
    (label order first, then recency), else ``<namespace>/<owner>``; None when neither is there."""
    for name in deployment_labels:
        for labels in label_sets:
            value = label_value(labels, name)
            if value:
                return value[:MAX_NAME]
    for labels in label_sets:
        owner = labels.get(OWNER_NAME_LABEL)
        where = namespace or labels.get("namespace")
        if not (owner and where):
            continue
        template_hash = label_value(labels, POD_TEMPLATE_HASH)
        if (
            labels.get(OWNER_KIND_LABEL) == "ReplicaSet"
            and template_hash
            and owner.endswith(f"-{template_hash}")
        ):
            owner = owner[: -len(template_hash) - 1]
        return f"{where}/{owner}"[:MAX_NAME]
    return None
