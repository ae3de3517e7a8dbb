"""Which serving worker runs on which GPU, and which worker an engine endpoint belongs to.

Attribution is evidence, never a guess (DESIGN.md): per GPU, in order, the operator's mapping file, the
kubelet pod-resources API (GPU UUID -> pod), dcgm-exporter's pod labels, and NVML's host PIDs walked up
to the engine process that launched them.  A GPU held by several pods or processes (MPS, time slicing),
or whose PIDs are not visible in /proc, stays unattributed, with the reason.  A tensor-parallel worker
spans all the GPUs that resolve to the same pod or engine process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from collector.deployments import OwnerRef
from collector.mapping import RoleMapping
from collector.podresources import PodLookup
from collector.procfs import ProcReader
from collector.roles import engine_of_cmdline, flag_value
from collector.window import GpuStatus, PodRef
from fleet.precision import parse_precision

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"})
MAX_ANCESTRY = 8


@dataclass(frozen=True)
class Worker:
    worker_id: str
    gpu_uuids: tuple[str, ...] = ()
    how: str = "none"  # mapping | pod-resources | dcgm-labels | process | endpoint
    pod: PodRef | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_ip: str | None = None
    owner: OwnerRef | None = None  # the pod's controlling owner (Kubernetes API)
    cmdline: tuple[str, ...] = ()
    engine: str | None = None
    port: int | None = None
    model: str | None = None
    tp: int | None = None
    precision: str | None = None  # of weights/matmuls, from --quantization or --dtype


@dataclass
class Attribution:
    workers: dict[str, Worker] = field(default_factory=dict)
    gpu_worker: dict[str, str] = field(default_factory=dict)  # GPU UUID -> worker_id
    unattributed: dict[str, str] = field(default_factory=dict)  # GPU UUID -> why


def _int_flag(argv: Sequence[str], *names: str) -> int | None:
    for name in names:
        value = flag_value(argv, name)
        if value and value.isdigit():
            return int(value)
    return None


def engine_root(pid: int, procs: ProcReader) -> tuple[int, tuple[str, ...]] | None:
    """The outermost ancestor of ``pid`` (itself included) that is an engine launch; None if the PID is not
    visible.  vLLM's GPU processes (EngineCore, TP workers) are children of the API server that has --port."""
    argv = procs.cmdline(pid)
    if argv is None:
        return None
    best: tuple[int, tuple[str, ...]] = (pid, argv)
    current: int | None = pid
    for _ in range(MAX_ANCESTRY):
        if current is None or current <= 1:
            break
        argv = procs.cmdline(current)
        if argv is not None and engine_of_cmdline(argv) is not None:
            best = (current, argv)
        current = procs.parent(current)
    return best


def _process_worker(node: str, root_pid: int, argv: tuple[str, ...]) -> Worker:
    engine = engine_of_cmdline(argv)
    port = _int_flag(argv, "--port")
    if port is None and engine is not None and engine != "dynamo":
        port = DEFAULT_PORTS.get(engine)
    names = (flag_value(argv, f) for f in ("--served-model-name", "--model", "--model-path"))
    model = next((name for name in names if name), None)
    if model is None and len(argv) > 2 and argv[1] == "serve" and not argv[2].startswith("-"):
        model = argv[2]  # vllm serve MODEL
    worker_id = f"{node}:{port}" if port is not None else f"{node}:pid{root_pid}"
    tp = _int_flag(argv, "--tensor-parallel-size", "-tp", "--tp-size", "--tp")
    worker = Worker(worker_id, how="process", cmdline=argv, engine=engine, port=port, model=model, tp=tp)
    return replace(worker, precision=precision_of_cmdline(argv))


def precision_of_cmdline(argv: Sequence[str]) -> str | None:
    """``--quantization fp8`` -> "fp8"; else ``--dtype bfloat16`` -> "bf16"; "auto" or unknown -> None."""
    for flag in ("--quantization", "-q", "--dtype"):
        value = flag_value(argv, flag)
        if value and value != "auto":
            try:
                return parse_precision(value).value
            except ValueError:
                return None
    return None


def attribute_gpus(
    node: str,
    statuses: Mapping[str, GpuStatus],
    *,
    pod_holders: Mapping[str, list[PodRef]] | None = None,
    pod_lookup: PodLookup | None = None,
    procs: ProcReader | None = None,
    mapping: RoleMapping | None = None,
) -> Attribution:
    out = Attribution()
    members: dict[str, list[str]] = {}
    for uuid, status in statuses.items():
        worker, why = _attribute_one(
            node, uuid, status, pod_holders=pod_holders, procs=procs, mapping=mapping
        )
        if worker is None:
            out.unattributed[uuid] = why
            continue
        if worker.worker_id not in out.workers:
            if worker.pod is not None and pod_lookup is not None:
                info = pod_lookup.get(worker.pod)
                if info is not None:
                    labels = {**worker.pod_labels, **info.labels}
                    worker = replace(worker, pod_labels=labels, pod_ip=info.ip, owner=info.owner)
            out.workers[worker.worker_id] = worker
        members.setdefault(worker.worker_id, []).append(uuid)
        out.gpu_worker[uuid] = worker.worker_id
    for worker_id, uuids in members.items():
        worker = out.workers[worker_id]
        out.workers[worker_id] = replace(worker, gpu_uuids=tuple(uuids))
    return out


def _attribute_one(
    node: str,
    uuid: str,
    status: GpuStatus,
    *,
    pod_holders: Mapping[str, list[PodRef]] | None,
    procs: ProcReader | None,
    mapping: RoleMapping | None,
) -> tuple[Worker | None, str]:
    mapped = mapping.by_gpu(uuid) if mapping is not None else None
    if mapped is not None:
        return Worker(mapped.worker_id, how="mapping", model=mapped.model), ""
    holders = (pod_holders or {}).get(uuid, [])
    if len(holders) > 1:
        return None, f"shared by {len(holders)} pods (time slicing): cannot split its load"
    if len(holders) == 1:
        return Worker(holders[0].worker_id, how="pod-resources", pod=holders[0]), ""
    if status.pod is not None:
        pod = status.pod
        return Worker(pod.worker_id, how="dcgm-labels", pod=pod, pod_labels=status.pod_labels), ""
    if not status.pids:
        return None, "no compute process and no pod holds it"
    if procs is None:
        return None, "no process table to resolve its PIDs"
    roots = {engine_root(pid, procs) for pid in status.pids}
    if None in roots:
        return None, "its PIDs are not visible in /proc (run the collector with hostPID)"
    resolved = {root for root in roots if root is not None}
    if len(resolved) > 1:
        return None, f"{len(resolved)} processes share it (MPS or time slicing): cannot split its load"
    root_pid, argv = resolved.pop()
    return _process_worker(node, root_pid, argv), ""


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return host, port


def worker_for_endpoint(
    url: str, attribution: Attribution, node: str, mapping: RoleMapping | None = None
) -> Worker:
    """The worker an engine URL belongs to: mapping file, pod IP, then a local port; else a GPU-less worker
    named after the endpoint (its engine samples carry no GPUs: unattributed, not guessed)."""
    mapped = mapping.by_url(url) if mapping is not None else None
    if mapped is not None:
        known = attribution.workers.get(mapped.worker_id)
        gpus = known.gpu_uuids if known is not None else mapped.gpus
        base = known or Worker(mapped.worker_id, how="mapping")
        return replace(base, gpu_uuids=tuple(gpus), model=mapped.model or base.model)
    host, port = _host_port(url)
    for worker in attribution.workers.values():
        if worker.pod_ip and worker.pod_ip == host:
            return worker
    if host in LOCAL_HOSTS or host == node.lower():
        for worker in attribution.workers.values():
            if worker.port is not None and worker.port == port:
                return worker
    safe_host = re.sub(r"[^A-Za-z0-9.\-_:]", "_", host)[:200]
    worker_id = f"{node}:{port}" if host in LOCAL_HOSTS else f"{safe_host}:{port}"
    return Worker(worker_id, how="endpoint", port=port)
