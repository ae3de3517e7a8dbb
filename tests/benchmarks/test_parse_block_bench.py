"""benchmarks/parse_block_bench.py: the block it times is whole lines the fast parser takes, every one."""

from __future__ import annotations

from benchmarks.parse_block_bench import block_of, timed
from fleet.fast_records import fast_block


def test_the_block_is_whole_lines_within_its_size_and_the_fast_parser_takes_them_all() -> None:
    block = block_of(16, block_bytes=20_000)
    assert 0 < len(block) <= 20_000 and block.endswith(b"\n")
    batch = fast_block(block, 1, "epoch_us")
    assert batch is not None and len(batch.gpu_rows) == block.count(b"\n") and len(batch.gpus) == 16
    parse, dump, load, size = timed(block, 2)
    assert parse > 0 and dump > 0 and load > 0 and size > 0
