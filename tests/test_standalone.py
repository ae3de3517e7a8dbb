"""The repository stands alone: no tracked file names a folder beside the checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIBLING = "../" + "shared"  # spelled in two parts so this file does not match itself
PATH_PARTS = '/".."/' + '"shared"'  # the same folder built with pathlib


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    return [ROOT / name.decode() for name in listed if name]


def test_no_tracked_file_refers_to_a_sibling_folder() -> None:
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [
            f"{path.relative_to(ROOT)}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if SIBLING in line or PATH_PARTS in line.replace(" ", "")
        ]
    assert offenders == [], f"tracked files name {SIBLING}: {offenders}"


def test_the_data_the_tests_and_benchmarks_read_is_in_the_repository() -> None:
    for name in (
        "data/benchmarks/published.csv",
        "data/benchmarks/gpu_specs.csv",
        "data/benchmarks/models.csv",
        "data/benchmarks/mig_profiles.csv",
        "data/azure-llm-trace-2023/AzureLLMInferenceTrace_code.csv",
        "data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv",
        "tests/fixtures/metrics/dcgm-exporter_h100_standalone_digitalocean_docs_excerpt.prom",
        "tests/fixtures/metrics/vllm_v1_via_dynamo_worker_qwen3-0.6b.prom",
        "tests/fixtures/metrics/sglang_via_dynamo_worker_qwen3-0.6b.prom",
    ):
        assert (ROOT / name).is_file(), name
    assert "CC-BY 4.0" in (ROOT / "data" / "azure-llm-trace-2023" / "README.md").read_text()
