"""Cluster and deployment on the collector's records: the cluster from settings and flags, the deployment from
each serving stack's pod labels, the engine's Dynamo namespace, the mapping file or the pod's owner."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from collector.agent import Agent
from collector.deployments import DEPLOYMENT_LABELS, OwnerRef, owner_name, resolve_deployment
from collector.discovery import Discovered
from collector.engines import EngineScraper
from collector.fake_nvml import fleet_node
from collector.mapping import MappedWorker, RoleMapping
from collector.nvml_source import NvmlSource
from collector.podresources import ContainerDevices, KubernetesPodLookup, PodDevices, PodInfo
from collector.procfs import FakeProcs
from collector.roles import sanitise_label
from collector.settings import CollectorSettings
from collector.window import PodRef
from fleet.clock import FakeClock
from fleet.contract import EngineSample, GpuJoin, GpuSample, Role
from tests.collector.conftest import VLLM_FIXTURE, fixture_text

POD_IP = "10.0.3.7"
POD_URL = f"http://{POD_IP}:8000/metrics"
LOCAL_URL = "http://127.0.0.1:8100/metrics"
PROCS: dict[int, tuple[int, tuple[str, ...]]] = {
    100: (1, ("vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--port", "8100"))
}


def without_dynamo(text: str) -> str:
    """The vLLM capture without its ``dynamo_component_*`` series: a plain vLLM, no Dynamo namespace."""
    return "\n".join(line for line in text.splitlines() if "dynamo_" not in line) + "\n"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"nvidia.com/dynamo-namespace": "llama-disagg"}, "llama-disagg"),
        ({"nvidia.com/dynamo-graph-deployment-name": "llama-dgd"}, "llama-dgd"),
        ({"llm-d.ai/inferencepool": "llama-pool"}, "llama-pool"),
        ({"llm-d.ai/inferencePool": "llama-pool"}, "llama-pool"),
        ({"serving.kserve.io/inferenceservice": "llama-isvc"}, "llama-isvc"),
        ({"llm_d_ai_inferencepool": "sanitised-pool"}, "sanitised-pool"),  # dcgm-exporter's copy
        ({"nvidia_com_dynamo_namespace": "ns", "serving_kserve_io_inferenceservice": "isvc"}, "ns"),
        ({"app": "vllm", "llm-d.ai/role": "decode"}, None),
    ],
)
def test_deployment_from_each_label_family(labels: dict[str, str], expected: str | None) -> None:
    assert resolve_deployment(labels) == expected


def test_every_label_in_the_table_is_honoured_raw_and_sanitised() -> None:
    for key in DEPLOYMENT_LABELS:
        assert resolve_deployment({key: "d"}) == "d"
        assert resolve_deployment({sanitise_label(key): "d"}) == "d"


def test_owner_references_give_namespace_and_deployment() -> None:
    hashed = {"pod-template-hash": "7d9c5b6f4"}
    rs = OwnerRef("ReplicaSet", "llama-decode-7d9c5b6f4")
    assert resolve_deployment(hashed, namespace="llm", owner=rs) == "llm/llama-decode"
    # a ReplicaSet whose name does not end in the pod's hash is kept whole (not ours to guess)
    assert owner_name(OwnerRef("ReplicaSet", "standalone-rs"), hashed) == "standalone-rs"
    assert owner_name(rs, {}) == "llama-decode-7d9c5b6f4"
    sts = OwnerRef("StatefulSet", "llama-prefill")
    assert resolve_deployment({}, namespace="llm", owner=sts) == "llm/llama-prefill"
    # a stack label beats the owner; the engine's Dynamo namespace and the mapping beat the owner too
    labelled = {"serving.kserve.io/inferenceservice": "isvc", **hashed}
    assert resolve_deployment(labelled, namespace="llm", owner=rs) == "isvc"
    assert resolve_deployment({}, namespace="llm", owner=sts, engine_namespaces={"dyn"}) == "dyn"
    assert resolve_deployment({}, namespace="llm", owner=sts, mapped="from-file") == "from-file"
    # two Dynamo namespaces on one endpoint: ambiguous, so not used
    assert resolve_deployment({}, engine_namespaces={"a", "b"}) is None
    assert resolve_deployment({}, owner=sts) is None  # no namespace: no "<namespace>/<owner>"


def test_pod_lookup_reads_the_controlling_owner() -> None:
    def read_pod(name: str, namespace: str) -> Any:
        refs = [
            SimpleNamespace(kind="Node", name="n1", controller=False),
            SimpleNamespace(kind="ReplicaSet", name="llama-decode-7d9c5b6f4", controller=True),
        ]
        return SimpleNamespace(
            metadata=SimpleNamespace(
                labels={"pod-template-hash": "7d9c5b6f4"},
                owner_references=refs,
                annotations={"prometheus.io/port": "8000"},
            ),
            status=SimpleNamespace(pod_ip=POD_IP),
        )

    info = KubernetesPodLookup(read_pod).get(PodRef("llm", "llama-decode-7d9c5b6f4-x2x9q"))
    assert info == PodInfo(
        {"pod-template-hash": "7d9c5b6f4"},
        POD_IP,
        OwnerRef("ReplicaSet", "llama-decode-7d9c5b6f4"),
        Discovered((f"http://{POD_IP}:8000/metrics",)),
    )


class FakePodResources:
    def __init__(self, pods: list[PodDevices]) -> None:
        self.pods = pods

    def list(self) -> list[PodDevices]:
        return self.pods


def kube_agent(clock: FakeClock, labels: dict[str, str], refs: list[Any], engine_text: str) -> Agent:
    """One GPU held by pod llm/decode-0 (pod-resources), its labels and owner from the Kubernetes API, and
    its engine scraped at the pod IP."""
    fake = fleet_node(1, clock.monotonic)
    uuid = fake.gpus[0].uuid
    pods = [PodDevices("llm", "decode-0", "vllm", (ContainerDevices("nvidia.com/gpu", (uuid,)),))]

    def read_pod(name: str, namespace: str) -> Any:
        return SimpleNamespace(
            metadata=SimpleNamespace(labels=labels, owner_references=refs),
            status=SimpleNamespace(pod_ip=POD_IP),
        )

    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=engine_text)))
    return Agent(
        node="gpu-node-17",
        clock=clock,
        cluster="east",
        gpu_sources=[NvmlSource(fake, "gpu-node-17", clock)],
        engines=EngineScraper([POD_URL], client, clock),
        sku_of=lambda name: "H200-SXM",
        pod_resources=FakePodResources(pods),
        pod_lookup=KubernetesPodLookup(read_pod),
    )


def one_window(agent: Agent, clock: FakeClock) -> tuple[list[GpuSample], EngineSample]:
    agent.start()
    clock.advance(10.0)
    records = agent.collect_window()
    [engine] = [r for r in records if isinstance(r, EngineSample)]
    return [r for r in records if isinstance(r, GpuSample)], engine


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"nvidia.com/dynamo-namespace": "llama-disagg"}, "llama-disagg"),
        ({"llm-d.ai/inferencepool": "llama-pool", "llm-d.ai/role": "decode"}, "llama-pool"),
        ({"serving.kserve.io/inferenceservice": "llama-isvc"}, "llama-isvc"),
        ({"pod-template-hash": "5f8d"}, "llm/llama-decode"),  # owner: ReplicaSet llama-decode-5f8d
    ],
)
def test_agent_stamps_cluster_and_deployment_from_kubernetes(
    clock: FakeClock, labels: dict[str, str], expected: str
) -> None:
    refs = [SimpleNamespace(kind="ReplicaSet", name="llama-decode-5f8d", controller=True)]
    agent = kube_agent(clock, labels, refs, without_dynamo(fixture_text(VLLM_FIXTURE)))
    gpus, engine = one_window(agent, clock)
    assert engine.worker_id == "llm/decode-0" and engine.gpu_uuids == [gpus[0].gpu_uuid]
    assert engine.deployment == expected
    assert engine.cluster == "east" and [g.cluster for g in gpus] == ["east"]


def test_engine_reported_dynamo_namespace_names_the_deployment(clock: FakeClock) -> None:
    agent = kube_agent(clock, {}, [], fixture_text(VLLM_FIXTURE))  # the capture: dynamo_namespace="dynamo"
    _, engine = one_window(agent, clock)
    assert engine.deployment == "dynamo"


def bare_metal_agent(clock: FakeClock, mapping: RoleMapping | None, cluster: str | None) -> Agent:
    fake = fleet_node(1, clock.monotonic)
    fake.gpus[0].pids = [100]
    text = without_dynamo(fixture_text(VLLM_FIXTURE))
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=text)))
    return Agent(
        node="n",
        clock=clock,
        cluster=cluster,
        gpu_sources=[NvmlSource(fake, "n", clock)],
        engines=EngineScraper([LOCAL_URL], client, clock),
        sku_of=lambda name: "H100-SXM",
        mapping=mapping,
        procs=FakeProcs(PROCS),
    )


def test_without_kubernetes_the_deployment_is_none_and_no_cluster_is_none(clock: FakeClock) -> None:
    gpus, engine = one_window(bare_metal_agent(clock, None, None), clock)
    assert engine.worker_id == "n:8100" and engine.gpu_uuids == [gpus[0].gpu_uuid]
    assert engine.deployment is None and engine.cluster is None
    assert all(g.cluster is None for g in gpus)


def test_without_kubernetes_the_mapping_file_gives_the_deployment(clock: FakeClock) -> None:
    mapping = RoleMapping(workers=(MappedWorker(worker_id="n:8100", deployment="llama-70b"),))
    gpus, engine = one_window(bare_metal_agent(clock, mapping, "west"), clock)
    assert engine.deployment == "llama-70b"
    assert engine.cluster == "west" and [g.cluster for g in gpus] == ["west"]


def test_cluster_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PHASEFIT_COLLECTOR_CLUSTER", "eu-west")
    assert CollectorSettings().cluster == "eu-west"
    assert CollectorSettings(cluster="us-east").cluster == "us-east"  # what a flag passes overrides it
    monkeypatch.setenv("PHASEFIT_COLLECTOR_CLUSTER", " ")
    assert CollectorSettings().cluster is None  # blank (an empty Helm value) means unset
    monkeypatch.delenv("PHASEFIT_COLLECTOR_CLUSTER")
    assert CollectorSettings().cluster is None


def test_mapping_file_accepts_a_deployment(tmp_path: Path) -> None:
    from collector.mapping import load_mapping

    path = tmp_path / "roles.yaml"
    path.write_text("workers:\n  - worker_id: w1\n    deployment: llama-70b\n")
    assert load_mapping(path).workers[0].deployment == "llama-70b"


def _discovering_agent(clock: FakeClock, annotations: dict[str, str], seen: list[str]) -> Agent:
    """As kube_agent, but no engine URL is configured: the pod's annotations say where it serves /metrics."""
    fake = fleet_node(1, clock.monotonic)
    uuid = fake.gpus[0].uuid
    pods = [PodDevices("llm", "decode-0", "vllm", (ContainerDevices("nvidia.com/gpu", (uuid,)),))]

    def read_pod(name: str, namespace: str) -> Any:
        return SimpleNamespace(
            metadata=SimpleNamespace(labels={"llm-d.ai/role": "decode"}, annotations=annotations),
            status=SimpleNamespace(pod_ip=POD_IP),
        )

    text = without_dynamo(fixture_text(VLLM_FIXTURE))

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=text)

    client = httpx.Client(transport=httpx.MockTransport(answer))
    return Agent(
        node="gpu-node-17",
        clock=clock,
        gpu_sources=[NvmlSource(fake, "gpu-node-17", clock)],
        engines=EngineScraper([], client, clock),
        discover_engines=True,
        sku_of=lambda name: "H200-SXM",
        pod_resources=FakePodResources(pods),
        pod_lookup=KubernetesPodLookup(read_pod),
    )


def test_a_gpu_holding_pod_is_scraped_where_its_annotation_says(clock: FakeClock) -> None:
    seen: list[str] = []
    agent = _discovering_agent(clock, {"prometheus.io/port": "8000"}, seen)
    agent.start()
    engines: list[EngineSample] = []
    for _ in range(3):  # 1: the pod is found; 2: its engine's first scrape; 3: its first window
        clock.advance(10.0)
        engines += [r for r in agent.collect_window() if isinstance(r, EngineSample)]
    assert seen and set(seen) == {POD_URL}
    assert [e.worker_id for e in engines] == ["llm/decode-0"]
    assert engines[0].gpu_join is GpuJoin.POD_RESOURCES and engines[0].role is Role.DECODE


def test_a_gpu_holding_pod_without_an_endpoint_is_reported_not_guessed(clock: FakeClock) -> None:
    seen: list[str] = []
    agent = _discovering_agent(clock, {}, seen)
    agent.start()
    for _ in range(2):
        clock.advance(10.0)
        assert not [r for r in agent.collect_window() if isinstance(r, EngineSample)]
    assert seen == []
    [failure] = [f for f in agent.failures.current() if f.stage == "engine_discovery"]
    assert failure.target == "llm/decode-0" and failure.reason == "no_metrics_endpoint"
