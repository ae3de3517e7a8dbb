"""What an operator may change in the rendered rules: runbook URLs, job selectors, labels, thresholds.

Mirrors the ``_config`` block of the Prometheus mixins (kubernetes-mixin ``config.libsonnet``): selectors
and thresholds are substituted when the rules are rendered, never hard-coded in PromQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from alerts.model import check_duration, check_label_name

# The runbooks shipped in docs/runbooks/ of phasefit's repository; operators who host their own copy
# render with ``phasefit alerts render --runbook-base-url`` (or PHASEFIT_ALERTS_RUNBOOK_BASE_URL).
DEFAULT_RUNBOOK_BASE_URL = "https://github.com/phasefit/phasefit/blob/main/docs/runbooks"

# A label matcher list as written inside braces: job="dcgm-exporter", namespace=~"llm-.*"
_MATCHER = r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\`]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*)?$")

SELECTOR_KEYS = ("collector", "service", "dcgm", "engine")


def check_selector(value: str, what: str) -> str:
    """Return ``value`` if it is a comma-separated list of label matchers (may be empty); else raise."""
    if not _SELECTOR.fullmatch(value):
        raise ValueError(
            f'{what}: {value!r} is not a list of label matchers such as job="dcgm-exporter" '
            "(no braces, double quotes, no backticks)"
        )
    return value.strip()


@dataclass(frozen=True)
class SkuBandwidth:
    """How the zero-agent rules learn a GPU's HBM bandwidth: from its name on the series.

    ``model_name_regex`` is matched (fully, as PromQL ``=~`` does) against dcgm-exporter's ``modelName``
    label, the NVML device name; ``sku`` is the catalog key the phasefit collector puts in its ``sku`` label.
    """

    sku: str
    model_name_regex: str
    hbm_bandwidth_bytes_per_s: float

    def __post_init__(self) -> None:
        if not self.hbm_bandwidth_bytes_per_s > 0:
            raise ValueError(f"SKU {self.sku}: HBM bandwidth must be positive")
        try:  # written for a PromQL string body: backslashes are doubled there
            re.compile(self.model_name_regex.replace("\\\\", "\\"))
        except re.error as exc:
            raise ValueError(f"SKU {self.sku}: bad modelName regex {self.model_name_regex!r}: {exc}") from exc
        if '"' in self.model_name_regex or '"' in self.sku:
            raise ValueError(f"SKU {self.sku}: names may not contain double quotes")


@dataclass(frozen=True)
class RulesConfig:
    """Everything the rule sources read. Build one with :func:`default_config` or ``replace()``.

    Selectors are matcher lists without braces (``job="phasefit-collector"``); an empty string matches
    every job. ``dcgm_role_label`` is the label carrying a pod's prefill/decode role on dcgm-exporter
    series: ``role`` when the pod label is literally ``role`` (or relabelled to it), ``llm_d_ai_role``
    for llm-d's ``llm-d.ai/role`` copied by dcgm-exporter's pod-label option,
    ``nvidia_com_dynamo_sub_component_type`` for Dynamo.
    """

    skus: tuple[SkuBandwidth, ...]
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL
    runbook_suffix: str = ".md"
    collector_selector: str = 'job="phasefit-collector"'
    service_selector: str = 'job="phasefit-service"'
    dcgm_selector: str = 'job="dcgm-exporter"'
    engine_selector: str = ""
    cluster_label: str = "cluster"
    dcgm_role_label: str = "role"
    dcgm_pool_labels: tuple[str, ...] = ("namespace",)
    prefill_role_regex: str = "prefill"
    decode_role_regex: str = "decode"
    window: str = "5m"
    lost_tokens_share: float = 0.05
    # A pool's latency target is missed when less than this share of its measured serving time met it.
    latency_target_attainment: float = 0.9
    memory_bound_dram_active: float = 0.5
    compute_bound_tensor_active: float = 0.4
    min_bandwidth_ratio: float = 1.1
    busy_gpu_util_percent: float = 50.0
    collector_stale_seconds: int = 300
    analyzer_stale_seconds: int = 1800
    for_override: str | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.skus:
            raise ValueError("at least one SKU bandwidth is needed for the placement rules")
        if len({s.sku for s in self.skus}) != len(self.skus):
            raise ValueError("SKU keys must be unique")
        if not self.runbook_base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"runbook base URL {self.runbook_base_url!r} must start with http:// or https://"
            )
        for key in SELECTOR_KEYS:
            check_selector(getattr(self, f"{key}_selector"), f"{key} selector")
        check_label_name(self.cluster_label, "cluster label")
        check_label_name(self.dcgm_role_label, "DCGM role label")
        for name in self.dcgm_pool_labels:
            check_label_name(name, "DCGM pool label")
        if self.cluster_label in self.dcgm_pool_labels:
            raise ValueError(
                "the cluster label is always part of the pool; do not list it in dcgm_pool_labels"
            )
        for what, regex in (("prefill", self.prefill_role_regex), ("decode", self.decode_role_regex)):
            if '"' in regex or "`" in regex:
                raise ValueError(f"{what} role regex may not contain quotes or backticks")
            re.compile(regex)
        check_duration(self.window, "window")
        if self.for_override is not None:
            check_duration(self.for_override, "for_override")
        if not 0 < self.lost_tokens_share < 1:
            raise ValueError(f"lost tokens share {self.lost_tokens_share} must lie strictly between 0 and 1")
        if not 0 < self.latency_target_attainment <= 1:
            raise ValueError(f"latency target attainment {self.latency_target_attainment} must lie in (0, 1]")
        for what, ratio in (
            ("memory-bound DRAM activity", self.memory_bound_dram_active),
            ("compute-bound tensor activity", self.compute_bound_tensor_active),
        ):
            if not 0 < ratio <= 1:
                raise ValueError(f"{what} threshold {ratio} must lie in (0, 1]")
        if self.min_bandwidth_ratio <= 1:
            raise ValueError("min_bandwidth_ratio must exceed 1 (the prefill GPU must be faster)")
        if not 0 < self.busy_gpu_util_percent <= 100:
            raise ValueError("busy_gpu_util_percent must lie in (0, 100]")
        if self.collector_stale_seconds <= 0 or self.analyzer_stale_seconds <= 0:
            raise ValueError("staleness limits must be positive")

    def runbook_url(self, alertname: str) -> str:
        """``<base>/<alertname lowercased><suffix>``, as kube-prometheus builds its runbook links."""
        return f"{self.runbook_base_url.rstrip('/')}/{alertname.lower()}{self.runbook_suffix}"

    def for_(self, duration: str) -> str:
        """An alert's ``for:``, unless a demo or end-to-end test shortens every one of them."""
        return self.for_override or duration

    def with_selectors(self, selectors: Mapping[str, str]) -> RulesConfig:
        """A copy with some job selectors replaced, keyed by ``collector``/``service``/``dcgm``/``engine``."""
        unknown = sorted(set(selectors) - set(SELECTOR_KEYS))
        if unknown:
            raise ValueError(f"unknown selector key(s) {unknown}: use {', '.join(SELECTOR_KEYS)}")
        return replace(
            self,
            collector_selector=selectors.get("collector", self.collector_selector),
            service_selector=selectors.get("service", self.service_selector),
            dcgm_selector=selectors.get("dcgm", self.dcgm_selector),
            engine_selector=selectors.get("engine", self.engine_selector),
        )
