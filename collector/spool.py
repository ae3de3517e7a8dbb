"""The durable local spool: records wait in an SQLite file (WAL) until the service acknowledges them.

* Persist first, ship second (reliability.md §1.6): a window's records are committed in one transaction
  before anything is sent; a commit survives the collector being SIGKILLed (WAL), and with ``fsync`` on
  (synchronous=FULL) a power loss too.
* In order: ``seq`` is an AUTOINCREMENT key, never reused, so replay after a restart resumes with the
  oldest unacknowledged record (the persisted cursor Prometheus lacks, prometheus#8809).
* Acknowledged records are deleted; nothing else is.  Replays may resend a batch whose acknowledgement was
  lost; records carry natural keys (``gpu_uuid``/``worker_id`` + ``ts``), so the store keeps one copy.
* Bounded: when the payload bytes exceed ``max_bytes``, the oldest records are dropped and counted
  (``dropped{reason="spool_full"}``); records the service rejects for good are counted as ``rejected``.
  Counters are persisted with the data.
* A file that is not a readable SQLite database is moved aside (``.corrupt-<time>``) and a fresh spool
  started, rather than refusing to run.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DROP_SPOOL_FULL = "spool_full"
DROP_REJECTED = "rejected"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    payload BLOB NOT NULL,
    size INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class SpooledRecord:
    seq: int
    payload: bytes


class Spool:
    def __init__(self, path: Path, max_bytes: int, *, fsync: bool = True) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open(fsync)
        except sqlite3.DatabaseError as exc:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            log.error("spool %s is unreadable (%s): moved to %s, starting a fresh spool", path, exc, aside)
            path.rename(aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            self._db = self._open(fsync)
            self._bump("corrupt_files", 1)
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM records").fetchone()
        self._count, self._bytes = int(row[0]), int(row[1])

    def _open(self, fsync: bool) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # effective on a new file only
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
            db.executescript(_SCHEMA)
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("quick_check failed")
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _bump(self, name: str, by: int) -> None:
        self._db.execute(
            "INSERT INTO counters(name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + ?",
            (name, by, by),
        )

    def append(self, payloads: Sequence[bytes]) -> int:
        """Commit records in one transaction; returns how many old records were dropped to stay bounded."""
        if not payloads:
            return 0
        rows = [(p, len(p)) for p in payloads]
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT INTO records(payload, size) VALUES (?, ?)", rows)
                added = sum(size for _, size in rows)
                dropped, freed = self._trim(self._bytes + added)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._bytes += added - freed
            self._count += len(rows) - dropped
            return dropped

    def _trim(self, total: int) -> tuple[int, int]:
        """Inside a transaction: delete the oldest records until the payload fits in max_bytes."""
        if total <= self.max_bytes:
            return 0, 0
        excess, dropped, freed, cutoff = total - self.max_bytes, 0, 0, None
        for seq, size in self._db.execute("SELECT seq, size FROM records ORDER BY seq"):
            cutoff, dropped, freed = seq, dropped + 1, freed + size
            if freed >= excess:
                break
        if cutoff is not None:
            self._db.execute("DELETE FROM records WHERE seq <= ?", (cutoff,))
            self._bump(DROP_SPOOL_FULL, dropped)
            log.warning("spool full (%d bytes): dropped the %d oldest records", self.max_bytes, dropped)
        return dropped, freed

    def peek(self, max_records: int, max_bytes: int) -> list[SpooledRecord]:
        """The oldest records in order, up to the limits (at least one when the spool is not empty)."""
        out: list[SpooledRecord] = []
        total = 0
        with self._lock:
            query = "SELECT seq, payload, size FROM records ORDER BY seq LIMIT ?"
            cursor = self._db.execute(query, (max_records,))
            for seq, payload, size in cursor:
                if out and total + size > max_bytes:
                    break
                out.append(SpooledRecord(seq, bytes(payload)))
                total += size
        return out

    def ack(self, seqs: Sequence[int]) -> None:
        self._delete(seqs, None)

    def reject(self, seqs: Sequence[int]) -> None:
        """Delete records the service will never accept, counting them."""
        self._delete(seqs, DROP_REJECTED)

    def _delete(self, seqs: Sequence[int], reason: str | None) -> None:
        if not seqs:
            return
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                freed = removed = 0
                for start in range(0, len(seqs), 500):
                    chunk = list(seqs[start : start + 500])
                    marks = ",".join("?" * len(chunk))
                    sizes = f"SELECT COALESCE(SUM(size), 0) FROM records WHERE seq IN ({marks})"
                    row = db.execute(sizes, chunk)
                    freed += int(row.fetchone()[0])
                    removed += db.execute(f"DELETE FROM records WHERE seq IN ({marks})", chunk).rowcount
                if reason is not None:
                    self._bump(reason, len(seqs))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._bytes -= freed
            self._count -= removed
            if self._bytes == 0:
                db.execute("PRAGMA incremental_vacuum")

    def count(self) -> int:
        return self._count

    def size_bytes(self) -> int:
        return self._bytes

    def dropped(self) -> dict[str, int]:
        """Records deliberately dropped since the spool file was created, by reason."""
        with self._lock:
            rows = self._db.execute("SELECT name, value FROM counters").fetchall()
        counts = {DROP_SPOOL_FULL: 0, DROP_REJECTED: 0}
        counts.update({str(name): int(value) for name, value in rows if name != "corrupt_files"})
        return counts

    def close(self) -> None:
        with self._lock:
            self._db.close()
