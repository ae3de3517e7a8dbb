"""Label names that say which serving deployment (router group) a worker belongs to.

One table for the collector (pod labels) and zero-agent mode (Prometheus series labels), strongest first.
With the cluster and the served model, the deployment names a worker's pool (docs/architecture.md).
"""

from __future__ import annotations

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
# Dynamo workers also report their namespace as a label on their own metrics.
DYNAMO_NAMESPACE_METRIC_LABEL = "dynamo_namespace"
POD_TEMPLATE_HASH = "pod-template-hash"  # set by the Deployment controller on its ReplicaSets' pods
