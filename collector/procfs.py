"""Host processes behind NVML's PIDs: command lines and parents, read from a procfs root (injectable).

NVML returns host PIDs (NVIDIA/nvidia-docker#1483), so the collector needs the host's /proc (hostPID, or
the host's /proc mounted and ``proc_root`` pointed at it).  A PID that is not there is not guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class ProcReader(Protocol):
    def cmdline(self, pid: int) -> tuple[str, ...] | None: ...
    def parent(self, pid: int) -> int | None: ...


class ProcFs:
    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        try:
            raw = (self.root / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        return tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)

    def parent(self, pid: int) -> int | None:
        try:
            stat = (self.root / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


@dataclass
class FakeProcs:
    """An in-memory process table: pid -> (parent pid, argv)."""

    table: dict[int, tuple[int, tuple[str, ...]]] = field(default_factory=dict)

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        entry = self.table.get(pid)
        return entry[1] if entry else None

    def parent(self, pid: int) -> int | None:
        entry = self.table.get(pid)
        return entry[0] if entry else None
