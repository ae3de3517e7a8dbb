"""The engines' latency histograms, as the simulator's latency model gives them.

The simulator models a window's latency as a lognormal (``pool.latencies``: a median and a p99, the p90
between them by ``pool.lognormal_p90``), and the engine reports that window's p50/p90/p99 with
measurement noise (``fleet_sim``). Its histogram is the same lognormal, evaluated at the shared bucket
bounds (:data:`fleet.histograms.BOUNDS_S`) as cumulative counts times the window's observations:

- its width is the window's own p50 and p99: ``sigma = ln(p99 / p50) / z99``;
- it is pinned at the window's reported p90 (``median = p90 / exp(z90 * sigma)``). The three reported
  quantiles carry independent noise, so no lognormal passes through all of them; the p90 is the one a
  pool's latency target is read at, from its workers' merged buckets, so the histogram keeps it;
- end to end, where only a p90 is modelled, the lognormal through that p90 with the TTFT's sigma.

Observations per window: TTFT and end to end count the requests the worker served (a prefill worker:
its ``generation_tokens``, one first token per request prefilled; decode and colocated workers: their
``generation_tokens`` over the window's mean output length, the requests they decoded), TPOT the output
tokens generated (vLLM's inter-token latency observes once per output token). A family the role does
not report (a prefill worker's TPOT) is None; a window in which the worker served nothing an empty
histogram (count 0), as an engine exports a family it has but observed nothing in.

A histogram is held as three numbers per (window, worker) (:class:`HistogramColumns`) and turned into
buckets only for the records picked, a block at a time: the stored form (:func:`encoded`, what
:func:`fleet.histograms.decode` reads) or the contract's JSON (:func:`contract_dicts`,
:func:`contract_json`).
The lognormal's tails are cut where they hold under ``_TAIL`` (1e-4) of the window's observations (past
3.7 sigma; the p99.9 is at 3.1), which keeps the stored form and the records short.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import orjson

from fleet import histograms

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

Z90 = 1.2815516  # standard normal quantiles
Z99 = 2.3263479
COUNT_DECIMALS = 3  # counts in the records (the expected observations of a window: not whole)
_TAIL = 1e-4  # share of a window's observations below which a tail is cut
_BLOCK = 4096  # cells whose (cells x bounds) arrays are built at once: bounds the memory they take
_MIN_SIGMA = 1e-3  # a p99 equal to the p50: all observations at one latency (a step, in one bucket)
_N = len(histograms.BOUNDS_S)
_BOUNDS = np.asarray(histograms.BOUNDS_S, dtype=np.float64)
_LOG_BOUNDS = np.log(_BOUNDS)
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
# The standard normal CDF, tabled (numpy has no erf, and the simulator needs no scipy): linear between
# points 0.0006 apart it is off by under 2e-8; tails under _TAIL cut to 0 and 1.
_U_STEP = 10.0 / 2**14
_PHI = np.array([0.5 * math.erfc(-(k - 2**13) * _U_STEP / math.sqrt(2.0)) for k in range(2**14 + 1)])
_PHI = np.where(_PHI < _TAIL, 0.0, np.where(_PHI > 1.0 - _TAIL, 1.0, _PHI))  # u from -5 to 5
_PHI_STEP = np.append(np.diff(_PHI), 0.0)


@dataclass(frozen=True)
class HistogramColumns:
    """A latency histogram per cell (any shape): the lognormal's ``median`` (s) and ``sigma``, and the
    window's observations ``count``: NaN where the engine exports no such histogram (None), 0 where it
    observed nothing (an empty histogram)."""

    median: FloatArray
    sigma: FloatArray
    count: FloatArray

    def take(self, rows: IntArray, items: IntArray) -> HistogramColumns:
        """The cells ``(rows[i], items[i])`` of 2-D columns, as 1-D columns."""
        return HistogramColumns(self.median[rows, items], self.sigma[rows, items], self.count[rows, items])


def sigma_of(p50: FloatArray, p99: FloatArray) -> FloatArray:
    """The lognormal's sigma through a p50 and a p99 (NaN where either is)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.maximum(np.log(np.maximum(p99, p50) / p50) / Z99, _MIN_SIGMA)
    return out


def histogram_columns(
    p90: FloatArray, sigma: FloatArray, count: FloatArray, exported: npt.NDArray[np.bool_]
) -> HistogramColumns:
    """The lognormal with this ``sigma`` and 90th percentile, ``count`` observations where the p90 is
    reported, none (0) where it is not but the engine ``exported`` the family, None (NaN) elsewhere."""
    observed = np.isfinite(p90) & np.isfinite(sigma) & (count > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        median = np.where(observed, p90 * np.exp(-Z90 * sigma), np.nan)
    return HistogramColumns(
        median=median,
        sigma=np.where(observed, sigma, np.nan),
        count=np.where(exported, np.where(observed, count, 0.0), np.nan),
    )


def cumulative(columns: HistogramColumns) -> FloatArray:
    """Cumulative counts at each bound of the shared grid, one row per (flattened) cell; zeros where the
    histogram is empty or None."""
    median, sigma = columns.median.ravel(), columns.sigma.ravel()
    count = np.nan_to_num(columns.count.ravel(), nan=0.0)
    live = np.flatnonzero(count > 0)
    # The table's position of u = (ln bound - ln median) / sigma, then linear between its points (as
    # np.interp, without its search: the points are evenly spaced).
    position = _LOG_BOUNDS[None, :] - np.log(median[live])[:, None]
    position /= sigma[live][:, None] * _U_STEP
    position += _PHI.size // 2
    np.clip(position, 0.0, _PHI.size - 1.0 - 1e-9, out=position)
    index = position.astype(np.intp)
    position -= index
    share = _PHI[index]
    share += position * _PHI_STEP[index]
    share *= count[live][:, None]
    if live.size == count.size:
        return np.asarray(share, dtype=np.float64)
    out = np.zeros((count.size, _N))
    out[live] = share
    return out


def buckets(columns: HistogramColumns) -> FloatArray:
    """Per-bucket counts on the shared grid (``histograms.SIZE`` per row, the last above every bound)."""
    cum = cumulative(columns)
    total = np.nan_to_num(columns.count.ravel(), nan=0.0)
    return np.maximum(np.diff(np.concatenate((cum, total[:, None]), axis=1), axis=1, prepend=0.0), 0.0)


def _blocks(columns: HistogramColumns) -> Iterator[HistogramColumns]:
    """The cells (flattened) in blocks of ``_BLOCK``: the (cells x bounds) arrays of one block at a time."""
    median, sigma, count = columns.median.ravel(), columns.sigma.ravel(), columns.count.ravel()
    for start in range(0, count.size, _BLOCK):
        part = slice(start, start + _BLOCK)
        yield HistogramColumns(median[part], sigma[part], count[part])


def encoded(columns: HistogramColumns) -> list[bytes | None]:
    """Each cell's histogram in the stored form (:func:`fleet.histograms.encode_cumulative`;
    :func:`fleet.histograms.decode` gives back its :func:`buckets`), None where there is none."""
    return [item for block in _blocks(columns) for item in _encoded(block)]


def _encoded(columns: HistogramColumns) -> list[bytes | None]:
    total = np.nan_to_num(columns.count, nan=0.0)
    stored = histograms.encode_cumulative(cumulative(columns), total)
    exported = np.isfinite(columns.count).tolist()
    return [form if known else None for form, known in zip(stored, exported, strict=True)]


def _rounded(columns: HistogramColumns) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    """Cumulative counts and totals as the records carry them (``COUNT_DECIMALS``), and which bounds
    each keeps, ``[first, last)``: up to its last non-empty finite bucket (as ``histograms.to_contract``
    trims), from the last bound with nothing at or below it (the empty bounds below that one say nothing
    more: re-binned, the histogram is the same)."""
    cum = cumulative(columns).round(COUNT_DECIMALS)
    total = np.nan_to_num(columns.count, nan=0.0).round(COUNT_DECIMALS)
    first, last = histograms.cumulative_span(cum)
    return cum, total, first, last


def contract_dicts(columns: HistogramColumns) -> list[dict[str, object] | None]:
    """Each cell's histogram as the contract's ``LatencyHistogram`` takes it (``le``, cumulative
    ``counts``, ``count``), None where there is none."""
    return [item for block in _blocks(columns) for item in _contract_dicts(block)]


def _contract_dicts(columns: HistogramColumns) -> list[dict[str, object] | None]:
    cum, total, first, last = _rounded(columns)
    exported = np.isfinite(columns.count.ravel()).tolist()
    return [
        {"le": list(histograms.BOUNDS_S[j:k]), "counts": cum[i, j:k].tolist(), "count": t} if known else None
        for i, (j, k, t, known) in enumerate(
            zip(first.tolist(), last.tolist(), total.tolist(), exported, strict=True)
        )
    ]


def contract_json(columns: HistogramColumns) -> list[bytes]:
    """:func:`contract_dicts` as JSON tokens (``null`` where there is none), the same values. The counts
    of a block's histograms that keep the same bounds are formatted by one orjson call."""
    return [item for block in _blocks(columns) for item in _contract_json(block)]


def _contract_json(columns: HistogramColumns) -> list[bytes]:
    cum, total, first, last = _rounded(columns)
    exported = np.isfinite(columns.count.ravel())
    totals = orjson.dumps(total, option=_NUMPY)[1:-1].split(b",") if total.size else []
    out = [b"null"] * len(totals)
    key = first * (_N + 1) + last
    order = np.argsort(key, kind="stable")
    order = order[exported[order]]
    breaks = np.flatnonzero(np.diff(key[order])) + 1
    for group in np.split(order, breaks) if order.size else []:
        j, k = int(first[group[0]]), int(last[group[0]])
        head = b'{"le":%s,"counts":[' % _le_json(j, k)
        if k > j:
            bodies = orjson.dumps(np.ascontiguousarray(cum[group, j:k]), option=_NUMPY)[2:-2].split(b"],[")
        else:
            bodies = [b""] * group.size
        for i, body in zip(group.tolist(), bodies, strict=True):
            out[i] = b'%s%s],"count":%s}' % (head, body, totals[i])
    return out


@functools.cache
def _le_json(first: int, last: int) -> bytes:
    return orjson.dumps(list(histograms.BOUNDS_S[first:last]))
