"""Collector settings, read from the environment (prefix ``PHASEFIT_COLLECTOR_``) and passed in explicitly.

No module-level instance: the CLI builds one and overrides fields from its flags.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_node_name() -> str:
    """The Kubernetes node name when the downward API provides it (``NODE_NAME``), else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname() or "localhost"


def default_spool_path() -> Path:
    return Path(user_data_dir("phasefit", appauthor=False)) / "collector-spool.sqlite"


class CollectorSettings(BaseSettings):
    """Everything the per-node agent needs; every field can be set as ``PHASEFIT_COLLECTOR_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="PHASEFIT_COLLECTOR_", extra="ignore")

    node: str = Field(
        default_factory=default_node_name,
        min_length=1,
        max_length=253,
        description="Node name put on every record (default: $NODE_NAME, else the host name).",
    )
    cluster: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="Cluster name put on every record: with the deployment and the served model it names a "
        "worker's pool (unset: the analyzer's node -> cluster map, else the one default cluster).",
    )
    interval_s: float = Field(
        default=10.0,
        ge=0.2,
        le=3600.0,
        description="Collection window in seconds (GPM needs > 0.1 s between samples; 1-30 s is usual).",
    )
    listen: str = Field(
        default=":9401",
        description="Address of the Prometheus exporter, HOST:PORT or :PORT (all interfaces).",
    )
    ingest_url: str | None = Field(
        default=None,
        description="Base URL of the phasefit service (records are POSTed to <url>/v1/ingest).",
    )
    token_file: Path | None = Field(
        default=None,
        description="File holding the bearer token for the ingest API (read at start; never logged).",
    )
    output_file: Path | None = Field(
        default=None,
        description="JSONL file the shipper appends records to when no ingest URL is set (--output ship).",
    )
    spool_path: Path = Field(
        default_factory=default_spool_path,
        description="SQLite file of the durable spool: records wait until the service acknowledges them.",
    )
    spool_max_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=64 * 1024,
        description="Disk bound of the spool; beyond it the oldest records are dropped and counted.",
    )
    spool_fsync: bool = Field(
        default=True,
        description="fsync each spool commit (synchronous=FULL): survives power loss too, not only a kill.",
    )
    batch_max_records: int = Field(default=2000, ge=1, description="Most records in one ingest request.")
    batch_max_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="Most uncompressed JSON bytes in one ingest request."
    )
    request_timeout_s: float = Field(default=10.0, gt=0, description="Timeout of one ingest request.")
    backoff_min_s: float = Field(default=0.5, gt=0, description="First retry delay after a failed send.")
    backoff_max_s: float = Field(default=30.0, gt=0, description="Cap of the exponential retry delay.")
    nvml_call_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="Deadline of one NVML call; a call past it marks the GPU's window incomplete.",
    )
    scrape_timeout_s: float = Field(
        default=3.0, gt=0, description="Timeout of one scrape of dcgm-exporter or an engine /metrics."
    )
    dcgm_url: str | None = Field(default=None, description="dcgm-exporter /metrics URL for --source dcgm.")
    engine_urls: list[str] = Field(
        default_factory=list,
        description="Serving-engine /metrics URLs (vLLM, SGLang, TensorRT-LLM, Dynamo workers), JSON list.",
    )
    discover_engines: bool = Field(
        default=True,
        description="With the pod-resources socket (Kubernetes): scrape the /metrics endpoint each "
        "GPU-holding pod declares (phasefit.io/metrics-port or prometheus.io/port annotation, or a port "
        "named 'metrics'), beside engine_urls.",
    )
    role_mapping_file: Path | None = Field(
        default=None,
        description="YAML file mapping workers (or engine URLs, or GPU UUIDs) to roles, models and GPUs; the "
        "last-resort role source before 'unknown'.",
    )
    role_label_key: str | None = Field(
        default=None,
        description="An operator's own pod label that names the role (e.g. 'example.com/phase'), checked "
        "after llm-d.ai/role and nvidia.com/dynamo-sub-component-type.",
    )
    pod_resources_socket: Path | None = Field(
        default=None,
        description="Kubelet pod-resources socket (GPU UUID -> pod), usually "
        "/var/lib/kubelet/pod-resources/kubelet.sock; unset = not in Kubernetes.",
    )
    proc_root: Path = Field(
        default=Path("/proc"),
        description="procfs of the host (run with hostPID or mount the host's /proc) to map GPU PIDs to "
        "workers.",
    )
    max_series_per_family: int = Field(
        default=2048, ge=1, description="Cardinality bound of each exporter metric family."
    )

    @field_validator("cluster", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("listen")
    @classmethod
    def _listen_has_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("ingest_url", "dcgm_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    def read_token(self) -> str | None:
        """The bearer token from ``token_file``; a clear error when the file is unreadable or empty."""
        if self.token_file is None:
            return None
        try:
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"cannot read the ingest token file {self.token_file}: {exc.strerror}") from exc
        if not token:
            raise ValueError(f"the ingest token file {self.token_file} is empty")
        return token


def parse_listen(value: str) -> tuple[str, int]:
    """``":9401"`` -> ("0.0.0.0", 9401); ``"127.0.0.1:9401"`` -> ("127.0.0.1", 9401); ``"[::1]:9401"``."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"listen address {value!r} must be HOST:PORT or :PORT")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)
