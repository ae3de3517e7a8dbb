"""GPU UUID -> pod, from the kubelet pod-resources API, plus the pod's labels from the Kubernetes API.

The kubelet serves ``v1.PodResourcesLister/List`` over gRPC on a unix socket (default
``/var/lib/kubelet/pod-resources/kubelet.sock``; dcgm-exporter's ``--pod-resources-kubelet-socket``).  The
three messages we read are decoded from the protobuf wire format here (field numbers from
``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``), so only ``grpcio`` is needed, no generated code.
The NVIDIA device plugin names devices by GPU or MIG UUID (``--device-id-strategy=uuid``, the default), by
index (``index``), and adds ``::N`` to time-sliced replicas.  A GPU claimed by more than one pod (time
slicing) is reported by :func:`gpu_pods` with all its pods, and the caller leaves it unattributed.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from collector.deployments import OwnerRef
from collector.discovery import NOT_LOOKED_UP, Discovered, pod_metrics_urls
from collector.window import PodRef

LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


@dataclass(frozen=True)
class ContainerDevices:
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PodDevices:
    namespace: str
    name: str
    container: str
    devices: tuple[ContainerDevices, ...]


# --- protobuf wire format (varint and length-delimited fields; others are skipped) ----------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated length-delimited field")
            yield number, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    if pos != len(buf):
        raise ValueError("truncated fixed-width field")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ValueError("expected a string field")
    return value.decode("utf-8")


def decode_list_response(data: bytes) -> list[PodDevices]:
    """ListPodResourcesResponse -> one PodDevices per (pod, container)."""
    out: list[PodDevices] = []
    for number, pod_bytes in _fields(data):
        if number != 1 or not isinstance(pod_bytes, bytes):
            continue
        name, namespace, containers = "", "", []
        for field_no, value in _fields(pod_bytes):
            if field_no == 1:
                name = _text(value)
            elif field_no == 2:
                namespace = _text(value)
            elif field_no == 3 and isinstance(value, bytes):
                containers.append(value)
        for container_bytes in containers:
            container, devices = "", []
            for field_no, value in _fields(container_bytes):
                if field_no == 1:
                    container = _text(value)
                elif field_no == 2 and isinstance(value, bytes):
                    resource, ids = "", []
                    for dev_no, dev_value in _fields(value):
                        if dev_no == 1:
                            resource = _text(dev_value)
                        elif dev_no == 2:
                            ids.append(_text(dev_value))
                    devices.append(ContainerDevices(resource, tuple(ids)))
            out.append(PodDevices(namespace, name, container, tuple(devices)))
    return out


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def encode_list_response(pods: list[PodDevices]) -> bytes:
    """The inverse of :func:`decode_list_response` (one container per PodDevices), for tests and fakes."""
    out = b""
    for pod in pods:
        devices = b""
        for device in pod.devices:
            ids = b"".join(_len_field(2, i.encode()) for i in device.device_ids)
            devices += _len_field(2, _len_field(1, device.resource_name.encode()) + ids)
        container = _len_field(1, pod.container.encode()) + devices
        names = _len_field(1, pod.name.encode()) + _len_field(2, pod.namespace.encode())
        out += _len_field(1, names + _len_field(3, container))
    return out


# --- the gRPC call ------------------------------------------------------------------------------------------
class PodResourcesClient:
    """Calls List on the kubelet socket.  Needs ``grpcio`` (imported on first use)."""

    def __init__(self, socket_path: Path = DEFAULT_SOCKET, timeout_s: float = 3.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: Any = None

    def list(self) -> list[PodDevices]:
        try:
            grpc: Any = importlib.import_module("grpc")
        except ImportError as exc:
            raise RuntimeError("the pod-resources lookup needs grpcio: pip install grpcio") from exc
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        call = self._channel.unary_unary(
            LIST_METHOD, request_serializer=lambda _: b"", response_deserializer=decode_list_response
        )
        try:
            result: list[PodDevices] = call(None, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            where = f"kubelet pod-resources at {self.socket_path}"
            raise RuntimeError(f"{where}: {exc.code()} {exc.details()}") from exc
        return result

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def gpu_pods(
    pods: list[PodDevices], index_to_uuid: Mapping[str, str] | None = None
) -> dict[str, list[PodRef]]:
    """GPU (or MIG) UUID -> the pods that hold it.  Only ``nvidia.com/*`` resources are GPUs."""
    out: dict[str, list[PodRef]] = {}
    for pod in pods:
        ref = PodRef(pod.namespace, pod.name, pod.container or None)
        for device in pod.devices:
            if not device.resource_name.startswith("nvidia.com/"):
                continue
            for raw in device.device_ids:
                device_id = raw.split("::", 1)[0]  # time-slicing replica suffix
                uuid = (index_to_uuid or {}).get(device_id, device_id)
                holders = out.setdefault(uuid, [])
                if all(h.worker_id != ref.worker_id for h in holders):
                    holders.append(ref)
    return out


# --- pod labels --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PodInfo:
    labels: Mapping[str, str]
    ip: str | None = None
    owner: OwnerRef | None = None  # for the deployment when no serving-stack label names it
    metrics: Discovered = NOT_LOOKED_UP  # where its engine serves /metrics


def controller_owner(metadata: Any) -> OwnerRef | None:
    """The controlling entry of a pod's ``metadata.owner_references`` (else the first), if any."""
    refs = list(getattr(metadata, "owner_references", None) or [])
    ref = next((r for r in refs if getattr(r, "controller", False)), refs[0] if refs else None)
    kind, name = getattr(ref, "kind", None), getattr(ref, "name", None)
    return OwnerRef(str(kind), str(name)) if kind and name else None


class PodLookup(Protocol):
    def get(self, pod: PodRef) -> PodInfo | None: ...


class KubernetesPodLookup:
    """Pod labels, IP and owner through the Kubernetes API (in-cluster service account), cached ``ttl_s``.

    Needs the ``kubernetes`` package and RBAC ``get`` on pods; ``read_pod`` is injectable for tests."""

    def __init__(
        self,
        read_pod: Callable[[str, str], Any] | None = None,
        ttl_s: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_pod = read_pod
        self.ttl_s = ttl_s
        self.monotonic = monotonic
        self._cache: dict[str, tuple[float, PodInfo | None]] = {}

    def _reader(self) -> Callable[[str, str], Any]:
        if self._read_pod is None:
            kubernetes: Any = importlib.import_module("kubernetes")
            kubernetes.config.load_incluster_config()
            self._read_pod = kubernetes.client.CoreV1Api().read_namespaced_pod
        return self._read_pod

    def get(self, pod: PodRef) -> PodInfo | None:
        now = self.monotonic()
        cached = self._cache.get(pod.worker_id)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        try:
            obj = self._reader()(pod.name, pod.namespace)
            labels = dict(obj.metadata.labels or {})
            owner = controller_owner(obj.metadata)
            ip = getattr(obj.status, "pod_ip", None)
            info: PodInfo | None = PodInfo(labels, ip, owner, pod_metrics_urls(obj))
        except Exception:  # API down, RBAC missing, pod gone: no labels this time, retried after the TTL
            info = None
        self._cache[pod.worker_id] = (now, info)
        return info
