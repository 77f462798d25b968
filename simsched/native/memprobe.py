"""This machine's memory hierarchy: cache sizes read from sysfs, latencies and bandwidths measured by probes.

The probes live in the C extension (``_native.memory``): a pointer chase around a random
cycle of lines (dependent loads: the latency), the stream kernel of native runs (each double
loaded, incremented and stored back in order: one core's bandwidth, and all cores' together
for DRAM) and independent random loads (how many misses overlap where no prefetcher helps). The
stride kernel of native runs (13 doubles apart, modulo each iteration's own array) measures how many
misses the workloads' ``stride`` pattern overlaps, prefetcher included. The bandwidths are what the
memory kernels get, which update their data: a read-only stream reports several times more
than they can use, and the locality model charges every access of theirs at these rates.
Each probe runs on pinned threads under a time bound, like the other calibration probes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SimschedError

SYS_CPU = Path("/sys/devices/system/cpu")
PROBE_TIMEOUT_S = 30.0
DRAM_FACTOR = 4           # the DRAM probes' working set: this many times the last cache level
DRAM_FALLBACK = 256 << 20  # ... or this much where sysfs lists no caches
STREAM_BYTES = 256 << 20   # each bandwidth measurement updates at least this much
CHASE_LOADS = 1_000_000    # timed dependent loads per latency measurement (DRAM: a third of it)
TRIES = 3                  # each figure is the best of this many measurements: others share the CPUs
JITTER_RUNS = 11           # repetitions of one stream whose spread of times is the memory-time jitter
STRIDE_ARRAY_BYTES = 16 << 10  # the stride probe's array per iteration: a prefetcher's gain depends on it
SEED = 0x5EED              # the probes' random cycles and addresses (any fixed value: they only need to be random)


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


def _probe(kind: str, cpus: list[int], size: int, line: int, count: int):
    from . import _native

    return _native.memory(kind, list(cpus), int(size), int(line), int(count), SEED, PROBE_TIMEOUT_S)


def chase_ns(cpu: int, size: int, line: int, loads: int = CHASE_LOADS) -> float:
    """Best ns per dependent load around a random cycle of ``size`` bytes of lines."""
    return min(_probe("chase", [cpu], size, line, loads) for _ in range(TRIES))


def stream_gbs(cpus: list[int], size: int, line: int) -> float:
    """Best GB/s of ``len(cpus)`` threads running the stream kernel over ``size`` bytes each at once (together)."""
    passes = max(2, -(-STREAM_BYTES // (size * len(cpus))))
    return max(_probe("stream", cpus, size, line, passes)[1] for _ in range(TRIES))


def independent_ns(cpu: int, size: int, line: int) -> float:
    """Best ns per load of random lines whose addresses do not depend on earlier loads."""
    return min(_probe("independent", [cpu], size, line, CHASE_LOADS) for _ in range(TRIES))


def stride_ns(size: int, line: int) -> float:
    """Best ns per line of the native stride kernel (the ``arrays`` workload) on one thread over ``size`` bytes."""
    from . import run

    n = max(1, size // STRIDE_ARRAY_BYTES)
    workload = f"arrays:n={n},bytes={STRIDE_ARRAY_BYTES},balance=balanced"
    # The first loop of each run places the pages; the later ones find them in DRAM, not in a cache.
    best = min(min(run("omp-static", workload, 1, repeat=3).loop_ns[1:]) for _ in range(TRIES))
    return best / (n * STRIDE_ARRAY_BYTES / line)


def jitter_cv(cpu: int, size: int, line: int) -> float:
    """The relative standard deviation of the time of one stream over ``size`` bytes, repeated on one core."""
    import statistics

    passes = max(2, -(-STREAM_BYTES // size))
    times = [1.0 / _probe("stream", [cpu], size, line, passes)[1] for _ in range(JITTER_RUNS)]
    return statistics.stdev(times) / statistics.mean(times)


def measure_hierarchy(cpus: list[int], progress=print) -> dict:
    """Latency and bandwidth of every cache level and of DRAM, measured on ``cpus`` (the first one alone)."""
    levels = caches(cpus[0])
    line = levels[0].line_bytes if levels else 64
    first = cpus[0]
    measured = []
    for cache in levels:
        size = cache.size_bytes // 2
        progress(f"L{cache.level}: pointer chase and stream kernel over {size >> 10} KiB")
        measured.append({"cache": cache, "probe_bytes": size, "latency_ns": chase_ns(first, size, line),
                         "bandwidth_gbs": stream_gbs([first], size, line)})
    dram_bytes = DRAM_FACTOR * levels[-1].size_bytes if levels else DRAM_FALLBACK
    dram_bytes = max(min(dram_bytes, memory_available() // 4), 4 * line)
    progress(f"DRAM: pointer chase, independent loads, stride and stream kernels over {dram_bytes >> 20} MiB")
    dram_latency = chase_ns(first, dram_bytes, line, CHASE_LOADS // 3)
    independent = independent_ns(first, dram_bytes, line)
    strided = stride_ns(dram_bytes, line)
    bandwidth = stream_gbs([first], dram_bytes, line)
    jitter = jitter_cv(first, dram_bytes, line)
    # All threads together: the same total working set split over 1..P of them; the best aggregate.
    progress(f"DRAM: stream kernel with 1..{len(cpus)} threads at once")
    shared = [bandwidth] + [stream_gbs(cpus[:k], max(dram_bytes // k, 4 * line), line)
                            for k in range(2, len(cpus) + 1)]
    return {"line_bytes": line, "levels": measured, "dram_bytes": dram_bytes, "dram_latency_ns": dram_latency,
            "independent_ns": independent, "stride_ns": strided,
            "outstanding_misses": max(1, round(dram_latency / strided)),
            "dram_bandwidth_gbs": bandwidth, "shared_gbs": shared, "jitter_cv": jitter, "memory_bytes": memory_total(),
            "cpu": first}


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB" if nbytes < 1 << 20 else f"{nbytes / 2**20:g} MiB"


def _entry(key: str, value: str, comment: str) -> str:
    return f"{f'{key} = {value}':<26} # {comment}"


def hierarchy_text(m: dict) -> str:
    """The ``[cache.lN]`` and ``[dram]`` sections for measurements ``m``, each value commented with its source."""
    out = ["", f"# The memory hierarchy: sizes, lines and sharing from {SYS_CPU}/cpu{m['cpu']}/cache/index*/ (data and",
           f"# unified caches); latencies and bandwidths measured on CPU {m['cpu']}, each the best of {TRIES} tries "
           "(large pages where", "# the kernel grants them, so the probes time the memory rather than page walks)."]
    floor = 0.0
    for i, level in enumerate(m["levels"]):
        cache = level["cache"]
        # Noise must not make an outer level faster than an inner one (compared as written, to 2 decimals).
        latency = max(round(level["latency_ns"], 2), floor)
        raised = latency > round(level["latency_ns"], 2)
        floor = latency
        size = _kib(level["probe_bytes"])
        out += [f"[cache.l{cache.level}]",
                _entry("size_kib", f"{cache.size_bytes // 1024}", "sysfs: size (per instance)"),
                _entry("line_bytes", f"{cache.line_bytes}", "sysfs: coherency_line_size"),
                _entry("shared_by", f'"{cache.shared_by}"', f"sysfs: shared_cpu_list {cache.shared_cpus}"
                       + (" (this core's hardware threads)" if cache.shared_by == "core" else " (beyond this core)")),
                _entry("latency_ns", f"{latency:.2f}", f"pointer chase: ns per dependent load around a random cycle "
                       f"of lines over {size} (half the level)"
                       + (f"; measured {level['latency_ns']:.2f}, raised to the level inside's" if raised else "")),
                _entry("bandwidth_gbs", f"{level['bandwidth_gbs']:.1f}", f"one thread running the stream kernel "
                       f"over {size} again and again (each double loaded, incremented, stored back), GB/s updated")]
        if i == 0:
            out.append(_entry("outstanding_misses", f"{m['outstanding_misses']}", f"round(DRAM chase latency "
                              f"{m['dram_latency_ns']:.1f} ns / {m['stride_ns']:.2f} ns per line of the stride kernel "
                              f"on one thread over {_kib(m['dram_bytes'])} in {_kib(STRIDE_ARRAY_BYTES)} arrays): "
                              "the misses in flight the stride pattern gets, prefetcher included (independent random "
                              f"loads, which no prefetcher follows: {m['independent_ns']:.2f} ns, "
                              f"{max(1, round(m['dram_latency_ns'] / m['independent_ns']))} in flight)"))
        out.append("")
    dram_latency = max(round(m["dram_latency_ns"], 2), floor)
    shared = m["shared_gbs"]
    best = max(range(len(shared)), key=lambda k: shared[k])
    size = _kib(m["dram_bytes"])
    out += ["[dram]",
            _entry("node", '"socket"', "one NUMA node: this file describes one socket"),
            _entry("size_gib", f"{m['memory_bytes'] / 2**30:.1f}", "/proc/meminfo: MemTotal"),
            _entry("latency_ns", f"{dram_latency:.2f}", f"pointer chase as for the caches, over {size} "
                   f"({DRAM_FACTOR} x the last level)" + (f"; measured {m['dram_latency_ns']:.2f}, raised to the "
                                                          "last level's" if dram_latency > round(m["dram_latency_ns"], 2) else "")),
            _entry("bandwidth_gbs", f"{m['dram_bandwidth_gbs']:.1f}", f"one thread running the stream kernel "
                   f"over {size}, as for the caches"),
            _entry("shared_bandwidth_gbs", f"{shared[best]:.1f}", f"the best aggregate of 1..{len(shared)} threads "
                   f"running the stream kernel over {size} split between them, all at once ({best + 1} thread(s)); GB/s by thread count: "
                   f"[{', '.join(f'{x:.1f}' for x in shared)}]"),
            _entry("jitter_cv", f"{min(m['jitter_cv'], 0.5):.3f}", f"standard deviation / mean of the time of "
                   f"{JITTER_RUNS} identical streams over {size} on one core (capped at 0.5)"), ""]
    return "\n".join(out)
