"""Copy NVIDIA AI Configurator's measured collective timings into ``data/measured/collectives.csv``.

AIC (https://github.com/ai-dynamo/aiconfigurator, Apache-2.0) ships, inside its ``aiconfigurator-core``
wheel, the latency of all-reduces and all-to-alls measured on H100 SXM and H200 SXM: each engine's custom
all-reduce kernel (TensorRT-LLM, vLLM, SGLang) and NCCL. phasefit's communication model
(``analyzer/model/collectives.py``) is checked against them by ``benchmarks/perf_model_vs_measured.py``;
nothing is fitted on them. Like ``scripts/measured_physics.py``, run it with the Python of a separate
virtual environment that has AIC (never phasefit's)::

    python3 -m venv /tmp/aicvenv
    /tmp/aicvenv/bin/pip install aiconfigurator==0.12.0 aiconfigurator-core==0.12.0
    /tmp/aicvenv/bin/python scripts/measured_collectives.py --out data/measured/collectives.csv

The output is deterministic: rows sorted, floats printed with 6 significant digits.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import importlib.metadata
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

AIC_VERSION = "0.12.0"
SKUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM"}
# The engine versions of the step-time tables (data/measured/README.md) and AIC's newest NCCL.
CUSTOM_ALLREDUCE = {"trtllm": "1.3.0rc20", "vllm": "0.24.0", "sglang": "0.5.14"}
NCCL_VERSION = "2.29.2"
NCCL_OPS = ("all_reduce", "alltoall")
NCCL_DTYPE = "half"
# implementation: the engine's kernel (``<engine>_graph`` / ``<engine>_eager`` where AIC measured it
# both inside and outside a CUDA graph) or ``nccl``.
COLUMNS = ("implementation", "version", "sku", "op", "gpus", "elements", "element_bytes", "latency_s")


def data_root() -> Path:
    try:
        core = importlib.import_module("aiconfigurator_core")  # AIC's own virtualenv, never phasefit's
    except ImportError:
        sys.exit("aiconfigurator-core is not importable: see this script's docstring for the virtualenv")
    return Path(str(core.__file__)).parent / "systems" / "data"


def custom_rows(root: Path, sku: str) -> Iterator[tuple[object, ...]]:
    pd = importlib.import_module("pandas")
    for backend, version in CUSTOM_ALLREDUCE.items():
        frame = pd.read_parquet(root / sku / "comm" / backend / version / "custom_allreduce_perf.parquet")
        for r in frame.itertuples():
            if r.allreduce_dtype != "bfloat16":
                continue
            name = getattr(r, "backend", None) or backend  # vllm_graph / vllm_eager, or the engine
            yield (name, version, SKUS[sku], "all_reduce", int(r.num_gpus), int(r.message_size), 2,
                   float(r.latency) / 1e3)  # fmt: skip


def nccl_rows(root: Path, sku: str) -> Iterator[tuple[object, ...]]:
    pd = importlib.import_module("pandas")
    frame = pd.read_parquet(root / sku / "comm" / "nccl" / NCCL_VERSION / "nccl_perf.parquet")
    for r in frame.itertuples():
        if r.op_name not in NCCL_OPS or r.nccl_dtype != NCCL_DTYPE:
            continue
        yield ("nccl", NCCL_VERSION, SKUS[sku], r.op_name, int(r.num_gpus), int(r.message_size), 2,
               float(r.latency) / 1e3)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("data/measured/collectives.csv"))
    args = parser.parse_args(argv)
    root = data_root()
    rows = sorted(row for sku in SKUS for row in (*custom_rows(root, sku), *nccl_rows(root, sku)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="") as handle:
        handle.write(
            "# source: NVIDIA AI Configurator (https://github.com/ai-dynamo/aiconfigurator)\n"
            f"# aiconfigurator_core_version: {importlib.metadata.version('aiconfigurator-core')}\n"
            "# licence: Apache-2.0 (see LICENSE-aiconfigurator)\n"
            "# files: systems/data/<sku>/comm/<engine>/<version>/custom_allreduce_perf.parquet, "
            f"systems/data/<sku>/comm/nccl/{NCCL_VERSION}/nccl_perf.parquet ({', '.join(NCCL_OPS)}, "
            f"dtype {NCCL_DTYPE})\n"
            "# elements: AIC's message_size, in elements of element_bytes each (tokens x hidden for a "
            "tensor-parallel all-reduce); latency_s: AIC's latency (ms) / 1000\n"
            "# generator: scripts/measured_collectives.py\n"
        )
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([*row[:-1], f"{row[-1]:.6g}"])
    print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
