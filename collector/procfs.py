"""Host processes behind NVML's PIDs and behind engine ports, read from a procfs root (injectable).

* Command lines and parents (``/proc/<pid>/cmdline``, ``/proc/<pid>/stat``): NVML returns host PIDs
  (NVIDIA/nvidia-docker#1483), so the collector needs the host's /proc (hostPID, or the host's /proc mounted
  and ``proc_root`` pointed at it).  A PID that is not there is not guessed at.
* Which process listens on a TCP port: the listening socket's inode from the network namespace's
  ``tcp``/``tcp6`` tables (state ``0A``), then the process whose ``/proc/<pid>/fd/*`` links to
  ``socket:[<inode>]``.  The tables are the collector's own network namespace (``/proc/self/net``): that is
  where its scrape of ``http://127.0.0.1:<port>`` goes, whatever ``proc_root`` is.  Reading another user's
  fd table needs root or CAP_SYS_PTRACE; without it the fd table is "unreadable", never "no socket".
* The PID a process has in its own PID namespace (``NSpid``, the last field): engines report
  ``os.getpid()`` from inside their container.
* This host's own addresses (``fib_trie`` LOCAL entries, ``if_inet6``): whether a URL's host is this node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

TCP_LISTEN = "0A"


class ProcReader(Protocol):
    def cmdline(self, pid: int) -> tuple[str, ...] | None: ...
    def parent(self, pid: int) -> int | None: ...


class SocketReader(Protocol):
    """What the engine-port join reads besides command lines and parents (:class:`ProcFs` has both)."""

    def pids(self) -> Iterable[int]: ...
    def listening_inodes(self, port: int) -> frozenset[int] | None: ...
    def socket_inodes(self, pid: int) -> frozenset[int] | None: ...
    def ns_pid(self, pid: int) -> int | None: ...
    def local_addresses(self) -> frozenset[str]: ...


def parse_listening(table: str, port: int) -> set[int]:
    """Inodes of the sockets in LISTEN state on ``port`` in one ``/proc/net/tcp`` or ``tcp6`` table."""
    inodes: set[int] = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != TCP_LISTEN:
            continue
        _, _, port_hex = fields[1].rpartition(":")
        try:
            if int(port_hex, 16) == port and int(fields[9]) > 0:
                inodes.add(int(fields[9]))
        except ValueError:
            continue
    return inodes


def parse_fib_trie(text: str) -> set[str]:
    """IPv4 addresses marked ``/32 host LOCAL`` in ``/proc/net/fib_trie``: this host's own."""
    out: set[str] = set()
    last: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|--"):
            last = stripped[3:].strip()
        elif last is not None and stripped.startswith("/32 host LOCAL"):
            out.add(last)
    return out


def parse_if_inet6(text: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            try:
                out.add(str(ipaddress.IPv6Address(int(fields[0], 16))))
            except ValueError:
                continue
    return out


class ProcFs:
    def __init__(self, root: Path = Path("/proc"), net: Path = Path("/proc/self/net")) -> None:
        self.root = root
        self.net = net

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

    def pids(self) -> list[int]:
        try:
            return sorted(int(entry.name) for entry in self.root.iterdir() if entry.name.isdigit())
        except OSError:
            return []

    def listening_inodes(self, port: int) -> frozenset[int] | None:
        """None when neither table can be read (no procfs network view), else the inodes (maybe none)."""
        found: set[int] = set()
        readable = False
        for name in ("tcp", "tcp6"):
            try:
                text = (self.net / name).read_text(encoding="ascii", errors="replace")
            except OSError:
                continue
            readable = True
            found |= parse_listening(text, port)
        return frozenset(found) if readable else None

    def socket_inodes(self, pid: int) -> frozenset[int] | None:
        """Inodes of the sockets ``pid`` holds open; None when its fd table cannot be read."""
        fd_dir = self.root / str(pid) / "fd"
        try:
            entries = list(fd_dir.iterdir())
        except OSError:
            return None
        out: set[int] = set()
        for entry in entries:
            try:
                target = str(entry.readlink())
            except OSError:
                continue  # closed meanwhile
            if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit():
                out.add(int(target[8:-1]))
        return frozenset(out)

    def ns_pid(self, pid: int) -> int | None:
        try:
            status = (self.root / str(pid) / "status").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("NSpid:"):
                fields = line.split()[1:]
                return int(fields[-1]) if fields and fields[-1].isdigit() else None
        return None

    def local_addresses(self) -> frozenset[str]:
        out: set[str] = set()
        for name, parse in (("fib_trie", parse_fib_trie), ("if_inet6", parse_if_inet6)):
            try:
                out |= parse((self.net / name).read_text(encoding="ascii", errors="replace"))
            except OSError:
                continue
        return frozenset(out)


@dataclass
class FakeProcs:
    """An in-memory process table: pid -> (parent pid, argv), and optionally sockets and namespaces."""

    table: dict[int, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    listening: Mapping[int, frozenset[int]] | None = (
        None  # port -> listening socket inodes (None: unreadable)
    )
    fds: Mapping[int, frozenset[int]] = field(default_factory=dict)  # pid -> socket inodes it holds
    hidden_fds: frozenset[int] = frozenset()  # PIDs whose fd table cannot be read
    nspids: Mapping[int, int] = field(default_factory=dict)  # host pid -> pid in its own namespace
    addresses: frozenset[str] = frozenset()

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        entry = self.table.get(pid)
        return entry[1] if entry else None

    def parent(self, pid: int) -> int | None:
        entry = self.table.get(pid)
        return entry[0] if entry else None

    def pids(self) -> list[int]:
        return sorted(self.table)

    def listening_inodes(self, port: int) -> frozenset[int] | None:
        if self.listening is None:
            return None
        return self.listening.get(port, frozenset())

    def socket_inodes(self, pid: int) -> frozenset[int] | None:
        if pid in self.hidden_fds or pid not in self.table:
            return None
        return self.fds.get(pid, frozenset())

    def ns_pid(self, pid: int) -> int | None:
        if pid not in self.table:
            return None
        return self.nspids.get(pid, pid)

    def local_addresses(self) -> frozenset[str]:
        return self.addresses
