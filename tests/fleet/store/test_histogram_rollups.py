"""Summing stored histograms a chunk at a time (fleet.store.histogram_rollups): the same counts as
fleet.histograms.decode and merged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fleet import histograms
from fleet.store.histogram_rollups import histogram_sums

# Bounds off and on the shared grid, below its first and above its last.
ENGINE_BOUNDS = (*histograms.BOUNDS_S, 0.0005, 0.0123, 0.7, 9000.0)


def _with_counts(rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """A random engine histogram stored, and its per-bucket counts on the shared grid."""
    k = int(rng.integers(1, 30))
    le = np.sort(rng.choice(np.array(ENGINE_BOUNDS), size=k, replace=False))
    per_bucket = rng.integers(0, 100, size=k).astype(float) * (rng.random(k) < 0.7)
    counts = np.cumsum(per_bucket)
    buckets = histograms.rebin(le.tolist(), counts.tolist(), float(counts[-1] + rng.integers(0, 5)))
    encoded = histograms.encode(buckets)
    assert encoded is not None
    return encoded, buckets


def _stored(rng: np.random.Generator) -> bytes:
    return _with_counts(rng)[0]


def _edges() -> list[bytes]:
    """Nothing observed; all above the grid; all in its last finite bucket; all in its first."""
    out = []
    for place in (None, histograms.SIZE - 1, histograms.SIZE - 2, 0):
        buckets = np.zeros(histograms.SIZE)
        if place is not None:
            buckets[place] = 5.0
        encoded = histograms.encode(buckets)
        assert encoded is not None
        out.append(encoded)
    return out


def test_many_decoded_at_once_are_what_decode_reads() -> None:
    rng = np.random.default_rng(3)
    made = [_with_counts(rng) for _ in range(500)]
    stored: list[Any] = [m[0] for m in made] + _edges()
    stored.append(memoryview(stored[7]))  # as a driver may hand it back
    edges = [np.zeros(histograms.SIZE) for _ in range(4)]
    for buckets, place in zip(edges[1:], (histograms.SIZE - 1, histograms.SIZE - 2, 0), strict=True):
        buckets[place] = 5.0
    expected = np.array([m[1] for m in made] + edges + [made[7][1]])
    # the counts come back as the 4-byte floats they are stored as
    np.testing.assert_allclose(histograms.decode_many(stored), expected, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(histograms.decode_many(stored[-6:-5]), expected[-6:-5], rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize(
    "broken", [b"", b"\x02\x00\x00\x00\x00", b"\x01\x51\x00\x00\x80\x3f\x00\x00\x80\x3f"]
)
def test_a_broken_stored_histogram_is_refused(broken: bytes) -> None:
    with pytest.raises(histograms.HistogramError):
        histograms.decode_many([_edges()[1], broken])


@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
def test_sums_per_key_across_chunks(chunk_rows: int) -> None:
    rng = np.random.default_rng(5)
    rows: list[tuple[Any, ...]] = []
    for worker in ("a", "b", "c"):
        for bucket in (0, 60):
            for window in range(int(rng.integers(1, 6))):
                rows.append((worker, bucket, _stored(rng), None if window % 2 else _stored(rng), None))
    rows.append(("d", 0, None, _stored(rng), None))  # one histogram: kept as stored
    got = dict(histogram_sums(rows, chunk_rows))
    assert list(got) == list(dict.fromkeys((row[0], row[1]) for row in rows))
    for key, sums in got.items():
        mine = [row for row in rows if (row[0], row[1]) == key]
        for place, summed in enumerate(sums):
            held = [row[2 + place] for row in mine if row[2 + place] is not None]
            if not held:
                assert summed is None
            elif len(held) == 1:
                assert summed == held[0]  # the bytes themselves
            else:
                assert isinstance(summed, np.ndarray)
                expected = histograms.merged(map(histograms.decode, held))
                assert expected is not None
                np.testing.assert_allclose(summed, expected, rtol=1e-6, atol=1e-6)
