"""Zero-agent mode's pure core: Prometheus ``query_range`` series -> the analyzer's GpuFrame and EngineFrame.

GPUs are keyed by UUID (``UUID``/``uuid``/``gpu_uuid``; a MIG instance by ``<parent>/<GPU_I_ID>``), named by
``modelName``, placed on a node by ``node``/``Hostname``/``hostname``. A GPU belongs to the worker
``<namespace>/<pod>`` that dcgm-exporter's Kubernetes mapping names (``exported_pod`` where Prometheus
renamed a clash with the exporter's own target labels). Engine series belong to the pod of their scrape
target (``namespace``/``pod`` target labels), or to their ``instance`` outside Kubernetes; so GPU and engine
series join on (namespace, pod). A GPU without a pod stays unattributed, never guessed; a field no series
reports is NaN, never 0. Every row's source is ``prometheus``. Cluster and deployment (the pool, with the
model) come from the series' labels (prometheus_metrics), never from node or pod names.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.frames import ROLES, SOURCES, STATES, EngineFrame, FloatArray, GpuFrame, IntArray
from analyzer.prometheus_metrics import (
    DEFAULT_CLUSTER_LABEL,
    DEFAULT_DEPLOYMENT_LABELS,
    Family,
    MetricQuery,
    resolve_cluster,
    resolve_deployment,
    resolve_role,
)
from analyzer.prometheus_series import (
    Placements,
    RangeSeries,
    TimeGrid,
    dedupe_ranks,
    ratio_in_range,
)
from fleet.contract import GpuState, Role, RoleSource, TelemetrySource
from fleet.gpus import GpuCatalog

XID_GPU_FALLEN_OFF_BUS = 79
EXPORTER_POD = re.compile(r"dcgm-exporter")  # a pod label naming the exporter itself, not a GPU's user
_PROFILING = ("sm_active", "tensor_active", "dram_active")
_RATIOS = (*_PROFILING, "gpu_util")
_GPU_COLUMNS = (*_RATIOS, "mem_used_bytes", "xid")
_ENGINE_COLUMNS = (
    "prompt_tokens", "generation_tokens", "requests_running", "requests_waiting", "kv_cache_usage",
    "preemptions",
)  # fmt: skip
_POD_LABELS = (
    ("exported_pod", "exported_namespace", "exported_container"),
    ("pod", "namespace", "container"),
    ("pod_name", "pod_namespace", "container_name"),  # dcgm-exporter -o
)
_NODE_LABELS = ("node", "kubernetes_node", "Hostname", "hostname")

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
Pod = tuple[str | None, str, str | None]  # namespace, pod, container


@dataclass(frozen=True)
class PrometheusGpu:
    """A GPU as Prometheus reports it, once per worker it served in the range (``worker_id`` None: no pod)."""

    gpu_uuid: str
    node: str
    gpu_index: int
    gpu_name: str
    sku: str | None  # catalog key, when a catalog was given
    parent_gpu_uuid: str | None
    mig_profile: str | None
    worker_id: str | None
    namespace: str | None
    pod: str | None
    container: str | None
    windows: int  # grid columns with any value
    first_seen: float | None
    last_seen: float | None
    state: GpuState  # in its last window
    cluster: str | None = None


@dataclass(frozen=True)
class PrometheusWorker:
    """A serving worker: a pod holding GPUs, an engine target, or both. ``gpu_uuids``: the GPUs the pod
    held in the range (its TP x DP size; the split is not observable from these metrics)."""

    worker_id: str
    node: str
    engine: str | None  # None: GPUs attributed to the pod but no engine metrics scraped from it
    model: str | None
    role: Role
    role_source: RoleSource
    namespace: str | None
    pod: str | None
    gpu_uuids: tuple[str, ...]
    first_seen: float | None
    last_seen: float | None
    cluster: str | None = None
    deployment: str | None = None


@dataclass(frozen=True)
class PrometheusFleet:
    """What a zero-agent read produced: the frames, the inventory behind them, and notes on what it had to
    leave out. ``gpu_row_gpu`` indexes ``gpus`` for each GpuFrame row and ``gpu_row_mem_used_bytes`` carries
    FB_USED (bytes) per row, so per-GPU facts (SKU, memory) stay joinable to the frame."""

    grid: TimeGrid
    gpu: GpuFrame
    engine: EngineFrame
    gpus: tuple[PrometheusGpu, ...]
    workers: tuple[PrometheusWorker, ...]
    gpu_row_gpu: IntArray
    gpu_row_mem_used_bytes: FloatArray
    notes: tuple[str, ...]

    @property
    def window_s(self) -> float:
        return self.grid.step

    @property
    def unattributed_gpus(self) -> tuple[str, ...]:
        """GPUs that reported in the range but never under a pod."""
        attributed = {g.gpu_uuid for g in self.gpus if g.worker_id is not None}
        return tuple(sorted({g.gpu_uuid for g in self.gpus if g.windows} - attributed))


def _first(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def _host(instance: str | None) -> str | None:
    return instance.rsplit(":", 1)[0] if instance else None


def _pod(labels: Mapping[str, str], skip: re.Pattern[str] | None) -> Pod | None:
    for pod_label, namespace_label, container_label in _POD_LABELS:
        pod = labels.get(pod_label)
        if pod and not (skip and skip.search(pod)):
            return labels.get(namespace_label) or None, pod, labels.get(container_label) or None
    return None


def _worker_id(pod: Pod) -> str:
    return f"{pod[0]}/{pod[1]}" if pod[0] else pod[1]


@dataclass
class _GpuMeta:
    gpu_uuid: str
    node: str
    gpu_index: int
    gpu_name: str
    parent: str | None
    mig_profile: str | None
    pod: Pod | None
    labels: list[tuple[float, Mapping[str, str]]]


def _gpu_meta(labels: Mapping[str, str], pod: Pod | None) -> _GpuMeta | None:
    node = _first(labels, *_NODE_LABELS) or _host(labels.get("instance"))
    index_text = _first(labels, "gpu") or ""
    uuid = _first(labels, "UUID", "uuid", "gpu_uuid")
    if uuid is None:
        if not (node and index_text):
            return None
        uuid = f"{node}/gpu{index_text}"
    name = _first(labels, "modelName", "model_name") or "unknown"
    index = int(index_text) if index_text.isdigit() else 0
    gi_id = _first(labels, "GPU_I_ID")
    if gi_id is None:
        return _GpuMeta(uuid, node or "unknown", index, name, None, None, pod, [])
    profile = _first(labels, "GPU_I_PROFILE", "dra_mig_profile")
    return _GpuMeta(
        gpu_uuid=_first(labels, "dra_mig_device_uuid") or f"{uuid}/{gi_id}",
        node=node or "unknown",
        gpu_index=index,
        gpu_name=f"{name} MIG {profile}" if profile and "MIG" not in name else name,
        parent=uuid,
        mig_profile=profile,
        pod=pod,
        labels=[],
    )


@dataclass
class _Gpus:
    metas: list[_GpuMeta]
    columns: dict[str, FloatArray]  # rows x grid columns
    present: BoolArray
    state: IntArray  # STATES index per cell


def _map_gpus(
    results: Mapping[MetricQuery, Sequence[RangeSeries]],
    grid: TimeGrid,
    exporter_pod: re.Pattern[str] | None,
    notes: list[str],
) -> _Gpus:
    rows = Placements()
    metas: list[_GpuMeta] = []
    skipped = 0
    for query, series_list in results.items():
        if query.family is not Family.GPU:
            continue
        for series in series_list:
            pod = _pod(series.labels, exporter_pod)
            meta = _gpu_meta(series.labels, pod)
            if meta is None:
                skipped += 1
                continue
            row = rows.row((meta.gpu_uuid, _worker_id(pod) if pod else None))
            if row == len(metas):
                metas.append(meta)
            metas[row].labels.append((float(series.ts[-1]), series.labels))
            rows.place(row, query, series)
    if skipped:
        notes.append(f"{skipped} GPU series without a UUID, or a GPU index and node, were skipped")
    columns = {c: rows.fill(c, grid, total=False) for c in _GPU_COLUMNS}
    dropped = 0
    for name in _RATIOS:
        columns[name], bad = ratio_in_range(columns[name])
        dropped += bad
    if dropped:
        notes.append(f"{dropped} GPU ratio value(s) outside 0..1 dropped (DCGM can report > 100% on MIG)")

    # Profiling fields stuck at 0 while the GPU runs kernels is broken telemetry (NVIDIA/dcgm-exporter#635,
    # NVIDIA/DCGM#303): the ratios are treated as missing rather than as an idle GPU.
    profiling = np.stack([columns[c] for c in _PROFILING])
    reported = ~np.isnan(profiling)
    stuck = (
        reported.any(axis=0)
        & np.all(~reported | (profiling == 0.0), axis=0)
        & (np.nan_to_num(columns["gpu_util"]) > 0.0)
    )
    if stuck.any():
        for name in _PROFILING:
            columns[name] = np.where(stuck, np.nan, columns[name])
        notes.append(
            f"profiling fields read 0 while GPU_UTIL > 0 in {int(stuck.sum())} GPU window(s): treated as "
            "missing (broken DCGM profiling) and the GPUs marked degraded"
        )
    present = np.zeros((len(metas), grid.n), dtype=bool)
    for values in columns.values():
        present |= ~np.isnan(values)
    missing = np.isnan(columns["tensor_active"]) | np.isnan(columns["dram_active"])
    no_profiling = present & np.isnan(columns["tensor_active"]) & np.isnan(columns["dram_active"]) & ~stuck
    if no_profiling.any():
        count = len({metas[r].gpu_uuid for r in np.flatnonzero(no_profiling.any(axis=1))})
        notes.append(
            f"{count} GPU(s) report no DCGM_FI_PROF_PIPE_TENSOR_ACTIVE / DCGM_FI_PROF_DRAM_ACTIVE: add the "
            "profiling fields to dcgm-exporter's counters CSV, or their bottleneck stays unknown"
        )
    state = np.full(present.shape, STATES.index(GpuState.OK), dtype=np.int64)
    state[present & (missing | stuck)] = STATES.index(GpuState.DEGRADED)
    state[columns["xid"] == XID_GPU_FALLEN_OFF_BUS] = STATES.index(GpuState.LOST)
    return _Gpus(metas, columns, present, state)


@dataclass
class _EngineMeta:
    worker_id: str
    pod: Pod | None
    labels: list[tuple[float, Family, Mapping[str, str]]]


@dataclass
class _Engines:
    metas: list[_EngineMeta]
    columns: dict[str, FloatArray]
    present: BoolArray


def _map_engines(
    results: Mapping[MetricQuery, Sequence[RangeSeries]], grid: TimeGrid, notes: list[str]
) -> _Engines:
    rows = Placements()
    metas: list[_EngineMeta] = []
    skipped = 0
    for query, series_list in results.items():
        if query.family is Family.GPU:
            continue
        for series in series_list:
            pod = _pod(series.labels, None)
            worker = _worker_id(pod) if pod else series.labels.get("instance")
            if not worker:
                skipped += 1
                continue
            row = rows.row(worker)
            if row == len(metas):
                metas.append(_EngineMeta(worker, pod, []))
            metas[row].labels.append((float(series.ts[-1]), query.family, series.labels))
            rows.place(row, query, series)
    if skipped:
        notes.append(f"{skipped} engine series without a pod or instance label were skipped")
    for column, placed in list(rows.placed.items()):
        rows.placed[column] = dedupe_ranks(placed)
    columns = {c: rows.fill(c, grid, total=c != "kv_cache_usage") for c in _ENGINE_COLUMNS}
    columns["kv_cache_usage"], _ = ratio_in_range(columns["kv_cache_usage"])
    present = np.zeros((len(metas), grid.n), dtype=bool)
    for values in columns.values():
        present |= ~np.isnan(values)
    if not metas:
        notes.append(
            "no vLLM or SGLang series in the range: token counts, queues, KV usage and engine-reported roles "
            "are unknown (are the engines' /metrics scraped?)"
        )
    return _Engines(metas, columns, present)


def _span(grid: TimeGrid, present: BoolArray) -> tuple[int, float | None, float | None]:
    cols = np.flatnonzero(present)
    if cols.size == 0:
        return 0, None, None
    return int(cols.size), grid.start + float(cols[0]) * grid.step, grid.start + float(cols[-1]) * grid.step


def _most_common(values: Iterable[str | None]) -> str | None:
    counts = Counter(v for v in values if v)
    return counts.most_common(1)[0][0] if counts else None


def _recent_first(labels: Iterable[tuple[float, Mapping[str, str]]]) -> list[Mapping[str, str]]:
    return [item[1] for item in sorted(labels, key=lambda item: -item[0])]


def _inventory_gpus(
    g: _Gpus, grid: TimeGrid, catalog: GpuCatalog | None, cluster_label: str, default_cluster: str | None
) -> list[PrometheusGpu]:
    out: list[PrometheusGpu] = []
    for row, meta in enumerate(g.metas):
        windows, first, last = _span(grid, g.present[row])
        pod = meta.pod
        cluster = resolve_cluster(_recent_first(meta.labels), cluster_label) or default_cluster
        out.append(
            PrometheusGpu(
                gpu_uuid=meta.gpu_uuid,
                node=meta.node,
                gpu_index=meta.gpu_index,
                gpu_name=meta.gpu_name,
                sku=catalog.resolve(meta.gpu_name).key if catalog is not None else None,
                parent_gpu_uuid=meta.parent,
                mig_profile=meta.mig_profile,
                worker_id=_worker_id(pod) if pod else None,
                namespace=pod[0] if pod else None,
                pod=pod[1] if pod else None,
                container=pod[2] if pod else None,
                windows=windows,
                first_seen=first,
                last_seen=last,
                state=STATES[int(g.state[row, np.flatnonzero(g.present[row])[-1]])]
                if windows
                else GpuState.OK,
                cluster=cluster,
            )
        )
    return out


@dataclass(frozen=True)
class _PoolLabels:
    cluster_label: str
    deployment_labels: Sequence[str]
    default_cluster: str | None


def _inventory_workers(
    g: _Gpus,
    gpus: Sequence[PrometheusGpu],
    e: _Engines,
    grid: TimeGrid,
    role_label: str | None,
    pool: _PoolLabels,
) -> list[PrometheusWorker]:
    gpu_rows: dict[str, list[int]] = defaultdict(list)
    for row, gpu in enumerate(gpus):
        if gpu.worker_id is not None and gpu.windows:
            gpu_rows[gpu.worker_id].append(row)
    engine_rows = {meta.worker_id: row for row, meta in enumerate(e.metas)}
    out: list[PrometheusWorker] = []
    for worker_id in sorted(set(gpu_rows) | set(engine_rows)):
        held = [gpus[r] for r in gpu_rows.get(worker_id, [])]
        engine_row = engine_rows.get(worker_id)
        engine = e.metas[engine_row] if engine_row is not None else None
        engine_labels = engine.labels if engine is not None else []
        gpu_labels = [item for r in gpu_rows.get(worker_id, []) for item in g.metas[r].labels]
        role, role_source = resolve_role(engine_labels, gpu_labels, role_label)
        node = (
            _most_common(_first(labels, *_NODE_LABELS) for _, _, labels in engine_labels)
            or _most_common(gpu.node for gpu in held)
            or _most_common(_host(labels.get("instance")) for _, _, labels in engine_labels)
            or "unknown"
        )
        pod = engine.pod if engine is not None and engine.pod else None
        spans = [(gpu.first_seen, gpu.last_seen) for gpu in held]
        if engine_row is not None:
            spans.append(_span(grid, e.present[engine_row])[1:])
        firsts = [a for a, _ in spans if a is not None]
        lasts = [b for _, b in spans if b is not None]
        namespace = pod[0] if pod else (held[0].namespace if held else None)
        label_sets = [
            *_recent_first((ts, labels) for ts, _, labels in engine_labels),
            *_recent_first(gpu_labels),
        ]
        cluster = (
            resolve_cluster(label_sets, pool.cluster_label)
            or _most_common(gpu.cluster for gpu in held)
            or pool.default_cluster
        )
        out.append(
            PrometheusWorker(
                worker_id=worker_id,
                node=node,
                engine=_most_common(family.value for _, family, _ in engine_labels),
                model=_most_common(labels.get("model_name") for _, _, labels in engine_labels),
                role=role,
                role_source=role_source,
                namespace=namespace,
                pod=pod[1] if pod else (held[0].pod if held else None),
                gpu_uuids=tuple(sorted({gpu.gpu_uuid for gpu in held})),
                first_seen=min(firsts) if firsts else None,
                last_seen=max(lasts) if lasts else None,
                cluster=cluster,
                deployment=resolve_deployment(label_sets, pool.deployment_labels, namespace),
            )
        )
    return out


def _shown(workers: Sequence[PrometheusWorker]) -> str:
    return ", ".join(w.worker_id for w in workers[:5]) + (", ..." if len(workers) > 5 else "")


def _pool_notes(workers: Sequence[PrometheusWorker], pool: _PoolLabels) -> list[str]:
    """What the pools will lack: a cluster or deployment label the series did not carry."""
    notes: list[str] = []
    if not workers:
        return notes
    label = pool.cluster_label
    no_cluster = [w for w in workers if w.cluster is None]
    if len(no_cluster) == len(workers):
        notes.append(
            f"no {label!r} label on the engine or GPU series (nor a {label!r} external label on the "
            "Prometheus server): every worker is in one cluster; name the label that carries it, or map "
            "nodes to clusters"
        )
    elif no_cluster:
        notes.append(
            f"{len(no_cluster)} worker(s) without a {label!r} label ({_shown(no_cluster)}): they join the "
            "default cluster"
        )
    no_deployment = [w for w in workers if w.deployment is None]
    if no_deployment:
        expected = ", ".join(repr(n) for n in pool.deployment_labels[:3])
        expected += ", ..." if len(pool.deployment_labels) > 3 else ""
        notes.append(
            f"{len(no_deployment)} worker(s) without a deployment label ({expected}) or a namespace and "
            f"owner_name ({_shown(no_deployment)}): the workers of a model in a cluster form one pool"
        )
    return notes


def _codes(keys: Sequence[str], table: Sequence[str]) -> IntArray:
    index = {k: i for i, k in enumerate(table)}
    return np.array([index[k] for k in keys], dtype=np.int64)


def _gpu_frame(g: _Gpus, gpus: Sequence[PrometheusGpu], grid: TimeGrid) -> tuple[GpuFrame, IntArray]:
    attributed = np.array([gpu.worker_id is not None for gpu in gpus], dtype=bool).reshape(-1, 1)
    rows, cols = np.nonzero(g.present & attributed)
    row_worker = [str(gpus[r].worker_id) for r in rows.tolist()]
    names = tuple(sorted(set(row_worker)))
    frame = GpuFrame(
        workers=names,
        ts=grid.start + cols.astype(np.float64) * grid.step,
        worker=_codes(row_worker, names),
        sm_active=g.columns["sm_active"][rows, cols],
        tensor_active=g.columns["tensor_active"][rows, cols],
        dram_active=g.columns["dram_active"][rows, cols],
        gpu_util=g.columns["gpu_util"][rows, cols],
        source=np.full(rows.size, SOURCES.index(TelemetrySource.PROMETHEUS), dtype=np.int64),
        state=g.state[rows, cols],
    )
    return frame, np.stack([rows.astype(np.int64), cols.astype(np.int64)])


def _engine_frame(e: _Engines, grid: TimeGrid, roles: Mapping[str, Role]) -> EngineFrame:
    rows, cols = np.nonzero(e.present)
    row_worker = [e.metas[r].worker_id for r in rows.tolist()]
    names = tuple(sorted(set(row_worker)))
    role_of = np.array([ROLES.index(roles[meta.worker_id]) for meta in e.metas], dtype=np.int64)
    return EngineFrame(
        workers=names,
        ts=grid.start + cols.astype(np.float64) * grid.step,
        worker=_codes(row_worker, names),
        role=role_of[rows] if rows.size else np.zeros(0, dtype=np.int64),
        kv_cache_usage=e.columns["kv_cache_usage"][rows, cols],
        requests_running=e.columns["requests_running"][rows, cols],
        requests_waiting=e.columns["requests_waiting"][rows, cols],
        preemptions=e.columns["preemptions"][rows, cols],
        prompt_tokens=e.columns["prompt_tokens"][rows, cols],
        generation_tokens=e.columns["generation_tokens"][rows, cols],
    )


def map_fleet(
    results: Mapping[MetricQuery, Sequence[RangeSeries]],
    grid: TimeGrid,
    *,
    role_label: str | None = None,
    gpu_catalog: GpuCatalog | None = None,
    exporter_pod: re.Pattern[str] | None = EXPORTER_POD,
    cluster_label: str = DEFAULT_CLUSTER_LABEL,
    deployment_labels: Sequence[str] = DEFAULT_DEPLOYMENT_LABELS,
    default_cluster: str | None = None,
) -> PrometheusFleet:
    """Frames and inventory from the series of every query, all evaluated on ``grid``.

    ``role_label``: the label that carries a worker's phase role (a pod label dcgm-exporter surfaces, or a
    relabelled one), tried before the well-known ones. ``gpu_catalog`` resolves ``modelName`` to SKU keys.
    ``exporter_pod``: pod names that are the exporter's own scrape-target labels, never a GPU's user.
    ``cluster_label`` names the cluster on a series; ``default_cluster`` (the Prometheus server's own
    external label) stands in where no series carries it. ``deployment_labels``: the labels naming a
    worker's deployment, strongest first (else ``<namespace>/<owner>`` where ``owner_name`` is joined in).
    """
    notes: list[str] = []
    g = _map_gpus(results, grid, exporter_pod, notes)
    e = _map_engines(results, grid, notes)
    gpus = _inventory_gpus(g, grid, gpu_catalog, cluster_label, default_cluster)
    pool = _PoolLabels(cluster_label, tuple(deployment_labels), default_cluster)
    workers = _inventory_workers(g, gpus, e, grid, role_label, pool)
    unattributed = {gpu.gpu_uuid for gpu in gpus if gpu.windows} - {
        gpu.gpu_uuid for gpu in gpus if gpu.worker_id is not None
    }
    if unattributed:
        notes.append(
            f"{len(unattributed)} GPU(s) carry no pod label and stay unattributed (dcgm-exporter without "
            "Kubernetes mapping, or GPUs no pod holds)"
        )
    unknown = [w.worker_id for w in workers if w.role is Role.UNKNOWN]
    if unknown:
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        notes.append(
            f"{len(unknown)} worker(s) without a role label ({shown}): name the label that carries it"
        )
    notes.extend(_pool_notes(workers, pool))
    gpu_frame, cells = _gpu_frame(g, gpus, grid)
    return PrometheusFleet(
        grid=grid,
        gpu=gpu_frame,
        engine=_engine_frame(e, grid, {w.worker_id: w.role for w in workers}),
        gpus=tuple(gpus),
        workers=tuple(workers),
        gpu_row_gpu=cells[0],
        gpu_row_mem_used_bytes=g.columns["mem_used_bytes"][cells[0], cells[1]],
        notes=tuple(notes),
    )
