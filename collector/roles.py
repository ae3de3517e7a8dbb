"""A worker's phase role and how it was learned (``role_source``), strongest evidence first.

Order (issue 4, telemetry.md §3.5):

1. SGLang's ``engine_type`` label when it says ``prefill`` or ``decode``           -> engine
2. Kubernetes pod labels: ``llm-d.ai/role``, ``nvidia.com/dynamo-sub-component-type``
   (absent on an aggregated Dynamo worker, which is then ``mixed``), the operator's own key;
   raw or as dcgm-exporter sanitises them (``llm_d_ai_role``)                       -> pod-label
3. Dynamo component names (``nvidia.com/dynamo-component`` e.g. ``VllmPrefillWorker``,
   the ``dynamo_component`` metric label ``prefill``)                                -> component
4. The worker's command line: ``--disaggregation-mode``, ``--is-prefill-worker`` /
   ``--is-decode-worker``; an engine launched with no disaggregation flag serves both
   phases (``mixed``)                                                                -> cmdline
5. The operator's static mapping file                                               -> config
6. Weak evidence, used only when nothing above spoke: vLLM ``--kv-transfer-config`` ``kv_role``
   (NixlConnector ignores it), SGLang ``engine_type="unified"`` (old SGLang reports it whatever the
   mode), and llm-d's convention that a pod in an llm-d deployment without ``llm-d.ai/role`` is
   decode-capable                                                -> cmdline / engine / pod-label
7. otherwise ``unknown`` with role_source ``none``.

The role words and label keys are the vocabulary zero-agent mode reads too (fleet.vocabulary.roles,
fleet.labels); the order of evidence is this module's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fleet.contract import Role, RoleSource
from fleet.labels import (
    DYNAMO_COMPONENT,
    DYNAMO_COMPONENT_TYPE,
    DYNAMO_WORKER_TYPE,
    LLMD_LABEL_PREFIX,
    ROLE_POD_LABELS,
    sanitise_label,
)
from fleet.vocabulary.roles import role_from_component_names, role_from_text

__all__ = [
    "RoleEvidence",
    "engine_of_cmdline",
    "flag_value",
    "resolve_role",
    "role_from_text",
    "sanitise_label",
]


def _label(labels: Mapping[str, str], key: str) -> str | None:
    return labels.get(key) or labels.get(sanitise_label(key))


def flag_value(argv: Sequence[str], name: str) -> str | None:
    """Value of ``--name X`` or ``--name=X``; "" for a bare switch; None when absent."""
    for i, arg in enumerate(argv):
        if arg == name:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            return "" if nxt.startswith("--") else nxt
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    return None


def engine_of_cmdline(argv: Sequence[str]) -> str | None:
    """Which serving engine a command line launches: the program, or the module / script after python."""
    if not argv:
        return None
    words = [Path(argv[0]).name.lower()]
    if words[0].startswith("python"):
        rest = list(argv[1:])
        words = (
            [rest[rest.index("-m") + 1].lower()]
            if "-m" in rest[:-1]
            else [Path(a).name.lower() for a in rest[:1]]
        )
    elif words[0].startswith("vllm::"):  # vLLM's EngineCore / worker process titles
        return "vllm"
    word = words[0] if words else ""
    for prefix, engine in (
        ("dynamo.", "dynamo"),
        ("sglang", "sglang"),
        ("vllm", "vllm"),
        ("trtllm", "trtllm"),
        ("tensorrt_llm", "trtllm"),
    ):
        if word.startswith(prefix):
            return engine
    return None


@dataclass(frozen=True)
class RoleEvidence:
    engine_types: frozenset[str] = frozenset()
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    dynamo_components: frozenset[str] = frozenset()
    cmdline: tuple[str, ...] = ()
    mapped_role: Role | None = None


def _from_pod_labels(labels: Mapping[str, str], operator_key: str | None) -> Role | None:
    for key in ROLE_POD_LABELS:
        role = role_from_text(_label(labels, key))
        if role is not None:
            return role
    if operator_key:
        role = role_from_text(_label(labels, operator_key))
        if role is not None:
            return role
    if (_label(labels, DYNAMO_COMPONENT_TYPE) or "").lower() == DYNAMO_WORKER_TYPE:
        return Role.MIXED  # a Dynamo worker without a sub-component type is aggregated
    return None


def _from_components(components: frozenset[str], labels: Mapping[str, str]) -> Role | None:
    named = _label(labels, DYNAMO_COMPONENT)
    return role_from_component_names([*components, named] if named else components)


def _from_cmdline(argv: Sequence[str]) -> tuple[Role | None, Role | None]:
    """(strong, weak) role from a command line."""
    if not argv:
        return None, None
    mode = flag_value(argv, "--disaggregation-mode")
    if mode:
        return role_from_text(mode), None
    if flag_value(argv, "--is-prefill-worker") is not None:
        return Role.PREFILL, None
    if flag_value(argv, "--is-decode-worker") is not None:
        return Role.DECODE, None
    engine = engine_of_cmdline(argv)
    kv_config = flag_value(argv, "--kv-transfer-config")
    if kv_config is not None:
        try:
            kv_role = json.loads(kv_config).get("kv_role") if kv_config else None
        except (ValueError, AttributeError):
            kv_role = None
        return None, role_from_text(kv_role) if kv_role in ("kv_producer", "kv_consumer") else None
    if engine in ("vllm", "sglang"):
        return Role.MIXED, None  # no disaggregation configured: the worker serves both phases
    return None, None


def resolve_role(evidence: RoleEvidence, operator_key: str | None = None) -> tuple[Role, RoleSource]:
    for engine_type in sorted(evidence.engine_types):
        role = role_from_text(engine_type)
        if role in (Role.PREFILL, Role.DECODE):
            return role, RoleSource.ENGINE
    role = _from_pod_labels(evidence.pod_labels, operator_key)
    if role is not None:
        return role, RoleSource.POD_LABEL
    role = _from_components(evidence.dynamo_components, evidence.pod_labels)
    if role is not None:
        return role, RoleSource.COMPONENT
    strong, weak = _from_cmdline(evidence.cmdline)
    if strong is not None:
        return strong, RoleSource.CMDLINE
    if evidence.mapped_role is not None:
        return evidence.mapped_role, RoleSource.CONFIG
    if weak is not None:
        return weak, RoleSource.CMDLINE
    if any(role_from_text(t) is Role.MIXED for t in evidence.engine_types):  # "unified": weak
        return Role.MIXED, RoleSource.ENGINE
    if any(k.startswith((LLMD_LABEL_PREFIX, sanitise_label(LLMD_LABEL_PREFIX))) for k in evidence.pod_labels):
        return Role.DECODE, RoleSource.POD_LABEL  # llm-d's router treats an unlabelled pod as decode-capable
    return Role.UNKNOWN, RoleSource.NONE
