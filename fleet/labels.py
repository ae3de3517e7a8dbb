"""Label names the serving stack sets, read alike by the collector (pod labels, engine metric labels) and by
zero-agent mode (the same labels on Prometheus series): which deployment a worker belongs to, which phase
role it serves, and the Dynamo and SGLang metric labels that hint at either.

Pod label keys are written as Kubernetes spells them (``llm-d.ai/role``); dcgm-exporter and Prometheus
relabelling carry them sanitised (``llm_d_ai_role``), kube-state-metrics as ``label_llm_d_ai_role``.
With the cluster and the served model, the deployment names a worker's pool (docs/architecture.md).
"""

from __future__ import annotations

import re

DEPLOYMENT_LABELS: tuple[str, ...] = (
    # NVIDIA Dynamo operator (deploy/operator/internal/consts/consts.go in ai-dynamo/dynamo): the Dynamo
    # namespace is the frontend's discovery scope, the graph deployment its DynamoGraphDeployment.
    "nvidia.com/dynamo-namespace",
    "nvidia.com/dynamo-graph-deployment-name",
    # llm-d / Gateway API Inference Extension: an InferencePool selects its pods by labels of the operator's
    # choosing; llm-d deployments label them with the pool's name (both spellings are seen).
    "llm-d.ai/inferencepool",
    "llm-d.ai/inferencePool",
    # KServe: every InferenceService pod carries serving.kserve.io/inferenceservice=<isvc name>
    # (kserve/kserve pkg/constants: InferenceServicePodLabelKey).
    "serving.kserve.io/inferenceservice",
)
POD_TEMPLATE_HASH = "pod-template-hash"  # set by the Deployment controller on its ReplicaSets' pods

# Pod labels that name a worker's phase role, strongest first (values: fleet.vocabulary.roles).
LLMD_ROLE = "llm-d.ai/role"
DYNAMO_SUB_COMPONENT = "nvidia.com/dynamo-sub-component-type"  # prefill / decode; absent when aggregated
ROLE_POD_LABELS: tuple[str, ...] = (LLMD_ROLE, DYNAMO_SUB_COMPONENT)
DYNAMO_COMPONENT_TYPE = "nvidia.com/dynamo-component-type"  # "worker" on every Dynamo worker pod
DYNAMO_WORKER_TYPE = "worker"
DYNAMO_COMPONENT = "nvidia.com/dynamo-component"  # the component's name, e.g. VllmPrefillWorker
# Every llm-d label starts so; llm-d's router treats a pod of its own without llm-d.ai/role as decode-capable.
LLMD_LABEL_PREFIX = "llm-d.ai/"

# Labels on the engines' own metrics.
ENGINE_TYPE_LABEL = "engine_type"  # SGLang: prefill / decode / unified (TensorRT-LLM: a backend tag)
DYNAMO_COMPONENT_METRIC_LABEL = "dynamo_component"  # Dynamo worker metrics: the component's name
DYNAMO_NAMESPACE_METRIC_LABEL = "dynamo_namespace"  # Dynamo worker metrics: the deployment
MODEL_NAME_LABELS: tuple[str, ...] = ("model_name", "model")  # the served model: engines, then Dynamo
TP_RANK_LABEL = "tp_rank"  # SGLang reports per scheduler (tensor / pipeline parallel rank)
PP_RANK_LABEL = "pp_rank"


def sanitise_label(key: str) -> str:
    """Prometheus's (and dcgm-exporter's SanitizeLabelName) sanitising: every character outside
    [a-zA-Z0-9_] becomes ``_``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)
