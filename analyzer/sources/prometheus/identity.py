"""Who a zero-agent series is about: the GPU (or MIG instance) a dcgm-exporter series names, the node it sits
on, and the pod (worker) a GPU or engine series belongs to.

Label names come from the shared dcgm vocabulary (fleet.vocabulary.dcgm).
Reasoning: docs/analyzer.md#identity
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.vocabulary.dcgm import (
    GPU_INDEX_LABEL,
    HOSTNAME_LABELS,
    MIG_DEVICE_UUID_LABEL,
    MIG_INSTANCE_LABEL,
    MIG_PROFILE_LABELS,
    MODEL_NAME_LABELS,
    POD_LABEL_SETS,
    UUID_LABELS,
    mig_gpu_name,
    mig_key,
)

EXPORTER_POD = re.compile(r"dcgm-exporter")  # a pod label naming the exporter itself, not a GPU's user
POD_LABELS = (("exported_pod", "exported_namespace", "exported_container"), *POD_LABEL_SETS)
NODE_LABELS = ("node", "kubernetes_node", *HOSTNAME_LABELS)
UNKNOWN = "unknown"

Pod = tuple[str | None, str, str | None]  # namespace, pod, container


def first(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def host(instance: str | None) -> str | None:
    return instance.rsplit(":", 1)[0] if instance else None


def pod_of(labels: Mapping[str, str], skip: re.Pattern[str] | None = None) -> Pod | None:
    """The pod a series names (``skip``: pod names that are the exporter's own target labels)."""
    for pod_label, namespace_label, container_label in POD_LABELS:
        pod = labels.get(pod_label)
        if pod and not (skip and skip.search(pod)):
            return labels.get(namespace_label) or None, pod, labels.get(container_label) or None
    return None


def worker_id(pod: Pod) -> str:
    return f"{pod[0]}/{pod[1]}" if pod[0] else pod[1]


@dataclass(frozen=True)
class GpuIdentity:
    gpu_uuid: str
    node: str
    gpu_index: int
    gpu_name: str
    parent: str | None  # a MIG instance's parent GPU
    mig_profile: str | None


def gpu_identity(labels: Mapping[str, str]) -> GpuIdentity | None:
    """The GPU or MIG instance a dcgm-exporter series names; None without a UUID, or an index and node."""
    node = first(labels, *NODE_LABELS) or host(labels.get("instance"))
    index_text = first(labels, GPU_INDEX_LABEL) or ""
    uuid = first(labels, *UUID_LABELS)
    if uuid is None:
        if not (node and index_text):
            return None
        uuid = f"{node}/gpu{index_text}"
    name = first(labels, *MODEL_NAME_LABELS) or UNKNOWN
    index = int(index_text) if index_text.isdigit() else 0
    instance = first(labels, MIG_INSTANCE_LABEL)
    if instance is None:
        return GpuIdentity(uuid, node or UNKNOWN, index, name, None, None)
    profile = first(labels, *MIG_PROFILE_LABELS)
    return GpuIdentity(
        gpu_uuid=first(labels, MIG_DEVICE_UUID_LABEL) or mig_key(uuid, instance),
        node=node or UNKNOWN,
        gpu_index=index,
        gpu_name=mig_gpu_name(name, profile),
        parent=uuid,
        mig_profile=profile,
    )
