"""Every label zero-agent mode needs and does not find is a warning that names the label, says what is unknown
without it and points to docs/zero-agent.md; the warnings reach ``phasefit analyze --json``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from analyzer.pipeline import analyze
from analyzer.sources.prometheus.fleet import PrometheusFleet
from analyzer.sources.prometheus.inventory import analysis_input
from analyzer.sources.prometheus.notes import DOC
from analyzer.sources.prometheus.source import map_fleet
from fleet.catalog import load_catalog
from phasefit.cli.analyze import analysis_payload
from tests.analyzer.sources.prometheus.test_pools import relabel
from tests.analyzer.sources.prometheus.test_source import GRID, Answers, answers_to_results, two_node_answers

ROOT = Path(__file__).resolve().parents[4]


def read(answers: Answers, **options: object) -> PrometheusFleet:
    return map_fleet(answers_to_results(answers), GRID, gpu_catalog=load_catalog().gpus, **options)  # type: ignore[arg-type]


def without_pod_labels(answers: Answers) -> Answers:
    """The engine targets scraped without the Kubernetes relabelling: only job and instance."""
    return {
        name: [
            (
                {
                    k: v
                    for k, v in labels.items()
                    if not (name.startswith(("vllm", "sglang")) and k in ("pod", "namespace"))
                },
                pts,
            )
            for labels, pts in series
        ]
        for name, series in answers.items()
    }


def only_gpus(answers: Answers) -> Answers:
    """The engines not scraped at all, plus one engine target so there is a worker."""
    kept = {name: series for name, series in answers.items() if name.startswith("DCGM")}
    kept["sglang:num_running_reqs"] = answers["sglang:num_running_reqs"]
    return kept


def note(fleet: PrometheusFleet, start: str) -> str:
    found = [n for n in fleet.notes if n.startswith(start)]
    assert len(found) == 1, fleet.notes
    return found[0]


CASES: list[tuple[str, Callable[[Answers], Answers], str, tuple[str, ...]]] = [
    ("engine targets without pod labels", without_pod_labels, "2 engine target(s) carry no 'namespace'/'pod'",
     ("__meta_kubernetes_pod_name", "'pod'")),
    ("a pod whose engine is not scraped", only_gpus, "1 pod(s) hold GPUs but no vLLM, SGLang or TensorRT-LLM",
     ("llm/llama-decode-0",)),
    ("no cluster label", lambda a: a, "no 'cluster' label", ("map nodes to clusters",)),
    ("no deployment label", lambda a: a, "2 worker(s) without a deployment label",
     ("'nvidia.com/dynamo-namespace'", "owner_name")),
    ("GPUs without a pod", lambda a: a, "1 GPU(s) carry no pod label", ("honor_labels", "exported_pod")),
]  # fmt: skip


@pytest.mark.parametrize(("change", "start", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_missing_label_is_a_warning_that_says_what_to_add(
    change: Callable[[Answers], Answers], start: str, says: tuple[str, ...]
) -> None:
    fleet = read(change(two_node_answers()))
    text = note(fleet, start)
    assert all(s in text for s in says) and text.endswith(DOC), text


def test_a_role_label_warning_names_the_labels_it_tried() -> None:
    answers: Answers = {
        name: [({k: v for k, v in labels.items() if k != "engine_type"}, pts) for labels, pts in series]
        for name, series in two_node_answers().items()
    }
    text = note(read(answers, role_label="phase"), "1 worker(s) without a role label")
    assert (
        "llm/llama-prefill-0" in text
        and "'phase', 'role', 'llm-d.ai/role'" in text
        and "--role-label" in text
    )


def test_labels_that_are_there_raise_no_warning() -> None:
    labelled = relabel(
        two_node_answers(),
        {
            pod: {"cluster": "east", "llm_d_ai_inferencepool": "qwen", "llm_d_ai_role": role}
            for pod, role in (("llama-decode-0", "decode"), ("llama-prefill-0", "prefill"))
        },
    )
    notes = read(labelled).notes
    assert not any(DOC in n and not n.startswith("1 GPU(s) carry no pod label") for n in notes), notes


def test_the_warnings_reach_the_json_payload() -> None:
    fleet = read(only_gpus(two_node_answers()))
    result = analyze(analysis_input(fleet), load_catalog(), extra_warnings=list(fleet.notes))
    warnings = analysis_payload(result)["warnings"]
    assert len(fleet.notes) >= 4 and all(n in warnings for n in fleet.notes)


def test_the_doc_states_every_requirement_the_warnings_name() -> None:
    doc = (ROOT / DOC).read_text(encoding="utf-8")
    for label in ("namespace", "pod", "cluster", "llm-d.ai/role", "nvidia.com/dynamo-sub-component-type",
                  "engine_type", "nvidia.com/dynamo-namespace", "llm-d.ai/inferencepool",
                  "serving.kserve.io/inferenceservice", "owner_name", "exported_pod", "--role-label",
                  "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "honor_labels"):  # fmt: skip
        assert f"`{label}" in doc, label
