"""Zero-agent mode's pure core: Prometheus ``query_range`` series -> the analyzer's GpuFrame and EngineFrame.

GPU and engine series join on (namespace, pod). A GPU without a pod stays unattributed, and a field no
series reports is NaN, never 0. Reasoning: docs/analyzer.md#source
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.sources.prometheus.fleet import PrometheusFleet, PrometheusGpu, PrometheusWorker
from analyzer.sources.prometheus.histograms import Held, window_histograms
from analyzer.sources.prometheus.identity import (
    EXPORTER_POD,
    NODE_LABELS,
    GpuIdentity,
    Pod,
    first,
    gpu_identity,
    host,
    pod_of,
    worker_id,
)
from analyzer.sources.prometheus.labels import (
    DEFAULT_CLUSTER_LABEL,
    DEFAULT_DEPLOYMENT_LABELS,
    Family,
    resolve_cluster,
    resolve_deployment,
    resolve_role,
)
from analyzer.sources.prometheus.metrics import (
    GPU_COLUMNS,
    HISTOGRAM_COLUMNS,
    PRESENT,
    REPORTED_COLUMNS,
    MetricQuery,
    Reduce,
)
from analyzer.sources.prometheus.notes import join_notes, pool_notes, role_notes, unattributed_note
from analyzer.sources.prometheus.reported import kv_capacity_tokens, max_running_requests
from analyzer.sources.prometheus.series import Placements, RangeSeries, TimeGrid, dedupe_ranks, ratio_in_range
from analyzer.telemetry.frames import ROLES, SOURCES, STATES, EngineFrame, FloatArray, GpuFrame, IntArray
from analyzer.telemetry.gpu_view import PROFILING_HELP
from fleet.contract import GpuState, Role, TelemetrySource
from fleet.gpus import GpuCatalog
from fleet.labels import MODEL_NAME_LABELS, TP_RANK_LABEL
from fleet.vocabulary.dcgm import PROFILING_FIELDS, STUCK_CHECK_FIELDS, XID_GPU_FALLEN_OFF_BUS
from fleet.vocabulary.engines import LATENCY_QUANTILES, EngineField

_RATIOS = (*PROFILING_FIELDS, "gpu_util", "mem_copy_util", "gr_engine_active")
_BUSY = (
    "gr_engine_active",
    "mem_copy_util",
)  # gpu_sample's busy-time counters the GpuFrame has no column for
_TOTALS = ("prompt_tokens", "generation_tokens", "requests_running", "requests_waiting", "preemptions")
_LATENCIES = tuple(column for quantiles in LATENCY_QUANTILES.values() for column in quantiles)
_ENGINE_COLUMNS = (*_TOTALS, EngineField.KV_CACHE_USAGE.value, *_LATENCIES)

BoolArray = np.ndarray[Any, np.dtype[np.bool_]]


@dataclass
class _GpuMeta:
    identity: GpuIdentity
    pod: Pod | None
    labels: list[tuple[float, Mapping[str, str]]]


@dataclass
class _Gpus:
    metas: list[_GpuMeta]
    columns: dict[str, FloatArray]  # rows x grid columns
    present: BoolArray
    state: IntArray  # STATES index per cell


def _gpu_rows(
    results: Mapping[MetricQuery, Sequence[RangeSeries]],
    exporter_pod: re.Pattern[str] | None,
    notes: list[str],
) -> tuple[Placements, list[_GpuMeta]]:
    rows = Placements()
    metas: list[_GpuMeta] = []
    skipped = 0
    for query, series_list in results.items():
        if query.family is not Family.GPU:
            continue
        for series in series_list:
            identity = gpu_identity(series.labels)
            if identity is None:
                if query.reduce is not Reduce.PRESENT:  # NVSwitch and CPU entities are listed too: no GPUs
                    skipped += 1
                continue
            pod = pod_of(series.labels, exporter_pod)
            row = rows.row((identity.gpu_uuid, worker_id(pod) if pod else None))
            if row == len(metas):
                metas.append(_GpuMeta(identity, pod, []))
            metas[row].labels.append((float(series.ts[-1]), series.labels))
            rows.place(row, query, series)
    if skipped:
        notes.append(f"{skipped} GPU series without a UUID, or a GPU index and node, were skipped")
    return rows, metas


def _map_gpus(
    results: Mapping[MetricQuery, Sequence[RangeSeries]],
    grid: TimeGrid,
    exporter_pod: re.Pattern[str] | None,
    notes: list[str],
) -> _Gpus:
    rows, metas = _gpu_rows(results, exporter_pod, notes)
    columns = {c: rows.fill(c, grid, total=False) for c in GPU_COLUMNS}
    listed = ~np.isnan(rows.fill(PRESENT, grid, total=False))
    dropped = 0
    for name in _RATIOS:
        columns[name], bad = ratio_in_range(columns[name])
        dropped += bad
    if dropped:
        notes.append(f"{dropped} GPU ratio value(s) outside 0..1 dropped (DCGM can report > 100% on MIG)")

    # Profiling fields stuck at 0 while the GPU runs kernels is broken telemetry (NVIDIA/dcgm-exporter#635,
    # NVIDIA/DCGM#303): the ratios are treated as missing rather than as an idle GPU.
    activity = np.stack([columns[c] for c in STUCK_CHECK_FIELDS])
    reported = ~np.isnan(activity)
    stuck = (
        reported.any(axis=0)
        & np.all(~reported | (activity == 0.0), axis=0)
        & (np.nan_to_num(columns["gpu_util"]) > 0.0)
    )
    if stuck.any():
        for name in STUCK_CHECK_FIELDS:
            columns[name] = np.where(stuck, np.nan, columns[name])
        notes.append(
            f"profiling fields read 0 while GPU_UTIL > 0 in {int(stuck.sum())} GPU window(s): treated as "
            "missing (broken DCGM profiling) and the GPUs marked degraded"
        )
    present = listed.copy()
    for values in columns.values():
        present |= ~np.isnan(values)
    missing = np.isnan(columns["tensor_active"]) | np.isnan(columns["dram_active"])
    state = np.full(present.shape, STATES.index(GpuState.OK), dtype=np.int64)
    state[present & (missing | stuck)] = STATES.index(GpuState.DEGRADED)
    state[_lost(metas, columns)] = STATES.index(GpuState.LOST)
    # A MIG parent's own series (power, Xid) never make it a GPU beside its instances.
    parents = _mig_parents(metas)
    keep = [r for r, meta in enumerate(metas) if meta.identity.gpu_uuid not in parents]
    gpus = _Gpus(
        [metas[r] for r in keep], {c: v[keep] for c, v in columns.items()}, present[keep], state[keep]
    )
    no_profiling = gpus.present & missing[keep] & ~stuck[keep]
    if no_profiling.any():
        count = len({gpus.metas[r].identity.gpu_uuid for r in np.flatnonzero(no_profiling.any(axis=1))})
        notes.append(
            f"{count} GPU(s) report no DCGM_FI_PROF_PIPE_TENSOR_ACTIVE / DCGM_FI_PROF_DRAM_ACTIVE: add the "
            "profiling fields to dcgm-exporter's counters CSV, or their bottleneck stays unknown ("
            + PROFILING_HELP
            + ")"
        )
    return gpus


def _mig_parents(metas: Sequence[_GpuMeta]) -> set[str]:
    return {meta.identity.parent for meta in metas if meta.identity.parent is not None}


def _lost(metas: Sequence[_GpuMeta], columns: Mapping[str, FloatArray]) -> BoolArray:
    """Cells whose GPU, or whose MIG instance's parent, has fallen off the bus (Xid 79): in the exporter's Xid
    window where its exporter counts Xids (a GPU without a count had none), else in the last-Xid field (which
    the exporter never resets), as the collector's dcgm source judges it."""
    targets = [{labels.get("instance") for _, labels in meta.labels} for meta in metas]
    counted = ~np.isnan(columns["xid_counted"]).all(axis=1)
    counting = {t for row in np.flatnonzero(counted) for t in targets[row]}
    windowed = np.array([bool(t & counting) for t in targets], dtype=bool)
    by_count = np.nan_to_num(columns["xid_lost_count"]) > 0
    by_last = columns["xid"] == XID_GPU_FALLEN_OFF_BUS
    lost: BoolArray = np.where(windowed[:, None], by_count, by_last)
    by_uuid: dict[str, list[int]] = defaultdict(list)
    for row, meta in enumerate(metas):
        by_uuid[meta.identity.gpu_uuid].append(row)
    for row, meta in enumerate(metas):
        parent = meta.identity.parent
        if parent is not None and parent in by_uuid:
            lost[row] |= lost[by_uuid[parent]].any(axis=0)
    return lost


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
    reported: dict[int, list[tuple[MetricQuery, RangeSeries]]]  # row -> its KV budget and cap series
    histograms: dict[str, list[list[Held]]]  # column -> rows x grid columns (None: unknown)


def _engine_key(labels: Mapping[str, str]) -> tuple[Pod | None, str | None]:
    pod = pod_of(labels)
    return pod, worker_id(pod) if pod else labels.get("instance")


def _map_engines(
    results: Mapping[MetricQuery, Sequence[RangeSeries]], grid: TimeGrid, notes: list[str], scale: float
) -> _Engines:
    rows = Placements()
    metas: list[_EngineMeta] = []
    skipped = 0
    for query, series_list in results.items():
        if not query.family.is_engine or query.column in REPORTED_COLUMNS:
            continue
        for series in series_list:
            pod, worker = _engine_key(series.labels)
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
    _lend_dynamo_labels(results, rows, metas)
    reported = _reported_series(results, rows)
    for column, placed in list(rows.placed.items()):
        rows.placed[column] = dedupe_ranks(placed)
    columns = {c: rows.fill(c, grid, total=c in _TOTALS) for c in _ENGINE_COLUMNS}
    histograms = {
        c: window_histograms(rows.placed.get(c, []), len(metas), grid, scale=scale)
        for c in HISTOGRAM_COLUMNS.values()
    }
    columns["kv_cache_usage"], _ = ratio_in_range(columns["kv_cache_usage"])
    present = np.zeros((len(metas), grid.n), dtype=bool)
    for column in (*_TOTALS, "kv_cache_usage"):
        present |= ~np.isnan(columns[column])
    if not metas:
        notes.append(
            "no vLLM, SGLang or TensorRT-LLM series in the range: token counts, queues, KV usage and "
            "engine-reported roles are unknown (are the engines' /metrics scraped?)"
        )
    return _Engines(metas, columns, present, reported, histograms)


def _lend_dynamo_labels(
    results: Mapping[MetricQuery, Sequence[RangeSeries]], rows: Placements, metas: list[_EngineMeta]
) -> None:
    """Dynamo's worker metrics lend their labels to the worker whose target serves engine metrics too; a
    Dynamo component with no engine series (a frontend, a router) is no worker."""
    for query, series_list in results.items():
        if query.family is not Family.DYNAMO:
            continue
        for series in series_list:
            _, worker = _engine_key(series.labels)
            row = rows.index.get(worker) if worker else None
            if row is not None:
                metas[row].labels.append((float(series.ts[-1]), query.family, series.labels))


def _reported_series(
    results: Mapping[MetricQuery, Sequence[RangeSeries]], rows: Placements
) -> dict[int, list[tuple[MetricQuery, RangeSeries]]]:
    """The series of what each worker row's engine reports of itself (its KV budget, its concurrency cap);
    a series whose target serves no other engine series: none."""
    out: dict[int, list[tuple[MetricQuery, RangeSeries]]] = defaultdict(list)
    for query, series_list in results.items():
        if query.column not in REPORTED_COLUMNS:
            continue
        for series in series_list:
            _, worker = _engine_key(series.labels)
            row = rows.index.get(worker) if worker else None
            if row is not None:
                out[row].append((query, series))
    return out


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
        windows, first_seen, last_seen = _span(grid, g.present[row])
        pod, gpu = meta.pod, meta.identity
        out.append(
            PrometheusGpu(
                gpu_uuid=gpu.gpu_uuid,
                node=gpu.node,
                gpu_index=gpu.gpu_index,
                gpu_name=gpu.gpu_name,
                sku=catalog.resolve(gpu.gpu_name).key if catalog is not None else None,
                parent_gpu_uuid=gpu.parent,
                mig_profile=gpu.mig_profile,
                worker_id=worker_id(pod) if pod else None,
                namespace=pod[0] if pod else None,
                pod=pod[1] if pod else None,
                container=pod[2] if pod else None,
                windows=windows,
                first_seen=first_seen,
                last_seen=last_seen,
                state=STATES[int(g.state[row, np.flatnonzero(g.present[row])[-1]])]
                if windows
                else GpuState.OK,
                cluster=resolve_cluster(_recent_first(meta.labels), cluster_label) or default_cluster,
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
    for worker, engine_row in sorted(engine_rows.items()):
        held = [gpus[r] for r in gpu_rows.get(worker, [])]
        engine = e.metas[engine_row]
        engine_labels = engine.labels
        served = [(family, labels) for _, family, labels in engine_labels if family.is_engine]
        gpu_labels = [item for r in gpu_rows.get(worker, []) for item in g.metas[r].labels]
        role, role_source = resolve_role(engine_labels, gpu_labels, role_label)
        node = (
            _most_common(first(labels, *NODE_LABELS) for _, labels in served)
            or _most_common(gpu.node for gpu in held)
            or _most_common(host(labels.get("instance")) for _, labels in served)
            or "unknown"
        )
        pod = engine.pod
        spans = [(gpu.first_seen, gpu.last_seen) for gpu in held]
        spans.append(_span(grid, e.present[engine_row])[1:])
        firsts = [a for a, _ in spans if a is not None]
        lasts = [b for _, b in spans if b is not None]
        namespace = pod[0] if pod else (held[0].namespace if held else None)
        label_sets = [
            *_recent_first((ts, labels) for ts, _, labels in engine_labels),
            *_recent_first(gpu_labels),
        ]
        ranks = len({labels[TP_RANK_LABEL] for _, labels in served if TP_RANK_LABEL in labels})
        gpu_uuids = tuple(sorted({gpu.gpu_uuid for gpu in held}))
        engine_name = _most_common(family.value for family, _ in served) or "unknown"
        out.append(
            PrometheusWorker(
                worker_id=worker,
                node=node,
                engine=engine_name,
                model=_most_common(first(labels, *MODEL_NAME_LABELS) for _, labels in served),
                role=role,
                role_source=role_source,
                namespace=namespace,
                pod=pod[1] if pod else (held[0].pod if held else None),
                gpu_uuids=gpu_uuids,
                tp=ranks if ranks > 1 else (len(gpu_uuids) or None),
                first_seen=min(firsts) if firsts else None,
                last_seen=max(lasts) if lasts else None,
                cluster=resolve_cluster(label_sets, pool.cluster_label)
                or _most_common(gpu.cluster for gpu in held)
                or pool.default_cluster,
                deployment=resolve_deployment(label_sets, pool.deployment_labels, namespace),
                kv_capacity_tokens=kv_capacity_tokens(engine_name, e.reported.get(engine_row, [])),
                max_running_requests=max_running_requests(engine_name, e.reported.get(engine_row, [])),
            )
        )
    return out


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


def _all_gpu_columns(g: _Gpus, gpus: Sequence[PrometheusGpu], grid: TimeGrid) -> dict[str, Any]:
    """Raw sample columns (as the store returns them) of every GPU cell with a series, attributed or not."""
    rows, cols = np.nonzero(g.present)
    picked = rows.tolist()
    return {
        "ts": grid.start + cols.astype(np.float64) * grid.step,
        "window_s": np.full(rows.size, grid.step),
        "gpu_uuid": [gpus[r].gpu_uuid for r in picked],
        "worker_id": [gpus[r].worker_id for r in picked],
        **{c: g.columns[c][rows, cols] for c in (*PROFILING_FIELDS, "gpu_util", *_BUSY, "mem_used_bytes")},
        "state": [STATES[s].value for s in g.state[rows, cols].tolist()],
    }


def _engine_frame(
    e: _Engines, grid: TimeGrid, roles: Mapping[str, Role]
) -> tuple[EngineFrame, dict[str, FloatArray], dict[str, list[Held]]]:
    rows, cols = np.nonzero(e.present)
    row_worker = [e.metas[r].worker_id for r in rows.tolist()]
    names = tuple(sorted(set(row_worker)))
    role_of = np.array([ROLES.index(roles[meta.worker_id]) for meta in e.metas], dtype=np.int64)
    frame = EngineFrame(
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
    latency = {column: e.columns[column][rows, cols] for column in _LATENCIES}
    cells = list(zip(rows.tolist(), cols.tolist(), strict=True))
    histograms = {column: [held[r][c] for r, c in cells] for column, held in e.histograms.items()}
    return frame, latency, histograms


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
    range_s: float | None = None,
) -> PrometheusFleet:
    """Frames and inventory from the series of every query, all evaluated on ``grid``.

    ``role_label``, ``cluster_label`` / ``default_cluster`` and ``deployment_labels`` name the labels to read;
    ``gpu_catalog`` resolves ``modelName``; ``exporter_pod`` lists the exporter's own pod names;
    ``range_s``: the queries' window (default: the step), by which the histograms' increments are scaled to
    counts per step.
    Options: docs/analyzer.md#source
    """
    notes: list[str] = []
    g = _map_gpus(results, grid, exporter_pod, notes)
    e = _map_engines(results, grid, notes, grid.step / range_s if range_s else 1.0)
    gpus = _inventory_gpus(g, grid, gpu_catalog, cluster_label, default_cluster)
    workers = _inventory_workers(
        g, gpus, e, grid, role_label, _PoolLabels(cluster_label, tuple(deployment_labels), default_cluster)
    )
    notes += unattributed_note(gpus)
    notes += join_notes(workers, gpus)
    notes += role_notes(workers, role_label)
    notes += pool_notes(workers, cluster_label, tuple(deployment_labels))
    gpu_frame, cells = _gpu_frame(g, gpus, grid)
    engine_frame, latency, histograms = _engine_frame(e, grid, {w.worker_id: w.role for w in workers})
    return PrometheusFleet(
        grid=grid,
        gpu=gpu_frame,
        engine=engine_frame,
        gpus=tuple(gpus),
        workers=tuple(workers),
        gpu_row_gpu=cells[0],
        gpu_row_mem_used_bytes=g.columns["mem_used_bytes"][cells[0], cells[1]],
        gpu_row_busy={column: g.columns[column][cells[0], cells[1]] for column in _BUSY},
        engine_row_latency=latency,
        engine_row_histograms=histograms,
        notes=tuple(notes),
        all_gpu_columns=_all_gpu_columns(g, gpus, grid),
    )
