"""Engine endpoint -> GPUs without Kubernetes: listening sockets and process trees read from a fake /proc.

The fake tree is written under tmp_path in procfs's own formats: ``net/tcp`` and ``net/tcp6`` rows (state
``0A`` = LISTEN, inode in the tenth column), ``<pid>/fd/<n>`` symbolic links to ``socket:[<inode>]``,
``<pid>/stat`` (``pid (comm) state ppid ...``), ``<pid>/cmdline`` (NUL-separated) and ``<pid>/status``
(``NSpid``: the PID in each namespace, outermost first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from collector.engine_ids import EngineIdentity, engine_identity, identity_of
from collector.mapping import MappedWorker, RoleMapping
from collector.procfs import FakeProcs, ProcFs, parse_fib_trie, parse_if_inet6, parse_listening
from collector.promtext import parse
from collector.window import GpuStatus
from collector.workers import Attribution, ListenerFinder, attribute_gpus, join_endpoint
from fleet.contract import GpuJoin
from tests.collector.conftest import SGLANG_FIXTURE, fixture_text

NODE = "gpu-7"
TCP_HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)


def tcp_row(slot: int, address_hex: str, port: int, state: str, inode: int) -> str:
    return (
        f"  {slot:2d}: {address_hex}:{port:04X} {'0' * len(address_hex)}:0000 {state} 00000000:00000000 "
        f"00:00000000 00000000  1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
    )


@dataclass
class Proc:
    ppid: int
    argv: tuple[str, ...]
    sockets: tuple[int, ...] = ()
    nspid: int | None = None  # the PID inside its container, when it is in one
    fds_readable: bool = True


@dataclass
class FakeProcTree:
    """Writes a /proc tree: processes, the TCP tables of the collector's network namespace, addresses."""

    root: Path
    procs: dict[int, Proc] = field(default_factory=dict)
    listen4: dict[int, int] = field(default_factory=dict)  # port -> inode on 0.0.0.0
    listen6: dict[int, int] = field(default_factory=dict)  # port -> inode on ::

    def write(self) -> ProcFs:
        net = self.root / "net"
        net.mkdir(parents=True, exist_ok=True)
        rows4 = [tcp_row(0, "0100007F", 41234, "01", 999)]  # an established connection: ignored
        rows4 += [
            tcp_row(i + 1, "00000000", port, "0A", inode)
            for i, (port, inode) in enumerate(self.listen4.items())
        ]
        (net / "tcp").write_text(TCP_HEADER + "".join(rows4))
        rows6 = [
            tcp_row(i, "0" * 32, port, "0A", inode) for i, (port, inode) in enumerate(self.listen6.items())
        ]
        (net / "tcp6").write_text(TCP_HEADER + "".join(rows6))
        (net / "fib_trie").write_text(
            "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 192.0.2.2\n        /32 host LOCAL\n"
            "     |-- 192.0.2.255\n        /32 link BROADCAST\n"
        )
        (net / "if_inet6").write_text("fd000000000000000000000000000002 04 40 00 82     eth0\n")
        for pid, proc in self.procs.items():
            d = self.root / str(pid)
            d.mkdir(parents=True, exist_ok=True)
            (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in proc.argv) + b"\0")
            comm = proc.argv[0].rsplit("/", 1)[-1][:15]
            (d / "stat").write_text(f"{pid} ({comm}) S {proc.ppid} {pid} {pid} 0 -1 4194560 0 0 0")
            nspid = f"{pid}\t{proc.nspid}" if proc.nspid is not None else str(pid)
            (d / "status").write_text(f"Name:\t{comm}\nState:\tS (sleeping)\nNSpid:\t{nspid}\n")
            if not proc.fds_readable:
                (d / "fd").write_text("")  # not a directory: reading it fails as a denied fd table would
                continue
            (d / "fd").mkdir(exist_ok=True)
            (d / "fd" / "0").symlink_to("/dev/null")
            for n, inode in enumerate(proc.sockets, start=3):
                (d / "fd" / str(n)).symlink_to(f"socket:[{inode}]")
        return ProcFs(self.root, self.root / "net")


VLLM_API = (
    "python3",
    "/opt/app/serve.py",
    "--model",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--dtype",
    "bfloat16",
)


def vllm_tree(root: Path, changes: Mapping[int, Proc] | None = None) -> FakeProcTree:
    """A vLLM server behind a custom launcher (no --port: the port is in its config), TP 2: the API server
    (PID 500) listens on 9000 (IPv6 any), its EngineCore (501) starts the two TP workers (502, 503) that hold
    GPUs; a training job (700) holds another GPU and shares one with a worker."""
    procs = {
        1: Proc(0, ("/sbin/init",)),
        500: Proc(1, VLLM_API, sockets=(77001,)),
        501: Proc(500, ("VLLM::EngineCore",)),
        502: Proc(501, ("VLLM::Worker_TP0",)),
        503: Proc(501, ("VLLM::Worker_TP1",)),
        700: Proc(1, ("python3", "train.py")),
    }
    procs.update(changes or {})
    return FakeProcTree(root / "proc", procs, listen6={9000: 77001})


GPU_PIDS: dict[str, tuple[int, ...]] = {
    "GPU-0": (502,),
    "GPU-1": (503,),
    "GPU-2": (700,),
    "GPU-3": (),
    "GPU-4": (502, 700),  # shared with a process outside the engine
}


def attribute(procs: ProcFs | FakeProcs, gpu_pids: Mapping[str, Sequence[int]] = GPU_PIDS) -> Attribution:
    statuses = {uuid: GpuStatus(uuid, pids=tuple(pids)) for uuid, pids in gpu_pids.items()}
    return attribute_gpus(NODE, statuses, procs=procs)


def join(url: str, procs: ProcFs | FakeProcs, attribution: Attribution, **kwargs: object):  # type: ignore[no-untyped-def]
    return join_endpoint(
        url,
        attribution,
        NODE,
        procs=procs,
        sockets=procs,
        gpu_pids=kwargs.pop("gpu_pids", GPU_PIDS),
        **kwargs,  # type: ignore[arg-type]
    )


# --- procfs readers ----------------------------------------------------------------------------------------
def test_procfs_reads_listening_sockets_fd_links_and_namespaces(tmp_path: Path) -> None:
    tree = vllm_tree(tmp_path, {900: Proc(1, ("sglang",), nspid=57)})
    tree.listen4[8001] = 88001
    procfs = tree.write()
    assert procfs.listening_inodes(9000) == frozenset({77001})  # from tcp6
    assert procfs.listening_inodes(8001) == frozenset({88001})  # from tcp
    assert procfs.listening_inodes(41234) == frozenset()  # an established connection is no listener
    assert procfs.socket_inodes(500) == frozenset({77001}) and procfs.socket_inodes(502) == frozenset()
    assert procfs.socket_inodes(4242) is None
    assert procfs.ns_pid(900) == 57 and procfs.ns_pid(500) == 500 and procfs.ns_pid(4242) is None
    assert procfs.parent(503) == 501 and procfs.cmdline(500) == VLLM_API
    assert procfs.pids() == [1, 500, 501, 502, 503, 700, 900]
    assert procfs.local_addresses() == frozenset({"192.0.2.2", "fd00::2"})
    assert ProcFs(tmp_path / "none", tmp_path / "none").listening_inodes(9000) is None  # unreadable != none


def test_table_parsers_on_kernel_text() -> None:
    table = TCP_HEADER + tcp_row(0, "0100007F", 8000, "0A", 5089) + tcp_row(1, "0100007F", 8000, "06", 0)
    assert parse_listening(table, 8000) == {5089} and parse_listening(table, 8001) == set()
    assert parse_fib_trie("  |-- 10.0.0.5\n     /32 host LOCAL\n  |-- 10.0.0.0\n     /24 link UNICAST\n") == {
        "10.0.0.5"
    }
    assert parse_if_inet6("00000000000000000000000000000001 01 80 10 80       lo\n") == {"::1"}


# --- the process join ---------------------------------------------------------------------------------------
def test_engine_joined_through_the_listening_socket_and_its_children(tmp_path: Path) -> None:
    procs = vllm_tree(tmp_path).write()
    attribution = attribute(procs)
    # cmdline evidence alone guessed vLLM's default port for the EngineCore's tree
    assert attribution.gpu_worker["GPU-0"] == f"{NODE}:8000"
    joined = join("http://127.0.0.1:9000/metrics", procs, attribution)
    assert joined.join is GpuJoin.PROCESS
    worker = joined.worker
    assert worker.worker_id == f"{NODE}:9000" and worker.gpu_uuids == ("GPU-0", "GPU-1")
    assert worker.model == "meta-llama/Llama-3.1-8B-Instruct" and worker.precision == "bf16"
    assert worker.cmdline == VLLM_API and worker.tp is None  # no TP flag: the agent counts the GPUs
    # the GPU records follow the engine's worker; the guessed one is gone, the shared GPU stays out
    assert attribution.gpu_worker["GPU-0"] == attribution.gpu_worker["GPU-1"] == f"{NODE}:9000"
    assert f"{NODE}:8000" not in attribution.workers and "GPU-4" not in attribution.gpu_worker


def test_a_closed_port_joins_nothing_not_the_default_port_guess(tmp_path: Path) -> None:
    procs = vllm_tree(tmp_path).write()
    attribution = attribute(procs)
    joined = join("http://127.0.0.1:8000/metrics", procs, attribution)
    assert joined.join is None and joined.worker.gpu_uuids == ()
    assert joined.worker.worker_id == f"{NODE}:8000" and "nothing listens on port 8000" in joined.why


def test_the_topmost_of_several_socket_holders_is_the_listener(tmp_path: Path) -> None:
    # vLLM --api-server-count 2: the launcher and its API server children all hold the listening socket
    server = Proc(500, ("python3", "-m", "vllm.entrypoints.openai.api_server"), (77001,))
    procs = vllm_tree(tmp_path, {510: server}).write()
    finder = ListenerFinder(procs, procs)
    assert finder.find(9000, [510, 500], now=0.0).pids == frozenset({500})


def test_init_holding_a_socket_activated_port_is_not_the_engine(tmp_path: Path) -> None:
    # systemd socket activation: PID 1 holds the listening socket too, and every process descends from it
    tree = vllm_tree(tmp_path, {1: Proc(0, ("/sbin/init",), sockets=(77001,))})
    procs = tree.write()
    assert ListenerFinder(procs, procs).find(9000, [], now=0.0).pids == frozenset({500})  # by the full scan
    joined = join("http://127.0.0.1:9000/metrics", procs, attribute(procs))
    assert joined.worker.gpu_uuids == ("GPU-0", "GPU-1")  # not the training job's GPU


def test_listener_off_the_gpu_tree_is_found_by_a_rate_limited_scan(tmp_path: Path) -> None:
    tree = vllm_tree(tmp_path)
    tree.procs[800] = Proc(
        1, ("/usr/bin/docker-proxy", "-host-port", "8001", "-container-port", "8000"), (88001,)
    )
    tree.listen4[8001] = 88001
    procs = tree.write()
    finder = ListenerFinder(procs, procs, rescan_s=60.0)
    assert finder.find(8001, [502, 501, 500], now=0.0).pids == frozenset({800})  # found by the full scan
    assert finder.find(8001, [], now=1.0).pids == frozenset({800})  # the cached owner, re-checked
    (tmp_path / "proc" / "800" / "fd" / "3").unlink()  # it closed the socket
    assert finder.find(8001, [], now=2.0).pids == frozenset()  # no rescan within 60 s
    (tmp_path / "proc" / "800" / "fd" / "3").symlink_to("socket:[88001]")
    assert finder.find(8001, [], now=61.0).pids == frozenset({800})


def test_a_proxy_listener_holds_no_gpus_and_joins_nothing(tmp_path: Path) -> None:
    # docker's userland proxy listens on the host port; the engine runs in a container (its own --port)
    tree = vllm_tree(tmp_path)
    tree.procs[800] = Proc(
        1, ("/usr/bin/docker-proxy", "-host-port", "8001", "-container-port", "8000"), (88001,)
    )
    tree.procs[900] = Proc(
        1, ("python3", "-m", "sglang.launch_server", "--port", "8000", "--tp", "1"), nspid=1
    )
    tree.procs[901] = Proc(900, ("sglang::scheduler_TP0",), nspid=57)
    tree.listen4[8001] = 88001
    procs = tree.write()
    gpu_pids = {**GPU_PIDS, "GPU-3": (901,)}
    attribution = attribute(procs, gpu_pids)
    joined = join("http://localhost:8001/metrics", procs, attribution, gpu_pids=gpu_pids)
    assert joined.join is None and joined.worker.gpu_uuids == ()
    assert "PID 800" in joined.why and "hold no GPU" in joined.why
    # the engine's own pid label (its scheduler's PID inside the container) joins it: engine-labels
    attribution = attribute(procs, gpu_pids)
    joined = join("http://localhost:8001/metrics", procs, attribution, gpu_pids=gpu_pids, reported_pids={57})
    assert joined.join is GpuJoin.ENGINE_LABELS and joined.worker.gpu_uuids == ("GPU-3",)
    assert joined.worker.worker_id == f"{NODE}:8001" and joined.worker.engine == "sglang"
    assert attribution.gpu_worker["GPU-3"] == f"{NODE}:8001"


def test_an_ambiguous_reported_pid_joins_nothing(tmp_path: Path) -> None:
    tree = vllm_tree(tmp_path)
    tree.procs[900] = Proc(1, ("python3", "-m", "sglang.launch_server"), nspid=57)  # two containers whose
    tree.procs[950] = Proc(1, ("python3", "-m", "sglang.launch_server"), nspid=57)  # processes are both 57
    procs = tree.write()
    gpu_pids = {"GPU-5": (900,), "GPU-6": (950,)}
    joined = join("http://10.9.9.9:30000/metrics", procs, attribute(procs, gpu_pids), gpu_pids=gpu_pids,
                  reported_pids={57})  # fmt: skip
    assert joined.join is None and joined.worker.worker_id == "10.9.9.9:30000"
    assert "not this node" in joined.why


def test_unreadable_fd_tables_are_named_and_the_port_flag_is_the_fallback(tmp_path: Path) -> None:
    launcher = Proc(1, ("vllm", "serve", "m", "--port", "9000", "-tp", "2"), (77001,), fds_readable=False)
    tree = vllm_tree(tmp_path, {500: launcher})
    for pid in (1, 501, 502, 503, 700):
        tree.procs[pid].fds_readable = False
    procs = tree.write()
    attribution = attribute(procs)
    finder = ListenerFinder(procs, procs)
    assert "CAP_SYS_PTRACE" in finder.find(9000, [502, 501, 500], now=0.0).why
    # without the fd tables, the one engine launched with --port 9000 (cmdline) is the evidence left
    joined = join("http://127.0.0.1:9000/metrics", procs, attribution)
    assert joined.join is GpuJoin.PROCESS and joined.worker.gpu_uuids == ("GPU-0", "GPU-1")


def test_a_second_url_for_the_same_engine_does_not_take_its_gpus(tmp_path: Path) -> None:
    procs = vllm_tree(tmp_path).write()
    attribution = attribute(procs)
    assert join("http://127.0.0.1:9000/metrics", procs, attribution).join is GpuJoin.PROCESS
    second = join("http://localhost:9000/metrics", procs, attribution)
    assert second.join is None and "already joined to http://127.0.0.1:9000/metrics" in second.why


def test_this_node_by_its_address(tmp_path: Path) -> None:
    procs = vllm_tree(tmp_path).write()
    joined = join("http://192.0.2.2:9000/metrics", procs, attribute(procs))
    assert joined.join is GpuJoin.PROCESS and joined.worker.worker_id == "192.0.2.2:9000"


def test_reported_gpu_uuids_and_the_mapping_file(tmp_path: Path) -> None:
    procs = vllm_tree(tmp_path).write()
    joined = join("http://10.1.1.1:8000/metrics", procs, attribute(procs), reported_gpus={"GPU-3", "GPU-x"})
    assert joined.join is GpuJoin.ENGINE_LABELS and joined.worker.gpu_uuids == ("GPU-3",)
    mapping = RoleMapping(
        workers=(MappedWorker(worker_id="bm-7", engine_url="http://10.1.1.1:8000/metrics", gpus=("GPU-2",)),)
    )
    joined = join("http://10.1.1.1:8000/metrics", procs, attribute(procs), mapping=mapping)
    assert joined.join is GpuJoin.MAPPING and joined.worker.worker_id == "bm-7"
    assert joined.worker.gpu_uuids == ("GPU-2",)


def test_engine_identity_from_the_real_sglang_capture() -> None:
    identity = engine_identity(parse(fixture_text(SGLANG_FIXTURE)))
    assert identity == EngineIdentity(frozenset(), frozenset({697544}))  # sglang:num_retracted_reqs{pid=...}
    labelled = parse('triton_gpu_util{gpu_uuid="GPU-927d7444-b45a-7c49-8402-5e686e46a026",gpu="0"} 1\n')
    assert engine_identity(labelled).gpu_uuids == {"GPU-927d7444-b45a-7c49-8402-5e686e46a026"}
    assert identity_of(object()) == EngineIdentity()


@pytest.mark.parametrize("pid", [1, 57])
def test_the_fake_process_table_matches_procfs(pid: int) -> None:
    fake = FakeProcs({pid: (0, ("x",))}, listening={9000: frozenset({5})}, fds={pid: frozenset({5})})
    assert fake.listening_inodes(9000) == frozenset({5}) and fake.socket_inodes(pid) == frozenset({5})
    assert fake.ns_pid(pid) == pid and FakeProcs().listening_inodes(9000) is None


# --- the agent: engine samples carry the join, TP from the GPUs, unknown when unjoined ---------------------
def test_agent_joins_a_bare_metal_engine_and_leaves_an_unjoinable_one_unknown(tmp_path: Path) -> None:
    import httpx

    from collector.agent import Agent
    from collector.engines import EngineScraper
    from collector.fake_nvml import Load, fake_uuid, fleet_node
    from collector.nvml_source import NvmlSource
    from fleet.clock import FakeClock
    from fleet.contract import EngineSample, GpuSample
    from tests.collector.conftest import VLLM_FIXTURE

    clock = FakeClock()
    procs = vllm_tree(tmp_path).write()
    fake = fleet_node(3, clock.monotonic, load=Load(sm_util=60, tensor_util=40, dram_bw_util=50))
    fake.gpus[0].pids, fake.gpus[1].pids, fake.gpus[2].pids = [502], [503], [700]
    vllm = fixture_text(VLLM_FIXTURE)
    joined_url, unjoined_url = "http://127.0.0.1:9000/metrics", "http://127.0.0.1:8002/metrics"
    down: set[str] = set()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503 if str(request.url) in down else 200, text=vllm)

    client = httpx.Client(transport=httpx.MockTransport(answer))
    agent = Agent(
        node=NODE,
        clock=clock,
        gpu_sources=[NvmlSource(fake, NODE, clock)],
        engines=EngineScraper([joined_url, unjoined_url], client, clock),
        procs=procs,
        sockets=procs,
    )
    agent.start()
    clock.advance(10.0)
    records = agent.collect_window()
    engines = {r.worker_id: r for r in records if isinstance(r, EngineSample)}
    gpus = {r.gpu_uuid: r for r in records if isinstance(r, GpuSample)}
    joined = engines[f"{NODE}:9000"]
    assert joined.gpu_join is GpuJoin.PROCESS and joined.gpu_uuids == [fake_uuid(0), fake_uuid(1)]
    assert joined.tp == 2  # no TP flag: the two GPUs its process tree holds
    assert gpus[fake_uuid(0)].worker_id == gpus[fake_uuid(1)].worker_id == f"{NODE}:9000"
    assert gpus[fake_uuid(2)].worker_id == f"{NODE}:pid700"  # the training job: its own process, untouched
    unjoined = engines[f"{NODE}:8002"]
    assert unjoined.gpu_uuids == [] and unjoined.gpu_join is None and unjoined.tp is None  # unknown, not 1
    assert "nothing listens on port 8002" in agent.joins[unjoined_url].why
    # the engine's scrape fails for a window: its GPUs keep its worker id (stable, not the cmdline guess)
    down.add(joined_url)
    clock.advance(10.0)
    records = agent.collect_window()
    gpus = {r.gpu_uuid: r for r in records if isinstance(r, GpuSample)}
    assert gpus[fake_uuid(0)].worker_id == gpus[fake_uuid(1)].worker_id == f"{NODE}:9000"
    assert not any(isinstance(r, EngineSample) and r.worker_id == f"{NODE}:9000" for r in records)
    [failure] = agent.failures.current()
    assert (failure.target, failure.reason, failure.status) == (joined_url, "http_503", 503)


def test_pod_ip_joins_by_pod_resources_unless_pods_share_the_host_network() -> None:
    from collector.podresources import PodInfo
    from collector.window import PodRef

    holders = {"GPU-a": [PodRef("llm", "prefill-0")], "GPU-b": [PodRef("llm", "decode-0")]}

    class Lookup:
        def __init__(self, ips: dict[str, str]) -> None:
            self.ips = ips

        def get(self, pod: PodRef) -> PodInfo | None:
            return PodInfo({}, self.ips[pod.name])

    statuses = {u: GpuStatus(u) for u in holders}
    own_ips = Lookup({"prefill-0": "10.0.0.7", "decode-0": "10.0.0.8"})
    own_ips_attr = attribute_gpus(NODE, statuses, pod_holders=holders, pod_lookup=own_ips)
    joined = join_endpoint("http://10.0.0.7:8000/metrics", own_ips_attr, NODE)
    assert joined.join is GpuJoin.POD_RESOURCES and joined.worker.worker_id == "llm/prefill-0"
    host_network = Lookup({"prefill-0": "10.0.0.5", "decode-0": "10.0.0.5"})
    shared = attribute_gpus(NODE, statuses, pod_holders=holders, pod_lookup=host_network)
    joined = join_endpoint("http://10.0.0.5:8000/metrics", shared, NODE)
    assert joined.join is None and "2 pods have the IP 10.0.0.5" in joined.why  # not the first pod found
