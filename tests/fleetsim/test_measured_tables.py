"""The committed step-time tables measured by NVIDIA AI Configurator (``data/measured/``).

They are read here with the standard library only (``csv``): the simulator must be able to use them
without AI Configurator installed. Checked: the provenance lines, the exact columns, that every row
parses, that every (SKU, TP, EP) is either tabulated or recorded as skipped, the grid accounting
(rows + omitted = grid), physical sanity (decode step grows with batch and context, prefill grows with
prompt length and batch, H200 no slower than H100), the size budget and the required coverage.
The checkers are plain functions that return the violations found; the last tests feed them broken
tables to show they do catch what they are for.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

MEASURED = Path(__file__).resolve().parents[2] / "data" / "measured"
REQUIRED_KEYS = (
    "source",
    "aiconfigurator_version",
    "backend",
    "backend_version",
    "model",
    "quantization",
    "systems",
    "command",
    "generator",
    "omitted",
    "licence",
)
COLUMNS = ["sku", "tp", "ep", "phase", "batch", "tokens", "step_s", "mem_gib"]
SKUS = ("H100-SXM", "H200-SXM")
CAPACITY_GIB = {"H100-SXM": 80.0, "H200-SXM": 141.0}  # AIC's system specs
PHASES = ("decode", "prefill")
TPS = (1, 2, 4, 8)
MOE_MODELS = {"qwen3-235b-a22b", "mixtral-8x7b"}
GRID_POINTS = {"decode": 10 * 6, "prefill": 4 * 8}  # batches x contexts, batches x prompt lengths
BATCH_TOLERANCE = 0.08  # AIC's measured GEMM/MoE tables dip up to ~7% between neighbouring batches
CONTEXT_TOLERANCE = 0.02
H200_TOLERANCE = 0.05
MAX_BYTES = 5_000_000

# Both SKUs must have rows for these (TP, EP); further (SKU, TP, EP) that fit on one SKU only.
REQUIRED = {
    "llama-3.1-8b": {(1, 1), (2, 1), (4, 1), (8, 1)},
    "llama-3.1-70b": {(1, 1), (2, 1), (4, 1), (8, 1)},
    "llama-3.1-405b": {(8, 1)},
    "qwen3-235b-a22b": {(4, 4), (8, 8), (4, 1)},
}
REQUIRED_ONE_SKU = {
    "llama-3.1-405b": {("H200-SXM", 4, 1)},
    "qwen3-235b-a22b": {("H200-SXM", 2, 2)},
}


@dataclass(frozen=True)
class Row:
    sku: str
    tp: int
    ep: int
    phase: str
    batch: int
    tokens: int
    step_s: float
    mem_gib: float | None


@dataclass(frozen=True)
class Table:
    path: Path
    provenance: dict[str, list[str]]
    header: list[str]
    rows: list[Row]

    @property
    def slug(self) -> str:
        return self.path.stem


def row_problems(row: Row) -> list[str]:
    checks = {
        f"sku {row.sku!r}": row.sku in SKUS,
        f"phase {row.phase!r}": row.phase in PHASES,
        f"tp {row.tp}": row.tp in TPS,
        f"ep {row.ep} with tp {row.tp}": row.ep >= 1 and row.tp % row.ep == 0,
        f"batch {row.batch}, tokens {row.tokens}": row.batch >= 1 and row.tokens >= 1,
        f"step_s {row.step_s}": row.step_s > 0,
        f"mem_gib {row.mem_gib}": row.mem_gib is None or 0 < row.mem_gib < CAPACITY_GIB.get(row.sku, 0),
    }
    return [what for what, ok in checks.items() if not ok]


def parse_row(raw: list[str]) -> Row:
    """A data row, or ValueError saying what is wrong with it."""
    if len(raw) != len(COLUMNS):
        raise ValueError(f"{len(raw)} fields: {raw}")
    sku, tp, ep, phase, batch, tokens, step, mem = raw
    row = Row(sku, int(tp), int(ep), phase, int(batch), int(tokens), float(step), float(mem) if mem else None)
    if problems := row_problems(row):
        raise ValueError(f"{problems} in {raw}")
    return row


def read_table(path: Path) -> Table:
    provenance: dict[str, list[str]] = defaultdict(list)
    with path.open(newline="", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    body = [line for line in lines if not line.startswith("#")]
    for line in itertools.takewhile(lambda text: text.startswith("#"), lines):
        key, sep, value = line.removeprefix("# ").partition(": ")
        assert sep and line.startswith("# "), f"{path.name}: malformed provenance line {line!r}"
        provenance[key].append(value)
    reader = csv.reader(body)
    header = next(reader, [])
    return Table(path, dict(provenance), header, [parse_row(raw) for raw in reader])


def table_paths() -> list[Path]:
    return sorted(MEASURED.glob("*/*.csv"))


@pytest.fixture(scope="module", params=table_paths(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def table(request: pytest.FixtureRequest) -> Table:
    return read_table(request.param)


def series(rows: Iterable[Row], phase: str, vary: str) -> dict[tuple[object, ...], list[tuple[int, float]]]:
    """Step times of one phase along ``vary`` ('batch' or 'tokens'), the other coordinates fixed."""
    fixed = "tokens" if vary == "batch" else "batch"
    out: dict[tuple[object, ...], list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        if row.phase == phase:
            out[(row.sku, row.tp, row.ep, getattr(row, fixed))].append((getattr(row, vary), row.step_s))
    return {key: sorted(values) for key, values in out.items()}


def growth_violations(
    rows: Iterable[Row], phase: str, vary: str, tolerance: float, min_ratio: int = 1
) -> list[str]:
    """Pairs x < x' (x' >= min_ratio * x) where step(x') < step(x) * (1 - tolerance); with tolerance 0
    the step must strictly grow."""
    found = []
    for key, points in series(rows, phase, vary).items():
        for (x, step), (x2, step2) in itertools.combinations(points, 2):
            if x2 < min_ratio * x:
                continue
            if (step2 <= step) if tolerance == 0 else (step2 < step * (1 - tolerance)):
                found.append(f"{phase} {key}: {vary} {x}->{x2}: {step:.6g}s -> {step2:.6g}s")
    return found


def sku_violations(rows: Iterable[Row], tolerance: float) -> list[str]:
    """Decode points where H200 is slower than H100 by more than ``tolerance``."""
    steps = {(r.sku, r.tp, r.ep, r.batch, r.tokens): r.step_s for r in rows if r.phase == "decode"}
    return [
        f"tp={tp} ep={ep} batch={b} tokens={t}: H100 {h100:.6g}s, H200 {h200:.6g}s"
        for (sku, tp, ep, b, t), h100 in steps.items()
        if sku == "H100-SXM"
        and (h200 := steps.get(("H200-SXM", tp, ep, b, t))) is not None
        and h200 > h100 * (1 + tolerance)
    ]


def skipped(table: Table) -> set[tuple[str, int, int, str]]:
    """(sku, tp, ep, phase) recorded as skipped in the provenance."""
    pattern = re.compile(r"^(H\d00-SXM) tp=(\d+) ep=(\d+) (decode|prefill): \S")
    found = set()
    for line in table.provenance.get("skipped", []):
        match = pattern.match(line)
        assert match, f"{table.path.name}: malformed skipped line {line!r}"
        found.add((match[1], int(match[2]), int(match[3]), match[4]))
    return found


def expected_configs(slug: str) -> set[tuple[int, int]]:
    if slug in MOE_MODELS:
        return {(tp, tp) for tp in TPS} | {(tp, 1) for tp in TPS}
    return {(tp, 1) for tp in TPS}


def unaccounted(table: Table) -> list[str]:
    """(SKU, TP, EP, phase) with neither rows nor a recorded skip; and rows for unexpected configs."""
    present = {(r.sku, r.tp, r.ep, r.phase) for r in table.rows}
    wanted = {(s, tp, ep, ph) for s in SKUS for tp, ep in expected_configs(table.slug) for ph in PHASES}
    missing = sorted(wanted - present - skipped(table))
    unexpected = sorted(present - wanted)
    return [f"no rows, not skipped: {m}" for m in missing] + [f"unexpected: {u}" for u in unexpected]


def leading_int(text: str) -> int:
    match = re.match(r"\d+", text)
    assert match, f"not a count: {text!r}"
    return int(match[0])


# ---------------------------------------------------------------------------------------------------------


def test_the_tables_exist() -> None:
    backends = {path.parent.name for path in table_paths()}
    assert "trtllm" in backends, f"no trtllm tables under {MEASURED}"
    assert backends <= {"trtllm", "vllm", "sglang"}


def test_provenance_has_every_key(table: Table) -> None:
    missing = [key for key in REQUIRED_KEYS if not any(v.strip() for v in table.provenance.get(key, []))]
    assert not missing, f"{table.path.name}: missing provenance {missing}"
    assert "AI Configurator" in table.provenance["source"][0]
    assert table.provenance["licence"][0].startswith("Apache-2.0")
    assert table.provenance["backend"] == [table.path.parent.name]
    assert table.provenance["systems"] == ["h100_sxm, h200_sxm"]
    assert all(cmd.startswith("aiconfigurator cli estimate ") for cmd in table.provenance["command"])
    assert {"static_gen", "static_ctx"} <= {m for c in table.provenance["command"] for m in c.split()}
    assert table.provenance["generator"][0].startswith("scripts/measured_physics.py")


def test_header_is_exact(table: Table) -> None:
    assert table.header == COLUMNS


def test_rows_are_sorted_unique_and_plentiful(table: Table) -> None:
    keys = [(r.sku, r.tp, r.ep, r.phase, r.batch, r.tokens) for r in table.rows]
    assert keys == sorted(keys), f"{table.path.name}: rows not sorted"
    assert len(set(keys)) == len(keys), f"{table.path.name}: duplicate rows"
    assert {r.phase for r in table.rows} == set(PHASES)
    assert all(r.mem_gib is not None for r in table.rows), "AIC gives memory for every point"


def test_every_config_has_both_skus_or_a_recorded_skip(table: Table) -> None:
    assert not unaccounted(table), f"{table.path.name}: {unaccounted(table)}"


def test_omitted_accounts_for_the_rest_of_the_grid(table: Table) -> None:
    omitted = leading_int(table.provenance["omitted"][0])
    configs = len(expected_configs(table.slug)) * len(SKUS)
    grid = configs * sum(GRID_POINTS.values())
    assert len(table.rows) + omitted == grid, f"{table.path.name}: {len(table.rows)} + {omitted} != {grid}"
    parts = [leading_int(table.provenance[k][0]) for k in ("omitted_oom", "omitted_unsupported")]
    assert sum(parts) == omitted


def test_decode_step_grows_with_batch(table: Table) -> None:
    found = growth_violations(table.rows, "decode", "batch", BATCH_TOLERANCE)
    assert not found, f"{table.path.name}: {found[:5]}"
    trend = growth_violations(table.rows, "decode", "batch", 0.0, min_ratio=16)
    assert not trend, f"{table.path.name}: 16x the batch is not slower: {trend[:5]}"


def test_decode_step_grows_with_context(table: Table) -> None:
    found = growth_violations(table.rows, "decode", "tokens", CONTEXT_TOLERANCE)
    assert not found, f"{table.path.name}: {found[:5]}"


def test_prefill_time_increases_with_prompt_length_and_batch(table: Table) -> None:
    found = growth_violations(table.rows, "prefill", "tokens", 0.0)
    found += growth_violations(table.rows, "prefill", "batch", 0.0)
    assert not found, f"{table.path.name}: {found[:5]}"


def test_h200_decode_is_not_slower_than_h100(table: Table) -> None:
    found = sku_violations(table.rows, H200_TOLERANCE)
    assert not found, f"{table.path.name}: {found[:5]}"


def test_the_folder_is_small_and_licensed() -> None:
    size = sum(path.stat().st_size for path in MEASURED.rglob("*") if path.is_file())
    assert size < MAX_BYTES, f"data/measured is {size} bytes"
    licence = (MEASURED / "LICENSE-aiconfigurator").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0" in licence
    readme = (MEASURED / "README.md").read_text(encoding="utf-8")
    assert "scripts/measured_physics.py" in readme and "Apache-2.0" in readme


@pytest.mark.parametrize("backend", sorted({p.parent.name for p in table_paths()}))
@pytest.mark.parametrize("slug", sorted(REQUIRED))
def test_required_coverage(backend: str, slug: str) -> None:
    path = MEASURED / backend / f"{slug}.csv"
    assert path.is_file(), f"missing {path}"
    rows = read_table(path).rows
    have = {(r.sku, r.tp, r.ep, r.phase) for r in rows}
    wanted = {(s, tp, ep) for s in SKUS for tp, ep in REQUIRED[slug]} | REQUIRED_ONE_SKU.get(slug, set())
    missing = sorted((s, tp, ep, ph) for s, tp, ep in wanted for ph in PHASES if (s, tp, ep, ph) not in have)
    assert not missing, f"{backend}/{slug}: missing {missing}"


# The checkers catch what they are for: each is shown a table broken in one way. ---------------------------


def make_rows(scale: dict[tuple[str, str, int, int], float] | None = None) -> list[Row]:
    """A small healthy table: step grows with batch and tokens; H200 is 20% faster."""
    rows = []
    for sku, phase, batch, tokens in itertools.product(SKUS, PHASES, (1, 2, 32), (512, 1024)):
        step = 0.01 * (1 + batch / 64) * (1 + tokens / 4096) * (0.8 if sku == "H200-SXM" else 1.0)
        step *= (scale or {}).get((sku, phase, batch, tokens), 1.0)
        rows.append(Row(sku, 8, 1, phase, batch, tokens, step, 20.0))
    return rows


def test_checkers_pass_a_healthy_table() -> None:
    rows = make_rows()
    assert not growth_violations(rows, "decode", "batch", BATCH_TOLERANCE)
    assert not growth_violations(rows, "decode", "batch", 0.0, min_ratio=16)
    assert not growth_violations(rows, "decode", "tokens", CONTEXT_TOLERANCE)
    assert not growth_violations(rows, "prefill", "tokens", 0.0)
    assert not sku_violations(rows, H200_TOLERANCE)


def test_checkers_catch_broken_tables() -> None:
    faster_big_batch = make_rows({("H100-SXM", "decode", 2, 512): 2.0})
    assert growth_violations(faster_big_batch, "decode", "batch", BATCH_TOLERANCE)
    flat_prefill = make_rows({("H200-SXM", "prefill", 1, 1024): 1 / 1.25})
    assert growth_violations(flat_prefill, "prefill", "tokens", 0.0)
    slow_h200 = make_rows({("H200-SXM", "decode", 32, 1024): 1.4})
    assert sku_violations(slow_h200, H200_TOLERANCE)
    no_trend = make_rows({("H100-SXM", "decode", 32, 512): 0.6})
    assert growth_violations(no_trend, "decode", "batch", 0.0, min_ratio=16)


@pytest.mark.parametrize(
    "raw",
    [
        ["A100-SXM", "8", "1", "decode", "1", "512", "0.01", "20"],
        ["H100-SXM", "3", "1", "decode", "1", "512", "0.01", "20"],
        ["H100-SXM", "8", "3", "decode", "1", "512", "0.01", "20"],
        ["H100-SXM", "8", "1", "mixed", "1", "512", "0.01", "20"],
        ["H100-SXM", "8", "1", "decode", "1", "512", "0", "20"],
        ["H100-SXM", "8", "1", "decode", "1", "512", "-0.01", ""],
        ["H100-SXM", "8", "1", "decode", "1", "512", "0.01", "95"],
        ["H100-SXM", "8", "1", "decode", "1", "512", "fast", "20"],
        ["H100-SXM", "8", "1", "decode", "1", "512", "0.01"],
    ],
)
def test_parse_row_rejects_bad_rows(raw: list[str]) -> None:
    with pytest.raises(ValueError):
        parse_row(raw)


def test_unaccounted_configs_are_found(tmp_path: Path) -> None:
    table = Table(tmp_path / "llama-3.1-8b.csv", {"skipped": ["H100-SXM tp=1 ep=1 decode: oom"]}, COLUMNS, [])
    problems = unaccounted(table)
    assert len(problems) == len(SKUS) * len(TPS) * len(PHASES) - 1
    assert not any("'H100-SXM', 1, 1, 'decode'" in p for p in problems)
