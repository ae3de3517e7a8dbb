"""Scheduled role changes: advice carried out in the simulated fleet.

A scenario's ``changes`` (``RoleChangeSpec``) switch workers of disaggregated pools between prefill and
decode mid-run: from the change on the worker runs its new role on the same GPUs, its engine is down for
the change's ``restart_minutes`` (``LifeEvents.restarting``, like any restart) and its engine samples
then report the new role. A window runs (and reports) the new role when it ends after the change time,
the rule role labels follow, so the first window of the new role is ``floor(at_s / window_s)``.

Two ways to make a change:

- in place (the default): the worker keeps its id, the scenario's key (``node00/decode-1``) or a
  pod-style name, both carrying the role the worker started with, so after a change the id no longer
  names the role; it lets an observer follow the worker across the change.
- ``replace_pods``, the Kubernetes Deployment way: the old pod is deleted and a new pod, with a new
  worker id named for its new role (``FleetLayout.change_ids``, ``Namer.replacement``:
  ``node00/decode-1`` -> ``node00/prefill-3``; a new pod name with the new role's template hash), runs
  on the same GPUs. From the change's first window on, engine samples and the GPUs' samples carry the
  new id; the old id never reports again. An observer can tie the two only by the GPUs they hold.

Either way the fleet's worker (its index, its scenario key) is the same: changes, drains and the truth
name it by key; ``Switch`` carries the id it had before each change and the new one.

``with_role_changes(scenario, changes)`` returns a copy of a scenario with changes added, e.g. an
analyzer's recommendations fed back into the fleet they came from; ``keys_by_worker_id`` maps the ids
records carry (replacing pods' ids too) to the keys changes name. What a change realized is in the
ground truth (``fleetsim.truth_changes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from fleet.catalog import Catalog
from fleet.contract import Role, RoleSource
from fleetsim.layout import FleetLayout, build_layout
from fleetsim.pool import ROLE_CODE
from fleetsim.scenario import RoleChangeSpec, Scenario, ScenarioError, _format_error

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def with_role_changes(scenario: Scenario, changes: Iterable[RoleChangeSpec | Mapping[str, Any]]) -> Scenario:
    """A copy of ``scenario`` with ``changes`` after its own (``{"worker", "to_role", "at_hour"}``
    mappings or specs), validated: ``ScenarioError`` naming each bad field. The input is not modified."""
    data = scenario.model_dump()
    added = [c.model_dump() if isinstance(c, RoleChangeSpec) else dict(c) for c in changes]
    data["changes"] = [*data["changes"], *added]
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_error(f"{scenario.name} (with role changes)", exc)) from exc


def keys_by_worker_id(scenario: Scenario, catalog: Catalog) -> dict[str, str]:
    """The worker ids records carry -> the scenario keys ``changes`` name (the same in nodeNN naming),
    replacing pods' ids included."""
    layout = build_layout(scenario, catalog)
    out = {w.worker_id: w.key for w in layout.workers}
    by_key = layout.worker_by_key()
    for change, new_id in zip(scenario.changes, layout.change_ids, strict=True):
        if new_id is not None:
            out[new_id] = by_key[change.worker].key
    return out


@dataclass(frozen=True)
class Switch:
    """One scheduled change: fleet worker index, its pool and position in it, time, new role code."""

    worker: int
    pool: int
    position: int
    at_s: float  # seconds from the scenario start
    role: int
    spec_index: int  # position in the scenario's ``changes``
    worker_id: str = ""  # the id the worker reports until the change
    new_worker_id: str | None = None  # the replacing pod's id (replace_pods); None: the id is kept


class RoleSchedule:
    """Every worker's role in each window of a fleet, its scheduled changes applied."""

    def __init__(self, scenario: Scenario, layout: FleetLayout, window_s: float) -> None:
        self._window_s = window_s
        self._base = [
            np.array([ROLE_CODE[layout.workers[w].role] for w in pool.workers], dtype=np.int64)
            for pool in layout.pools
        ]
        by_key = layout.worker_by_key()
        current = {w.index: w.worker_id for w in layout.workers}
        switches = []
        for i in sorted(range(len(scenario.changes)), key=lambda i: (scenario.changes[i].at_hour, i)):
            change = scenario.changes[i]
            worker = by_key[change.worker]
            position = layout.pools[worker.pool].workers.index(worker.index)
            role = ROLE_CODE[Role(change.to_role)]
            new_id = layout.change_ids[i] if i < len(layout.change_ids) else None
            at_s = change.at_hour * 3600.0
            old_id = current[worker.index]
            switches.append(Switch(worker.index, worker.pool, position, at_s, role, i, old_id, new_id))
            current[worker.index] = new_id or old_id
        self.switches = switches  # in time order (ties: the scenario's order)

    def first_window(self, switch: Switch) -> int:
        """The first window that runs the new role (it ends after the change time)."""
        return int(np.floor(switch.at_s / self._window_s))

    def cuts(self, pool: int) -> list[int]:
        """The windows where a pool's placement changes, in order."""
        return sorted({self.first_window(s) for s in self.switches if s.pool == pool})

    def pool_roles(self, pool: int, window_start: FloatArray) -> IntArray | None:
        """(windows, pool workers) role codes; None when no change concerns the pool (the layout's roles)."""
        mine = [s for s in self.switches if s.pool == pool]
        if not mine:
            return None
        roles = np.tile(self._base[pool], (len(window_start), 1))
        for s in mine:  # in time order: a later change wins
            roles[window_start + self._window_s > s.at_s, s.position] = s.role
        return roles

    def roles_at(self, pool: int, window: int) -> IntArray:
        """A pool's role codes in one window."""
        roles = self.pool_roles(pool, np.array([window * self._window_s]))
        return self._base[pool].copy() if roles is None else roles[0]

    def labels(self, epoch0: float) -> list[tuple[int, float, str, str]]:
        """(worker, from epoch, role, role source) of each change, in time order: what engines report."""
        names = {code: role.value for role, code in ROLE_CODE.items()}
        return [(s.worker, epoch0 + s.at_s, names[s.role], RoleSource.SIM.value) for s in self.switches]

    def renames(self, epoch0: float) -> list[tuple[int, float, str]]:
        """(worker, from epoch, new id) of each change that replaces the pod, in time order: the id the
        worker's engine and GPUs report in windows ending after that moment."""
        return [(s.worker, epoch0 + s.at_s, s.new_worker_id) for s in self.switches if s.new_worker_id]

    def worker_id_in(self, worker: int, window: int, layout_id: str) -> str:
        """The id ``worker`` reports in ``window``: its last replacing pod's by then, else ``layout_id``;
        for naming a worker the way the records of that window do."""
        end = (window + 1) * self._window_s
        found = layout_id
        for s in self.switches:
            if s.worker == worker and s.new_worker_id and end > s.at_s:
                found = s.new_worker_id
        return found
