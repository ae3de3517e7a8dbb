"""Time of one collective inside a node: the tensor-parallel all-reduce and the expert all-to-all.

NCCL and the engines' custom all-reduce kernels pick, per message size, between a latency-optimised
protocol (NCCL's LL, the engines' one-shot kernels: the data rides with flags, so only half the link
carries payload) and a bandwidth-optimised one (NCCL's ring with the Simple protocol: full link
bandwidth, but every one of the 2(n-1) ring steps pays a hop latency). The collective takes the faster of
the two at its message size, as NCCL's own tuner does. Either way a call inside a serving step waits for
its n - 1 peers: the fitted per-peer latency (launch, synchronisation, the skew between ranks) is paid
n - 1 times. Reasoning: docs/analyzer.md#communication
"""

from __future__ import annotations

from dataclasses import dataclass

# NCCL's cost model (src/graph/tuning.cc, NVLink): the LL protocol packs 4 payload bytes with a 4-byte
# flag in every 8-byte store, so half the link bandwidth carries data; the ring's Simple protocol pays
# 3.4 us per hop on NVLink. Hardware facts, not fitted.
LL_PAYLOAD_SHARE = 0.5
SIMPLE_HOP_LATENCY_S = 3.4e-6


@dataclass(frozen=True)
class Link:
    """What a collective can use: the per-GPU link rate it achieves and its latency per peer."""

    bytes_per_s: float  # achieved per-GPU bandwidth (catalog figure x fitted efficiency)
    latency_s: float  # per peer of one call: launch, synchronisation, rank skew (fitted)

    def __post_init__(self) -> None:
        if not self.bytes_per_s > 0:
            raise ValueError(f"link bandwidth must be positive, got {self.bytes_per_s}")
        if self.latency_s < 0:
            raise ValueError(f"collective latency must be >= 0, got {self.latency_s}")


def allreduce_seconds(gpus: int, message_bytes: float, link: Link) -> float:
    """One all-reduce of ``message_bytes`` over ``gpus`` GPUs: the faster of the latency-optimised and
    the ring protocol (each GPU sends and receives 2(n-1)/n of the message either way)."""
    if gpus <= 1 or message_bytes <= 0:
        return 0.0
    moved = 2 * (gpus - 1) / gpus * message_bytes
    sync = link.latency_s * (gpus - 1)
    latency_optimised = sync + moved / (link.bytes_per_s * LL_PAYLOAD_SHARE)
    ring = sync + 2 * (gpus - 1) * SIMPLE_HOP_LATENCY_S + moved / link.bytes_per_s
    return min(latency_optimised, ring)


def all_to_all_seconds(gpus: int, bytes_per_gpu: float, link: Link) -> float:
    """One all-to-all where each GPU sends ``bytes_per_gpu`` spread over its ``gpus - 1`` peers (expert
    dispatch or combine): the per-peer latency for each of the ``gpus - 1`` peers, and the volume at
    link rate."""
    if gpus <= 1 or bytes_per_gpu <= 0:
        return 0.0
    return link.latency_s * (gpus - 1) + bytes_per_gpu / link.bytes_per_s
