"""Columns to records: JSON lines (fast) and record dicts / typed contract records.

Both paths pick the same values from a chunk's columns (rounded: ratios to 4 decimals, power to 0.1 W,
TPOT to 10 us). The JSON-lines path never builds a dict per record: orjson formats each column in one
call (numpy arrays, NaN -> null), and each line is a byte template filled with those tokens; the
constant strings (ids, names, model) are JSON-encoded once by orjson, so escaping is orjson's. A fleet
week is millions of records and this is several times faster than ``orjson.dumps`` per dict. The tests
check that both paths give the same records and that every line parses with
``fleet.contract.parse_record``. Within a window, GPU samples come first (by GPU), then engine samples.

Engine samples carry their latency histograms (``fleetsim.latency_histograms``) in the contract's form
(``le``, cumulative ``counts`` to 3 decimals, ``count``), built for the picked records only. The dict path
can instead carry them in the stored form (``histograms="encoded"``: ``fleet.histograms.encode`` bytes),
which is what the examiner's columns hold (``examine.simulate``).

A role change that replaces the pod (``replace_pods``, ``fleetsim.role_changes``) renames the worker:
from the change's first window on, its engine samples and its GPUs' samples carry the new pod's id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import orjson

from fleet.contract import EngineSample, GpuJoin, GpuSample, RoleSource, TelemetrySource
from fleetsim import latency_histograms
from fleetsim.fleet_sim import Chunk, FleetSimulation, rfc3339
from fleetsim.latency_histograms import HistogramColumns

IntArray = npt.NDArray[np.int64]
_RATIO_DECIMALS = 4
_NUMPY = orjson.OPT_SERIALIZE_NUMPY

_GPU_FIELDS = (
    "sm_active", "tensor_active", "dram_active", "gpu_util", "mem_used_bytes", "power_w",
    "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes",
)  # fmt: skip
_GPU_DECIMALS: dict[str, int | None] = {
    "sm_active": 4, "tensor_active": 4, "dram_active": 4, "gpu_util": 4, "power_w": 1,
}  # fmt: skip
_GPU_STATIC = (
    "node", "gpu_uuid", "gpu_index", "gpu_name", "worker_id", "source", "parent_gpu_uuid", "mig_profile",
    "cluster",
)  # fmt: skip
_STATES = ("ok", "lost", "degraded")
_STATE_JSON = tuple(orjson.dumps(x) for x in _STATES)
_ENGINE_FIELDS = (
    "prompt_tokens", "generation_tokens", "requests_running", "requests_waiting", "kv_cache_usage",
    "preemptions", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "ttft_p90_s", "tpot_p90_s",
    "e2e_p90_s",
)  # fmt: skip
_ENGINE_DECIMALS: dict[str, int | None] = {
    "kv_cache_usage": 4, "ttft_p50_s": 4, "ttft_p99_s": 4, "tpot_p50_s": 5, "tpot_p99_s": 5,
    "ttft_p90_s": 4, "tpot_p90_s": 5, "e2e_p90_s": 3,
}  # fmt: skip
HISTOGRAMS = ("ttft_histogram", "tpot_histogram", "e2e_histogram")
HistogramForm = Literal["contract", "encoded"]
_ENGINE_STATIC = (
    "worker_id", "node", "engine", "model", "precision", "tp", "gpu_uuids", "gpu_join", "cluster",
    "deployment", "kv_capacity_tokens", "max_running_requests",
)  # fmt: skip

_GPU_TEMPLATE = (
    b'{"kind":"gpu_sample","ts":%s,"window_s":%s,"node":%s,"gpu_uuid":%s,"gpu_index":%s,"gpu_name":%s,'
    b'"worker_id":%s,"source":%s,"parent_gpu_uuid":%s,"mig_profile":%s,"cluster":%s,"sm_active":%s,'
    b'"tensor_active":%s,"dram_active":%s,"gpu_util":%s,"mem_used_bytes":%s,"power_w":%s,'
    b'"nvlink_tx_bytes":%s,"nvlink_rx_bytes":%s,"pcie_tx_bytes":%s,"pcie_rx_bytes":%s,"state":%s}\n'
)
_ENGINE_TEMPLATE = (
    b'{"kind":"engine_sample","ts":%s,"window_s":%s,"worker_id":%s,"node":%s,"engine":%s,"model":%s,'
    b'"precision":%s,"tp":%s,"gpu_uuids":%s,"gpu_join":%s,"cluster":%s,"deployment":%s,'
    b'"kv_capacity_tokens":%s,"max_running_requests":%s,"role":%s,"role_source":%s,'
    b'"prompt_tokens":%s,"generation_tokens":%s,"requests_running":%s,"requests_waiting":%s,'
    b'"kv_cache_usage":%s,"preemptions":%s,"ttft_p50_s":%s,"ttft_p99_s":%s,"tpot_p50_s":%s,'
    b'"tpot_p99_s":%s,"ttft_p90_s":%s,"tpot_p90_s":%s,"e2e_p90_s":%s,"ttft_histogram":%s,'
    b'"tpot_histogram":%s,"e2e_histogram":%s}\n'
)


def _objects(values: Sequence[Any]) -> npt.NDArray[np.object_]:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _tokens(values: npt.NDArray[Any]) -> list[bytes]:
    """Each value of a 1-D numeric array as a JSON token (NaN -> null), from one orjson call."""
    if len(values) == 0:
        return []
    return orjson.dumps(np.ascontiguousarray(values), option=_NUMPY)[1:-1].split(b",")


@dataclass(frozen=True)
class _Picked:
    """The records of some windows of a chunk, as columns in output order."""

    window: IntArray  # position of each record's window among the picked windows
    item: IntArray  # GPU or worker index
    values: dict[str, npt.NDArray[Any]]
    state: IntArray | None  # index into _STATES
    counts: IntArray  # records per window
    row: IntArray  # each record's row of the chunk


def _pick(
    present: npt.NDArray[np.bool_],
    rows: IntArray,
    columns: dict[str, npt.NDArray[Any]],
    decimals: dict[str, int | None],
    state: IntArray | None,
) -> _Picked:
    mask = present[rows]
    flat = np.flatnonzero(mask)
    width = mask.shape[1]
    local, item = flat // width, flat % width
    row = rows[local]
    values = {}
    for name, column in columns.items():
        picked = column[row, item]
        places = decimals.get(name)
        values[name] = np.round(picked, places) if places is not None else picked
    state_picked = state[row, item] if state is not None else None
    return _Picked(local, item, values, state_picked, np.bincount(local, minlength=len(rows)), row)


class RecordBuilder:
    """Turns a simulation's chunks into records, window by window."""

    def __init__(self, sim: FleetSimulation) -> None:
        layout = sim.layout
        gpus, workers = layout.gpus, layout.workers
        pools = [layout.pools[w.pool] for w in workers]
        self.window_s = sim.window_s
        self._gpu_static: dict[str, list[Any]] = {
            "node": [layout.nodes[g.node] for g in gpus],
            "gpu_uuid": [g.uuid for g in gpus],
            "gpu_index": [g.local_index for g in gpus],
            "gpu_name": [g.nvml_name for g in gpus],
            "worker_id": [workers[g.worker].worker_id if g.worker >= 0 else None for g in gpus],
            # DCGM: the counters follow DCGM's field definitions (the analyzer keeps no ceiling of the
            # simulator's own); "basic" GPUs are dcgm-exporter without its profiling fields.
            "source": [TelemetrySource.DCGM.value for _ in gpus],
            "parent_gpu_uuid": [g.parent_uuid for g in gpus],
            "mig_profile": [g.mig_profile for g in gpus],
            "cluster": [g.cluster for g in gpus],
        }
        self._engine_static: dict[str, list[Any]] = {
            "worker_id": [w.worker_id for w in workers],
            "node": [layout.nodes[w.node] for w in workers],
            "engine": [p.spec.engine for p in pools],
            "role": [w.role.value for w in workers],
            "role_source": [RoleSource.SIM.value for _ in workers],
            "model": [p.spec.model for p in pools],
            "precision": [p.precision.value for p in pools],
            "tp": [p.spec.tp for p in pools],
            "gpu_uuids": [[gpus[i].uuid for i in w.gpus] for w in workers],
            "gpu_join": [GpuJoin.DECLARED.value for _ in workers],  # the layout placed them
            "cluster": [p.spec.cluster for p in pools],
            "deployment": [p.spec.deployment_name for p in pools],
            "kv_capacity_tokens": kv_capacity_tokens(sim),
            "max_running_requests": max_running_requests(sim),
        }
        self._labels = sim.schedule.labels(sim.epoch0) + _labels(sim)  # role changes, then labels over them
        self._renames = sim.schedule.renames(sim.epoch0)
        self._gpu_owner = np.array([g.worker for g in gpus], dtype=np.int64)
        self._gpu_objects = {k: _objects(v) for k, v in self._gpu_static.items()}
        self._engine_objects = {k: _objects(v) for k, v in self._engine_static.items()}
        self._gpu_json = {k: _objects([orjson.dumps(x) for x in v]) for k, v in self._gpu_static.items()}
        self._engine_json = {
            k: _objects([orjson.dumps(x) for x in v]) for k, v in self._engine_static.items()
        }

    def _rows(self, chunk: Chunk, window_slice: slice | None) -> IntArray:
        return np.arange(len(chunk.window_end_epoch))[window_slice or slice(None)]

    def _picks(self, chunk: Chunk, rows: IntArray) -> tuple[_Picked, _Picked]:
        g, e = chunk.gpu, chunk.engine
        state = np.where(g.lost, 1, np.where(g.degraded, 2, 0)).astype(np.int64)
        gpu = _pick(g.present, rows, {f: getattr(g, f) for f in _GPU_FIELDS}, _GPU_DECIMALS, state)
        engine = _pick(e.present, rows, {f: getattr(e, f) for f in _ENGINE_FIELDS}, _ENGINE_DECIMALS, None)
        return gpu, engine

    def _roles(self, chunk: Chunk, rows: IntArray, engine: _Picked) -> tuple[list[str], list[str]]:
        """Each engine record's role label and its source: the worker's role unless a label says otherwise."""
        role = self._engine_objects["role"][engine.item]
        source = self._engine_objects["role_source"][engine.item]
        if self._labels:
            end = chunk.window_end_epoch[rows][engine.window]
            for worker, since, label, label_source in self._labels:
                hit = (engine.item == worker) & (end > since)
                role = np.where(hit, label, role)
                source = np.where(hit, label_source, source)
        return [str(x) for x in role], [str(x) for x in source]

    def _histograms(self, chunk: Chunk, engine: _Picked) -> dict[str, HistogramColumns]:
        """The picked engine records' latency histograms (as the lognormals behind them)."""
        return {name: getattr(chunk.engine, name).take(engine.row, engine.item) for name in HISTOGRAMS}

    def _ids(
        self, chunk: Chunk, rows: IntArray, picked: _Picked, gpu: bool, *, encode: bool
    ) -> npt.NDArray[np.object_]:
        """Each picked record's worker id (JSON tokens when ``encode``): the layout's, or a replacing pod's
        in the windows that end after its change."""
        if encode:
            table = self._gpu_json if gpu else self._engine_json
        else:
            table = self._gpu_objects if gpu else self._engine_objects
        out: npt.NDArray[np.object_] = table["worker_id"][picked.item]  # a copy (fancy indexing)
        owner = self._gpu_owner[picked.item] if gpu else picked.item
        end = chunk.window_end_epoch[rows][picked.window]
        for worker, since, new_id in self._renames:
            out[(owner == worker) & (end > since)] = _json(new_id) if encode else new_id
        return out

    def _static_json(self, chunk: Chunk, rows: IntArray, picked: _Picked, name: str, gpu: bool) -> list[Any]:
        """One constant column's JSON tokens for the picked records (the worker id as renamed)."""
        if name == "worker_id" and self._renames:
            column = self._ids(chunk, rows, picked, gpu, encode=True)
        else:
            column = (self._gpu_json if gpu else self._engine_json)[name][picked.item]
        tokens: list[Any] = column.tolist()
        return tokens

    def chunk_dicts(
        self, chunk: Chunk, window_slice: slice | None = None, *, histograms: HistogramForm = "contract"
    ) -> list[dict[str, Any]]:
        """Record dicts of a chunk (or of ``window_slice`` of its windows), in output order; latency
        histograms in the contract's form, or ``"encoded"`` (``fleet.histograms.encode`` bytes)."""
        rows = self._rows(chunk, window_slice)
        if len(rows) == 0:
            return []
        ts = [rfc3339(float(chunk.window_end_epoch[w])) for w in rows]
        gpu, engine = self._picks(chunk, rows)
        gpu_dicts = []
        gpu_values = {k: v.tolist() for k, v in gpu.values.items()}
        state = gpu.state.tolist() if gpu.state is not None else [0] * len(gpu.item)
        gpu_ids = self._ids(chunk, rows, gpu, True, encode=False).tolist()
        for i, (w, item) in enumerate(zip(gpu.window.tolist(), gpu.item.tolist(), strict=True)):
            record: dict[str, Any] = {"kind": "gpu_sample", "ts": ts[w], "window_s": self.window_s}
            record.update({k: v[item] for k, v in self._gpu_static.items()})
            record["worker_id"] = gpu_ids[i]
            lost = state[i] == 1
            record.update({k: (None if lost or v[i] != v[i] else v[i]) for k, v in gpu_values.items()})
            record["state"] = _STATES[state[i]]
            gpu_dicts.append(record)
        engine_dicts = []
        engine_values = {k: v.tolist() for k, v in engine.values.items()}
        roles, sources = self._roles(chunk, rows, engine)
        engine_ids = self._ids(chunk, rows, engine, False, encode=False).tolist()
        form = latency_histograms.encoded if histograms == "encoded" else latency_histograms.contract_dicts
        engine_histograms: dict[str, list[Any]] = {
            k: form(v) for k, v in self._histograms(chunk, engine).items()
        }
        for i, (w, item) in enumerate(zip(engine.window.tolist(), engine.item.tolist(), strict=True)):
            record = {"kind": "engine_sample", "ts": ts[w], "window_s": self.window_s}
            record.update({k: v[item] for k, v in self._engine_static.items()})
            record["worker_id"] = engine_ids[i]
            record.update({k: (None if v[i] != v[i] else v[i]) for k, v in engine_values.items()})
            record.update({k: v[i] for k, v in engine_histograms.items()})
            record.update(role=roles[i], role_source=sources[i])
            engine_dicts.append(record)
        return _interleave(gpu_dicts, gpu.counts, engine_dicts, engine.counts)

    def chunk_jsonl(self, chunk: Chunk, window_slice: slice | None = None) -> bytes:
        """JSON lines of a chunk (or of ``window_slice`` of its windows), in output order."""
        rows = self._rows(chunk, window_slice)
        if len(rows) == 0:
            return b""
        ts = _objects([orjson.dumps(rfc3339(float(chunk.window_end_epoch[w]))) for w in rows])
        window = orjson.dumps(self.window_s)
        gpu, engine = self._picks(chunk, rows)
        gpu_tokens = [_tokens(gpu.values[f]) for f in _GPU_FIELDS]
        codes = gpu.state.tolist() if gpu.state is not None else [0] * len(gpu.item)
        state = [_STATE_JSON[c] for c in codes]
        for i in [i for i, c in enumerate(codes) if c == 1]:  # a lost GPU reports nothing but its state
            for column in gpu_tokens:
                column[i] = b"null"
        gpu_lines = [
            _GPU_TEMPLATE % (t, window, *fields)
            for t, *fields in zip(
                ts[gpu.window].tolist(),
                *(self._static_json(chunk, rows, gpu, k, True) for k in _GPU_STATIC),
                *gpu_tokens,
                state,
                strict=True,
            )
        ]
        if self._labels:
            roles, sources = self._roles(chunk, rows, engine)
            role_json, source_json = [_json(r) for r in roles], [_json(r) for r in sources]
        else:
            role_json = self._engine_json["role"][engine.item].tolist()
            source_json = self._engine_json["role_source"][engine.item].tolist()
        engine_lines = [
            _ENGINE_TEMPLATE % (t, window, *fields)
            for t, *fields in zip(
                ts[engine.window].tolist(),
                *(self._static_json(chunk, rows, engine, k, False) for k in _ENGINE_STATIC),
                role_json,
                source_json,
                *(_tokens(engine.values[f]) for f in _ENGINE_FIELDS),
                *(latency_histograms.contract_json(h) for h in self._histograms(chunk, engine).values()),
                strict=True,
            )
        ]
        return b"".join(_interleave(gpu_lines, gpu.counts, engine_lines, engine.counts))


def kv_capacity_tokens(sim: FleetSimulation) -> list[int]:
    """Each worker's KV cache in tokens, as an engine reports it: the whole tokens of the budget the
    simulator's own physics gives it (``StepModel.kv_capacity_tokens``: HBM x utilisation, less the weights
    and the runtime reserve, x the KV fraction, over one GPU's KV bytes per token), which caps its batch."""
    capacity: dict[int, int] = {}
    for model in sim.models:
        for position, worker in enumerate(model.pool.workers):
            capacity[worker] = int(model.step.kv_capacity_tokens[position])
    return [capacity[w.index] for w in sim.layout.workers]


def max_running_requests(sim: FleetSimulation) -> list[int]:
    """Each worker's concurrency cap, as its engine reports it (SGLang's max_running_requests, vLLM's
    max_num_seqs): the most sequences the simulator's physics lets its engine run at once
    (``EngineConfig.max_batch`` of its pool's step model: the scenario's, or the perturbed physics' draw)."""
    cap: dict[int, int] = {}
    for model in sim.models:
        for worker in model.pool.workers:
            cap[worker] = int(model.step.engine.max_batch)
    return [cap[w.index] for w in sim.layout.workers]


_JSON_CACHE: dict[str, bytes] = {}


def _json(text: str) -> bytes:
    token = _JSON_CACHE.get(text)
    if token is None:
        token = _JSON_CACHE.setdefault(text, orjson.dumps(text))
    return token


def _labels(sim: FleetSimulation) -> list[tuple[int, float, str, str]]:
    """(worker, from epoch, role label, role source) of the scenario's labels, in order."""
    layout = sim.layout
    by_key = layout.worker_by_key()
    out: list[tuple[int, float, str, str]] = []
    for spec in sim.scenario.labels:
        if spec.worker is not None:
            targets = [by_key[spec.worker]]
        else:
            node = layout.node_index(spec.node or "")
            targets = [w for w in layout.workers if w.node == node]
        source = RoleSource.NONE if spec.role == "unknown" else RoleSource.SIM
        since = sim.epoch0 + spec.from_hour * 3600.0
        out += [(w.index, since, spec.role, source.value) for w in targets]
    return out


def _interleave(
    first: list[Any], first_counts: IntArray, second: list[Any], second_counts: IntArray
) -> list[Any]:
    """Each window's items of ``first`` then of ``second``."""
    out: list[Any] = []
    a = b = 0
    for na, nb in zip(first_counts.tolist(), second_counts.tolist(), strict=True):
        out += first[a : a + na]
        out += second[b : b + nb]
        a += na
        b += nb
    return out


def to_records(dicts: list[dict[str, Any]]) -> list[GpuSample | EngineSample]:
    """Typed contract records for record dicts (validated, as the collector ships them)."""
    return [
        GpuSample.model_validate(d) if d["kind"] == "gpu_sample" else EngineSample.model_validate(d)
        for d in dicts
    ]
