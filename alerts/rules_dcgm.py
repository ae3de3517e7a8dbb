"""Zero-agent rules: plain dcgm-exporter and vLLM/SGLang series, for fleets with no phasefit component.

Which series and labels they read (see docs/runbooks and the README of alerts/):

* ``DCGM_FI_PROF_DRAM_ACTIVE``, ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` (ratios 0..1), ``DCGM_FI_DEV_GPU_UTIL``
  (percent), with dcgm-exporter's ``modelName``, ``gpu``, ``instance`` and, from its Kubernetes mapping
  (``-k``), ``namespace`` and ``pod``; MIG instances (``GPU_I_PROFILE`` set) and GPUs not allocated to a
  pod are left out: their bandwidth share or worker is not known.
* The pod's prefill/decode role as a label on those series (``cfg.dcgm_role_label``), which
  dcgm-exporter >= 4.2.3 copies from pod labels with ``--kubernetes-enable-pod-labels``.
* ``vllm:generation_tokens_total`` / ``sglang:generation_tokens_total`` with ``namespace`` and ``pod``
  target labels (Kubernetes service discovery), only to size the loss in the description.
"""

from __future__ import annotations

from alerts.config import RulesConfig
from alerts.model import AlertingRule, RuleFile, RuleGroup
from alerts.placement import PlacementSeries, placement_groups
from alerts.promql import labels, number, selector

GPU_EXCLUDES = 'GPU_I_PROFILE="", pod!=""'


def dcgm_rule_file(cfg: RulesConfig) -> RuleFile:
    recording, alerting = placement_groups(
        cfg,
        dcgm_series(cfg),
        group_prefix="phasefit-dcgm-placement",
        alert="PhasefitDcgmDecodeOnLowerBandwidthGpu",
        skus=cfg.skus,
    )
    return RuleFile(
        name="phasefit-dcgm",
        description="Placement rules over plain dcgm-exporter and vLLM/SGLang series (no phasefit needed).",
        groups=(recording, alerting, _telemetry_alerts(cfg)),
    )


def dcgm_series(cfg: RulesConfig) -> PlacementSeries:
    c = cfg.cluster_label
    role = cfg.dcgm_role_label
    pool = (c, *cfg.dcgm_pool_labels)
    worker = tuple(dict.fromkeys((*pool, "namespace", "pod", "modelName", role)))
    win = cfg.window
    gpu_sel = selector(cfg.dcgm_selector, GPU_EXCLUDES)

    def per_pod(metric: str) -> str:
        return f"avg by ({labels(worker)}) (avg_over_time({metric}{gpu_sel}[{win}]))"

    engine = selector(cfg.engine_selector)
    tokens = "\nor\n".join(
        f"sum by ({c}, namespace, pod) (rate({name}{engine}[{win}]))"
        for name in ("vllm:generation_tokens_total", "sglang:generation_tokens_total")
    )
    return PlacementSeries(
        level="namespace_pod",
        pool_level="_".join(pool),
        metric_prefix="dcgm",
        dram_record=f"namespace_pod:DCGM_FI_PROF_DRAM_ACTIVE:avg_over_time{win}",
        dram_expr=per_pod("DCGM_FI_PROF_DRAM_ACTIVE"),
        tensor_record=f"namespace_pod:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:avg_over_time{win}",
        tensor_expr=per_pod("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
        tokens_record=f"namespace_pod:engine_generation_tokens:rate{win}",
        tokens_expr=tokens,
        worker_labels=worker,
        pool_labels=pool,
        identity_labels=(c, "namespace", "pod"),
        role_label=role,
        prefill_matcher=f'{role}=~"{cfg.prefill_role_regex}"',
        decode_matcher=f'{role}=~"{cfg.decode_role_regex}"',
        gpu_model_label="modelName",
        worker_text=f"pod {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} (role {{{{ $labels.{role} }}}})",
        counterpart_text="pod {{ .Labels.namespace }}/{{ .Labels.pod }} on {{ .Labels.modelName }}",
        tokens_source="the vLLM/SGLang generation-token rate",
    )


def _telemetry_alerts(cfg: RulesConfig) -> RuleGroup:
    c = cfg.cluster_label
    on = f"on ({c}, instance, gpu)"
    dcgm = selector(cfg.dcgm_selector)
    whole_gpu = selector(cfg.dcgm_selector, 'GPU_I_PROFILE=""')
    busy = f"DCGM_FI_DEV_GPU_UTIL{whole_gpu} > {number(cfg.busy_gpu_util_percent)}"
    by = labels((c, "instance", "Hostname", "hostname", "gpu", "modelName", "namespace", "pod"))
    return RuleGroup(
        name="phasefit-dcgm-telemetry",
        rules=(
            AlertingRule(
                alert="PhasefitDcgmProfilingMetricsMissing",
                expr=f"""
                max by ({by}) (
                  (
                    {busy}
                    unless {on}
                    (DCGM_FI_PROF_DRAM_ACTIVE{dcgm} and {on} DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{dcgm})
                  )
                  or
                  (
                    {busy}
                    and {on} (DCGM_FI_PROF_DRAM_ACTIVE{dcgm} == 0)
                  )
                )
                """,
                for_=cfg.for_("30m"),
                severity="info",
                summary="A busy GPU reports no usable DCGM profiling metrics, so its placement cannot be "
                "judged.",
                description="""
                GPU {{ $labels.gpu }} ({{ $labels.modelName }}) on
                {{ $labels.Hostname }}{{ $labels.hostname }} ({{ $labels.instance }}) is
                {{ $value | humanize }}% busy but dcgm-exporter reports no usable DCGM_FI_PROF_DRAM_ACTIVE /
                DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (missing, or DRAM activity stuck at zero){{ if
                $labels.pod }} for pod {{ $labels.namespace }}/{{ $labels.pod }}{{ end }}.
                The placement rules cannot tell whether this GPU is memory- or compute-bound.
                """,
                runbook_url=cfg.runbook_url("PhasefitDcgmProfilingMetricsMissing"),
            ),
        ),
    )
