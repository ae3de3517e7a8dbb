"""A GPU and a serving worker as last reported: one declaration each, for the store, the analyzer, the
zero-agent reader and the dashboard.

What changes per window lives in the samples (``fleet.contract``); these records hold what identifies a GPU
or a worker and the latest of its descriptive fields ("latest window wins"). Fields a reader cannot know
are ``None``, never a default (a TP degree nobody reported, the first time a GPU was seen by a source
without history).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fleet.contract import Role


@dataclass(frozen=True)
class GpuRecord:
    """A GPU or MIG instance. ``sku`` is the catalog key (None where not resolved); a MIG instance names its
    physical GPU (``parent_gpu_uuid``) and profile where the source said them."""

    gpu_uuid: str
    node: str
    gpu_name: str
    sku: str | None
    worker_id: str | None
    source: str
    state: str
    cluster: str | None = None
    parent_gpu_uuid: str | None = None
    mig_profile: str | None = None
    gpu_index: int | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None


@dataclass(frozen=True)
class WorkerRecord:
    """A serving worker: its engine, model, role and the GPUs it holds (``gpu_join``: how they were found)."""

    worker_id: str
    node: str
    engine: str
    model: str
    role: Role
    role_source: str
    precision: str | None
    tp: int | None  # None: neither the engine nor its GPUs said (never defaulted)
    gpu_uuids: tuple[str, ...]
    cluster: str | None = None
    deployment: str | None = None
    kv_capacity_tokens: int | None = None  # as the engine reports it (None: not reported)
    max_running_requests: int | None = None  # its running-request cap as it reports it (None: not reported)
    gpu_join: str | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None
