"""What zero-agent mode asks Prometheus for: the metric names per frame column (with the aliases real fleets
drift between), the PromQL of each, the role vocabulary of pod labels and SGLang's ``engine_type``, and the
labels that name a worker's cluster and serving deployment (its pool).

Names and units follow the exporters' own documentation: dcgm-exporter fields (DCGM 4.6 renames and the
``-o`` 1.x compatibility names as aliases; GPU_UTIL in percent, FB_USED in MiB), vLLM V1 metrics (with the
older ``gpu_cache_usage_perc``), SGLang scheduler and tokenizer metrics (``sglang_`` as an alias prefix).
Gauges are read as their mean over the window that ends at each step (``avg_over_time``), counters as
``rate`` (the mapping multiplies by the step: counts per window), Xid codes as their maximum.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from fleet.contract import Role, RoleSource
from fleet.labels import DEPLOYMENT_LABELS, DYNAMO_NAMESPACE_METRIC_LABEL, POD_TEMPLATE_HASH


class Family(StrEnum):
    """Which exporter a metric comes from; the engine families name the engine."""

    GPU = "gpu"
    VLLM = "vllm"
    SGLANG = "sglang"


class Reduce(StrEnum):
    AVG = "avg_over_time"  # gauges: mean over the window
    RATE = "rate"  # counters: per-second rate over the window
    MAX = "max_over_time"  # codes (last Xid): the worst value in the window


class Unit(StrEnum):
    RATIO = "ratio"  # 0..1 as is
    PERCENT = "percent"  # 0..100 -> 0..1
    RATIO_OR_PERCENT = "ratio-or-percent"  # DCGM 4.6 *_UTIL_RATIO: scale undocumented, > 1 read as percent
    MIB = "mib"  # MiB -> bytes
    COUNT = "count"  # gauges counting requests, or counter rates (-> count per window)
    CODE = "code"  # an enumerated value (Xid)


@dataclass(frozen=True)
class MetricQuery:
    """One exporter metric that feeds one frame column."""

    family: Family
    column: str
    name: str
    unit: Unit
    reduce: Reduce
    rank: int  # alias preference: 0 = the current name; a lower rank wins where both report

    def promql(self, range_s: float) -> str:
        return f"{self.reduce.value}({self.name}[{format_duration(range_s)}])"


def format_duration(seconds: float) -> str:
    """A PromQL duration: whole seconds where exact, else milliseconds."""
    millis = round(seconds * 1000.0)
    if millis <= 0:
        raise ValueError(f"a PromQL range must be positive, got {seconds}s")
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def _column(
    family: Family, column: str, reduce: Reduce, names: tuple[tuple[str, Unit], ...]
) -> tuple[MetricQuery, ...]:
    return tuple(MetricQuery(family, column, n, u, reduce, rank) for rank, (n, u) in enumerate(names))


_R, _P, _C = Unit.RATIO, Unit.PERCENT, Unit.COUNT
GPU_QUERIES: tuple[MetricQuery, ...] = (
    *_column(Family.GPU, "sm_active", Reduce.AVG, (
        ("DCGM_FI_PROF_SM_ACTIVE", _R), ("DCGM_FI_PROF_SM_UTIL_RATIO", _R), ("dcgm_fi_prof_sm_active", _R),
    )),
    *_column(Family.GPU, "tensor_active", Reduce.AVG, (
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _R), ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", _R),
        ("DCGM_FI_PROF_PIPE_TENSOR_UTIL_RATIO", _R), ("dcgm_fi_prof_pipe_tensor_active", _R),
    )),
    *_column(Family.GPU, "dram_active", Reduce.AVG, (
        ("DCGM_FI_PROF_DRAM_ACTIVE", _R), ("DCGM_FI_PROF_DRAM_UTIL_RATIO", _R),
        ("dcgm_fi_prof_dram_active", _R),
    )),
    *_column(Family.GPU, "gpu_util", Reduce.AVG, (
        ("DCGM_FI_DEV_GPU_UTIL", _P), ("DCGM_FI_DEV_GPU_UTIL_RATIO", Unit.RATIO_OR_PERCENT),
        ("dcgm_gpu_utilization", _P),
    )),
    *_column(Family.GPU, "mem_used_bytes", Reduce.AVG, (
        ("DCGM_FI_DEV_FB_USED", Unit.MIB), ("dcgm_fb_used", Unit.MIB),
    )),
    *_column(Family.GPU, "xid", Reduce.MAX, (
        ("DCGM_FI_DEV_XID_ERRORS", Unit.CODE), ("DCGM_FI_DEV_XID_ERROR", Unit.CODE),
        ("dcgm_xid_errors", Unit.CODE),
    )),
)  # fmt: skip


def _sglang(name: str) -> tuple[tuple[str, Unit], ...]:
    """SGLang's name and its ``sglang_`` spelling (reported for newer releases; unverified)."""
    return ((f"sglang:{name}", _C), (f"sglang_{name}", _C))


ENGINE_QUERIES: tuple[MetricQuery, ...] = (
    *_column(Family.VLLM, "prompt_tokens", Reduce.RATE, (("vllm:prompt_tokens_total", _C),)),
    *_column(Family.VLLM, "generation_tokens", Reduce.RATE, (("vllm:generation_tokens_total", _C),)),
    *_column(Family.VLLM, "requests_running", Reduce.AVG, (("vllm:num_requests_running", _C),)),
    *_column(Family.VLLM, "requests_waiting", Reduce.AVG, (("vllm:num_requests_waiting", _C),)),
    *_column(Family.VLLM, "kv_cache_usage", Reduce.AVG, (
        ("vllm:kv_cache_usage_perc", _R), ("vllm:gpu_cache_usage_perc", _R),
    )),
    *_column(Family.VLLM, "preemptions", Reduce.RATE, (("vllm:num_preemptions_total", _C),)),
    *_column(Family.SGLANG, "prompt_tokens", Reduce.RATE, _sglang("prompt_tokens_total")),
    *_column(Family.SGLANG, "generation_tokens", Reduce.RATE, _sglang("generation_tokens_total")),
    *_column(Family.SGLANG, "requests_running", Reduce.AVG, _sglang("num_running_reqs")),
    *_column(Family.SGLANG, "requests_waiting", Reduce.AVG, _sglang("num_queue_reqs")),
    *_column(Family.SGLANG, "kv_cache_usage", Reduce.AVG, (
        ("sglang:token_usage", _R), ("sglang_token_usage", _R),
    )),
    # SGLang's preemption is a retraction; num_retractions is a histogram of retractions per request,
    # so its _sum counts retraction events.
    *_column(Family.SGLANG, "preemptions", Reduce.RATE, _sglang("num_retractions_sum")),
)  # fmt: skip

ALL_QUERIES: tuple[MetricQuery, ...] = GPU_QUERIES + ENGINE_QUERIES


def plan(available: Collection[str] | None) -> tuple[MetricQuery, ...]:
    """The queries worth running: those whose metric exists (``available`` from Prometheus's label-values
    API), or every alias when the server cannot list its metric names."""
    if available is None:
        return ALL_QUERIES
    return tuple(q for q in ALL_QUERIES if q.name in available)


# Labels that carry a worker's phase role: the operator's choice first, then well-known pod labels as
# dcgm-exporter copies them (--kubernetes-enable-pod-labels sanitises llm-d.ai/role to llm_d_ai_role) or
# as a relabelling rule names them.
DEFAULT_ROLE_LABELS: tuple[str, ...] = (
    "role",
    "llm_d_ai_role",
    "nvidia_com_dynamo_sub_component_type",
    "label_llm_d_ai_role",
)
DYNAMO_COMPONENT_TYPE_LABEL = "nvidia_com_dynamo_component_type"
ENGINE_TYPE_LABEL = "engine_type"

# The role vocabulary of llm-d, Dynamo, SGLang and TensorRT-LLM (the collector's role module holds the
# same words; the analyzer may not import the collector).
_ROLE_WORDS: dict[str, Role] = {
    "prefill": Role.PREFILL,
    "encode-prefill": Role.PREFILL,
    "context": Role.PREFILL,
    "ctx": Role.PREFILL,
    "decode": Role.DECODE,
    "generation": Role.DECODE,
    "gen": Role.DECODE,
    "prefill-decode": Role.MIXED,
    "encode-prefill-decode": Role.MIXED,
    "both": Role.MIXED,
    "agg": Role.MIXED,
    "aggregated": Role.MIXED,
    "unified": Role.MIXED,
    "mixed": Role.MIXED,
    "colocated": Role.MIXED,
}


def role_from_text(value: str | None) -> Role | None:
    if not value:
        return None
    word = value.strip().lower()
    return _ROLE_WORDS.get(word) or _ROLE_WORDS.get(word.replace("_", "-"))


def resolve_role(
    engine_labels: Sequence[tuple[float, Family, Mapping[str, str]]],
    gpu_labels: Sequence[tuple[float, Mapping[str, str]]],
    role_label: str | None,
) -> tuple[Role, RoleSource]:
    """A worker's role from the labels of its engine series and GPU series, each with its last timestamp.

    SGLang's ``engine_type`` (prefill/decode) > the role label (``role_label``, then the well-known ones) on
    engine or GPU series > a Dynamo worker without a sub-component type (aggregated) > ``engine_type``
    "unified" (telemetry.md §3.5). Within a level the most recent series speaks first.
    """
    engines = [labels for _, _, labels in sorted(engine_labels, key=lambda e: -e[0])]
    types = [
        role_from_text(labels.get(ENGINE_TYPE_LABEL))
        for _, family, labels in sorted(engine_labels, key=lambda e: -e[0])
        if family is Family.SGLANG
    ]
    for role in types:
        if role in (Role.PREFILL, Role.DECODE):
            return role, RoleSource.ENGINE
    label_sets = [*engines, *(labels for _, labels in sorted(gpu_labels, key=lambda g: -g[0]))]
    names = (role_label, *DEFAULT_ROLE_LABELS) if role_label else DEFAULT_ROLE_LABELS
    for name in names:
        for labels in label_sets:
            role = role_from_text(labels.get(name))
            if role is not None:
                return role, RoleSource.POD_LABEL
    if any((labels.get(DYNAMO_COMPONENT_TYPE_LABEL) or "").lower() == "worker" for labels in label_sets):
        return Role.MIXED, RoleSource.POD_LABEL
    if Role.MIXED in types:
        return Role.MIXED, RoleSource.ENGINE
    return Role.UNKNOWN, RoleSource.NONE


# A worker's pool is (cluster, deployment, model): never from node or pod names. The cluster label is the
# operator's choice (default "cluster", the usual external label a Thanos / Mimir / federated query returns).
DEFAULT_CLUSTER_LABEL = "cluster"
# The deployment's pod labels, strongest first: the table the collector uses too (fleet.labels) plus
# Dynamo's own ``dynamo_namespace`` metric label. Each is looked up raw, sanitised (dcgm-exporter pod
# labels, relabelled target labels: nvidia_com_dynamo_namespace) and as kube-state-metrics' kube_pod_labels
# names it (label_...).
DEFAULT_DEPLOYMENT_LABELS: tuple[str, ...] = (*DEPLOYMENT_LABELS, DYNAMO_NAMESPACE_METRIC_LABEL)
# Else "<namespace>/<owner>": kube-state-metrics' kube_pod_owner labels where a rule joins them in; a
# Deployment's ReplicaSet loses its pod-template-hash suffix when the pod's hash label says so.
OWNER_KIND_LABEL = "owner_kind"
OWNER_NAME_LABEL = "owner_name"
MAX_NAME = 253


def sanitise_label(key: str) -> str:
    """Prometheus's (and dcgm-exporter's) label sanitising: every character outside [a-zA-Z0-9_] -> ``_``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def label_value(labels: Mapping[str, str], name: str) -> str | None:
    """A pod label raw, sanitised, or as kube-state-metrics' ``label_<sanitised>``."""
    safe = sanitise_label(name)
    return labels.get(name) or labels.get(safe) or labels.get(f"label_{safe}") or None


def resolve_cluster(label_sets: Sequence[Mapping[str, str]], cluster_label: str) -> str | None:
    """The first label set's value of ``cluster_label`` (most recent series first)."""
    for labels in label_sets:
        value = labels.get(cluster_label)
        if value:
            return value[:MAX_NAME]
    return None


def resolve_deployment(
    label_sets: Sequence[Mapping[str, str]],
    deployment_labels: Sequence[str],
    namespace: str | None,
) -> str | None:
    """A worker's deployment from its series' labels: the first of ``deployment_labels`` any set carries
    (label order first, then recency), else ``<namespace>/<owner>``; None when neither is there."""
    for name in deployment_labels:
        for labels in label_sets:
            value = label_value(labels, name)
            if value:
                return value[:MAX_NAME]
    for labels in label_sets:
        owner = labels.get(OWNER_NAME_LABEL)
        where = namespace or labels.get("namespace")
        if not (owner and where):
            continue
        template_hash = label_value(labels, POD_TEMPLATE_HASH)
        if (
            labels.get(OWNER_KIND_LABEL) == "ReplicaSet"
            and template_hash
            and owner.endswith(f"-{template_hash}")
        ):
            owner = owner[: -len(template_hash) - 1]
        return f"{where}/{owner}"[:MAX_NAME]
    return None
