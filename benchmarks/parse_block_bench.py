"""One block of JSONL through ingest's fast parser, timed alone: what a parsing process spends per block.

`.venv/bin/python benchmarks/parse_block_bench.py [--gpus 1024 10000] [--repeat 15]` builds one 4 MB block
(``fleet.ingest.BLOCK_BYTES``) of ``benchmarks/ingest_bench.py``'s records per fleet size and prints, best
of ``--repeat`` runs each, the time :func:`fleet.fast_records.fast_block` takes over it, and the time to
pickle its batch (in the parsing process) and unpickle it (in the writing one). A fleet of G GPUs names
each GPU about 7,600 / G times in a block: the per-GPU work (its record, its fingerprint) weighs more as G
grows. The garbage collector is paused, as ingest pauses it. Timings on shared cores vary by tens of
percent: compare trees in alternating runs.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling ingest_bench (its records)

from ingest_bench import samples

from fleet.fast_records import fast_block
from fleet.ingest import BLOCK_BYTES
from fleet.ingest_blocks import gc_paused


def block_of(gpus: int, block_bytes: int = BLOCK_BYTES) -> bytes:
    """The first ``block_bytes`` of the benchmark's JSONL for ``gpus`` GPUs, cut at a line end."""
    lines: list[bytes] = []
    size = 0
    for record in samples(10**9, gpus):
        line = orjson.dumps(record) + b"\n"
        if size + len(line) > block_bytes:
            break
        lines.append(line)
        size += len(line)
    return b"".join(lines)


def timed(block: bytes, repeat: int) -> tuple[float, float, float, int]:
    """Best seconds of (parse, pickle, unpickle) over ``repeat`` runs, and the pickled batch's bytes."""
    with gc_paused():
        if fast_block(block, 1, "epoch_us") is None:  # the names are learnt once per process, as in ingest
            raise SystemExit("the fast parser declined the block")
        best = [float("inf")] * 3
        size = 0
        for _ in range(repeat):
            started = time.perf_counter()
            batch = fast_block(block, 1, "epoch_us")
            parsed = time.perf_counter()
            data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
            pickled = time.perf_counter()
            pickle.loads(data)
            done = time.perf_counter()
            best = [
                min(b, t)
                for b, t in zip(best, (parsed - started, pickled - parsed, done - pickled), strict=True)
            ]
            size = len(data)
    return best[0], best[1], best[2], size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, nargs="+", default=[1024, 10_000])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print("gpus     lines   parse ms  pickle ms  unpickle ms  pickled MB  (best of each)")
    for gpus in args.gpus:
        block = block_of(gpus)
        parse, dump, load, size = timed(block, args.repeat)
        lines = block.count(b"\n")
        print(f"{gpus:>6,} {lines:>8,} {parse * 1e3:>10.1f} {dump * 1e3:>10.1f} {load * 1e3:>12.1f}"
              f" {size / 1e6:>11.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
