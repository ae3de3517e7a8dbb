"""GPU -> worker attribution (pod-resources, dcgm labels, host PIDs, mapping) and endpoint -> worker."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collector.mapping import MappedWorker, RoleMapping, load_mapping
from collector.podresources import (
    ContainerDevices,
    KubernetesPodLookup,
    PodDevices,
    PodInfo,
    PodResourcesClient,
    decode_list_response,
    encode_list_response,
    gpu_pods,
)
from collector.procfs import FakeProcs, ProcFs
from collector.window import GpuStatus, PodRef
from collector.workers import attribute_gpus, engine_root, worker_for_endpoint
from fleet.contract import Role

VLLM_TP2 = {
    100: (
        1,
        ("vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--port", "8100", "-tp", "2", "-q", "fp8"),
    ),
    101: (100, ("VLLM::EngineCore",)),
    102: (101, ("VLLM::Worker_TP0",)),
    103: (101, ("VLLM::Worker_TP1",)),
    200: (1, ("python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--port", "30001")),
}
PODS = [
    PodDevices("llm", "prefill-0", "vllm", (ContainerDevices("nvidia.com/gpu", ("GPU-a", "GPU-b")),)),
    PodDevices("llm", "decode-0", "vllm", (ContainerDevices("nvidia.com/gpu", ("GPU-c",)),)),
    PodDevices("llm", "sliced-0", "app", (ContainerDevices("nvidia.com/gpu", ("GPU-d::0",)),)),
    PodDevices("llm", "sliced-1", "app", (ContainerDevices("nvidia.com/gpu", ("GPU-d::1",)),)),
    PodDevices("kube-system", "net", "cni", (ContainerDevices("example.com/nic", ("GPU-x",)),)),
    PodDevices("llm", "by-index", "vllm", (ContainerDevices("nvidia.com/gpu", ("4",)),)),
]


def test_tensor_parallel_worker_spans_gpus_through_the_process_tree() -> None:
    statuses = {
        "GPU-0": GpuStatus("GPU-0", pids=(102,)),
        "GPU-1": GpuStatus("GPU-1", pids=(103,)),
        "GPU-2": GpuStatus("GPU-2", pids=(200,)),
        "GPU-3": GpuStatus("GPU-3"),
    }
    result = attribute_gpus("node-a", statuses, procs=FakeProcs(VLLM_TP2))
    vllm = result.workers["node-a:8100"]
    assert vllm.gpu_uuids == ("GPU-0", "GPU-1") and vllm.engine == "vllm" and vllm.tp == 2
    assert vllm.model == "meta-llama/Llama-3.1-70B-Instruct" and vllm.how == "process"
    assert vllm.precision == "fp8" and result.workers["node-a:30001"].precision is None
    assert result.gpu_worker["GPU-2"] == "node-a:30001"
    assert result.workers["node-a:30001"].model == "Qwen/Qwen3-8B"
    assert "GPU-3" in result.unattributed and "GPU-3" not in result.gpu_worker


def test_shared_gpus_and_invisible_pids_stay_unattributed() -> None:
    statuses = {
        "GPU-mps": GpuStatus("GPU-mps", pids=(102, 200)),  # two engines on one GPU
        "GPU-hidden": GpuStatus("GPU-hidden", pids=(99999,)),  # not in this /proc
    }
    result = attribute_gpus("node-a", statuses, procs=FakeProcs(VLLM_TP2))
    assert result.gpu_worker == {}
    assert "MPS" in result.unattributed["GPU-mps"]
    assert "hostPID" in result.unattributed["GPU-hidden"]
    assert "process table" in attribute_gpus("n", statuses).unattributed["GPU-mps"]


def test_pod_resources_attribution_with_labels() -> None:
    holders = gpu_pods(PODS, {"4": "GPU-e"})
    assert [p.worker_id for p in holders["GPU-a"]] == ["llm/prefill-0"]
    assert len(holders["GPU-d"]) == 2 and "GPU-x" not in holders and "GPU-e" in holders

    class Lookup:
        def get(self, pod: PodRef) -> PodInfo | None:
            return PodInfo({"llm-d.ai/role": "prefill"}, "10.0.0.7") if pod.name == "prefill-0" else None

    statuses = {u: GpuStatus(u) for u in ("GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e")}
    result = attribute_gpus("node-a", statuses, pod_holders=holders, pod_lookup=Lookup())
    prefill = result.workers["llm/prefill-0"]
    assert prefill.gpu_uuids == ("GPU-a", "GPU-b") and prefill.pod_labels["llm-d.ai/role"] == "prefill"
    assert prefill.pod_ip == "10.0.0.7" and prefill.how == "pod-resources"
    assert result.gpu_worker["GPU-c"] == "llm/decode-0" and result.gpu_worker["GPU-e"] == "llm/by-index"
    assert "time slicing" in result.unattributed["GPU-d"]


def test_dcgm_pod_labels_and_mapping_file() -> None:
    statuses = {
        "GPU-k": GpuStatus("GPU-k", pod=PodRef("llm", "decode-3"), pod_labels={"llm_d_ai_role": "decode"}),
        "GPU-m": GpuStatus("GPU-m", pids=(102,)),
    }
    mapping = RoleMapping(
        workers=(MappedWorker(worker_id="bare-metal-7", role=Role.PREFILL, gpus=("GPU-m",)),)
    )
    result = attribute_gpus("node-a", statuses, procs=FakeProcs(VLLM_TP2), mapping=mapping)
    assert result.gpu_worker == {"GPU-k": "llm/decode-3", "GPU-m": "bare-metal-7"}
    assert result.workers["llm/decode-3"].pod_labels == {"llm_d_ai_role": "decode"}


def test_endpoint_to_worker() -> None:
    statuses = {"GPU-0": GpuStatus("GPU-0", pids=(102,)), "GPU-1": GpuStatus("GPU-1", pids=(103,))}
    result = attribute_gpus("node-a", statuses, procs=FakeProcs(VLLM_TP2))
    local = worker_for_endpoint("http://127.0.0.1:8100/metrics", result, "node-a")
    assert local.worker_id == "node-a:8100" and local.gpu_uuids == ("GPU-0", "GPU-1")
    stranger = worker_for_endpoint("http://127.0.0.1:9999/metrics", result, "node-a")
    assert stranger.worker_id == "node-a:9999" and stranger.gpu_uuids == () and stranger.how == "endpoint"
    remote = worker_for_endpoint("http://10.1.2.3:8000/metrics", result, "node-a")
    assert remote.worker_id == "10.1.2.3:8000"
    mapping = RoleMapping(
        workers=(MappedWorker(worker_id="node-a:8100", engine_url="http://vllm.local/metrics", model="m"),)
    )
    mapped = worker_for_endpoint("http://vllm.local/metrics", result, "node-a", mapping)
    assert (
        mapped.worker_id == "node-a:8100" and mapped.gpu_uuids == ("GPU-0", "GPU-1") and mapped.model == "m"
    )


def test_endpoint_matched_by_pod_ip() -> None:
    holders = {"GPU-a": [PodRef("llm", "prefill-0")]}

    class Lookup:
        def get(self, pod: PodRef) -> PodInfo | None:
            return PodInfo({}, "10.0.0.7")

    result = attribute_gpus("n", {"GPU-a": GpuStatus("GPU-a")}, pod_holders=holders, pod_lookup=Lookup())
    assert worker_for_endpoint("http://10.0.0.7:8000/metrics", result, "n").worker_id == "llm/prefill-0"


def test_engine_root_walks_to_the_api_server() -> None:
    procs = FakeProcs(VLLM_TP2)
    assert engine_root(103, procs) == (100, VLLM_TP2[100][1])
    assert engine_root(424242, procs) is None


def test_procfs_reads_cmdline_and_parent(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cmdline").write_bytes(b"vllm\0serve\0m\0--port\x008000\0")
    (tmp_path / "77" / "stat").write_text("77 (vllm serve (x)) S 12 77 77 0 -1 4194560 0 0")
    procs = ProcFs(tmp_path)
    assert procs.cmdline(77) == ("vllm", "serve", "m", "--port", "8000")
    assert procs.parent(77) == 12
    assert procs.cmdline(78) is None and procs.parent(78) is None


def test_pod_resources_protobuf_round_trip() -> None:
    assert decode_list_response(encode_list_response(PODS)) == PODS
    with pytest.raises(ValueError, match="truncated"):
        decode_list_response(encode_list_response(PODS)[:-3])


def test_pod_resources_over_a_real_grpc_unix_socket(tmp_path: Path) -> None:
    import grpc  # the collector extra installs grpcio

    socket = tmp_path / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                lambda request, context: encode_list_response(PODS[:2]),
                request_deserializer=lambda data: data,
                response_serializer=lambda data: data,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    client = PodResourcesClient(socket, timeout_s=5.0)
    try:
        assert client.list() == PODS[:2]
    finally:
        client.close()
        server.stop(None)
    with pytest.raises(RuntimeError, match="kubelet pod-resources"):
        PodResourcesClient(tmp_path / "absent.sock", timeout_s=0.5).list()


def test_kubernetes_pod_lookup_caches_and_survives_api_errors() -> None:
    calls: list[tuple[str, str]] = []
    now = [0.0]

    def read_pod(name: str, namespace: str) -> Any:
        calls.append((name, namespace))
        if name == "gone":
            raise RuntimeError("404")
        return SimpleNamespace(
            metadata=SimpleNamespace(labels={"llm-d.ai/role": "decode"}),
            status=SimpleNamespace(pod_ip="10.0.0.9"),
        )

    lookup = KubernetesPodLookup(read_pod, ttl_s=60.0, monotonic=lambda: now[0])
    info = lookup.get(PodRef("llm", "decode-0"))
    assert info is not None and (info.labels, info.ip) == ({"llm-d.ai/role": "decode"}, "10.0.0.9")
    assert info.metrics.urls == () and "no phasefit.io/metrics-port" in (info.metrics.why_none or "")
    lookup.get(PodRef("llm", "decode-0"))
    assert lookup.get(PodRef("llm", "gone")) is None
    assert len(calls) == 2
    now[0] = 61.0
    lookup.get(PodRef("llm", "decode-0"))
    assert len(calls) == 3


def test_mapping_file(tmp_path: Path) -> None:
    path = tmp_path / "roles.yaml"
    path.write_text(
        "workers:\n  - worker_id: w1\n    role: prefill\n    gpus: [GPU-a]\n    engine_url: http://h:1/metrics\n"
    )
    mapping = load_mapping(path)
    assert mapping.by_gpu("GPU-a") is not None and mapping.by_url("http://h:1/metrics") is not None
    path.write_text("workers:\n  - worker_id: w1\n    role: sideways\n")
    with pytest.raises(ValueError, match=r"roles\.yaml is invalid: workers\.0\.role"):
        load_mapping(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_mapping(tmp_path / "missing.yaml")
