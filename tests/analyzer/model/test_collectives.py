"""analyzer/model/collectives.py: the protocol choice by message size, and what each protocol costs."""

from __future__ import annotations

import itertools

import pytest

from analyzer.model.collectives import (
    LL_PAYLOAD_SHARE,
    SIMPLE_HOP_LATENCY_S,
    Link,
    all_to_all_seconds,
    allreduce_seconds,
)

LINK = Link(bytes_per_s=400e9, latency_s=10e-6)


def test_one_gpu_or_an_empty_message_costs_nothing() -> None:
    assert allreduce_seconds(1, 1e6, LINK) == 0.0
    assert allreduce_seconds(8, 0.0, LINK) == 0.0
    assert all_to_all_seconds(1, 1e6, LINK) == 0.0


def test_a_small_message_waits_for_each_peer_once() -> None:
    """The latency-optimised protocol: the per-peer latency n - 1 times, no ring hops."""
    small = 16e3
    for gpus in (2, 4, 8):
        moved = 2 * (gpus - 1) / gpus * small
        expected = (gpus - 1) * LINK.latency_s + moved / (LINK.bytes_per_s * LL_PAYLOAD_SHARE)
        assert allreduce_seconds(gpus, small, LINK) == pytest.approx(expected)


def test_a_large_message_rides_the_ring_at_full_link_rate() -> None:
    large = 1e9
    moved = 2 * 7 / 8 * large
    ring = 7 * LINK.latency_s + 14 * SIMPLE_HOP_LATENCY_S + moved / LINK.bytes_per_s
    assert allreduce_seconds(8, large, LINK) == pytest.approx(ring)
    # Half the time the latency-optimised protocol would take at that size.
    assert allreduce_seconds(8, large, LINK) < 0.55 * (7 * LINK.latency_s + moved / (LINK.bytes_per_s / 2))


def test_time_grows_with_the_message_and_the_choice_is_continuous() -> None:
    sizes = [2.0**k for k in range(8, 31)]
    times = [allreduce_seconds(8, s, LINK) for s in sizes]
    assert times == sorted(times)
    # Where the protocols cross, neither jumps: doubling the message never more than doubles the time.
    assert all(b <= 2 * a + 1e-12 for a, b in itertools.pairwise(times))


def test_all_to_all_waits_for_each_peer_and_moves_the_volume() -> None:
    assert all_to_all_seconds(8, 4e6, LINK) == pytest.approx(7 * 10e-6 + 4e6 / 400e9)


@pytest.mark.parametrize(("bandwidth", "latency"), [(0.0, 1e-6), (-1.0, 1e-6), (1e9, -1e-9)])
def test_a_link_refuses_impossible_figures(bandwidth: float, latency: float) -> None:
    with pytest.raises(ValueError, match=r"link bandwidth|collective latency"):
        Link(bandwidth, latency)
