"""Lost tokens/s over time from finding episodes, when the store holds no analyzer runs for the range.

Findings of one subject (a worker, a pool) overlap (a worker can be both misplaced and drifting), so per
bucket the subject's largest loss counts, and subjects add up: the same rule as the service's
``GET /v1/lost-tokens`` uses, so the dashboard and the API agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from dashboard.views import FindingView, LostPoint


def lost_from_episodes(
    findings: Sequence[FindingView], since: datetime, until: datetime, step_s: float
) -> list[LostPoint]:
    first = math.floor(since.timestamp() / step_s) * step_s
    count = max(0, math.ceil((until.timestamp() - first) / step_s))
    chosen: list[dict[str, FindingView]] = [{} for _ in range(count)]
    for f in findings:
        if f.lost_tokens_per_s is None or f.lost_tokens_per_s <= 0:
            continue  # no loss stated: it adds nothing, not a 0
        end = (f.resolved_at or f.last_seen).timestamp()
        lo = max(0, math.floor((f.first_seen.timestamp() - first) / step_s))
        hi = min(count - 1, math.floor((end - first) / step_s))
        for i in range(lo, hi + 1):
            known = chosen[i].get(f.subject)
            if known is None or f.lost_tokens_per_s > (known.lost_tokens_per_s or 0.0):
                chosen[i][f.subject] = f
    points = []
    for i, picked in enumerate(chosen):
        ts = datetime.fromtimestamp(first + i * step_s, tz=UTC)
        if not picked:
            points.append(LostPoint(ts, None, None, None))
            continue
        values = list(picked.values())
        lows = [f.lost_tokens_per_s_low for f in values]
        highs = [f.lost_tokens_per_s_high for f in values]
        points.append(
            LostPoint(
                ts,
                sum(f.lost_tokens_per_s or 0.0 for f in values),  # every value here is a stated loss > 0
                None if any(x is None for x in lows) else sum(x or 0.0 for x in lows),
                None if any(x is None for x in highs) else sum(x or 0.0 for x in highs),
            )
        )
    return points
