"""Latency histograms on one shared grid of bucket bounds, so histograms from many windows, workers and
engines add up, and a pool's quantile is taken from its merged buckets as PromQL's
``histogram_quantile(q, sum by (le) (...))`` takes it.

Engines bucket their latency histograms differently (vLLM's TTFT bounds run 0.001 ... 2560 s, SGLang's
0.1 ... 400 s). A window's histogram, as the contract carries it (the engine's own bounds, cumulative
counts), is re-binned onto :data:`BOUNDS_S` by interpolating its cumulative counts linearly between the
engine's bounds: the assumption ``histogram_quantile`` itself makes inside a bucket. The grid holds every
bound of vLLM's, SGLang's and Dynamo's default latency buckets, so for those engines re-binning loses
nothing and a quantile of the re-binned histogram is the engine's own ``histogram_quantile``.

Stored as a short byte string (:func:`encode`): the knots of the cumulative curve, about 5 bytes per
engine bucket that holds observations. The grid itself, the check and the stored form of a histogram on
it live in :mod:`fleet.histogram_grid` (no numpy, for ingest) and are re-exported here.
Pure: no I/O. Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from fleet.histogram_grid import BOUNDS_S, COUNT, KNOT, SIZE, TOTAL, HistogramError, check, stored_on_grid

__all__ = [
    "BOUNDS_S", "SIZE", "FloatArray", "HistogramError", "check", "cumulative_span", "decode",
    "decode_many", "encode", "encode_cumulative", "merged", "quantile", "rebin", "stored", "summed",
    "to_contract",
]  # fmt: skip

FloatArray = npt.NDArray[np.float64]

_BOUNDS = np.asarray(BOUNDS_S, dtype=np.float64)
_XS = np.concatenate(([0.0], _BOUNDS))
_WIDTHS_S = np.diff(_XS)  # each finite bucket's width in seconds (the first from 0)
_SPAN_SHARE = (_XS[1:-1] - _XS[:-2]) / (_XS[2:] - _XS[:-2])  # where each bound lies between its neighbours
_POSITIONS = np.arange(len(BOUNDS_S))
_KNOT_DTYPE = np.dtype([("index", "u1"), ("value", "<f4")])  # KNOT, packed
_HEADERS = tuple(COUNT.pack(n) for n in range(len(BOUNDS_S) + 1))


def rebin(le: Sequence[float], counts: Sequence[float], count: float) -> FloatArray:
    """Per-bucket counts on :data:`BOUNDS_S` (``SIZE`` of them, the last above every bound) of a histogram
    with upper bounds ``le`` and cumulative ``counts``, ``count`` observations in all. The cumulative count
    at each shared bound is interpolated linearly between the engine's bounds (from 0 at 0 seconds);
    observations above the engine's last bound land above the grid's last one."""
    check(le, counts, count)
    if not le:
        out = np.zeros(SIZE)
        out[-1] = count
        return out
    xs = np.concatenate(([0.0], np.asarray(le, dtype=np.float64)))
    ys = np.concatenate(([0.0], np.asarray(counts, dtype=np.float64)))
    # Past the engine's last bound np.interp holds its last cumulative count: what lies above that bound
    # is somewhere above it, so it lands in the +Inf bucket.
    below = np.interp(_BOUNDS, xs, ys)
    cumulative = np.append(below, max(count, ys[-1]))
    return np.maximum(np.diff(cumulative, prepend=0.0), 0.0)


def quantile(q: float, buckets: FloatArray | None) -> float | None:
    """``histogram_quantile(q, ...)`` of per-bucket counts on :data:`BOUNDS_S`: linear inside the bucket
    holding the rank, from 0 in the first; the last finite bound when the rank lies above it; None for an
    empty histogram (nothing observed is unknown, never 0)."""
    if buckets is None:
        return None
    total = float(buckets.sum())
    if not total > 0.0:
        return None
    rank = q * total
    cumulative = np.cumsum(buckets)
    # Counts stored as 4-byte floats and summed: a rank that a bucket reaches to a millionth is reached
    # there (else the rank would fall through empty buckets above it to the next filled one).
    index = int(np.searchsorted(cumulative, rank - 1e-6 * total, side="left"))
    if index >= len(BOUNDS_S):
        return BOUNDS_S[-1]
    lower = 0.0 if index == 0 else BOUNDS_S[index - 1]
    below = 0.0 if index == 0 else float(cumulative[index - 1])
    width = float(buckets[index])
    return lower + (BOUNDS_S[index] - lower) * (
        min(max((rank - below) / width, 0.0), 1.0) if width > 0 else 1.0
    )


def merged(histograms: Iterable[FloatArray | None]) -> FloatArray | None:
    """The bucket-wise sum of ``histograms`` (``sum by (le)``), None when none is known."""
    total: FloatArray | None = None
    for histogram in histograms:
        if histogram is not None:
            total = histogram.astype(np.float64) if total is None else total + histogram
    return total


def encode(buckets: FloatArray | None) -> bytes | None:
    """The stored form of per-bucket counts on the shared grid: the knots of their cumulative curve (the
    bounds where its slope changes, each as its index and cumulative count) and the total, every count a
    4-byte float. A re-binned engine histogram is linear between the engine's own bounds, so it keeps one
    knot per engine bucket that holds observations (a few dozen bytes), and :func:`decode` interpolates
    the rest back. None stays None (no histogram: unknown)."""
    if buckets is None:
        return None
    if buckets.shape != (SIZE,):
        raise HistogramError(f"a histogram on the shared grid has {SIZE} buckets, not {buckets.shape}")
    cumulative = np.cumsum(buckets.astype(np.float64))
    finite = cumulative[:-1]
    ys = np.concatenate(([0.0], finite))
    tolerance = 1e-6 * max(float(cumulative[-1]), 1.0)
    # A bound is a knot unless it lies on the line through its neighbours (the last: unless flat to it).
    line = ys[:-2] + (ys[2:] - ys[:-2]) * _SPAN_SHARE
    kept = np.append(np.abs(ys[1:-1] - line) > tolerance, ys[-1] != ys[-2])
    knots = [(int(i), float(finite[i])) for i in np.flatnonzero(kept)]
    parts = [COUNT.pack(len(knots))]
    parts.extend(KNOT.pack(index, value) for index, value in knots)
    parts.append(TOTAL.pack(float(cumulative[-1])))
    return b"".join(parts)


def decode(stored_value: bytes | memoryview | None) -> FloatArray | None:
    """:func:`encode`'s inverse (counts to 4-byte float precision); None stays None."""
    if stored_value is None:
        return None
    decoded: FloatArray = summed([stored_value], np.zeros(1, np.int64), 1)[0]
    return decoded


def stored(le: Sequence[float], counts: Sequence[float], count: float) -> bytes:
    """``encode(rebin(le, counts, count))`` of a histogram :func:`check` accepts: at a few microseconds on
    the grid's bounds (:func:`fleet.histogram_grid.stored_on_grid`), else interpolated onto it."""
    quick = stored_on_grid(le, counts, count)
    if quick is not None:
        return quick
    encoded = encode(rebin(le, counts, count))
    assert encoded is not None
    return encoded


def encode_cumulative(cumulative: FloatArray, totals: FloatArray) -> list[bytes]:
    """The stored forms of many histograms at once, from their cumulative counts at every bound (rows of
    ``len(BOUNDS_S)``) and their totals: every bound from the last one with nothing at or below it to the
    last rise is a knot (as :func:`stored` keeps an engine's points), so a curve that bends at every bound
    (a simulated lognormal) is kept whole. :func:`decode` reads each."""
    first, last = cumulative_span(cumulative)
    rows, index = np.nonzero((first[:, None] <= _POSITIONS) & (last[:, None] > _POSITIONS))
    knots = np.empty(rows.size, dtype=_KNOT_DTYPE)
    knots["index"] = index
    knots["value"] = cumulative[rows, index]
    blob = knots.tobytes()
    packed_totals = np.asarray(totals, dtype="<f4").tobytes()
    ends = (np.cumsum(last - first) * KNOT.size).tolist()
    out: list[bytes] = []
    begin = 0
    for i, (j, k, end) in enumerate(zip(first.tolist(), last.tolist(), ends, strict=True)):
        out.append(_HEADERS[k - j] + blob[begin:end] + packed_totals[4 * i : 4 * i + 4])
        begin = end
    return out


def cumulative_span(cumulative: FloatArray) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The bounds ``[first, last)`` of each row of cumulative counts that say what it holds: up to its
    last rise, from the last bound with nothing at or below it (0 where it has nothing below any bound);
    below ``first`` it is 0, above ``last`` flat (the rest above every bound)."""
    n = cumulative.shape[1]
    rises = np.diff(cumulative, axis=1, prepend=0.0) > 0
    some = rises.any(axis=1)
    last = np.where(some, n - np.argmax(rises[:, ::-1], axis=1), 0).astype(np.int64)
    first = np.where(some, np.maximum(np.argmax(rises, axis=1) - 1, 0), 0).astype(np.int64)
    return first, last


def decode_many(stored_values: Sequence[bytes | memoryview]) -> FloatArray:
    """:func:`decode` of many stored histograms at once: an (n, ``SIZE``) array of per-bucket counts."""
    n = len(stored_values)
    return summed(stored_values, np.arange(n, dtype=np.int64), n)


def summed(
    stored_values: Sequence[bytes | memoryview], group: npt.NDArray[np.int64], groups: int
) -> FloatArray:
    """The stored histograms summed per group (``group[i]`` for value ``i``): a (``groups``, ``SIZE``) array
    of per-bucket counts. Each cumulative curve is linear between its knots, so each bucket holds the slope
    there times its width, and all curves of a group add up by summing the slope changes at each bound:
    one pass over the knots however many histograms (a rollup sums hundreds of thousands)."""
    n = len(stored_values)
    lengths = np.fromiter(map(len, stored_values), dtype=np.int64, count=n)
    data = np.frombuffer(b"".join(stored_values), dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    if np.any(lengths < COUNT.size + TOTAL.size):
        raise HistogramError("a stored histogram too short to hold its knot count and total")
    sizes = data[starts].astype(np.int64)
    if np.any(lengths != COUNT.size + KNOT.size * sizes + TOTAL.size):
        raise HistogramError("a stored histogram's length does not match its knot count")
    totals = _floats_at(data, starts + lengths - TOTAL.size)
    nth = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    at = np.repeat(starts, sizes) + COUNT.size + KNOT.size * nth  # each knot's index byte
    knot_index = data[at].astype(np.int64)
    if knot_index.size and int(knot_index.max()) >= len(BOUNDS_S):
        raise HistogramError("a stored histogram's knot lies beyond the shared grid")
    knot_value = _floats_at(data, at + 1)
    # Every curve's points: its origin (column 0: no observation at 0 s), then its knots (column i + 1).
    owner = np.repeat(np.arange(n), sizes + 1)
    origin = np.zeros(owner.size, bool)
    origin[np.cumsum(sizes + 1) - (sizes + 1)] = True
    column = np.zeros(owner.size, np.int64)
    column[~origin] = knot_index + 1
    y = np.zeros(owner.size)
    y[~origin] = knot_value
    last = np.r_[origin[1:], True]  # a curve's last point: flat after it
    slope = np.zeros(owner.size)
    inner = np.flatnonzero(~last)
    slope[inner] = (y[inner + 1] - y[inner]) / (_XS[column[inner + 1]] - _XS[column[inner]])
    gained = slope - np.where(origin, 0.0, np.r_[0.0, slope[:-1]])
    weights = np.bincount(group[owner] * _XS.size + column, weights=gained, minlength=groups * _XS.size)
    # The slope on each bucket is the sum of the changes at or below its lower bound; its count, that slope
    # times its width. Sums of slopes of opposite sign leave rounding dust where nothing was observed:
    # anything under a billionth of the group's observations is nothing.
    slopes = np.cumsum(weights.reshape(groups, _XS.size)[:, :-1], axis=1)
    finite = slopes * _WIDTHS_S
    totals_by_group = np.bincount(group, weights=totals, minlength=groups)
    finite[np.abs(finite) <= 1e-9 * np.maximum(totals_by_group, 1.0)[:, None]] = 0.0
    above = totals_by_group - finite.sum(axis=1)
    out: FloatArray = np.maximum(np.hstack([finite, above[:, None]]), 0.0)
    return out


def _floats_at(data: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]) -> FloatArray:
    """The little-endian 4-byte floats at byte offsets ``at`` of ``data``."""
    four = np.ascontiguousarray(data[at[:, None] + np.arange(4)])
    values: FloatArray = four.view("<f4")[:, 0].astype(np.float64)
    return values


def to_contract(buckets: FloatArray) -> dict[str, object]:
    """Per-bucket counts on the shared grid as the contract carries a histogram (``le``, cumulative
    ``counts``, ``count``), trimmed to the bounds up to the last non-empty finite bucket."""
    cumulative = np.cumsum(buckets)
    filled = np.flatnonzero(buckets[:-1] > 0)
    last = int(filled[-1]) + 1 if filled.size else 0
    return {
        "le": list(BOUNDS_S[:last]),
        "counts": [float(v) for v in cumulative[:last]],
        "count": float(cumulative[-1]),
    }
