"""The analyzer's operator settings (environment prefix ``PHASEFIT_ANALYZER_``), turned into its parameters.

These are facts about the fleet the telemetry cannot tell: service objectives and engine limits that cap a
decode batch, the network between prefill and decode workers, and how nodes group into clusters.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from analyzer.pipeline import AnalyzerParams
from analyzer.prometheus_labels import DEFAULT_CLUSTER_LABEL, DEFAULT_DEPLOYMENT_LABELS
from analyzer.recommend import RecommendParams


class AnalyzerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PHASEFIT_ANALYZER_", extra="ignore")

    tpot_slo_s: float | None = Field(
        default=None, gt=0, description="TPOT objective (seconds): decode batches are sized to meet it."
    )
    max_decode_batch: int | None = Field(
        default=None, ge=1, description="The engines' cap on concurrent sequences (vLLM --max-num-seqs)."
    )
    kv_link_gb_s: float | None = Field(
        default=None,
        gt=0,
        description="KV-transfer bandwidth per prefill worker in GB/s (its share of the RDMA NICs); "
        "unset: the KV-fabric check reports the need without a verdict.",
    )
    tolerance: float = Field(
        default=0.0,
        ge=0,
        le=0.5,
        description="A materiality floor: a placement with more role changes must also sustain this much "
        "more (a share) to be recommended, on top of beating the current one in 75% of the capacity draws.",
    )
    restart_s: float = Field(default=300.0, ge=0, description="Seconds a role swap in place takes.")
    cold_start_s: float = Field(default=900.0, ge=0, description="Seconds a move to other GPUs takes.")
    clusters: dict[str, str] = Field(
        default_factory=dict,
        description='Node -> cluster (JSON, e.g. {"gpu-a-01": "east"}), over the cluster each collector '
        "reports (PHASEFIT_COLLECTOR_CLUSTER); a node with neither is in the one default cluster.",
    )
    cluster_label: str = Field(
        default=DEFAULT_CLUSTER_LABEL,
        min_length=1,
        description="Zero-agent mode (--prometheus): the series label naming the cluster (else the "
        "Prometheus server's external label of that name).",
    )
    deployment_labels: list[str] = Field(
        default=list(DEFAULT_DEPLOYMENT_LABELS),
        description="Zero-agent mode: the pod labels naming a worker's deployment, strongest first (JSON "
        "list; each also matched sanitised and as kube-state-metrics' label_<name>); else "
        "<namespace>/<owner_name> where the series carry them.",
    )

    def params(self) -> AnalyzerParams:
        base = AnalyzerParams()
        capacity = replace(
            base.pool.capacity, tpot_slo_s=self.tpot_slo_s, max_decode_batch=self.max_decode_batch
        )
        recommend = RecommendParams(
            restart_s=self.restart_s,
            cold_start_s=self.cold_start_s,
            kv_link_bytes_per_s=self.kv_link_gb_s * 1e9 if self.kv_link_gb_s is not None else None,
        )
        return replace(
            base,
            pool=replace(base.pool, capacity=capacity, tolerance=self.tolerance),
            findings=replace(base.findings, recommend=recommend),
            clusters=self.clusters or None,
        )
