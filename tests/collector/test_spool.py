"""The durable spool: order, bound with counted oldest-first drop, rejection, corruption, SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collector.spool import DROP_REJECTED, DROP_SPOOL_FULL, Spool

REPO = Path(__file__).resolve().parents[2]


def payloads(start: int, count: int, size: int = 100) -> list[bytes]:
    return [json.dumps({"n": n, "pad": "x" * (size - 20)}).encode() for n in range(start, start + count)]


def numbers(records: list[bytes]) -> list[int]:
    return [json.loads(p)["n"] for p in records]


def test_fifo_peek_ack_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    spool = Spool(path, max_bytes=10**7)
    spool.append(payloads(0, 10))
    spool.append(payloads(10, 5))
    batch = spool.peek(4, 10**6)
    assert numbers([r.payload for r in batch]) == [0, 1, 2, 3]
    spool.ack([r.seq for r in batch])
    assert spool.count() == 11
    spool.close()
    reopened = Spool(path, max_bytes=10**7)
    assert numbers([r.payload for r in reopened.peek(100, 10**6)]) == list(range(4, 15))
    assert reopened.size_bytes() == sum(len(p) for p in payloads(4, 11))


def test_peek_respects_the_byte_limit_but_returns_at_least_one(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.sqlite", max_bytes=10**7)
    spool.append(payloads(0, 10, size=1000))
    assert len(spool.peek(100, 3500)) == 3
    assert len(spool.peek(100, 10)) == 1


def test_bound_drops_oldest_first_and_counts_exactly(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    spool = Spool(path, max_bytes=5000, fsync=False)
    for window in range(20):
        spool.append(payloads(window * 10, 10, size=100))  # 1,000 bytes a window
    kept = numbers([r.payload for r in spool.peek(1000, 10**7)])
    assert spool.size_bytes() <= 5000 and spool.count() == len(kept)
    assert kept == list(range(200 - len(kept), 200))  # the newest survive, in order
    assert spool.dropped()[DROP_SPOOL_FULL] == 200 - len(kept)
    spool.close()
    assert Spool(path, max_bytes=5000).dropped()[DROP_SPOOL_FULL] == 200 - len(kept)  # persisted


def test_reject_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.sqlite", max_bytes=10**7)
    spool.append(payloads(0, 3))
    batch = spool.peek(10, 10**6)
    spool.reject([batch[1].seq])
    assert numbers([r.payload for r in spool.peek(10, 10**6)]) == [0, 2]
    assert spool.dropped()[DROP_REJECTED] == 1


def test_unreadable_spool_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"this is not an sqlite database" * 100)
    spool = Spool(path, max_bytes=10**6)
    spool.append(payloads(0, 1))
    assert spool.count() == 1
    assert len(list(tmp_path.glob("s.sqlite.corrupt-*"))) == 1


CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from fleet.clock import SystemClock
    from collector.shipper import FileSink, Shipper
    from collector.spool import Spool

    spool = Spool(Path(sys.argv[1]), max_bytes=10**9)
    shipper = Shipper(spool, FileSink(Path(sys.argv[2])), SystemClock(), batch_max_records=7)
    n = 0
    while True:
        spool.append([json.dumps({"n": n + i}).encode() for i in range(3)])
        print(n + 2, flush=True)  # committed up to here
        n += 3
        shipper.step()
    """
)


def test_sigkill_while_spooling_and_shipping_loses_nothing_committed(tmp_path: Path) -> None:
    spool_path, shipped_path = tmp_path / "spool.sqlite", tmp_path / "shipped.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(spool_path), str(shipped_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    committed = -1
    assert child.stdout is not None
    deadline = time.monotonic() + 20.0
    while committed < 600 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            pytest.fail(f"the spooling child died: {child.stderr.read() if child.stderr else ''}")
        committed = int(line)
    child.send_signal(signal.SIGKILL)
    rest, _ = child.communicate(timeout=10)
    for line in rest.split():
        committed = max(committed, int(line))
    assert child.returncode == -signal.SIGKILL
    shipped = numbers([line.encode() for line in shipped_path.read_text().splitlines() if line.strip()])
    spool = Spool(spool_path, max_bytes=10**9)
    replay = numbers([r.payload for r in spool.peek(10**6, 10**9)])
    assert replay == sorted(replay)  # replayed in order
    assert shipped == sorted(shipped)
    delivered = set(shipped) | set(replay)
    missing = [n for n in range(committed + 1) if n not in delivered]
    assert missing == []
    assert len(shipped) > 0  # the test did exercise the ack path
