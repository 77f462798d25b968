"""This host as its kernel describes it (sysfs, /proc): its caches, the CPUs in a list, its memory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SimschedError

SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class Cache:
    """One data (or unified) cache level as sysfs describes it for a CPU."""

    level: int
    size_bytes: int
    line_bytes: int
    shared_by: str  # "core" or "socket"
    shared_cpus: str


def _cpu_list(text: str) -> set[int]:
    cpus = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not match:
        raise ValueError(f"unreadable cache size {text!r}")
    return int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]


def caches(cpu: int = 0, root: Path = SYS_CPU) -> list[Cache]:
    """The data and unified caches of ``cpu``, innermost first; empty where sysfs does not list them."""
    folder = root / f"cpu{cpu}"
    try:
        siblings = _cpu_list((folder / "topology" / "thread_siblings_list").read_text())
    except (OSError, ValueError):
        siblings = {cpu}
    found = []
    for index in sorted(folder.glob("cache/index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            shared = (index / "shared_cpu_list").read_text().strip()
            # A cache only the CPU's own hardware threads share is private to its core.
            found.append(Cache(int((index / "level").read_text()), _size((index / "size").read_text()),
                               int((index / "coherency_line_size").read_text()),
                               "core" if _cpu_list(shared) <= siblings else "socket", shared))
        except (OSError, ValueError):
            return []
    found.sort(key=lambda c: c.level)
    if [c.level for c in found] != list(range(1, len(found) + 1)):
        return []  # a gap or a repeated level: not a hierarchy this file format can describe
    return found


def memory_total() -> int:
    """Bytes of memory this host has (MemTotal)."""
    return _meminfo("MemTotal")


def memory_available() -> int:
    """Bytes of memory free for a new allocation (MemAvailable)."""
    return _meminfo("MemAvailable")


def _meminfo(key: str) -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    raise SimschedError(f"cannot read {key} from /proc/meminfo")
