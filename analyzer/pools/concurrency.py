"""The engines' concurrency cap: the most requests a worker runs at once, and when it ran at it.

Read where the engine exports it (SGLang's ``max_running_requests``, vLLM's ``max_num_seqs``, TensorRT-LLM's
max batch size: ``WorkerRecord.max_running_requests``), else seen as a plateau: the most requests the worker
ran, held (within ``plateau_share``) in ``plateau_buckets`` buckets or more. A decode worker pinned at its cap
with work waiting is saturated as surely as one whose KV cache is full, and no decode batch runs beyond it:
the model's KV-sized batch is capped there. Reasoning: docs/analyzer.md#calibration-and-capacity
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from analyzer.telemetry.grid import WorkerGrid

FloatArray = npt.NDArray[np.float64]


def running_plateau(running: FloatArray, share: float, buckets: int) -> float | None:
    """The most requests a worker ran, where it held that level (within ``share``) in ``buckets`` buckets or
    more; None where it never did (a peak, not a cap)."""
    finite = running[np.isfinite(running)]
    if finite.size == 0 or float(finite.max()) < 1.0:
        return None
    peak = float(finite.max())
    return peak if int((finite >= share * peak).sum()) >= buckets else None


def row_caps(
    grid: WorkerGrid, rows: npt.NDArray[np.int64], reported: Mapping[int, int], share: float, buckets: int
) -> FloatArray:
    """Per row: its engine's reported cap, else its running plateau, else infinity (no cap seen)."""
    out = np.full(rows.shape, math.inf)
    for i, row in enumerate(rows.tolist()):
        if row in reported:
            out[i] = float(reported[row])
        else:
            plateau = running_plateau(grid.running[row], share, buckets)
            out[i] = plateau if plateau is not None else math.inf
    return out


def at_cap(
    grid: WorkerGrid, rows: npt.NDArray[np.int64], caps: FloatArray, share: float
) -> npt.NDArray[np.bool_]:
    """Per (row, bucket): running at its cap (within ``share``); never where no cap is known."""
    running = np.nan_to_num(grid.running[rows])
    limit = np.where(np.isfinite(caps), share * caps, np.inf)
    hit: npt.NDArray[np.bool_] = running >= limit[:, None]
    return hit


def group_cap(members: Sequence[int], reported: Mapping[int, int]) -> float | None:
    """The cap a group's engines report (their median), None where none reports one."""
    figures = [reported[row] for row in members if row in reported]
    return float(np.median(figures)) if figures else None
