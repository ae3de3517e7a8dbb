"""Which serving worker runs on which GPU, and which worker (and GPUs) an engine endpoint belongs to.

Attribution is evidence, never a guess: per GPU, in order, the operator's mapping file, the
kubelet pod-resources API (GPU UUID -> pod), dcgm-exporter's pod labels, and NVML's host PIDs walked up
to the engine process that launched them.  A GPU held by several pods or processes (MPS, time slicing),
or whose PIDs are not visible in /proc, stays unattributed, with the reason.  A tensor-parallel worker
spans all the GPUs that resolve to the same pod or engine process.

An engine endpoint (``--engine-url``) is joined to its GPUs by :func:`join_endpoint`, and says how
(``gpu_join``): the mapping file's entry for the URL; the pod whose IP the URL names (pod-resources); on
this node, the process listening on the URL's port and the GPUs NVML lists for it or for its descendants
(vLLM's EngineCore and TP workers are children of the API server), else the one engine launched with that
``--port`` (process); GPU UUIDs or process ids the engine reports in its own labels (engine-labels); the
mapping file's ``gpus`` (mapping).  When none holds, the engine keeps no GPUs and the reason is logged.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from collector.deployments import OwnerRef
from collector.discovery import Discovered
from collector.mapping import MappedWorker, RoleMapping
from collector.podresources import PodLookup
from collector.procfs import ProcReader, SocketReader
from collector.roles import engine_of_cmdline, flag_value
from collector.window import GpuStatus, PodRef
from fleet.contract import GpuJoin
from fleet.precision import parse_precision

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"})
MAX_ANCESTRY = 8
MAX_TREE_DEPTH = 16  # listener -> GPU process: API server -> EngineCore -> workers, plus launchers
LISTENER_RESCAN_S = 60.0  # a port with no visible listener is looked for in every process at most this often
TP_FLAGS = ("--tensor-parallel-size", "-tp", "--tp-size", "--tp", "--tp_size")
PP_FLAGS = ("--pipeline-parallel-size", "-pp", "--pp-size", "--pp", "--pp_size")
DP_FLAGS = ("--data-parallel-size", "-dp", "--dp-size", "--dp", "--dp_size")
# how a worker's GPUs were attributed -> how an engine's GPUs were found
JOIN_OF_HOW: dict[str, GpuJoin] = {
    "mapping": GpuJoin.MAPPING,
    "pod-resources": GpuJoin.POD_RESOURCES,
    "dcgm-labels": GpuJoin.POD_RESOURCES,  # dcgm-exporter's pod labels come from the kubelet's pod-resources
    "process": GpuJoin.PROCESS,
    "engine-labels": GpuJoin.ENGINE_LABELS,
}
_STRONG_HOWS = frozenset({"mapping", "pod-resources", "dcgm-labels"})


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
    pp: int | None = None  # pipeline-parallel degree from the command line
    dp: int | None = None  # data-parallel degree from the command line
    metrics: Discovered | None = None  # where its pod serves the engine's /metrics (Kubernetes only)


@dataclass
class Attribution:
    workers: dict[str, Worker] = field(default_factory=dict)
    gpu_worker: dict[str, str] = field(default_factory=dict)  # GPU UUID -> worker_id
    unattributed: dict[str, str] = field(default_factory=dict)  # GPU UUID -> why
    claimed: dict[str, str] = field(default_factory=dict)  # GPU UUID -> the engine URL joined to it


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
    worker = Worker(
        worker_id,
        how="process",
        cmdline=argv,
        engine=engine,
        port=port,
        model=model,
        tp=_int_flag(argv, *TP_FLAGS),
        pp=_int_flag(argv, *PP_FLAGS),
        dp=_int_flag(argv, *DP_FLAGS),
    )
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
                    worker = replace(
                        worker, pod_labels=labels, pod_ip=info.ip, owner=info.owner, metrics=info.metrics
                    )
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
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    return host, port


def endpoint_worker_id(url: str, node: str) -> str:
    """The id of an engine known only by its URL: ``<node>:<port>`` on this node (as a process worker
    launched with that ``--port`` is named, so the id is the same however its GPUs were found), else
    ``<host>:<port>``."""
    host, port = _host_port(url)
    if host in LOCAL_HOSTS or host == node.lower():
        return f"{node}:{port}"
    safe_host = re.sub(r"[^A-Za-z0-9.\-_:]", "_", host)[:200]
    return f"{safe_host}:{port}"


@dataclass(frozen=True)
class EndpointJoin:
    """An engine endpoint's worker, its GPUs (``worker.gpu_uuids``) and how they were found (None: not found,
    ``why`` says what was tried)."""

    worker: Worker
    join: GpuJoin | None
    why: str = ""


def _descends(pid: int, roots: Collection[int], procs: ProcReader) -> bool:
    current: int | None = pid
    for _ in range(MAX_TREE_DEPTH):
        if current is None or current <= 0:
            return False
        if current in roots:
            return True
        current = procs.parent(current)
    return False


def _ancestry(pids: Iterable[int], procs: ProcReader) -> list[int]:
    out: dict[int, None] = {}
    for pid in pids:
        current: int | None = pid
        for _ in range(MAX_TREE_DEPTH):
            if current is None or current <= 1 or current in out:
                break
            out[current] = None
            current = procs.parent(current)
    return list(out)


@dataclass(frozen=True)
class Listener:
    pids: frozenset[int]  # the topmost processes holding the listening socket (empty: none found)
    why: str = ""  # when none was found
    nothing_listens: bool = False  # the port is known to be closed (not merely unreadable)


class ListenerFinder:
    """Which process listens on a local TCP port.  Cheap first: the last owner, then the GPU processes and
    their ancestors; a scan of every process's fd table at most every ``rescan_s`` per port."""

    def __init__(self, procs: ProcReader, sockets: SocketReader, rescan_s: float = LISTENER_RESCAN_S) -> None:
        self.procs = procs
        self.sockets = sockets
        self.rescan_s = rescan_s
        self._owners: dict[int, frozenset[int]] = {}
        self._scanned_at: dict[int, float] = {}

    def find(self, port: int, candidates: Sequence[int], now: float) -> Listener:
        inodes = self.sockets.listening_inodes(port)
        if inodes is None:
            return Listener(frozenset(), "this node's TCP tables (/proc/self/net/tcp) cannot be read")
        if not inodes:
            why = f"nothing listens on port {port} in the collector's network namespace"
            return Listener(frozenset(), why, nothing_listens=True)
        unreadable: list[int] = []

        def owners_among(pids: Iterable[int]) -> set[int]:
            found: set[int] = set()
            for pid in pids:
                if pid <= 1:
                    continue  # init holds the sockets of socket-activated services: every process descends
                held = self.sockets.socket_inodes(pid)
                if held is None:
                    unreadable.append(pid)
                elif held & inodes:
                    found.add(pid)
            return found

        owners = owners_among(self._owners.get(port, ()))
        if not owners:
            owners = owners_among(candidates)
        last = self._scanned_at.get(port)
        if not owners and (last is None or now - last >= self.rescan_s):
            self._scanned_at[port] = now
            owners = owners_among(self.sockets.pids())
        if not owners:
            why = f"no visible process holds the socket listening on port {port}"
            if unreadable:
                why += f" ({len(unreadable)} fd tables unreadable: run as root or with CAP_SYS_PTRACE)"
            return Listener(frozenset(), why)
        top = frozenset(p for p in owners if not _descends_strictly(p, owners, self.procs))
        self._owners[port] = top
        return Listener(top)


def _descends_strictly(pid: int, roots: Collection[int], procs: ProcReader) -> bool:
    parent = procs.parent(pid)
    return parent is not None and _descends(parent, roots, procs)


def _held_gpus(
    roots: Collection[int], gpu_pids: Mapping[str, Sequence[int]], procs: ProcReader
) -> tuple[list[str], list[str]]:
    """(GPUs whose every compute process is in the trees of ``roots``, GPUs it shares with others)."""
    held, shared = [], []
    for uuid, pids in gpu_pids.items():
        inside = [_descends(pid, roots, procs) for pid in pids]
        if pids and all(inside):
            held.append(uuid)
        elif any(inside):
            shared.append(uuid)
    return held, shared


def _host_pids(
    reported: Iterable[int], gpu_pids: Mapping[str, Sequence[int]], sockets: SocketReader
) -> set[int]:
    """NVML's host PIDs that are the PIDs an engine reports (``os.getpid()`` in its own namespace); a reported
    PID that matches several host processes (two containers) is ambiguous and dropped."""
    visible = {pid for pids in gpu_pids.values() for pid in pids}
    out: set[int] = set()
    for wanted in reported:
        matches = {pid for pid in visible if pid == wanted or sockets.ns_pid(pid) == wanted}
        if len(matches) == 1:
            out |= matches
    return out


def join_endpoint(
    url: str,
    attribution: Attribution,
    node: str,
    *,
    mapping: RoleMapping | None = None,
    procs: ProcReader | None = None,
    sockets: SocketReader | None = None,
    listeners: ListenerFinder | None = None,
    gpu_pids: Mapping[str, Sequence[int]] | None = None,
    reported_gpus: Collection[str] = (),
    reported_pids: Collection[int] = (),
    now: float = 0.0,
) -> EndpointJoin:
    """The worker behind an engine URL and the GPUs it holds, with how they were found (module docstring).

    A join by process or by engine labels adopts the GPUs into ``attribution`` (their GPU records then carry
    the engine's worker id), unless another endpoint already claimed them this window."""
    pids = gpu_pids or {}
    mapped = mapping.by_url(url) if mapping is not None else None
    tried: list[str] = []
    if mapped is not None:
        known = attribution.workers.get(mapped.worker_id)
        if known is not None and known.gpu_uuids:
            worker = replace(known, model=mapped.model or known.model)
            return EndpointJoin(worker, JOIN_OF_HOW.get(known.how))
    host, port = _host_port(url)
    if mapped is None:
        by_ip = [w for w in attribution.workers.values() if w.pod_ip and w.pod_ip == host and w.gpu_uuids]
        if len(by_ip) == 1:
            return EndpointJoin(by_ip[0], JOIN_OF_HOW.get(by_ip[0].how))
        if by_ip:
            tried.append(f"{len(by_ip)} pods have the IP {host} (host network): the port decides")
    base_id = mapped.worker_id if mapped is not None else endpoint_worker_id(url, node)
    listener_argv: tuple[str, ...] = ()
    closed = False  # the port is known to have no listener: no engine launched with --port can be it
    local = host in LOCAL_HOSTS or host == node.lower() or host == socket.gethostname().lower()
    if not local and sockets is not None and host:
        local = host.strip("[]") in sockets.local_addresses()
    if local and port is not None and procs is not None and sockets is not None:
        finder = listeners or ListenerFinder(procs, sockets)
        candidates = _ancestry((pid for group in pids.values() for pid in group), procs)
        listener = finder.find(port, candidates, now)
        if listener.pids:
            top = min(listener.pids)
            listener_argv = procs.cmdline(top) or ()
            held, shared = _held_gpus(listener.pids, pids, procs)
            joined = _adopt(url, base_id, held, attribution, node, top, listener_argv, port, "process")
            if isinstance(joined, Worker):
                return EndpointJoin(joined, GpuJoin.PROCESS)
            tried.append(joined or _no_gpus(top, port, shared))
        else:
            tried.append(listener.why)
            closed = listener.nothing_listens
    if local and port is not None and not closed:
        same_port = [w for w in attribution.workers.values() if w.how == "process" and w.port == port]
        if len(same_port) == 1:
            found = same_port[0]
            worker_id = found.worker_id if mapped is None else base_id
            joined = _adopt(
                url, worker_id, found.gpu_uuids, attribution, node, None, found.cmdline, port, "process"
            )
            if isinstance(joined, Worker):
                return EndpointJoin(joined, GpuJoin.PROCESS)
            tried.append(joined or "")
        if len(same_port) > 1:
            tried.append(f"{len(same_port)} engines were launched with --port {port}: cannot tell which")
    labelled = _labelled_gpus(reported_gpus, reported_pids, attribution, pids, procs, sockets)
    if labelled:
        root = labelled[1]
        argv = (procs.cmdline(root) if procs is not None and root is not None else None) or listener_argv
        joined = _adopt(url, base_id, labelled[0], attribution, node, root, argv, port, "engine-labels")
        if isinstance(joined, Worker):
            return EndpointJoin(joined, GpuJoin.ENGINE_LABELS)
        tried.append(joined or "the GPUs the engine reports are not on this node")
    if mapped is not None and mapped.gpus:
        return EndpointJoin(_mapped_worker(mapped), GpuJoin.MAPPING)
    worker = Worker(base_id, how="endpoint", port=port)
    if listener_argv:
        worker = replace(_listener_worker(node, 0, listener_argv, port), worker_id=base_id, how="endpoint")
    if mapped is not None:
        worker = replace(worker, model=mapped.model)
    if not local and not tried:
        tried.append(f"{host} is not this node and no pod has that IP")
    return EndpointJoin(worker, None, "; ".join(t for t in tried if t) or "no evidence joins it to a GPU")


def _no_gpus(pid: int, port: int, shared: Sequence[str]) -> str:
    why = f"the process listening on port {port} (PID {pid}) and its children hold no GPU NVML lists"
    if shared:
        why += f" alone ({len(shared)} shared with other processes)"
    return why


def _mapped_worker(mapped: MappedWorker) -> Worker:
    return Worker(mapped.worker_id, gpu_uuids=tuple(mapped.gpus), how="mapping", model=mapped.model)


def _listener_worker(node: str, pid: int, argv: tuple[str, ...], port: int | None) -> Worker:
    worker = _process_worker(node, pid, argv)
    return replace(worker, port=port, worker_id=f"{node}:{port}")


def _labelled_gpus(
    reported_gpus: Collection[str],
    reported_pids: Collection[int],
    attribution: Attribution,
    gpu_pids: Mapping[str, Sequence[int]],
    procs: ProcReader | None,
    sockets: SocketReader | None,
) -> tuple[list[str], int | None] | None:
    """GPUs named by the engine's labels: its GPU UUIDs, or the GPUs of the process tree of the PIDs it
    reports (with the root of that tree)."""
    known = set(gpu_pids) | set(attribution.gpu_worker) | set(attribution.unattributed)
    by_uuid = [u for u in reported_gpus if u in known]
    if by_uuid:
        return by_uuid, None
    if not reported_pids or procs is None or sockets is None:
        return None
    hosts = _host_pids(reported_pids, gpu_pids, sockets)
    roots = {found[0] for pid in hosts if (found := engine_root(pid, procs)) is not None}
    if len(roots) != 1:
        return None
    [root_pid] = roots
    held, _ = _held_gpus({root_pid}, gpu_pids, procs)
    return (held, root_pid) if held else None


def _adopt(
    url: str,
    worker_id: str,
    uuids: Sequence[str],
    attribution: Attribution,
    node: str,
    root_pid: int | None,
    argv: tuple[str, ...],
    port: int | None,
    how: str,
) -> Worker | str | None:
    """The worker that now holds ``uuids`` (registered in ``attribution``), or why not (None: no GPUs)."""
    if not uuids:
        return None
    taken = {attribution.claimed[u] for u in uuids if u in attribution.claimed}
    if taken - {url}:
        return f"its GPUs are already joined to {sorted(taken - {url})[0]}"
    strong = {
        attribution.gpu_worker[u]
        for u in uuids
        if u in attribution.gpu_worker and attribution.workers[attribution.gpu_worker[u]].how in _STRONG_HOWS
    }
    if len(strong) > 1:
        return f"its GPUs belong to {len(strong)} different workers ({', '.join(sorted(strong))})"
    if strong:
        worker = attribution.workers[next(iter(strong))]
    else:
        worker = _listener_worker(node, root_pid or 0, argv, port) if argv else Worker(worker_id, port=port)
        same_id = attribution.workers.get(worker_id)  # a process worker named after the same port
        kept = same_id.gpu_uuids if same_id is not None else ()
        worker = replace(worker, worker_id=worker_id, how=how, gpu_uuids=kept)
    for uuid in uuids:
        previous = attribution.gpu_worker.get(uuid)
        if previous is not None and previous != worker.worker_id:
            old = attribution.workers[previous]
            left = tuple(u for u in old.gpu_uuids if u != uuid)
            if left:
                attribution.workers[previous] = replace(old, gpu_uuids=left)
            else:
                del attribution.workers[previous]
        attribution.gpu_worker[uuid] = worker.worker_id
        attribution.unattributed.pop(uuid, None)
    ordered = tuple(dict.fromkeys([*worker.gpu_uuids, *uuids]))
    worker = replace(worker, gpu_uuids=ordered)
    attribution.workers[worker.worker_id] = worker
    _claim(url, worker, attribution)
    return worker


def _claim(url: str, worker: Worker, attribution: Attribution) -> None:
    for uuid in worker.gpu_uuids:
        attribution.claimed[uuid] = url


def worker_for_endpoint(
    url: str, attribution: Attribution, node: str, mapping: RoleMapping | None = None
) -> Worker:
    """The worker an engine URL belongs to, without procfs: mapping file, pod IP, then a local ``--port``;
    else a GPU-less worker named after the endpoint (see :func:`join_endpoint`)."""
    return join_endpoint(url, attribution, node, mapping=mapping).worker
