"""The prompt load a group's prefill workers were seen serving within a TTFT target: the fleet's own evidence
of its prefill goodput.

Per worker and bucket: the prompt tokens/s it served and the TTFT p90 its engine reported. Under a target,
the load of the buckets that met it is goodput the group has delivered, whatever a queueing model says: a
worker seen serving that much within the target can. Its high quantile (robust to a lucky bucket) is a
floor on the bounded capacity, and outranks the model's bound where it is higher.
Reasoning: docs/analyzer.md#goodput
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.grid import WorkerGrid

FloatArray = npt.NDArray[np.float64]
SEEN_QUANTILE = 0.9  # of the qualifying buckets' loads: near the most seen, not one lucky bucket


@dataclass(frozen=True)
class TtftPoints:
    """One group's prefill buckets: each worker-bucket's prompt tokens/s and its window TTFT p90."""

    rates: FloatArray
    p90s: FloatArray

    def load_within(self, target_s: float, min_buckets: int) -> float | None:
        """Prompt tokens/s per worker seen within ``target_s`` (the :data:`SEEN_QUANTILE` of the buckets
        that met it), None with fewer than ``min_buckets`` such buckets."""
        met = self.p90s <= target_s
        if int(met.sum()) < min_buckets:
            return None
        return float(np.quantile(self.rates[met], SEEN_QUANTILE))


def ttft_points(grid: WorkerGrid, rows: npt.NDArray[np.int64], prefill: npt.NDArray[np.bool_]) -> TtftPoints:
    """The points of ``rows`` where ``prefill`` (per row and bucket) holds and the engine reported both a
    prompt rate and a TTFT p90 for at least half the bucket."""
    rates = grid.rate(grid.prompt_tokens[rows], rows)
    p90s = grid.ttft_p90_s[rows]
    use = prefill & (grid.engine_s[rows] >= grid.bucket_s / 2.0) & np.isfinite(rates) & np.isfinite(p90s)
    return TtftPoints(rates[use], p90s[use])
