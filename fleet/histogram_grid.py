"""The shared grid of latency-histogram bounds, and what ingest needs of it without numpy.

Ingest checks every histogram a record carries and stores it in the grid's short byte form; both are
plain Python where the engine's bounds lie on the grid (the engines' defaults do). Importing numpy costs
about 0.1 s, before ``phasefit ingest`` can fork its parsing processes, so only histograms on other bounds
take :mod:`fleet.histograms` (numpy), imported when first met. That module holds the rest and re-exports
these names. Pure: no I/O.
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Sequence
from itertools import islice

_STEPS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.5, 8.0)  # per decade: the engines' round numbers
# Upper bounds in seconds, 1 ms to 8,000 s; 160, 640 and 2,560 s are vLLM's top TTFT bounds.
BOUNDS_S: tuple[float, ...] = tuple(
    sorted(
        {round(step * 10.0**exponent, 6) for exponent in range(-3, 4) for step in _STEPS}
        | {160.0, 640.0, 2560.0}
    )
)
SIZE = len(BOUNDS_S) + 1  # the buckets: one per bound, then everything above the last (+Inf)
INDEX = {bound: i for i, bound in enumerate(BOUNDS_S)}
# The stored form: a knot count, then each knot (bound index, cumulative count), then the total.
COUNT, KNOT, TOTAL = struct.Struct("<B"), struct.Struct("<Bf"), struct.Struct("<f")


class HistogramError(ValueError):
    """A histogram that is not one (bounds out of order, cumulative counts that fall)."""


def check(le: Sequence[float], counts: Sequence[float], count: float) -> None:
    """Raise :class:`HistogramError` unless ``le`` rises strictly, ``counts`` (cumulative, one per bound)
    never falls, and ``count`` (the +Inf bucket: every observation) is at least the last of them."""
    if len(le) != len(counts):
        raise HistogramError(f"{len(le)} bucket bounds but {len(counts)} cumulative counts")
    if not all(map(operator.lt, le, islice(le, 1, None))):  # C speed: this runs for every histogram
        i = next(i for i in range(1, len(le)) if le[i] <= le[i - 1])
        raise HistogramError(f"bucket bounds must rise: le[{i}] = {le[i]} after {le[i - 1]}")
    if not all(map(operator.le, counts, islice(counts, 1, None))):
        i = next(i for i in range(1, len(counts)) if counts[i] < counts[i - 1])
        raise HistogramError(
            f"cumulative counts must not fall: counts[{i}] = {counts[i]} after {counts[i - 1]}"
        )
    if counts and count < counts[-1]:
        raise HistogramError(
            f"count {count} (every observation) is below the last cumulative count {counts[-1]}"
        )


def stored_on_grid(le: Sequence[float], counts: Sequence[float], count: float) -> bytes | None:
    """``encode(rebin(le, counts, count))`` of a histogram :func:`check` accepts (the contract checked it),
    at a few microseconds, where every one of ``le`` is a bound of the shared grid (the engines' defaults
    are): the engine's own points are the knots, the flat start and end trimmed. None where a bound is off
    the grid: :func:`fleet.histograms.stored` then takes the long way (interpolated onto the grid with
    numpy, then encoded)."""
    try:
        indices = [INDEX[bound] for bound in le]
    except KeyError:
        return None
    n = len(counts)
    start = 0
    while start + 1 < n and counts[start + 1] == 0.0:
        start += 1  # keep the last empty bound before the first observation: the line starts there
    end = n
    while end - 1 > start and counts[end - 2] == counts[end - 1]:
        end -= 1  # past the last rise the curve is flat: np.interp holds the last knot's count
    if end - start == 1 and counts[start] == 0.0:
        start = end  # nothing observed below any bound: no knot
    flat: list[float] = []
    for i in range(start, end):
        flat += (indices[i], counts[i])
    return _packer(end - start).pack(end - start, *flat, max(count, counts[-1] if counts else 0.0))


@functools.lru_cache(maxsize=len(BOUNDS_S) + 1)
def _packer(knots: int) -> struct.Struct:
    """The stored form of ``knots`` knots in one struct: their count, each (index, count), the total."""
    return struct.Struct("<B" + "Bf" * knots + "f")
