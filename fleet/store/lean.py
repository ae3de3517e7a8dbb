"""Batch rows (natural keys, text enumerations; :mod:`fleet.store.rows`) to raw table rows (integer keys,
codes; :mod:`fleet.store.schema`), and how a sent value compares with the one stored.

The rows are transposed to columns, the key and enumeration columns mapped through dictionaries, and the
columns zipped back in the raw tables' order: a handful of C-level passes per batch rather than Python code
per row, so the ingest path stays as fast as a plain load (``benchmarks/ingest_bench.py``).

PostgreSQL keeps ratios, gauges and latencies as 4-byte floats and reads them back as the shortest decimal
that is that float (1/3 is stored, and read, as 0.33333334), and a GPU sample's byte counts as 4-byte floats
read back as the integer that float is (123456789012 as 123456790528): a re-sent sample is the same sample
when each such value rounds to the same 4-byte float, which :func:`stored_equal` says. Latency histograms
are bytes already (:func:`fleet.store.rows.stored_histogram`) and pass through unchanged.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import REAL

from fleet.store import codes
from fleet.store.rows import ENGINE_SAMPLE_COLUMNS, GPU_SAMPLE_COLUMNS
from fleet.store.schema import BYTE_COUNTERS, RawEngineSampleRow, RawGpuSampleRow, table_of

RAW_GPU_COLUMNS = (
    "ts", "mem_used_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes", "pcie_tx_bytes", "pcie_rx_bytes",
    "gpu_key", "worker_key", "window_s", "sm_active", "tensor_active", "dram_active", "gpu_util", "power_w",
    "sm_clock_mhz", "gr_engine_active", "mem_copy_util", "state", "source", "activity_evidence",
)  # fmt: skip
RAW_ENGINE_COLUMNS = (
    "ts", "prompt_tokens", "generation_tokens", "requests_running", "requests_waiting", "preemptions",
    "worker_key", "window_s", "kv_cache_usage", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
    "role", "role_source", "ttft_p90_s", "tpot_p90_s", "e2e_p90_s", "ttft_histogram", "tpot_histogram",
    "e2e_histogram",
)  # fmt: skip

# Raw column -> the batch column it comes from (the same name unless said here).
_GPU_SOURCES = {"gpu_key": "gpu_uuid", "worker_key": "worker_id"}
_ENGINE_SOURCES = {"worker_key": "worker_id"}
_Lookup = Mapping[Any, Any]
_ENCODERS: dict[str, _Lookup] = {
    "state": codes.encoder(codes.STATE),
    "source": codes.encoder(codes.SOURCE),
    "activity_evidence": codes.encoder(codes.EVIDENCE, nullable=True),
    "role": codes.encoder(codes.ROLE),
    "role_source": codes.encoder(codes.ROLE_SOURCE),
}
_CODES = {**codes.GPU_COLUMNS, **codes.ENGINE_COLUMNS}


def _plan(raw: Sequence[str], batch: Sequence[str], sources: dict[str, str]) -> tuple[tuple[int, str], ...]:
    return tuple((batch.index(sources.get(name, name)), name) for name in raw)


_GPU_PLAN = _plan(RAW_GPU_COLUMNS, GPU_SAMPLE_COLUMNS, _GPU_SOURCES)
_ENGINE_PLAN = _plan(RAW_ENGINE_COLUMNS, ENGINE_SAMPLE_COLUMNS, _ENGINE_SOURCES)


def lean_gpu_rows(
    rows: Sequence[tuple[Any, ...]],
    gpu_keys: Mapping[str, int],
    worker_keys: Mapping[str, int],
    *,
    float4_counts: bool = False,
    columns: Sequence[Sequence[Any]] | None = None,
) -> list[tuple[Any, ...]]:
    """``rows`` (``GPU_SAMPLE_COLUMNS``) as ``raw_gpu_samples`` rows (``RAW_GPU_COLUMNS``); every GPU UUID
    and worker id must have a key. ``float4_counts`` (PostgreSQL): the byte counts go to 4-byte float
    columns, so one beyond the largest such float that fits 64 bits is stored as that float. ``columns``:
    :func:`columns_of` ``rows``, when the caller has them already. Raises
    :class:`fleet.store.codes.UnknownCodeError` for a value without a code."""
    lookups: dict[str, _Lookup] = {"gpu_key": gpu_keys, "worker_key": {None: None, **worker_keys}}
    return _transform(rows, _GPU_PLAN, lookups, BYTE_COUNTERS if float4_counts else (), columns)


def lean_engine_rows(
    rows: Sequence[tuple[Any, ...]],
    worker_keys: Mapping[str, int],
    *,
    columns: Sequence[Sequence[Any]] | None = None,
) -> list[tuple[Any, ...]]:
    """``rows`` (``ENGINE_SAMPLE_COLUMNS``) as ``raw_engine_samples`` rows (``RAW_ENGINE_COLUMNS``)."""
    return _transform(rows, _ENGINE_PLAN, {"worker_key": worker_keys}, (), columns)


def columns_of(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` transposed: one tuple per column (none for no rows), at C speed."""
    return list(zip(*rows, strict=True))


def _transform(
    rows: Sequence[tuple[Any, ...]],
    plan: tuple[tuple[int, str], ...],
    lookups: dict[str, _Lookup],
    float4_counts: Sequence[str] = (),
    columns: Sequence[Sequence[Any]] | None = None,
) -> list[tuple[Any, ...]]:
    if not rows:
        return []
    if columns is None:
        columns = columns_of(rows)
    out: list[Sequence[Any]] = []
    for index, name in plan:
        lookup = lookups.get(name, _ENCODERS.get(name))
        if lookup is None:
            if name in REAL_COLUMNS:
                out.append(_reals(columns[index]))
            elif name in float4_counts:
                out.append(_float4_counts(columns[index]))
            else:
                out.append(columns[index])
            continue
        try:
            out.append(list(map(lookup.__getitem__, columns[index])))
        except KeyError as exc:
            if name in _CODES:
                raise codes.unknown_code(name, exc.args[0], _CODES[name]) from None
            raise KeyError(f"{name}: no key resolved for {exc.args[0]!r}") from None
    return list(zip(*out, strict=True))


# Sample columns stored as floats: 4-byte on PostgreSQL, 8-byte on SQLite (the same names in the raw tables
# and the views). The byte counts are 4-byte floats on PostgreSQL only (FLOAT4_ON_POSTGRES).
REAL_COLUMNS = frozenset(
    column.name
    for model in (RawGpuSampleRow, RawEngineSampleRow)
    for column in table_of(model).c
    if isinstance(column.type, REAL) and column.name not in BYTE_COUNTERS
)
FLOAT4_ON_POSTGRES = REAL_COLUMNS | frozenset(BYTE_COUNTERS)
_FLOAT32 = struct.Struct("f")
# The smallest normal 4-byte float: PostgreSQL refuses a smaller magnitude as underflow.
FLOAT32_MIN = 1.1754943508222875e-38
# The largest 4-byte float below 2**63 (2**63 - 2**39): a larger count would round to 2**63, which no
# 64-bit integer holds, so it could not be read back as one.
FLOAT32_INT64_MAX = 2**63 - 2**39


def _float4_counts(column: Sequence[Any]) -> Sequence[Any]:
    """Byte counts as a 4-byte float column holds them; unchanged (no per-value call) unless one is beyond
    :data:`FLOAT32_INT64_MAX` (the contract bounds them at 2**63 - 1 and at 0)."""
    largest = max(filter(None, column), default=0)
    return list(map(to_float4_count, column)) if largest > FLOAT32_INT64_MAX else column


def to_float4_count(value: Any) -> Any:
    """A byte count as PostgreSQL stores it: beyond :data:`FLOAT32_INT64_MAX`, that value."""
    return FLOAT32_INT64_MAX if value is not None and value > FLOAT32_INT64_MAX else value


def _reals(column: Sequence[Any]) -> Sequence[Any]:
    """The column as 4-byte floats hold it; unchanged (no per-value call) when nothing is that small: the
    contract keeps these columns at or above 0, so the smallest non-zero value decides."""
    smallest = min(filter(None, column), default=1.0)
    return list(map(to_real, column)) if smallest < FLOAT32_MIN else column


def to_real(value: Any) -> Any:
    """A value as a 4-byte float column can hold it: a magnitude below the smallest normal 4-byte float
    (the contract allows 1e-300 for a ratio) becomes that smallest one, keeping its sign, so a positive
    value stays positive; everything else is unchanged (the contract bounds these columns far below the
    4-byte float's maximum)."""
    if isinstance(value, float) and 0.0 < abs(value) < FLOAT32_MIN:
        return math.copysign(FLOAT32_MIN, value)
    return value


def stored_equal(dialect: str, column: str, stored: Any, sent: Any) -> bool:
    """Whether a sample column read back as ``stored`` holds what ``sent`` would be stored as: equal values,
    or, for a 4-byte float column on PostgreSQL, values that round to the same 4-byte float. A binary value
    (an encoded histogram) compares by its bytes, however the driver hands it back (``memoryview``)."""
    if stored == sent:
        return True
    if isinstance(stored, memoryview | bytearray) or isinstance(sent, memoryview | bytearray):
        return bool(_as_bytes(stored) == _as_bytes(sent))
    if column in REAL_COLUMNS and stored == to_real(sent):  # below a 4-byte float: the smallest one
        return True
    if dialect != "postgresql" or column not in FLOAT4_ON_POSTGRES:
        return False
    if not isinstance(stored, int | float) or not isinstance(sent, int | float):
        return False
    try:
        return bool(_FLOAT32.pack(stored) == _FLOAT32.pack(to_float4_count(to_real(sent))))
    except OverflowError:  # beyond a 4-byte float: the store refuses it, so it is not the stored value
        return False


def _as_bytes(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview | bytearray) else value
