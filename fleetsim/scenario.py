"""Simulated-fleet scenarios: the YAML schema, loading and validation with errors that name the field.

A scenario describes model pools (what they serve, how, and the traffic they get), node groups (GPU SKU,
GPUs per node, and the workers each node runs for a pool), life events (drift, idle periods,
restarts, collector gaps, GPUs lost to Xid 79) and scheduled role changes (``changes``: advice carried
out, in place or by replacing the pod, ``fleetsim.role_changes``). A pool of a mixture-of-experts model
may set ``ep`` (expert parallelism, checked against the model's experts when the layout resolves it).
Built-in scenarios live next to this module in ``scenarios/*.yaml``; ``load_scenario`` takes a built-in
name or a path.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

_SCENARIO_PACKAGE = "fleetsim.scenarios"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ID_PART = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
IdPart = Annotated[str, Field(pattern=_ID_PART, max_length=63)]
WorkerRole = Literal["prefill", "decode", "mixed"]
LabelRole = Literal["prefill", "decode", "mixed", "unknown"]
# A worker as the scenario names it, whatever the naming style: "<node key>/<role>-<k>" (node03/decode-1).
WorkerKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/(prefill|decode|mixed)-[0-9]+$")]
Naming = Literal["nodeNN", "eks", "gke", "fqdn"]
Telemetry = Literal["full", "basic"]  # basic: dcgm-exporter without profiling fields
GpuField = Literal["sm_active", "tensor_active", "dram_active", "gpu_util", "power_w"]
_PROFILING_AND_POWER: tuple[GpuField, ...] = ("sm_active", "tensor_active", "dram_active", "power_w")


class ScenarioError(ValueError):
    """A scenario cannot be loaded or does not make sense; the message names the file and the field."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrafficSpec(_Spec):
    """Requests a pool receives: mean rate, code/conv mix, diurnal cycle, weekends and bursts."""

    rate_rps: Positive
    code_share: Share = 0.2  # share of requests from the "code" service (the rest: "conv")
    diurnal_amplitude: Annotated[float, Field(ge=0.0, le=0.95)] = 0.35
    peak_hour_utc: Annotated[float, Field(ge=0.0, lt=24.0)] = 16.0
    weekend_factor: Annotated[float, Field(ge=0.0, le=2.0)] = 0.75
    bursts_per_day: NonNegative = 2.0
    burst_factor: Annotated[float, Field(ge=1.0, le=10.0)] = 1.6
    burst_minutes: Positive = 12.0
    prompt_scale: Annotated[float, Field(gt=0.0, le=20.0)] = 1.0  # multiplies every prompt length
    output_scale: Annotated[float, Field(gt=0.0, le=20.0)] = 1.0  # multiplies every output length


class DriftSpec(_Spec):
    """The traffic mix moves to ``code_share`` over ``ramp_hours`` from ``at_hour`` (hours from start)."""

    at_hour: NonNegative
    ramp_hours: NonNegative = 4.0
    code_share: Share
    description: str = "traffic mix drifts"


class IdleSpec(_Spec):
    """The pool's traffic falls to ``factor`` of normal for ``hours`` from ``at_hour``."""

    at_hour: NonNegative
    hours: Positive
    factor: Share = 0.02
    description: str = "idle period"


class PoolSpec(_Spec):
    """One model pool: a served model, its serving mode and engine knobs, and its traffic."""

    name: IdPart
    cluster: IdPart | None = None  # records' cluster; None: the records carry none
    # Engine records' deployment ("<namespace>/<owner>" allowed); default: the pool's name.
    deployment: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$", max_length=127)] | None = None
    model: str = Field(min_length=1, max_length=253)  # served model id, e.g. an HF id
    precision: str = "fp8"
    kv_precision: str | None = None  # default: the weights' precision (bf16 for int4)
    tp: Annotated[int, Field(ge=1, le=16)] = 2
    # Expert parallelism of a mixture-of-experts model (None: 1, experts sharded by TP); the layout checks
    # the model has experts and that ep divides their number.
    ep: Annotated[int, Field(ge=1, le=64)] | None = None
    engine: Literal["vllm", "sglang"] = "vllm"
    serving: Literal["disaggregated", "colocated"] = "disaggregated"
    routing: Literal["capacity", "round-robin"] = "capacity"
    tpot_target_s: Positive | None = 0.08
    # The operator's TTFT p90 objective: engines do nothing about it (they admit every request), but the
    # truth counts only the prefill load that meets it (fleetsim/ttft_goodput.py). None: no target.
    ttft_target_s: Positive | None = None
    max_batch: Annotated[int, Field(ge=1, le=65536)] = 512
    token_budget: Annotated[int, Field(ge=64, le=1_048_576)] = 8192
    hbm_utilization: Annotated[float, Field(gt=0.3, le=1.0)] = 0.90
    runtime_reserve_gb: NonNegative = 4.0
    kv_link_gb_s: Positive = 25.0  # per prefill worker: its share of the node's RDMA NICs (GB/s)
    traffic: TrafficSpec
    drift: list[DriftSpec] = Field(default_factory=list)
    idle: list[IdleSpec] = Field(default_factory=list)

    @property
    def pool_id(self) -> str:
        """The pool as findings name it: ``cluster/pool``."""
        return f"{self.cluster}/{self.name}" if self.cluster else self.name

    @property
    def deployment_name(self) -> str:
        return self.deployment or self.name


class NodeGroupSpec(_Spec):
    """``count`` identical nodes of one SKU serving one pool, with the workers each node runs."""

    count: Annotated[int, Field(ge=1, le=4096)] = 1
    sku: str = Field(min_length=1)  # GPU catalog key, e.g. H100-SXM
    gpus: Annotated[int, Field(ge=1, le=16)] = 8
    pool: IdPart
    workers: dict[WorkerRole, Annotated[int, Field(ge=0, le=112)]]
    telemetry: Telemetry | None = None  # default: the scenario's
    node_pool: IdPart | None = None  # the GKE node pool (gke naming); default from the SKU
    mig: Annotated[str, Field(pattern=r"^[1-7]g\.[0-9]+gb$")] | None = None  # each GPU split in slices

    @property
    def devices(self) -> int:
        """GPUs, or MIG slices, the node's workers can hold."""
        return self.gpus * self.mig_slices

    @property
    def mig_slices(self) -> int:
        return 7 // int(self.mig.split("g.")[0]) if self.mig else 1


class LabelSpec(_Spec):
    """A role label that differs from what a worker runs, from ``from_hour`` on (role "unknown": no label).

    Names one worker (``worker``) or every worker of a node (``node``), by their ``nodeNN`` keys.
    """

    worker: WorkerKey | None = None
    node: IdPart | None = None
    role: LabelRole
    from_hour: NonNegative = 0.0

    @model_validator(mode="after")
    def _one(self) -> LabelSpec:
        if (self.worker is None) == (self.node is None):
            raise ValueError("a label names exactly one of worker or node")
        return self


class DrainSpec(_Spec):
    """A worker the router stops sending traffic to at ``at_hour`` (for ``hours``; None: for good) while
    its engine stays up, holds its GPUs and reports."""

    worker: WorkerKey
    at_hour: NonNegative = 0.0
    hours: Positive | None = None


class DegradedSpec(_Spec):
    """A node's collector reports GPUs ``degraded`` with ``missing`` fields null from ``at_hour``."""

    node: IdPart
    gpus: list[Annotated[int, Field(ge=0, le=15)]] | None = None  # None: every GPU of the node
    at_hour: NonNegative = 0.0
    hours: Positive | None = None
    missing: list[GpuField] = Field(default_factory=lambda: list(_PROFILING_AND_POWER))


class GpuLostSpec(_Spec):
    """A GPU falls off the bus (Xid 79) at ``at_hour``; back after ``recover_after_hours`` (node reboot)."""

    node: IdPart
    gpu: Annotated[int, Field(ge=0, le=15)]
    at_hour: NonNegative
    recover_after_hours: Positive | None = None


class LifeSpec(_Spec):
    """Random and scheduled events besides traffic: restarts, collector gaps, lost GPUs, chip spread."""

    restarts_per_worker_week: NonNegative = 0.5
    restart_minutes: tuple[Positive, Positive] = (2.0, 6.0)
    collector_gaps_per_node_week: NonNegative = 1.0
    collector_gap_minutes: tuple[Positive, Positive] = (1.0, 15.0)
    gpu_lost: list[GpuLostSpec] = Field(default_factory=list)
    drained: list[DrainSpec] = Field(default_factory=list)
    degraded: list[DegradedSpec] = Field(default_factory=list)
    efficiency_spread: Annotated[float, Field(ge=0.0, le=0.1)] = 0.02  # per-GPU speed, std. deviation

    @model_validator(mode="after")
    def _ranges(self) -> LifeSpec:
        for field in ("restart_minutes", "collector_gap_minutes"):
            low, high = getattr(self, field)
            if low > high or high > 240:
                raise ValueError(f"{field} must be [low, high] minutes with low <= high <= 240")
        return self


class RoleChangeSpec(_Spec):
    """``worker`` (its scenario key) switches to ``to_role`` at ``at_hour`` on the same GPUs; its engine is
    down for ``restart_minutes`` while it restarts.

    By default a swap in place, under the same worker id. ``replace_pods``: made the Kubernetes
    Deployment way, the old pod deleted and a new one, under a new worker id named for its new role,
    started on the same GPUs (``fleetsim.role_changes``); the scenario key still names the GPUs' worker.
    """

    worker: WorkerKey
    to_role: Literal["prefill", "decode"]
    at_hour: Positive
    restart_minutes: Annotated[float, Field(gt=0.0, le=240.0)] = 5.0
    replace_pods: bool = False


class Scenario(_Spec):
    name: str = Field(pattern=_NAME.pattern, max_length=63)
    description: str = Field(min_length=1, max_length=300)
    intent: str = ""  # what the ground truth should show; checked by the tests
    start: AwareDatetime = datetime(2024, 6, 3, tzinfo=UTC)  # a Monday, 00:00 UTC
    window_s: Annotated[int, Field(ge=1, le=3600)] = 30
    days: Positive = 7.0
    node_prefix: IdPart = "node"
    naming: Naming = "nodeNN"  # node and worker names; events always name nodes by their nodeNN key
    telemetry: Telemetry = "full"
    kv_link_gb_s: Positive | None = None  # the default of every pool's kv_link_gb_s (the operator's figure)
    pools: list[PoolSpec] = Field(min_length=1)
    nodes: list[NodeGroupSpec] = Field(min_length=1)
    labels: list[LabelSpec] = Field(default_factory=list)
    life: LifeSpec = Field(default_factory=LifeSpec)
    changes: list[RoleChangeSpec] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _link_default(cls, data: object) -> object:
        link = data.get("kv_link_gb_s") if isinstance(data, dict) else None
        if link is None or not isinstance(data, dict) or not isinstance(data.get("pools"), list):
            return data
        pools = [{"kv_link_gb_s": link, **p} if isinstance(p, dict) else p for p in data["pools"]]
        return {**data, "pools": pools}

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        pools = {p.name: p for p in self.pools}
        roles: dict[str, set[str]] = {name: set() for name in pools}
        for i, group in enumerate(self.nodes):
            pool = pools.get(group.pool)
            if pool is None:
                raise ValueError(f"nodes[{i}].pool {group.pool!r} is not a pool; pools: {sorted(pools)}")
            used = sum(group.workers.values()) * pool.tp
            if used > group.devices:
                raise ValueError(
                    f"nodes[{i}]: {sum(group.workers.values())} workers x TP {pool.tp} need {used} GPUs, "
                    f"the node has {group.devices}"
                )
            if group.mig and pool.tp != 1:
                raise ValueError(
                    f"nodes[{i}]: MIG slices serve TP 1 only, pool {pool.name!r} has TP {pool.tp}"
                )
            roles[group.pool].update(role for role, n in group.workers.items() if n)
        for name, pool in pools.items():
            have = roles[name]
            if pool.serving == "disaggregated" and not {"prefill", "decode"} <= have:
                raise ValueError(f"pool {name!r} is disaggregated: it needs prefill and decode workers")
            if pool.serving == "colocated" and have != {"mixed"}:
                raise ValueError(f"pool {name!r} is colocated: its workers must all be 'mixed'")
            if pool.serving == "disaggregated" and "mixed" in have:
                raise ValueError(f"pool {name!r} is disaggregated: it cannot run 'mixed' workers")
        _check_changes(self)
        return self


def worker_keys(scenario: Scenario) -> dict[str, tuple[str, WorkerRole]]:
    """Every worker's scenario key (``<node key>/<role>-<k>``, as the layout names them) -> (pool, role)."""
    total = sum(group.count for group in scenario.nodes)
    width = max(2, len(str(total - 1)))
    out: dict[str, tuple[str, WorkerRole]] = {}
    node = 0
    for group in scenario.nodes:
        for _ in range(group.count):
            for role in ("prefill", "decode", "mixed"):
                for k in range(group.workers.get(role, 0)):
                    out[f"{scenario.node_prefix}{node:0{width}d}/{role}-{k + 1}"] = (group.pool, role)
            node += 1
    return out


def _check_changes(scenario: Scenario) -> None:
    """Role changes name existing workers of disaggregated pools, within the run, each a real change that
    leaves its pool both roles; a changed worker carries no role label (it would hide the change)."""
    keys = worker_keys(scenario)
    pools = {p.name: p for p in scenario.pools}
    horizon = scenario.days * 24.0
    labelled = {s.worker for s in scenario.labels if s.worker} | {
        k for s in scenario.labels if s.node for k in keys if k.split("/")[0] == s.node
    }
    roles = {k: role for k, (_, role) in keys.items()}
    busy_until: dict[str, float] = {}
    for i, change in sorted(enumerate(scenario.changes), key=lambda item: item[1].at_hour):
        where = f"changes[{i}]"
        if change.worker not in keys:
            example = next(iter(keys))
            raise ValueError(f"{where}.worker: no worker {change.worker!r} (keys are like {example!r})")
        pool = keys[change.worker][0]
        if pools[pool].serving != "disaggregated":
            raise ValueError(
                f"{where}.worker: {change.worker} serves colocated pool {pool!r}: no phase roles"
            )
        if change.worker in labelled:
            raise ValueError(
                f"{where}.worker: {change.worker} has a role label (labels): it would hide the change"
            )
        if change.at_hour >= horizon:
            raise ValueError(
                f"{where}.at_hour: {change.at_hour:g} is not within the scenario's {horizon:g} hours"
            )
        if change.at_hour < busy_until.get(change.worker, 0.0):
            raise ValueError(f"{where}.at_hour: {change.worker} is still restarting from its previous change")
        if roles[change.worker] == change.to_role:
            raise ValueError(f"{where}.to_role: {change.worker} already runs {change.to_role} at that hour")
        roles[change.worker] = change.to_role
        busy_until[change.worker] = change.at_hour + change.restart_minutes / 60.0
        left = {role for k, role in roles.items() if keys[k][0] == pool}
        if not {"prefill", "decode"} <= left:
            missing = ({"prefill", "decode"} - left).pop()
            raise ValueError(f"{where}: leaves pool {pool!r} without {missing} workers")


def _format_error(source: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return f"scenario {source} is invalid:\n" + "\n".join(lines)


def parse_scenario(text: str, source: str = "<text>") -> Scenario:
    """A scenario from YAML text; ``ScenarioError`` naming ``source`` and each bad field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario {source} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"scenario {source} must be a YAML mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_error(source, exc)) from exc


def builtin_scenarios() -> dict[str, Path]:
    """Built-in scenario names and their files."""
    folder = resources.files(_SCENARIO_PACKAGE)
    found: dict[str, Path] = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            found[entry.name.removesuffix(".yaml")] = Path(str(entry))
    return dict(sorted(found.items()))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name (``demo``) or a scenario file by path."""
    builtin = builtin_scenarios()
    text_name = str(name_or_path)
    if text_name in builtin:
        path = builtin[text_name]
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ScenarioError(
                f"no scenario {text_name!r}: not a built-in ({', '.join(builtin)}) and no such file"
            )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from exc
    return parse_scenario(text, str(path))
