"""A worker's serving deployment (router group), from the serving stack's own labels, never from names.

With the cluster and the served model it names the worker's pool (analyzer.pools.pool). Order: the stack
labels in :data:`fleet.labels.DEPLOYMENT_LABELS` (raw pod labels or dcgm-exporter's sanitised copies),
the ``dynamo_namespace`` the engine itself reports, the operator's mapping file, else
``<namespace>/<owner>`` from the pod's ownerReferences (a Deployment's ReplicaSet stripped of its
pod-template-hash suffix). Without any: None.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from collector.roles import sanitise_label
from fleet.labels import DEPLOYMENT_LABELS, POD_TEMPLATE_HASH

MAX_NAME = 253  # the contract's Name bound


@dataclass(frozen=True)
class OwnerRef:
    """The pod's controlling owner (metadata.ownerReferences with controller=true, else the first)."""

    kind: str
    name: str


def label_value(labels: Mapping[str, str], key: str) -> str | None:
    """A pod label raw or as dcgm-exporter sanitises it (``llm-d.ai/role`` -> ``llm_d_ai_role``)."""
    return labels.get(key) or labels.get(sanitise_label(key)) or None


def from_labels(labels: Mapping[str, str]) -> str | None:
    for key in DEPLOYMENT_LABELS:
        value = label_value(labels, key)
        if value:
            return value[:MAX_NAME]
    return None


def owner_name(owner: OwnerRef, labels: Mapping[str, str]) -> str:
    """A ReplicaSet ``<deployment>-<hash>`` whose pods carry ``pod-template-hash=<hash>`` -> the Deployment;
    any other owner (StatefulSet, LeaderWorkerSet, Job, ...) as it is."""
    template_hash = label_value(labels, POD_TEMPLATE_HASH)
    suffix = f"-{template_hash}"
    if owner.kind == "ReplicaSet" and template_hash and owner.name.endswith(suffix):
        return owner.name[: -len(suffix)]
    return owner.name


def resolve_deployment(
    labels: Mapping[str, str],
    *,
    namespace: str | None = None,
    owner: OwnerRef | None = None,
    engine_namespaces: Collection[str] = (),
    mapped: str | None = None,
) -> str | None:
    """The deployment of one worker (see the module docstring for the order)."""
    found = from_labels(labels)
    if found:
        return found
    if len(engine_namespaces) == 1:  # Dynamo's dynamo_namespace metric label; several: ambiguous
        return next(iter(engine_namespaces))[:MAX_NAME]
    if mapped:
        return mapped
    if namespace and owner is not None:
        return f"{namespace}/{owner_name(owner, labels)}"[:MAX_NAME]
    return None
