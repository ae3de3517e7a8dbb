"""Which workers of a group change role: how many is the plan's, which ones the telemetry says.

A decode -> prefill and a prefill -> decode change on the same node pair first (a swap in place: no data
moves); the rest by KV pressure, sessions in flight and queue (:func:`_rank_key`). Reasoning:
docs/analyzer.md#split_search
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analyzer.pools.capacity import GroupCapacity


@dataclass(frozen=True)
class Change:
    row: int  # grid row of the worker
    group: int  # index into the groups
    to_role: str  # "prefill" or "decode"
    share: float  # of the plan's gain attributed to this worker
    reason: str = ""  # why this worker of its group, from the telemetry (see ``WorkerLoad``)
    partner: int | None = None  # grid row of the worker on the same node that trades roles with it
    node: str | None = None


@dataclass(frozen=True)
class WorkerLoad:
    """What the segment's telemetry says about one worker, to choose which workers of a group change role:
    medians over the segment of its KV cache usage (0-1), requests running (sessions in flight) and
    requests waiting, and its node (None where unknown). NaN where not reported."""

    kv_usage: float = math.nan
    in_flight: float = math.nan
    waiting: float = math.nan
    node: str | None = None


def _kv_key(load: WorkerLoad) -> float:
    """KV pressure compared at whole percents (what an operator reads; finer differences are noise)."""
    return -round(load.kv_usage * 100.0) if math.isfinite(load.kv_usage) else math.inf


def _finite_or_inf(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def _rank_key(load: WorkerLoad, to_role: str) -> tuple[float, ...]:
    """Order of preference among a group's workers for a role change (smallest first)."""
    in_flight = _finite_or_inf(round(load.in_flight, 1) if math.isfinite(load.in_flight) else math.nan)
    waiting = _finite_or_inf(round(load.waiting, 1) if math.isfinite(load.waiting) else math.nan)
    if to_role == "prefill":  # most KV pressure, then fewest sessions to drain, then shortest queue
        return (_kv_key(load), in_flight, waiting)
    return (in_flight, waiting)  # a prefill worker that drains fastest


def _why(
    chosen: WorkerLoad, runner_up: WorkerLoad | None, to_role: str, n: int, label: str, moving: int
) -> str:
    """Why a worker was chosen over the best of those its group keeps in their role."""
    now = "decode" if to_role == "prefill" else "prefill"
    if runner_up is None:
        return f"all {n} {label} {now} workers change role"
    sessions = f"{chosen.in_flight:.0f}" if math.isfinite(chosen.in_flight) else "unknown"
    if to_role == "prefill" and _kv_key(chosen) != _kv_key(runner_up):
        other = f"{runner_up.kv_usage:.0%}" if math.isfinite(runner_up.kv_usage) else "unreported"
        rank = "highest" if moving == 1 else f"among the {moving} highest"
        return (
            f"KV cache {chosen.kv_usage:.0%} full, {rank} of the {n} {label} decode workers (the fullest "
            f"left decoding: {other}): its decode work gains most on better hardware"
        )
    keys = _rank_key(chosen, to_role), _rank_key(runner_up, to_role)
    offset = 1 if to_role == "prefill" else 0
    if keys[0][offset] != keys[1][offset]:
        equal = (
            f" at equal KV pressure ({chosen.kv_usage:.0%})"
            if to_role == "prefill" and math.isfinite(chosen.kv_usage)
            else ""
        )
        noun = "sessions" if now == "decode" else "requests"
        return f"fewest {noun} in flight ({sessions}) of the {n} {label} {now} workers{equal}: drains fastest"
    if keys[0] != keys[1]:
        return (
            f"shortest queue of the {n} {label} {now} workers at equal load ({sessions} in flight): "
            "drains fastest"
        )
    return (
        f"the {n} {label} {now} workers are indistinguishable by telemetry ({sessions} in flight): any of "
        "them would do, the first listed is named"
    )


def changes_for(
    groups: Sequence[GroupCapacity],
    current_roles: Sequence[Sequence[tuple[int, str]]],
    best_prefill: Sequence[int],
    isl: float,
    osl: float,
    loads: Mapping[int, WorkerLoad] | None = None,
) -> tuple[Change, ...]:
    """The workers whose role differs in the best plan: how many per group is the plan's; which ones the
    telemetry says (docs/analyzer.md#split_search). A decode -> prefill and a prefill -> decode change on the
    same node pair first (a swap in place: no data moves); the rest by :func:`_rank_key`. Workers the
    telemetry cannot tell apart keep the order they are listed in, and their reason says so."""
    known = loads or {}
    need: dict[int, int] = {}
    pools: dict[int, list[int]] = {}  # group -> its workers in the role it gives up, best first
    for g, members in enumerate(current_roles):
        prefilling = [row for row, role in members if role == "prefill"]
        decoding = [row for row, role in members if role == "decode"]
        delta = best_prefill[g] - len(prefilling)
        if delta == 0:
            continue
        to_role = "prefill" if delta > 0 else "decode"
        rows = decoding if delta > 0 else prefilling
        need[g] = abs(delta)
        pools[g] = sorted(rows, key=lambda row: _rank_key(known.get(row, WorkerLoad()), to_role))
    chosen: dict[int, list[int]] = {g: [] for g in need}
    partner: dict[int, int] = {}
    to_prefill = [g for g in need if best_prefill[g] > sum(1 for _, r in current_roles[g] if r == "prefill")]
    to_decode = [g for g in need if g not in to_prefill]
    for a_group in to_prefill:  # same-node swaps in place, in order of preference on both sides
        for a in pools[a_group]:
            node = known.get(a, WorkerLoad()).node
            if node is None or len(chosen[a_group]) >= need[a_group]:
                continue
            for b_group in to_decode:
                b = next(
                    (
                        row
                        for row in pools[b_group]
                        if row not in partner and known.get(row, WorkerLoad()).node == node
                    ),
                    None,
                )
                if b is not None and len(chosen[b_group]) < need[b_group]:
                    partner[a], partner[b] = b, a
                    chosen[a_group].append(a)
                    chosen[b_group].append(b)
                    break
    for g, count in need.items():
        for row in pools[g]:
            if len(chosen[g]) >= count:
                break
            if row not in chosen[g]:
                chosen[g].append(row)
    moves: list[Change] = []
    for g, rows in chosen.items():
        group = groups[g]
        to_role = "prefill" if g in to_prefill else "decode"
        weight = group.prefill.tokens_per_s / isl if to_role == "prefill" else group.decode.tokens_per_s / osl
        kept = [row for row in pools[g] if row not in rows]
        runner_up = known.get(kept[0], WorkerLoad()) if kept else None
        label = group.group.sku.name
        for row in rows:
            load = known.get(row, WorkerLoad())
            if row in partner:
                reason = (
                    "swap in place with a worker on the same node that trades roles with it: no data moves"
                )
            else:
                reason = _why(load, runner_up, to_role, len(pools[g]), label, len(rows))
            moves.append(Change(row, g, to_role, weight, reason, partner.get(row), load.node))
    total = sum(c.share for c in moves) or 1.0
    return tuple(
        Change(c.row, c.group, c.to_role, c.share / total, c.reason, c.partner, c.node)
        for c in sorted(moves, key=lambda c: (c.group, c.to_role))
    )
