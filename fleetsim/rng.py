"""Independent, reproducible random streams: every generator is keyed by (seed, stream, ...).

Keys name what a stream is for and which slice of time it covers (a day, a chunk of windows), so any
slice can be drawn on its own and one stream's use never shifts another's numbers.
"""

from __future__ import annotations

import numpy as np

STREAM_ARRIVALS = 1
STREAM_BURSTS = 2
STREAM_RESTARTS = 3
STREAM_GAPS = 4
STREAM_GPU_NOISE = 5
STREAM_ENGINE_NOISE = 6


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """An independent generator for one (seed, stream, ...) key."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))
