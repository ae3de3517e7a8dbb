"""The analyzer's operator settings (environment prefix ``PHASEFIT_ANALYZER_``), turned into its parameters.

These are facts about the fleet the telemetry cannot tell: service objectives and engine limits that cap a
decode batch, the network between prefill and decode workers, and how nodes group into clusters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from analyzer.findings.recommend import RecommendParams
from analyzer.pipeline import AnalyzerParams
from analyzer.planning.standing import StandingWhatIf
from analyzer.sources.prometheus.labels import DEFAULT_CLUSTER_LABEL, DEFAULT_DEPLOYMENT_LABELS
from analyzer.sources.prometheus.split import (
    DEFAULT_MAX_POINTS,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_MAX_SERIES,
    DEFAULT_TIMEOUT_S,
    QueryLimits,
)
from analyzer.tunable import OverrideError, with_overrides
from fleet.targets import PlacedRule, TargetError, TargetRule, parse_rules

TARGETS_ENV = "PHASEFIT_ANALYZER_TARGETS"


class AnalyzerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PHASEFIT_ANALYZER_", extra="ignore")

    tpot_slo_s: float | None = Field(
        default=None,
        gt=0,
        description="The fleet-wide TPOT p90 objective (seconds): decode batches are sized to meet it. "
        "The least specific latency-target rule: any rule of PHASEFIT_ANALYZER_TARGETS or the catalog's "
        "targets that matches a pool replaces it there.",
    )
    targets: list[TargetRule] = Field(
        default_factory=list,
        description='Per-pool latency targets (JSON list of rules, e.g. [{"cluster": "east", "model": '
        '"llama-3.1-70b", "tpot_p90_s": 0.05, "ttft_p90_s": 1.0}]): match keys cluster, deployment, model; '
        "targets ttft_p90_s, tpot_p90_s, e2e_p90_s (seconds at p90, at least one). The most specific "
        'matching rule applies to a pool; see "Latency targets" below.',
    )
    max_decode_batch: int | None = Field(
        default=None, ge=1, description="The engines' cap on concurrent sequences (vLLM --max-num-seqs)."
    )
    kv_link_gb_s: float | None = Field(
        default=None,
        gt=0,
        description="KV-transfer bandwidth per prefill worker in GB/s (its share of the RDMA NICs): the "
        "KV-fabric check's verdict, and a bound on each disaggregated prefill worker's capacity (it hands "
        "off no more prompt tokens than its link carries); unset: the check reports the need without a "
        "verdict and capacity is not bounded.",
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
    thresholds: dict[str, float | int | dict[str, float] | None] = Field(
        default_factory=dict,
        description="Any threshold of the analysis by its path (JSON, e.g. "
        '{"findings.underutilised.below": 0.35}); the paths, defaults and meanings are listed under '
        '"Analyzer thresholds" below. Applied after the named settings above.',
    )
    report_what_if: list[StandingWhatIf] = Field(
        default_factory=list,
        description='The weekly report\'s standing what-ifs (JSON list, e.g. [{"pool": "east/llama-70b", '
        '"add": ["H200-SXM:16"]}, {"replace": ["H100-SXM:H200-SXM:8"]}]): each re-solved on the week\'s '
        "analysis and shown under the pools.",
    )
    prometheus_max_points_per_series: int = Field(
        default=DEFAULT_MAX_POINTS,
        ge=1,
        description="Zero-agent mode: the most evaluation times one query_range asks per series (Prometheus, "
        "Thanos and Mimir refuse more than 11,000; VictoriaMetrics -search.maxPointsPerTimeseries, 30,000); "
        "longer ranges are queried in chunks.",
    )
    prometheus_max_series_per_query: int = Field(
        default=DEFAULT_MAX_SERIES,
        ge=1,
        description="Zero-agent mode: a query whose answer holds more series is split by a label's values "
        "(cluster label, namespace, node, scrape target); keep it under VictoriaMetrics' "
        "-search.maxUniqueTimeseries, Mimir's -querier.max-fetched-series-per-query, Thanos's "
        "--store.limits.request-series.",
    )
    prometheus_max_samples_per_query: int = Field(
        default=DEFAULT_MAX_SAMPLES,
        ge=1,
        description="Zero-agent mode: the most points (series x evaluation times) one answer may hold; "
        "chunks are shortened to fit. Keep it well under Prometheus's --query.max-samples and Mimir's "
        "-querier.max-samples (50,000,000).",
    )
    prometheus_max_query_length_s: float | None = Field(
        default=None,
        gt=0,
        description="Zero-agent mode: the longest time one query may span, its rate/average window "
        "included (Mimir -querier.max-partial-query-length / -query-frontend.max-total-query-length, "
        "Thanos --query-range.max-query-length); unset: no limit.",
    )
    prometheus_timeout_s: float = Field(
        default=DEFAULT_TIMEOUT_S,
        gt=0,
        description="Zero-agent mode: seconds to wait for one answer of the Prometheus API.",
    )

    @field_validator("thresholds")
    @classmethod
    def _known_thresholds(
        cls, value: dict[str, float | int | dict[str, float] | None]
    ) -> dict[str, float | int | dict[str, float] | None]:
        try:
            with_overrides(AnalyzerParams(), value)
        except OverrideError as error:
            raise ValueError(str(error)) from error
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _valid_targets(cls, value: Any) -> list[TargetRule]:
        try:
            return [placed.rule for placed in parse_rules(value, "settings", TARGETS_ENV)]
        except TargetError as error:
            raise ValueError(str(error)) from error

    def target_rules(self) -> tuple[PlacedRule, ...]:
        """The settings' latency-target rules, each named by its place in PHASEFIT_ANALYZER_TARGETS."""
        return tuple(
            PlacedRule(rule, "settings", f"{TARGETS_ENV}[{i}]") for i, rule in enumerate(self.targets)
        )

    def query_limits(self) -> QueryLimits:
        """What one zero-agent query may ask of the Prometheus API (analyzer.sources.prometheus.split)."""
        return QueryLimits(
            max_points_per_series=self.prometheus_max_points_per_series,
            max_series_per_query=self.prometheus_max_series_per_query,
            max_samples_per_query=self.prometheus_max_samples_per_query,
            max_query_length_s=self.prometheus_max_query_length_s,
            timeout_s=self.prometheus_timeout_s,
        )

    def params(self) -> AnalyzerParams:
        """The parameter tree: defaults, the named settings, then ``thresholds`` by path."""
        base = AnalyzerParams()
        capacity = replace(
            base.pool.capacity, tpot_slo_s=self.tpot_slo_s, max_decode_batch=self.max_decode_batch
        )
        recommend = RecommendParams(restart_s=self.restart_s, cold_start_s=self.cold_start_s)
        link = self.kv_link_gb_s * 1e9 if self.kv_link_gb_s is not None else None
        kv_fabric = replace(base.findings.kv_fabric, link_bytes_per_s=link)
        named = replace(
            base,
            pool=replace(base.pool, capacity=capacity, tolerance=self.tolerance),
            findings=replace(base.findings, recommend=recommend, kv_fabric=kv_fabric),
            clusters=self.clusters or None,
            targets=self.target_rules(),
            tpot_slo_where=(
                "threshold pool.capacity.tpot_slo_s"
                if "pool.capacity.tpot_slo_s" in self.thresholds
                else "PHASEFIT_ANALYZER_TPOT_SLO_S"
            ),
        )
        return with_overrides(named, self.thresholds)
