"""What latency histograms cost file ingest: parsing and validating engine samples with and without them.

Engine samples carry each window's TTFT, TPOT and end-to-end histograms (``ttft_histogram`` ...). The fast
ingest path (``fleet/fast_records.py``) validates each held histogram through the contract's own pydantic
model and the rows re-bin and encode it (``fleet.histograms.stored``). This times that path on the same
simulated engine lines twice, once as written and once with the histograms set to null, alternating the
two in one process (the ratio is what to read on shared, noisy cores), and checks both took the fast path.

    .venv/bin/python benchmarks/histogram_ingest.py            # one demo day, 5 rounds
    .venv/bin/python benchmarks/histogram_ingest.py --rounds 9
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

from fleet.catalog import load_catalog
from fleet.fast_records import fast_block
from fleetsim.scenario import load_scenario
from fleetsim.source import jsonl_batches

_HISTOGRAM = re.compile(rb'"(ttft|tpot|e2e)_histogram":(\{[^}]*\}|null)')
BLOCK_LINES = 7_500  # as fleet.ingest_blocks cuts a file


def engine_lines(days: float) -> list[bytes]:
    data = b"".join(jsonl_batches(load_scenario("demo"), load_catalog(), seed=1, days=days, window_s=60.0))
    return [line for line in data.split(b"\n") if b'"engine_sample"' in line]


def _blocks(lines: list[bytes]) -> list[bytes]:
    return [b"\n".join(lines[i : i + BLOCK_LINES]) + b"\n" for i in range(0, len(lines), BLOCK_LINES)]


def _seconds(blocks: list[bytes]) -> float:
    began = time.perf_counter()
    for block in blocks:
        if fast_block(block, 1, "epoch_us") is None:
            raise SystemExit("a block left the fast path: the figures would not be the fast path's")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=float, default=1.0, help="simulated days of the demo fleet")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of both (median reported)")
    args = parser.parse_args()
    lines = engine_lines(args.days)
    held = sum(len(_HISTOGRAM.findall(line)) for line in lines)
    stripped = [_HISTOGRAM.sub(rb'"\1_histogram":null', line) for line in lines]
    with_histograms, without = _blocks(lines), _blocks(stripped)
    print(f"{len(lines):,} engine samples, {held:,} histogram fields, "
          f"{sum(map(len, lines)) / len(lines):.0f} bytes a line with them, "
          f"{sum(map(len, stripped)) / len(stripped):.0f} without")  # fmt: skip
    _seconds(with_histograms[:1] + without[:1])  # warm: the validators' caches, imports
    pairs = [(_seconds(with_histograms), _seconds(without)) for _ in range(args.rounds)]
    ratios = [a / b for a, b in pairs]
    per_line = [1e6 * a / len(lines) for a, _ in pairs], [1e6 * b / len(lines) for _, b in pairs]
    (held_us, bare_us) = per_line
    print(f"parse and rows, with histograms: {statistics.median(held_us):.1f} us a sample "
          f"({min(held_us):.1f}-{max(held_us):.1f}); without: {statistics.median(bare_us):.1f} us "
          f"({min(bare_us):.1f}-{max(bare_us):.1f})")  # fmt: skip
    print(f"with / without: {statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}, "
          f"{args.rounds} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
