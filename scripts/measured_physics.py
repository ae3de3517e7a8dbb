"""Generate the step-time tables under ``data/measured/`` from NVIDIA AI Configurator (AIC).

AIC (https://github.com/ai-dynamo/aiconfigurator, Apache-2.0) predicts LLM serving latency from a
database of kernel timings measured on real GPUs, shipped inside its ``aiconfigurator-core`` wheel.
This script asks it, for each model x backend x SKU x (TP, EP), for

* the decode step time: one generation step of a batch of B sequences whose KV caches hold C tokens
  (AIC ``static_gen`` with ``isl=C, osl=2``: the single decode step after the prompt);
* the prefill time: one context (prefill) pass over a batch of B prompts of S tokens
  (AIC ``static_ctx`` with ``isl=S, osl=1``);
* AIC's per-GPU memory estimate (GiB) for that point; points AIC reports as out of memory are omitted.

and writes one CSV per backend x model with ``# key: value`` provenance lines. AIC is NOT a dependency
of phasefit: install it into a separate virtual environment and run this script with that Python,
from the repository root::

    python3 -m venv /tmp/aicvenv
    /tmp/aicvenv/bin/pip install aiconfigurator==0.12.0 aiconfigurator-core==0.12.0
    /tmp/aicvenv/bin/python scripts/measured_physics.py --out data/measured

Options choose a subset (``--models llama-3.1-70b --backends trtllm --skus h200_sxm``); only the
tables of the chosen models and backends are rewritten. The output is deterministic: no timestamps,
rows sorted, floats printed with 6 significant digits. Progress and timings go to stderr.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import importlib.metadata
import logging
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

AIC_VERSION = "0.12.0"
INSTALL_HINT = (
    "aiconfigurator is not importable from this Python. Install it into a separate virtualenv "
    "(never into phasefit's):\n"
    "  python3 -m venv /tmp/aicvenv\n"
    f"  /tmp/aicvenv/bin/pip install aiconfigurator=={AIC_VERSION} aiconfigurator-core=={AIC_VERSION}\n"
    "and run:  /tmp/aicvenv/bin/python scripts/measured_physics.py --out data/measured"
)
DATABASE_MODE = "SILICON"  # measured kernel data only: no speed-of-light or empirical fill-in
SKUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM"}
BACKENDS = ("trtllm", "vllm", "sglang")
TPS = (1, 2, 4, 8)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384)
PREFILL_BATCHES = (1, 2, 4, 8)
PREFILL_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
COLUMNS = ("sku", "tp", "ep", "phase", "batch", "tokens", "step_s", "mem_gib")


@dataclass(frozen=True)
class ModelSpec:
    slug: str  # phasefit's catalog key (fleet/data/models.yaml), the table's file name
    name: str  # AIC's (Hugging Face) model name
    moe: bool
    shipped_config: str | None = None  # for models outside AIC's default list: a file in model_configs/


MODELS = (
    ModelSpec("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", moe=False),
    ModelSpec("llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", moe=False),
    ModelSpec("llama-3.1-405b", "meta-llama/Meta-Llama-3.1-405B", moe=False),
    ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", moe=True),
    ModelSpec(
        "mixtral-8x7b",
        "mistralai/Mixtral-8x7B-v0.1",
        moe=True,
        shipped_config="mistralai--Mixtral-8x7B-v0.1_config.json",
    ),
)


@dataclass(frozen=True)
class Quant:
    gemm: str
    kv: str
    moe: str | None = None

    def describe(self) -> str:
        moe = f", moe {self.moe}" if self.moe else ""
        return f"gemm {self.gemm}{moe}, kv {self.kv}, fmha bfloat16 (AIC default)"

    def cli_flags(self) -> str:
        moe = f" --moe-quant-mode {self.moe}" if self.moe else ""
        return f"--gemm-quant-mode {self.gemm}{moe} --kvcache-quant-mode {self.kv}"


# Preference order; the first one AIC can evaluate for both phases on every SKU is used for the table.
# MoE models prefer block-wise FP8 (the format of Qwen's own FP8 checkpoint; SGLang's MoE data has
# no per-tensor FP8). SGLang 0.5.14's context-attention data has no FP8 KV cache, hence the kv fallbacks.
QUANT_CANDIDATES = {
    False: (Quant("fp8", "fp8"), Quant("fp8", "bfloat16"), Quant("bfloat16", "bfloat16")),
    True: (
        Quant("fp8_block", "fp8", "fp8_block"),
        Quant("fp8_block", "bfloat16", "fp8_block"),
        Quant("fp8", "fp8", "fp8"),
        Quant("fp8", "bfloat16", "fp8"),
        Quant("bfloat16", "bfloat16", "bfloat16"),
    ),
}


@dataclass(frozen=True)
class Parallel:
    tp: int
    ep: int

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep


@dataclass(frozen=True)
class Phase:
    name: str
    mode: str
    osl: int
    batches: tuple[int, ...]
    tokens: tuple[int, ...]

    def points(self) -> Iterator[tuple[int, int]]:
        for batch in self.batches:
            for tokens in self.tokens:
                yield batch, tokens


PHASES = (
    Phase("decode", "static_gen", 2, DECODE_BATCHES, DECODE_CONTEXTS),
    Phase("prefill", "static_ctx", 1, PREFILL_BATCHES, PREFILL_LENGTHS),
)

# Tables not written, whatever the selection. Mixtral is outside AIC's validated model list, and its vLLM
# tables fail the sanity checks of tests/fleetsim/test_measured_tables.py.
MIXTRAL_VLLM = (
    "AIC's vLLM 0.24.0 MoE data for Mixtral's expert shape has H200 up to 13% slower than H100 "
    "(TP 8 decode) and prefill getting faster with longer prompts (TP 8, 128 -> 256 tokens)"
)
EXCLUDED = {("vllm", "mixtral-8x7b"): MIXTRAL_VLLM}


@dataclass
class Table:
    """What one CSV (backend x model) accumulates."""

    rows: list[tuple[str, int, int, str, int, int, float, float | None]] = field(default_factory=list)
    omitted_oom: int = 0
    omitted_unsupported: int = 0
    skipped: list[str] = field(default_factory=list)


class Aic:
    """The few AIC entry points used here, imported lazily so that phasefit never needs AIC."""

    def __init__(self) -> None:
        try:
            self.version = importlib.metadata.version("aiconfigurator")
            self.core_version = importlib.metadata.version("aiconfigurator-core")
            self.config = importlib.import_module("aiconfigurator.sdk.config")
            self.builders = importlib.import_module("aiconfigurator.sdk.config_builders")
            self.models = importlib.import_module("aiconfigurator.sdk.models")
            self.moe_comm = importlib.import_module("aiconfigurator.sdk.moe_comm_resolver")
            self.perf_db = importlib.import_module("aiconfigurator.sdk.perf_database")
            self.backends = importlib.import_module("aiconfigurator.sdk.backends.factory")
            self.session = importlib.import_module("aiconfigurator.sdk.inference_session")
            self.core: ModuleType = importlib.import_module("aiconfigurator_core")
        except (ModuleNotFoundError, importlib.metadata.PackageNotFoundError) as exc:
            raise SystemExit(f"{exc}\n\n{INSTALL_HINT}") from exc
        if self.version != AIC_VERSION:
            print(
                f"warning: aiconfigurator {self.version} != {AIC_VERSION} (tables were made with it)",
                file=sys.stderr,
            )
        for name in ("aiconfigurator", "aiconfigurator_core"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        warnings.filterwarnings("ignore")

    def backend_version(self, system: str, backend: str) -> str | None:
        return self.perf_db.get_latest_database_version(system=system, backend=backend)  # type: ignore[no-any-return]

    def database(self, system: str, backend: str, version: str) -> Any:
        return self.perf_db.get_database_view(system, backend, version, database_mode=DATABASE_MODE)

    def shipped_config_dir(self, spec: ModelSpec, workdir: Path) -> str:
        """AIC loads models outside its default list from a local folder holding config.json."""
        if spec.shipped_config is None:
            return spec.name
        source = Path(self.core.__file__ or "").parent / "model_configs" / spec.shipped_config
        folder = workdir / spec.slug
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_bytes(source.read_bytes())
        return str(folder)


def model_config(aic: Aic, par: Parallel, quant: Quant, moe: bool) -> Any:
    moe_tp, moe_ep = (par.moe_tp, par.ep) if moe else (None, None)
    return aic.builders.build_model_config(
        par.tp, 1, 1, moe_tp, moe_ep, quant.gemm, quant.kv, None, quant.moe, None
    )


def build_session(
    aic: Aic, model_path: str, moe: bool, db: Any, backend: str, par: Parallel, quant: Quant, mode: str
) -> Any:
    """The model/session set-up of ``aiconfigurator cli estimate --estimate-mode static_*``."""
    config = model_config(aic, par, quant, moe)
    if moe:
        phases = ("context",) if mode == "static_ctx" else ("context", "generation")
        aic.moe_comm.resolve_model_config_moe_comm(
            config,
            model_path=model_path,
            backend_name=backend,
            database=db,
            required_phases=phases,
            fmha_quant_mode_explicit=False,
            kvcache_quant_mode_explicit=True,
        )
    if config.moe_comm_backend is None:
        aic.models.resolve_context_fmha_by_data(
            config, model_path, db, backend, is_context_role=mode != "static_gen"
        )
    aic.models.resolve_dsv4_moe_arch(config, model_path, system_name=db.system, backend_name=backend)
    aic.models.resolve_nvfp4_for_system(config, db.system, model_path, backend_name=backend)
    model = aic.models.get_model(model_path, config, backend)
    return aic.session.InferenceSession(model, db, aic.backends.get_backend(backend))


def run_point(aic: Aic, session: Any, phase: Phase, batch: int, tokens: int) -> Any:
    runtime = aic.config.RuntimeConfig(batch_size=batch, isl=tokens, osl=phase.osl, prefix=0)
    return session.run_static(runtime_config=runtime, mode=phase.mode)


def step_seconds(summary: Any, phase: Phase) -> float:
    result = summary.get_result_dict()
    key = "generation_latency" if phase.name == "decode" else "context_latency"
    return float(result[key]) / 1000.0


def clean_reason(exc: BaseException) -> str:
    """One deterministic line: no absolute paths (they depend on where the venv lives)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"\s+at\s+/\S+", "", text)
    text = re.sub(r"(?:/[\w.+-]+){2,}/?", "<path>", text)
    text = text.replace(";", ",")
    return f"{type(exc).__name__}: {text}"[:200]


@dataclass(frozen=True)
class Target:
    """One (backend, version, SKU, model, parallelism, quantisation) to tabulate."""

    backend: str
    version: str
    system: str
    spec: ModelSpec
    model_path: str
    par: Parallel
    quant: Quant


def phase_session(aic: Aic, target: Target, phase: Phase) -> tuple[Any, Any]:
    db = aic.database(target.system, target.backend, target.version)
    session = build_session(
        aic, target.model_path, target.spec.moe, db, target.backend, target.par, target.quant, phase.mode
    )
    return db, session


def measure_phase(aic: Aic, target: Target, phase: Phase, table: Table) -> None:
    """Add one phase's grid for one target to the table; records a skip when no point survives."""
    sku = SKUS[target.system]
    where = f"{sku} tp={target.par.tp} ep={target.par.ep} {phase.name}"
    total = len(phase.batches) * len(phase.tokens)
    try:
        db, session = phase_session(aic, target, phase)
    except Exception as exc:
        table.omitted_unsupported += total
        table.skipped.append(f"{where}: unsupported by AIC ({clean_reason(exc)})")
        return
    kept, weights, reason = 0, 0.0, ""
    for batch, tokens in phase.points():
        try:
            summary = run_point(aic, session, phase, batch, tokens)
            step = step_seconds(summary, phase)
        except Exception as exc:
            table.omitted_unsupported += 1
            reason = reason or clean_reason(exc)
            continue
        memory = summary.get_memory()
        if summary.check_oom():
            table.omitted_oom += 1
            weights = float(memory["weights"])
            continue
        kept += 1
        table.rows.append(
            (sku, target.par.tp, target.par.ep, phase.name, batch, tokens, step, float(memory["total"]))
        )
    if kept == 0:
        capacity = db.system_spec["gpu"]["mem_capacity"] / (1 << 30)
        oom = f"out of memory at every grid point (weights {weights:.1f} GiB/GPU, {capacity:.0f} GiB)"
        table.skipped.append(f"{where}: {reason or oom}")


def parallel_configs(spec: ModelSpec) -> list[Parallel]:
    if not spec.moe:
        return [Parallel(tp, 1) for tp in TPS]
    configs = [Parallel(tp, tp) for tp in TPS] + [Parallel(tp, 1) for tp in TPS if tp > 1]
    return sorted(configs, key=lambda p: (p.tp, p.ep))


def quant_works(aic: Aic, target: Target) -> str | None:
    """None when AIC evaluates a small point of both phases with this quantisation, else why not."""
    for phase in PHASES:
        try:
            _, session = phase_session(aic, target, phase)
            step_seconds(run_point(aic, session, phase, 1, 512), phase)
        except Exception as exc:
            return f"{phase.name}: {clean_reason(exc)}"
    return None


def choose_quant(
    aic: Aic, backend: str, versions: dict[str, str], spec: ModelSpec, model_path: str
) -> tuple[Quant, list[str]]:
    """The first candidate that works at TP 8 (EP 8) on every SKU; the refusals are recorded."""
    refusals: list[str] = []
    par = Parallel(8, 8 if spec.moe else 1)
    for quant in QUANT_CANDIDATES[spec.moe]:
        problems = [
            f"{SKUS[system]}: {why}"
            for system, version in versions.items()
            if (why := quant_works(aic, Target(backend, version, system, spec, model_path, par, quant)))
        ]
        if not problems:
            return quant, refusals
        refusals.append(f"{quant.describe()} rejected ({problems[0]})")
    raise RuntimeError(f"no quantisation works for {spec.name} on {backend}: {refusals}")


def cli_commands(spec: ModelSpec, backend: str, version: str, quant: Quant) -> list[str]:
    moe = " --moe-tp-size {tp/ep} --moe-ep-size {ep}" if spec.moe else ""
    path = spec.name if spec.shipped_config is None else f"<folder with {spec.shipped_config} as config.json>"
    head = (
        f"aiconfigurator cli estimate --model-path {path} --system {{h100_sxm|h200_sxm}} "
        f"--backend {backend} --backend-version {version} --database-mode {DATABASE_MODE} "
    )
    tail = f" --tp-size {{tp}}{moe} --batch-size {{batch}} --isl {{tokens}} {quant.cli_flags()}"
    return [
        f"{head}--estimate-mode static_gen{tail} --osl 2  (decode: step_s = 'Generation lat.'/1000)",
        f"{head}--estimate-mode static_ctx{tail} --osl 1  (prefill: step_s = 'TTFT'/1000)",
    ]


def provenance(
    aic: Aic,
    backend: str,
    version: str,
    spec: ModelSpec,
    quant: Quant,
    notes: list[str],
    table: Table,
    generator: str,
) -> list[tuple[str, str]]:
    lines = [
        ("source", "NVIDIA AI Configurator (https://github.com/ai-dynamo/aiconfigurator)"),
        ("aiconfigurator_version", aic.version),
        ("aiconfigurator_core_version", aic.core_version),
        ("licence", "Apache-2.0 (see LICENSE-aiconfigurator)"),
        ("backend", backend),
        ("backend_version", version),  # AIC's perf-database version, the same for every system
        ("database_mode", f"{DATABASE_MODE} (measured kernel tables, no speed-of-light fill-in)"),
        ("model", spec.name),
        ("catalog_model", spec.slug),
        ("quantization", quant.describe()),
        ("systems", ", ".join(SKUS)),
    ]
    if spec.shipped_config:
        lines.append(
            (
                "model_config",
                f"not in AIC's default model list, loaded from its shipped "
                f"aiconfigurator_core/model_configs/{spec.shipped_config}",
            )
        )
    lines += [("quantization_note", note) for note in notes]
    lines += [("command", cmd) for cmd in cli_commands(spec, backend, version, quant)]
    lines += [
        ("generator", generator),
        ("decode", "step_s = one generation step of `batch` sequences with `tokens` of context each"),
        ("prefill", "step_s = one context pass over `batch` prompts of `tokens` tokens each"),
        ("mem_gib", "AIC per-GPU memory estimate (weights+KV+activations+NCCL+other), GiB"),
        ("omitted", str(table.omitted_oom + table.omitted_unsupported)),
        ("omitted_oom", f"{table.omitted_oom} (AIC check_oom: memory >= GPU capacity)"),
        ("omitted_unsupported", str(table.omitted_unsupported)),
    ]
    return lines + [("skipped", skip) for skip in table.skipped]


def format_row(row: tuple[str, int, int, str, int, int, float, float | None]) -> list[str]:
    sku, tp, ep, phase, batch, tokens, step, mem = row
    return [
        sku,
        str(tp),
        str(ep),
        phase,
        str(batch),
        str(tokens),
        f"{step:.6g}",
        "" if mem is None else f"{mem:.6g}",
    ]


def write_table(path: Path, header: Iterable[tuple[str, str]], rows: Sequence[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        for key, value in header:
            handle.write(f"# {key}: {value}\n")
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(format_row(row) for row in sorted(rows))


def tabulate(
    aic: Aic, backend: str, versions: dict[str, str], spec: ModelSpec, model_path: str
) -> tuple[Table, Quant, list[str]]:
    quant, notes = choose_quant(aic, backend, versions, spec, model_path)
    table = Table()
    for par in parallel_configs(spec):
        for system, version in versions.items():
            target = Target(backend, version, system, spec, model_path, par, quant)
            for phase in PHASES:
                measure_phase(aic, target, phase, table)
    return table, quant, notes


def backend_versions(aic: Aic, backend: str, systems: Sequence[str]) -> dict[str, str] | None:
    """AIC's current database version per system, or None unless one version serves all of them."""
    versions = {system: aic.backend_version(system, backend) for system in systems}
    found = {v for v in versions.values() if v}
    if len(found) != 1 or None in versions.values():
        return None
    return {system: str(version) for system, version in versions.items()}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path("data/measured"), help="output folder")
    parser.add_argument(
        "--models",
        default=",".join(m.slug for m in MODELS),
        help=f"comma-separated slugs, from: {', '.join(m.slug for m in MODELS)}",
    )
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: trtllm,vllm,sglang")
    parser.add_argument("--skus", default=",".join(SKUS), help="comma-separated: h100_sxm,h200_sxm")
    args = parser.parse_args(argv)
    args.model_list = [m for m in MODELS if m.slug in args.models.split(",")]
    args.backend_list = [b for b in BACKENDS if b in args.backends.split(",")]
    args.sku_list = [s for s in SKUS if s in args.skus.split(",")]
    unknown = set(args.models.split(",")) - {m.slug for m in MODELS}
    if unknown or not args.backend_list or not args.sku_list:
        parser.error(f"unknown or empty selection (models not known: {sorted(unknown)})")
    return args


def generator_line(args: argparse.Namespace) -> str:
    return (
        f"scripts/measured_physics.py --out {args.out.as_posix()} --models {args.models} "
        f"--backends {args.backends} --skus {args.skus}"
    )


def write_backend(aic: Aic, args: argparse.Namespace, backend: str, workdir: Path) -> None:
    """Every chosen model's table for one backend, when AIC has one database version for all SKUs."""
    versions = backend_versions(aic, backend, args.sku_list)
    if versions is None:
        print(f"{backend}: no common AIC database for {args.sku_list}; skipped", file=sys.stderr)
        return
    for spec in args.model_list:
        if (why := EXCLUDED.get((backend, spec.slug))) is not None:
            print(f"{backend}/{spec.slug}: excluded: {why}", file=sys.stderr)
            continue
        started = time.monotonic()
        model_path = aic.shipped_config_dir(spec, workdir)
        table, quant, notes = tabulate(aic, backend, versions, spec, model_path)
        version = next(iter(versions.values()))
        header = provenance(aic, backend, version, spec, quant, notes, table, generator_line(args))
        write_table(args.out / backend / f"{spec.slug}.csv", header, table.rows)
        print(
            f"{backend}/{spec.slug}: {len(table.rows)} rows, {table.omitted_oom} oom, "
            f"{table.omitted_unsupported} unsupported, {time.monotonic() - started:.0f}s",
            file=sys.stderr,
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    aic = Aic()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="measured-physics-") as workdir:
        for backend in args.backend_list:
            write_backend(aic, args, backend, Path(workdir))
    print(f"done in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
