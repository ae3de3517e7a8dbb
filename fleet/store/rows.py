"""Contract records to the store's row tuples: pure, picklable, no SQLAlchemy.

This is the CPU-heavy half of the write path, kept apart so JSONL ingest can run it in worker processes
(see :mod:`fleet.ingest`) and hand the writer plain tuples. Sample rows follow ``GPU_SAMPLE_COLUMNS`` /
``ENGINE_SAMPLE_COLUMNS``; their ``ts`` is already in the target dialect's representation (integer
microseconds for SQLite, aware ``datetime`` for PostgreSQL; see :mod:`fleet.store.columns`). The GPU,
worker and node attributes are folded per key ("latest window wins"), so the writer upserts one row per
GPU per batch, not one per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from operator import attrgetter
from typing import Any, Literal, TypeVar

from fleet import histogram_grid
from fleet.contract import EngineSample, GpuSample, LatencyHistogram, activity_evidence
from fleet.inventory import GpuRecord, WorkerRecord
from fleet.store import codes, latest_records, variants
from fleet.store.latest_records import LatestOf, NodeSpans

# Re-exported (PEP 484's "as" form, for mypy's strict mode): the project imports them from here.
from fleet.store.row_limits import INT32_MAX as INT32_MAX  # noqa: PLC0414
from fleet.store.row_limits import INT64_MAX as INT64_MAX  # noqa: PLC0414
from fleet.store.row_limits import RowValueError as RowValueError  # noqa: PLC0414
from fleet.store.variants import Attributes, Fingerprint

TimeEncoding = Literal["epoch_us", "datetime"]


def time_encoding_of(dialect: str) -> TimeEncoding:
    """How rows encode ``ts`` for a store of this SQLAlchemy dialect name: SQLite keeps integer epoch
    microseconds, the others timestamps."""
    return "epoch_us" if dialect == "sqlite" else "datetime"


GPU_SAMPLE_COLUMNS = (
    "gpu_uuid", "ts", "window_s", "worker_id", "sm_active", "tensor_active", "dram_active", "gpu_util",
    "mem_used_bytes", "power_w", "sm_clock_mhz", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes",
    "pcie_rx_bytes", "state", "source", "gr_engine_active", "mem_copy_util", "activity_evidence",
)  # fmt: skip
ENGINE_SAMPLE_COLUMNS = (
    "worker_id", "ts", "window_s", "role", "role_source", "prompt_tokens", "generation_tokens",
    "requests_running", "requests_waiting", "kv_cache_usage", "preemptions", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s", "ttft_p90_s", "tpot_p90_s", "e2e_p90_s", "ttft_histogram", "tpot_histogram",
    "e2e_histogram",
)  # fmt: skip
# Stored as fleet.histograms.encode() of the histogram re-binned onto the shared grid (bytes), or None.
HISTOGRAM_COLUMNS = ("ttft_histogram", "tpot_histogram", "e2e_histogram")
_GPU_BIG_INTS = ("mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes")
_ENGINE_BIG_INTS = (
    "prompt_tokens",
    "generation_tokens",
    "requests_running",
    "requests_waiting",
    "preemptions",
)
_EVIDENCE = codes.encoder(codes.EVIDENCE, nullable=True)  # the evidence values raw rows can hold, and None
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The values each enumeration column can hold (add() checks the same).
_GPU_CODED: dict[str, Mapping[Any, Any]] = {
    "state": codes.STATE,
    "source": codes.SOURCE,
    "activity_evidence": _EVIDENCE,
}
_ENGINE_CODED: dict[str, Mapping[Any, Any]] = {"role": codes.ROLE, "role_source": codes.ROLE_SOURCE}
GPU_ATTRIBUTES = Attributes.of(GpuSample, GPU_SAMPLE_COLUMNS)
ENGINE_ATTRIBUTES = Attributes.of(EngineSample, ENGINE_SAMPLE_COLUMNS)


def stored_histogram(histogram: LatencyHistogram | None) -> bytes | None:
    """A contract histogram as the store holds it: re-binned onto the shared grid, encoded."""
    if histogram is None:
        return None
    quick = histogram_grid.stored_on_grid(histogram.le, histogram.counts, histogram.count)
    if quick is not None:
        return quick
    from fleet import histograms  # numpy, for bounds off the grid only (fleet.histogram_grid)

    return histograms.stored(histogram.le, histogram.counts, histogram.count)


def _stored_histograms(column: Sequence[Any]) -> Sequence[Any]:
    """The column as stored; unchanged (no per-value call) when it holds no histogram."""
    return list(map(stored_histogram, column)) if any(column) else column


_Dim = TypeVar("_Dim", GpuRecord, WorkerRecord)


@dataclass
class RowBatch:
    """Rows ready for the writer, plus the latest attributes of every GPU, worker and node they mention.

    Adding a record only remembers, per GPU and per worker, the latest record and the first/last window;
    :meth:`finish` turns those into ``gpus``, ``workers`` and ``nodes`` (a node's span is the union of the
    spans of the GPUs and workers whose latest record names it). ``tag`` (a line number for ingest) comes
    back on a :class:`RowValueError` raised by :meth:`finish`."""

    time_encoding: TimeEncoding
    gpu_rows: list[tuple[Any, ...]] = field(default_factory=list)
    engine_rows: list[tuple[Any, ...]] = field(default_factory=list)
    gpus: dict[str, GpuRecord] = field(default_factory=dict)  # sku: resolved by the writer
    workers: dict[str, WorkerRecord] = field(default_factory=dict)
    nodes: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)
    # File ingest (as strict as HTTP): a sample key twice in the batch with other values is an error, where
    # the writer's own batches keep the first and count the second as a duplicate; and each GPU's and
    # worker's attributes are fingerprinted (fleet.store.variants), so a load can tell which could repeat a
    # key of another block with other attributes.
    strict_repeats: bool = False
    _variants: dict[variants.Key, Fingerprint] = field(default_factory=dict, repr=False)
    # Strict: each sample key added one by one, with its record's fields and tag (until finish()).
    _sample_keys: dict[tuple[bool, str, datetime], tuple[dict[str, Any], int | None]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _latest_gpu: dict[str, list[Any]] = field(default_factory=dict, repr=False)  # [first, last, values, tag]
    _latest_worker: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    # Widened first/last seen that merge() has not written into gpus/workers yet: finish() does, once per
    # GPU and worker, rather than rebuilding a frozen record for every merged block.
    _spans: dict[tuple[bool, str], tuple[datetime, datetime]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.gpu_rows) + len(self.engine_rows)

    def add(self, record: GpuSample | EngineSample, tag: int | None = None) -> None:
        """Append one record's row; raises :class:`RowValueError` naming a field the store cannot hold."""
        values = record.__dict__
        ts: datetime = values["ts"]
        ts_value = _time_value(ts, self.time_encoding)
        if isinstance(record, GpuSample):
            _check_ints(values, _GPU_BIG_INTS)
            worker_id = values["worker_id"]
            if worker_id is not None and "\x00" in worker_id:
                raise RowValueError("worker_id", "contains a NUL character")
            state, source, evidence = values["state"]._value_, values["source"]._value_, _evidence(record)
            if state not in codes.STATE or source not in codes.SOURCE or evidence not in _EVIDENCE:
                raise _uncoded(("state", state), ("source", source), ("activity_evidence", evidence))
            self.gpu_rows.append((
                values["gpu_uuid"], ts_value, values["window_s"], worker_id, values["sm_active"],
                values["tensor_active"], values["dram_active"], values["gpu_util"], values["mem_used_bytes"],
                values["power_w"], values["sm_clock_mhz"], values["nvlink_tx_bytes"],
                values["nvlink_rx_bytes"], values["pcie_tx_bytes"], values["pcie_rx_bytes"],
                state, source, values["gr_engine_active"], values["mem_copy_util"], evidence,
            ))  # fmt: skip
            if self.strict_repeats:
                self._check_repeat(True, values["gpu_uuid"], ts, values, tag)
            _remember(self._latest_gpu, values["gpu_uuid"], ts, values, tag, key_field="gpu_uuid")
        else:
            _check_ints(values, _ENGINE_BIG_INTS)
            role, role_source = values["role"]._value_, values["role_source"]._value_
            if role not in codes.ROLE or role_source not in codes.ROLE_SOURCE:
                raise _uncoded(("role", role), ("role_source", role_source))
            self.engine_rows.append((
                values["worker_id"], ts_value, values["window_s"], role, role_source,
                values["prompt_tokens"], values["generation_tokens"],
                values["requests_running"], values["requests_waiting"], values["kv_cache_usage"],
                values["preemptions"], values["ttft_p50_s"], values["ttft_p99_s"], values["tpot_p50_s"],
                values["tpot_p99_s"], values["ttft_p90_s"], values["tpot_p90_s"], values["e2e_p90_s"],
                *map(stored_histogram, map(values.__getitem__, HISTOGRAM_COLUMNS)),
            ))  # fmt: skip
            if self.strict_repeats:
                self._check_repeat(False, values["worker_id"], ts, values, tag)
            _remember(self._latest_worker, values["worker_id"], ts, values, tag, key_field="worker_id")

    def _check_repeat(
        self, is_gpu: bool, key: str, ts: datetime, values: dict[str, Any], tag: int | None
    ) -> None:
        """Strict: refuse a sample key added before with other values (at any window: the latest record
        alone would not show an earlier window's repeat); fingerprint the GPU's or worker's attributes."""
        seen = self._sample_keys.setdefault((is_gpu, key, ts), (values, tag))
        if seen[0] is not values and seen[0] != values:
            key_field = "gpu_uuid" if is_gpu else "worker_id"
            raise repeated_with_other_values(key_field, key, ts, seen[0], values, tag)
        attributes = GPU_ATTRIBUTES if is_gpu else ENGINE_ATTRIBUTES
        variants.note(self._variants, (is_gpu, key), attributes.fingerprint(values))

    def add_columns(
        self,
        kind: Literal["gpu_sample", "engine_sample"],
        columns: Mapping[str, Sequence[Any]],
        ts: Sequence[datetime],
        values_at: Callable[[int], dict[str, Any]],
    ) -> None:
        """:meth:`add` for many records of one kind at once, a column at a time (records validated elsewhere,
        see :mod:`fleet.fast_records`): ``columns`` holds every sample column but ``ts`` as the rows hold it
        (enumerations as their values, the derived ``activity_evidence``), ``ts`` the records' windows
        (aware, UTC) and ``values_at(i)`` record ``i``'s fields as ``record.__dict__`` holds them (asked only
        for the latest record of each GPU or worker); a strict batch fingerprints the attributes (the fields
        the rows do not hold) from ``columns`` too. Checks what :meth:`add` checks and raises
        :class:`RowValueError` (no tag) before adding anything."""
        gpu = kind == "gpu_sample"
        names = GPU_SAMPLE_COLUMNS if gpu else ENGINE_SAMPLE_COLUMNS
        key_field = "gpu_uuid" if gpu else "worker_id"
        for name in _GPU_BIG_INTS if gpu else _ENGINE_BIG_INTS:
            top = max(filter(None, columns[name]), default=0)
            if top > INT64_MAX:
                raise RowValueError(name, f"{top} does not fit a 64-bit integer")
        for name, known in (_GPU_CODED if gpu else _ENGINE_CODED).items():
            for value in set(columns[name]).difference(known):
                coded = codes.GPU_COLUMNS.get(name) or codes.ENGINE_COLUMNS[name]
                raise RowValueError(name, codes.no_code_message(value, coded))
        for name in ("gpu_uuid", "worker_id") if gpu else ("worker_id",):
            if "\x00" in "".join(filter(None, set(columns[name]))):
                raise RowValueError(name, "contains a NUL character")
        keys = columns[key_field]
        if self.strict_repeats:
            self._check_columns(gpu, key_field, columns, ts)
        if not gpu:
            columns = {**columns, **{name: _stored_histograms(columns[name]) for name in HISTOGRAM_COLUMNS}}
        encoded = {t: _time_value(t, self.time_encoding) for t in set(ts)}
        ts_values = list(map(encoded.__getitem__, ts))
        (self.gpu_rows if gpu else self.engine_rows).extend(
            zip(*(ts_values if name == "ts" else columns[name] for name in names), strict=True)
        )
        # Windows ascending, a tie with the later record first: the last record per key is its latest window,
        # the first record of that window (as in add(), where only a later window replaces the latest).
        order = sorted(range(len(keys) - 1, -1, -1), key=ts.__getitem__)
        ordered_keys = list(map(keys.__getitem__, order))
        latest = dict(zip(ordered_keys, order, strict=True))
        first = dict(zip(reversed(ordered_keys), map(ts.__getitem__, reversed(order)), strict=True))
        remembered = self._latest_gpu if gpu else self._latest_worker
        if not remembered and not (self.gpus if gpu else self.workers):
            # A fresh batch (each parsed block): the records at once, without a dict per record's fields.
            built = latest_records.build(gpu, LatestOf(keys, latest, first, ts, columns))
            if built is not None:
                self._add_latest_records(gpu, *built)
                return
        for key in dict.fromkeys(keys):
            index = latest[key]
            seen = remembered.get(key)
            if seen is None:
                remembered[key] = [first[key], ts[index], values_at(index), None]
                continue
            if ts[index] > seen[1]:
                seen[1], seen[2], seen[3] = ts[index], values_at(index), None
            seen[0] = min(seen[0], first[key])

    def _add_latest_records(self, gpu: bool, records: Mapping[str, Any], spans: NodeSpans) -> None:
        """Records built by :mod:`fleet.store.latest_records` for a batch holding none of their kind."""
        (self.gpus if gpu else self.workers).update(records)
        for node, (first, last) in spans.items():
            self._fold_node(node, first, last)

    def _check_columns(
        self, gpu: bool, key_field: str, columns: Mapping[str, Sequence[Any]], ts: Sequence[datetime]
    ) -> None:
        """Strict :meth:`add_columns`: refuse a sample key twice in the block (add() compares the two
        records and names the line: the fast path declines the block on this; ~130 ns a record), and
        fingerprint each GPU's or worker's attributes."""
        keys = columns[key_field]
        if len(set(zip(keys, ts, strict=True))) != len(keys):
            raise RowValueError(key_field, "a sample key repeats in the block")
        rows = (GPU_ATTRIBUTES if gpu else ENGINE_ATTRIBUTES).fingerprints(keys, columns)
        variants.note_rows(self._variants, gpu, rows)

    def finish(self) -> RowBatch:
        """Fold the remembered latest records into ``gpus``, ``workers`` and ``nodes`` (idempotent)."""
        self._fold_latest()
        for (is_gpu, key), (earliest, latest) in self._spans.items():
            target: dict[str, Any] = self.gpus if is_gpu else self.workers
            record = target[key]
            first, last = min(earliest, record.first_seen), max(latest, record.last_seen)
            if (record.first_seen, record.last_seen) != (first, last):
                target[key] = replace(record, first_seen=first, last_seen=last)
        self._spans.clear()
        self._sample_keys.clear()
        return self

    def changed(self) -> set[variants.Key]:
        """The GPUs (True, uuid) and workers (False, id) added or merged with more than one set of
        attributes (strict batches only)."""
        return variants.changed(self._variants)

    def _fold_latest(self) -> None:
        for uuid, (first, last, values, tag) in self._latest_gpu.items():
            _check_texts(values, latest_records.GPU_TEXTS, tag)
            if values["gpu_index"] > INT32_MAX:
                raise RowValueError("gpu_index", f"{values['gpu_index']} does not fit a 32-bit integer", tag)
            gpu = GpuRecord(
                gpu_uuid=uuid, node=values["node"], gpu_name=values["gpu_name"], sku=None,
                worker_id=values["worker_id"], source=values["source"]._value_, state=values["state"]._value_,
                cluster=values["cluster"], parent_gpu_uuid=values["parent_gpu_uuid"],
                mig_profile=values["mig_profile"], gpu_index=values["gpu_index"],
                first_seen=first, last_seen=last,
            )  # fmt: skip
            self.gpus[uuid] = _newer(self.gpus.get(uuid), gpu)
            self._fold_node(gpu.node, first, last)
        for worker_id, (first, last, values, tag) in self._latest_worker.items():
            _check_texts(values, latest_records.WORKER_TEXTS, tag)
            for uuid in values["gpu_uuids"]:
                if "\x00" in uuid:
                    raise RowValueError("gpu_uuids", "contains a NUL character", tag)
            worker = WorkerRecord(
                worker_id=worker_id, node=values["node"], engine=values["engine"], model=values["model"],
                role=values["role"], role_source=values["role_source"]._value_, precision=values["precision"],
                tp=values["tp"], gpu_uuids=tuple(values["gpu_uuids"]), cluster=values["cluster"],
                deployment=values["deployment"], kv_capacity_tokens=values["kv_capacity_tokens"],
                max_running_requests=values["max_running_requests"], gpu_join=_value(values["gpu_join"]),
                first_seen=first, last_seen=last,
            )  # fmt: skip
            self.workers[worker_id] = _newer(self.workers.get(worker_id), worker)
            self._fold_node(worker.node, first, last)
        self._latest_gpu.clear()
        self._latest_worker.clear()

    def merge(self, other: RowBatch, *, rows: bool = True, strict: bool = False) -> None:
        """Fold ``other``'s GPU, worker and node attributes into this batch's; append its rows too unless
        ``rows`` is false (JSONL ingest writes rows chunk by chunk and the dimensions once per file).
        ``strict``: a GPU or worker whose latest window in both batches is the same but whose attributes
        differ was sent twice with other content (one file's blocks): :class:`RowValueError`."""
        if other.time_encoding != self.time_encoding:
            raise ValueError("cannot merge batches encoded for different dialects")
        self._fold_latest()
        other.finish()
        if rows:
            self.gpu_rows.extend(other.gpu_rows)
            self.engine_rows.extend(other.engine_rows)
        self._merge_records(self.gpus, other.gpus, True, "gpu_uuid" if strict else None)
        self._merge_records(self.workers, other.workers, False, "worker_id" if strict else None)
        for node, (first, last) in other.nodes.items():
            self._fold_node(node, first, last)
        mine = self._variants
        for key, seen in other._variants.items():  # variants.note, inline: once per GPU and block
            known = mine.setdefault(key, seen)
            if known is not seen and known != seen:
                mine[key] = variants.CHANGED

    def _merge_records(
        self, target: dict[str, _Dim], records: dict[str, _Dim], is_gpu: bool, strict_field: str | None
    ) -> None:
        """:func:`_newer` for each of ``records`` with the first/last seen kept aside until :meth:`finish`:
        the stored record is always the one with the latest window, so its ``last_seen`` is the latest so
        far. ``strict_field``: the key's name, to refuse one window sent with other attributes."""
        spans = self._spans
        for key, seen in records.items():
            known = target.get(key)
            if known is None:
                target[key] = seen
                continue
            if strict_field is not None:
                _same_window_same_values(known, seen, strict_field, key)
            seen_first, seen_last = seen.first_seen, seen.last_seen
            assert known.first_seen and known.last_seen and seen_first and seen_last  # a batch's always are
            first, last = spans.get((is_gpu, key), (known.first_seen, known.last_seen))
            # min() and max() spelled out (the same ties): called once per GPU and worker of every block
            spans[(is_gpu, key)] = (
                first if first <= seen_first else seen_first,
                last if last >= seen_last else seen_last,
            )
            if seen_last >= known.last_seen:
                target[key] = seen

    def _fold_node(self, node: str, first: datetime, last: datetime) -> None:
        span = self.nodes.get(node)
        self.nodes[node] = (first, last) if span is None else (min(span[0], first), max(span[1], last))


def _time_value(ts: datetime, time_encoding: TimeEncoding) -> Any:
    return (ts - _EPOCH) // _MICROSECOND if time_encoding == "epoch_us" else ts


def _uncoded(*named: tuple[str, str | None]) -> RowValueError:
    """The error for the first of ``named`` (field, value) the raw tables have no code for."""
    for name, value in named:
        known = codes.GPU_COLUMNS.get(name) or codes.ENGINE_COLUMNS[name]
        if value is not None and value not in known:
            return RowValueError(name, codes.no_code_message(value, known))
    raise AssertionError(f"every value of {named} has a code")


def _evidence(record: GpuSample) -> str | None:
    evidence = activity_evidence(record)
    return None if evidence is None else evidence._value_


def _value(member: StrEnum | None) -> str | None:
    return None if member is None else member._value_


def _remember(
    latest: dict[str, list[Any]],
    key: str,
    ts: datetime,
    values: dict[str, Any],
    tag: int | None,
    *,
    key_field: str,
) -> None:
    """Keep the latest record (and the first/last window) of ``key``."""
    seen = latest.get(key)
    if seen is None:
        if "\x00" in key:
            raise RowValueError(key_field, "contains a NUL character")
        latest[key] = [ts, ts, values, tag]
    elif ts > seen[1]:
        seen[1], seen[2], seen[3] = ts, values, tag
    elif ts < seen[0]:
        seen[0] = ts


def repeated_with_other_values(
    key_field: str, key: str, ts: datetime, before: dict[str, Any], now: dict[str, Any], tag: int | None
) -> RowValueError:
    differing = [name for name in now if before.get(name) != now[name]] or ["attributes"]
    shown = "; ".join(
        f"{name}: {_shown(before.get(name))} then {_shown(now.get(name))}" for name in differing[:4]
    )
    return RowValueError(
        differing[0],
        f"{key_field} {key!r} at {ts.isoformat()} came twice with other values ({shown}): a sample key is "
        "sent once, or again with the same values",
        tag,
    )


def _shown(value: Any) -> str:
    return repr(getattr(value, "_value_", value))


_SPAN_FIELDS = ("first_seen", "last_seen")


# The fields of a GPU or worker record but its span, read at once (C speed, no copy).
_ATTRIBUTES_OF: dict[type[Any], Callable[[Any], Any]] = {
    kind: attrgetter(*(f.name for f in fields(kind) if f.name not in _SPAN_FIELDS))
    for kind in (GpuRecord, WorkerRecord)
}


def _same_window_same_values(known: _Dim | None, seen: _Dim, key_field: str, key: str) -> None:
    """Refuse two records of one key whose latest window is the same but whose attributes differ."""
    if known is None or known.last_seen != seen.last_seen or seen.last_seen is None:
        return
    attributes = _ATTRIBUTES_OF[type(seen)]
    if type(known) is type(seen) and attributes(known) == attributes(seen):
        return  # the common case (a GPU whose window two blocks share), without asdict's deep copies
    before = {k: v for k, v in asdict(known).items() if k not in _SPAN_FIELDS}
    now = {k: v for k, v in asdict(seen).items() if k not in _SPAN_FIELDS}
    if before != now:
        raise repeated_with_other_values(key_field, key, seen.last_seen, before, now, None)


def _newer(known: _Dim | None, seen: _Dim) -> _Dim:
    """Attributes of whichever is later, first/last seen spanning both."""
    if known is None:
        return seen
    assert known.first_seen and known.last_seen and seen.first_seen and seen.last_seen  # a batch's always are
    latest = seen if seen.last_seen >= known.last_seen else known
    first, last = min(known.first_seen, seen.first_seen), max(known.last_seen, seen.last_seen)
    return replace(latest, first_seen=first, last_seen=last)


def _check_texts(values: dict[str, Any], names: tuple[str, ...], tag: int | None) -> None:
    for name in names:
        text = values[name]
        if text is not None and "\x00" in text:
            raise RowValueError(name, "contains a NUL character", tag)


def _check_ints(values: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        value = values[name]
        if value is not None and value > INT64_MAX:
            raise RowValueError(name, f"{value} does not fit a 64-bit integer")


def batch_from_records(
    records: list[GpuSample | EngineSample] | tuple[GpuSample | EngineSample, ...],
    time_encoding: TimeEncoding,
) -> RowBatch:
    """A finished batch of ``records``; raises :class:`RowValueError` (``tag`` = the record's index)."""
    batch = RowBatch(time_encoding)
    for index, record in enumerate(records):
        batch.add(record, index)
    return batch.finish()
