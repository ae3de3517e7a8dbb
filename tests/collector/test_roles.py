"""Role resolution: the documented order, each source, weak evidence last."""

from __future__ import annotations

import pytest

from collector.roles import RoleEvidence, engine_of_cmdline, resolve_role, role_from_text, sanitise_label
from fleet.contract import Role, RoleSource

VLLM_NIXL_PRODUCER = (
    "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--port", "8100",
    "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
)  # fmt: skip


def test_sglang_engine_type_wins_over_everything() -> None:
    evidence = RoleEvidence(
        engine_types=frozenset({"decode"}),
        pod_labels={"llm-d.ai/role": "prefill"},
        cmdline=("python", "-m", "sglang.launch_server", "--disaggregation-mode", "prefill"),
    )
    assert resolve_role(evidence) == (Role.DECODE, RoleSource.ENGINE)


def test_pod_labels_raw_and_sanitised() -> None:
    assert resolve_role(RoleEvidence(pod_labels={"llm-d.ai/role": "prefill"})) == (
        Role.PREFILL,
        RoleSource.POD_LABEL,
    )
    assert resolve_role(RoleEvidence(pod_labels={"llm_d_ai_role": "decode"})) == (
        Role.DECODE,
        RoleSource.POD_LABEL,
    )
    both = RoleEvidence(pod_labels={"llm-d.ai/role": "both"})
    assert resolve_role(both) == (Role.MIXED, RoleSource.POD_LABEL)
    dynamo = RoleEvidence(pod_labels={"nvidia_com_dynamo_sub_component_type": "prefill"})
    assert resolve_role(dynamo) == (Role.PREFILL, RoleSource.POD_LABEL)


def test_dynamo_worker_without_sub_component_is_aggregated() -> None:
    evidence = RoleEvidence(pod_labels={"nvidia.com/dynamo-component-type": "worker"})
    assert resolve_role(evidence) == (Role.MIXED, RoleSource.POD_LABEL)


def test_operator_key() -> None:
    evidence = RoleEvidence(pod_labels={"example.com/phase": "decode"})
    assert resolve_role(evidence) == (Role.UNKNOWN, RoleSource.NONE)
    assert resolve_role(evidence, "example.com/phase") == (Role.DECODE, RoleSource.POD_LABEL)
    sanitised = RoleEvidence(pod_labels={"example_com_phase": "prefill"})
    assert resolve_role(sanitised, "example.com/phase") == (Role.PREFILL, RoleSource.POD_LABEL)


def test_dynamo_component_names() -> None:
    assert resolve_role(RoleEvidence(dynamo_components=frozenset({"prefill"}))) == (
        Role.PREFILL,
        RoleSource.COMPONENT,
    )
    named = RoleEvidence(pod_labels={"nvidia.com/dynamo-component": "VllmDecodeWorker"})
    assert resolve_role(named) == (Role.DECODE, RoleSource.COMPONENT)
    # "backend" serves aggregated and decode workers alike: not evidence
    assert resolve_role(RoleEvidence(dynamo_components=frozenset({"backend"}))) == (
        Role.UNKNOWN,
        RoleSource.NONE,
    )


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (("python", "-m", "sglang.launch_server", "--disaggregation-mode", "prefill"), Role.PREFILL),
        (("python3", "-m", "dynamo.vllm", "--disaggregation-mode=decode"), Role.DECODE),
        (("python", "-m", "dynamo.vllm", "--is-prefill-worker"), Role.PREFILL),
        (("python", "-m", "dynamo.sglang", "--disaggregation-mode", "agg"), Role.MIXED),
        (("vllm", "serve", "m", "--port", "8000"), Role.MIXED),  # no KV transfer: serves both phases
        (("python3", "-m", "sglang.launch_server", "--model-path", "m"), Role.MIXED),
    ],
)
def test_command_line(argv: tuple[str, ...], role: Role) -> None:
    assert resolve_role(RoleEvidence(cmdline=argv)) == (role, RoleSource.CMDLINE)


def test_static_mapping_comes_before_weak_evidence() -> None:
    weak = RoleEvidence(cmdline=VLLM_NIXL_PRODUCER)
    assert resolve_role(weak) == (Role.PREFILL, RoleSource.CMDLINE)  # kv_role alone: weak but used
    mapped = RoleEvidence(cmdline=VLLM_NIXL_PRODUCER, mapped_role=Role.DECODE)
    assert resolve_role(mapped) == (Role.DECODE, RoleSource.CONFIG)
    kv_both = RoleEvidence(cmdline=(*VLLM_NIXL_PRODUCER[:-1], '{"kv_role":"kv_both"}'))
    assert resolve_role(kv_both) == (Role.UNKNOWN, RoleSource.NONE)


def test_strong_command_line_beats_the_mapping_file() -> None:
    evidence = RoleEvidence(
        cmdline=("python", "-m", "sglang.launch_server", "--disaggregation-mode", "decode"),
        mapped_role=Role.PREFILL,
    )
    assert resolve_role(evidence) == (Role.DECODE, RoleSource.CMDLINE)


def test_unified_engine_type_is_weak() -> None:
    unified = RoleEvidence(engine_types=frozenset({"unified"}))
    assert resolve_role(unified) == (Role.MIXED, RoleSource.ENGINE)
    with_mapping = RoleEvidence(engine_types=frozenset({"unified"}), mapped_role=Role.PREFILL)
    assert resolve_role(with_mapping) == (Role.PREFILL, RoleSource.CONFIG)


def test_llm_d_pod_without_role_label_is_decode_capable() -> None:
    evidence = RoleEvidence(pod_labels={"llm-d.ai/inferenceServing": "true"})
    assert resolve_role(evidence) == (Role.DECODE, RoleSource.POD_LABEL)
    assert resolve_role(RoleEvidence(pod_labels={"app": "vllm"})) == (Role.UNKNOWN, RoleSource.NONE)


def test_helpers() -> None:
    assert sanitise_label("llm-d.ai/role") == "llm_d_ai_role"
    assert role_from_text("Prefill-Decode") is Role.MIXED and role_from_text("gibberish") is None
    assert engine_of_cmdline(("bash", "-c", "vllm serve m")) is None
    assert engine_of_cmdline(("/usr/bin/python3", "/usr/local/bin/vllm", "serve")) == "vllm"
    assert engine_of_cmdline(("trtllm-serve", "m")) == "trtllm"
