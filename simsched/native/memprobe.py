"""This machine's memory hierarchy: cache sizes read from sysfs, latencies and bandwidths measured by probes.

The probes live in the C extension (``_native.memory``): a pointer chase around a random
cycle of lines (dependent loads: the latency), a read of every word in order (what one core's
loads get from a level, and all cores' together from DRAM: the bandwidth, as the machine files
define it) and independent random loads (how many misses overlap where no prefetcher helps, and
what a read at a random place of each level's data costs one core).
A loaded-latency probe times the pointer chase on one CPU while 0, 1, 2, 4, ... and all the other
CPUs read large arrays of their own in order: how much longer a miss takes while the others load
the memory controller, against the GB/s they read meanwhile.
The stride kernel of native runs (13 doubles apart, modulo each iteration's own array) measures
how many misses the workloads' ``stride`` pattern overlaps, prefetcher included: its time per
line from DRAM less its time per line on the same arrays in the core's own caches, which is the
kernel's own work. A kernel's own work (the update of each double, its index arithmetic) is the
workload's compute, not the memory's: the update kernel runs at about the same rate from every
level of a cache hierarchy, so it would measure the core, not the level.
Each probe runs on pinned threads under a time bound, like the other calibration probes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .hostinfo import SYS_CPU, Cache, caches, memory_available, memory_total

PROBE_TIMEOUT_S = 30.0
DRAM_FACTOR = 4           # the DRAM probes' working set: this many times the last cache level
DRAM_FALLBACK = 256 << 20  # ... or this much where sysfs lists no caches
STREAM_BYTES = 256 << 20   # each bandwidth measurement reads (each jitter one updates) at least this much
CHASE_LOADS = 1_000_000    # timed dependent loads per latency measurement (DRAM: a third of it)
TRIES = 3                  # each figure is the best of this many measurements: others share the CPUs
JITTER_RUNS = 11           # repetitions of one stream whose spread of times is the memory-time jitter
STRIDE_ARRAY_BYTES = 16 << 10  # the stride probe's array per iteration for outstanding_misses
STRIDE_ARRAYS_KIB = (1, 4, 16, 64)  # ... and the sizes for stride_misses: a prefetcher's gain depends on it
KNEE_STEPS = 8             # the last level's capacity is found among this many fractions of it
LOADED_BATCHES = 100       # the loaded-latency probe: per count of readers and try, this many samples, ...
LOADED_BATCH_LOADS = 2000  # ... each the mean of this many dependent loads (a fraction of a millisecond)
SEED = 0x5EED              # the probes' random cycles and addresses (any fixed value: they only need to be random)


def _probe(kind: str, cpus: list[int], size: int, line: int, count: int):
    from .extension import _native

    return _native.memory(kind, list(cpus), int(size), int(line), int(count), SEED, PROBE_TIMEOUT_S)


def chase_ns(cpu: int, size: int, line: int, loads: int = CHASE_LOADS) -> float:
    """Best ns per dependent load around a random cycle of ``size`` bytes of lines."""
    return min(_probe("chase", [cpu], size, line, loads) for _ in range(TRIES))


def read_gbs(cpus: list[int], size: int, line: int) -> float:
    """Best GB/s of ``len(cpus)`` threads reading ``size`` bytes each in order at once (together)."""
    passes = max(2, -(-STREAM_BYTES // (size * len(cpus))))
    return max(_probe("read", cpus, size, line, passes)[1] for _ in range(TRIES))


def independent_ns(cpu: int, size: int, line: int) -> float:
    """Best ns per load of random lines whose addresses do not depend on earlier loads.

    Seven streams of addresses (each an add and a multiply of the loop's, for lines of a power of
    two) go to seven sums: the core keeps as many loads in flight as it can, so the level's loads
    set the time, not the loop's own work (a generator chained through one address or one sum
    would hold it to that chain's pace even where the first level answers every load).
    """
    return min(_probe("independent", [cpu], size, line, CHASE_LOADS) for _ in range(TRIES))


def stride_ns(size: int, line: int, array_bytes: int = STRIDE_ARRAY_BYTES) -> float:
    """Best ns per line of the native stride kernel (the ``arrays`` workload) on one thread over ``size`` bytes."""
    from .pinned_runs import run

    n = max(1, size // array_bytes)
    workload = f"arrays:n={n},bytes={array_bytes},balance=balanced"
    # The first loop of each run places the pages; the later ones find them where the size leaves them.
    best = min(min(run("omp-static", workload, 1, repeat=3).loop_ns[1:]) for _ in range(TRIES))
    return best / (n * array_bytes / line)


def loaded_counts(cpus: int) -> list[int]:
    """How many other CPUs read in each step of the loaded-latency probe: 0, 1, 2, 4, ... and all of them."""
    others = cpus - 1
    if others < 1:
        return []
    counts = [0, 1]
    while counts[-1] * 2 < others:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == others else counts + [others]


def loaded_latency(cpus: list[int], chase_bytes: int, stream_bytes: int, line: int) -> list[dict]:
    """Per step of :func:`loaded_counts`: the chase latency on ``cpus[0]`` while so many of the others read.

    Each step runs in every one of ``TRIES`` rounds (the buffers are built once); its figure is
    the median of the rounds' 10th percentiles of batches of dependent loads, as for the other
    probes of the calibration, and its GB/s the median of what the readers read together.
    """
    from .extension import _native
    from .probe_figure import Figure

    counts = loaded_counts(len(cpus))
    if not counts:
        return []
    steps = _native.loaded(list(cpus), int(chase_bytes), int(stream_bytes), int(line), counts * TRIES,
                           LOADED_BATCHES, LOADED_BATCH_LOADS, SEED, PROBE_TIMEOUT_S)
    points = []
    for i, readers in enumerate(counts):
        tries = steps[i::len(counts)]
        samples = [np.frombuffer(raw, dtype=np.float64) for raw, _ in tries]
        points.append({"readers": readers, "figure": Figure.of_tries(samples),
                       "gbs": float(np.median([gbs for _, gbs in tries]))})
    return points


def jitter_cv(cpu: int, size: int, line: int) -> float:
    """The relative standard deviation of the time of one stream over ``size`` bytes, repeated on one core."""
    import statistics

    passes = max(2, -(-STREAM_BYTES // size))
    times = [1.0 / _probe("stream", [cpu], size, line, passes)[1] for _ in range(JITTER_RUNS)]
    return statistics.stdev(times) / statistics.mean(times)


def measure_hierarchy(cpus: list[int], progress=print) -> dict:
    """Latency, independent loads and bandwidth of each cache level and DRAM, on ``cpus`` (the first alone)."""
    levels = caches(cpus[0])
    line = levels[0].line_bytes if levels else 64
    first = cpus[0]
    dram_bytes = DRAM_FACTOR * levels[-1].size_bytes if levels else DRAM_FALLBACK
    dram_bytes = max(min(dram_bytes, memory_available() // 4), 4 * line)
    progress(f"DRAM: pointer chase, independent loads, stride kernel and reads over {dram_bytes >> 20} MiB")
    dram_latency = chase_ns(first, dram_bytes, line, CHASE_LOADS // 3)
    knee, listed = [], 0
    if levels:
        progress(f"L{levels[-1].level}: pointer chase up to its {_kib(levels[-1].size_bytes)}, for where it stops "
                 "holding the data")
        knee = capacity_chase(first, levels, line)
        listed = levels[-1].size_bytes
        levels[-1] = replace(levels[-1], size_bytes=held_bytes(knee, dram_latency, listed))
    measured = []
    for cache in levels:
        size = cache.size_bytes // 2
        progress(f"L{cache.level}: pointer chase, independent loads and reads over {_kib(size)}")
        measured.append({"cache": cache, "probe_bytes": size, "latency_ns": chase_ns(first, size, line),
                         "bandwidth_gbs": read_gbs([first], size, line),
                         "random_read_ns": independent_ns(first, size, line)})
    independent = independent_ns(first, dram_bytes, line)
    bandwidth = read_gbs([first], dram_bytes, line)
    hot_bytes = cached_bytes(levels)
    # What the model charges a line of the stride kernel where the core's caches hold the data: its transfer.
    holder = next((i for i, c in enumerate(levels) if c.size_bytes > hot_bytes), None)
    hot_line = line / measured[holder]["bandwidth_gbs"] if holder is not None else 0.0
    stride = []
    for kib in STRIDE_ARRAYS_KIB:
        cold, hot = stride_ns(dram_bytes, line, kib << 10), stride_ns(hot_bytes, line, kib << 10)
        stride.append({"array_bytes": kib << 10, "cold_ns": cold, "hot_ns": hot, "miss_ns": cold - hot + hot_line,
                       "misses": misses_in_flight(dram_latency, cold - hot + hot_line, line / bandwidth)})
    jitter = jitter_cv(first, dram_bytes, line)
    # All threads together: the same total working set split over 1..P of them; the best aggregate.
    progress(f"DRAM: reads with 1..{len(cpus)} threads at once")
    shared = [bandwidth] + [read_gbs(cpus[:k], max(dram_bytes // k, 4 * line), line)
                            for k in range(2, len(cpus) + 1)]
    loaded, stream_bytes = [], 0
    if len(cpus) > 1:
        counts = ", ".join(map(str, loaded_counts(len(cpus))))
        progress(f"DRAM: pointer chase on CPU {first} while {counts} other CPU(s) read at once")
        others = len(cpus) - 1
        # Together the readers' arrays are at least the DRAM probes' working set, each at least twice what the
        # last level holds, so that they read from DRAM; all of them in at most half the free memory.
        held = levels[-1].size_bytes if levels else 0
        stream_bytes = min(max(dram_bytes // others, 2 * held), memory_available() // (2 * others + 2))
        stream_bytes = max(stream_bytes // 4096 * 4096, 4096)
        loaded = loaded_latency(cpus, dram_bytes, stream_bytes, line)
    return {"line_bytes": line, "levels": measured, "knee": knee, "listed_bytes": listed, "dram_bytes": dram_bytes,
            "dram_latency_ns": dram_latency, "independent_ns": independent, "stride": stride,
            "hot_bytes": hot_bytes, "hot_line_ns": hot_line,
            "dram_bandwidth_gbs": bandwidth, "shared_gbs": shared, "jitter_cv": jitter, "memory_bytes": memory_total(),
            "cpu": first, "loaded": loaded, "loaded_stream_bytes": stream_bytes}


def capacity_chase(cpu: int, levels: list[Cache], line: int) -> list[tuple[int, float]]:
    """(bytes, ns) of pointer chases over eighths of the last level, those beyond the level inside it."""
    last, inside = levels[-1].size_bytes, levels[-2].size_bytes if len(levels) > 1 else 0
    sizes = [last * k // KNEE_STEPS for k in range(1, KNEE_STEPS + 1)]
    return [(size, chase_ns(cpu, size, line, CHASE_LOADS // 3)) for size in sizes if size > inside]


def held_bytes(knee: list[tuple[int, float]], dram_latency: float, listed: int) -> int:
    """How much of the last level holds data: the largest chase before the first one nearer DRAM's latency.

    A virtual machine's share of a last level, or a level that other tenants fill, can hold
    less than sysfs lists for it; the model must price what the loops will find.
    """
    if not knee:
        return listed
    held, inner = knee[0][0], knee[0][1]
    for size, ns in knee:
        if ns - inner > dram_latency - ns:
            return held
        held = size
    return listed


def half_private(levels) -> int:
    """Half the last level private to a core (the first level if none is): data its own caches hold; 0 if none."""
    private = [c for c in levels if c.shared_by == "core"] or levels[:1]
    return private[-1].size_bytes // 2 if private else 0


def cached_bytes(levels: list[Cache]) -> int:
    """The stride probe's working set in the core's own caches (at least one of its largest arrays)."""
    return max(max(STRIDE_ARRAYS_KIB) << 10, half_private(levels))


def misses_in_flight(latency_ns: float, miss_ns: float, transfer_ns: float) -> int:
    """The misses in flight that make ``miss_ns`` a line out of a ``latency_ns`` latency.

    No more than make the latency term smaller than a line's transfer (``transfer_ns``), which
    the model charges anyway: where the misses cost nothing beyond the kernel's work, the
    bandwidth is what limits.
    """
    return max(1, round(latency_ns / max(miss_ns, transfer_ns)))


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB" if nbytes < 1 << 20 else f"{nbytes / 2**20:g} MiB"


def _entry(key: str, value: str, comment: str) -> str:
    return f"{f'{key} = {value}':<26} # {comment}"


def _size_source(m: dict, size: int) -> str:
    """The last level's size comment: sysfs's figure, or where the pointer chases found less held."""
    if size == m["listed_bytes"]:
        return (f"sysfs: size (per instance); pointer chases over up to all of it stayed nearer its latency than "
                f"DRAM's {m['dram_latency_ns']:.1f} ns")
    chases = ", ".join(f"{_kib(nbytes)} {ns:.1f}" for nbytes, ns in m["knee"])
    return (f"what holds data: the largest pointer chase before the first nearer DRAM's {m['dram_latency_ns']:.1f} ns "
            f"than the first chase's latency (ns by size: {chases}); sysfs lists {m['listed_bytes'] // 1024} KiB "
            "per instance, which this CPU does not get")


def _stride_entries(m: dict) -> list[str]:
    """``outstanding_misses`` and ``stride_misses``, with the stride kernel's times they come from."""
    probe = next(p for p in m["stride"] if p["array_bytes"] == STRIDE_ARRAY_BYTES)
    transfer = m["line_bytes"] / m["dram_bandwidth_gbs"]
    latency = m["dram_latency_ns"]
    times = "; ".join(f"{_kib(p['array_bytes'])} {p['cold_ns']:.2f} and {p['hot_ns']:.2f} ns, so {p['miss_ns']:.2f}"
                      for p in m["stride"])
    pairs = ", ".join(f"[{p['array_bytes'] >> 10}, {p['misses']}]" for p in m["stride"])
    return [
        _entry("outstanding_misses", f"{probe['misses']}", f"round(DRAM chase latency {latency:.1f} ns / "
               f"max({probe['miss_ns']:.2f} ns, {transfer:.2f} ns)): the misses in flight the stride pattern gets "
               f"over {_kib(STRIDE_ARRAY_BYTES)} arrays, prefetcher included. {probe['miss_ns']:.2f} ns: what the "
               f"model must charge a line of the stride kernel from DRAM, so that one thread's loop over "
               f"{_kib(m['dram_bytes'])} of such arrays takes {probe['cold_ns']:.2f} ns a line where over "
               f"{_kib(m['hot_bytes'])} in this core's caches it takes {probe['hot_ns']:.2f} ns and the model charges "
               f"{m['hot_line_ns']:.2f} ns; {transfer:.2f} ns: a line at the DRAM bandwidth below, which limits "
               f"beyond. Independent random loads, which no prefetcher follows: {m['independent_ns']:.2f} ns, "
               f"{max(1, round(latency / m['independent_ns']))} in flight"),
        _entry("stride_misses", f"[{pairs}]", f"[array KiB, misses in flight]: the same by the size of the arrays "
               f"the stride kernel runs over, since the prefetcher follows it better over some (ns a line over "
               f"{_kib(m['dram_bytes'])} and over {_kib(m['hot_bytes'])}, so ns from DRAM: {times})")]


def loaded_curve(points: list[dict]) -> tuple[list[tuple[float, float]], list[str]]:
    """The ``loaded_latency_ns`` pairs (GB/s read, ns) of the probe's ``points``, and what was changed.

    A curve's GB/s rise (a step whose readers read no more than the one before is left out) and
    its ns do not fall (a step faster than the one before is raised to it).
    """
    pairs, notes = [], []
    for point in points:
        gbs, ns = round(point["gbs"], 1), round(point["figure"].value, 1)
        if pairs and gbs <= pairs[-1][0]:
            notes.append(f"{point['readers']} reading CPU(s) left out: {gbs:.1f} GB/s, no more than the step "
                         "before")
            continue
        if pairs and ns < pairs[-1][1]:
            notes.append(f"{point['readers']} reading CPU(s): {ns:.1f} ns raised to the step before's")
            ns = pairs[-1][1]
        pairs.append((0.0 if not pairs else gbs, ns))
    return pairs, notes


def _loaded_entry(m: dict) -> list[str]:
    """``loaded_latency_ns`` and its source, where the probe ran (more than one CPU); nothing otherwise."""
    pairs, notes = loaded_curve(m.get("loaded", []))
    if len(pairs) < 2:
        return []
    steps = "; ".join(f"{p['readers']} CPU(s) {p['gbs']:.1f} GB/s, {p['figure'].spread()}"
                      for p in m["loaded"])
    curve = "[" + ", ".join(f"[{gbs:.1f}, {ns:.1f}]" for gbs, ns in pairs) + "]"
    return [_entry("loaded_latency_ns", curve,
                   f"[GB/s the other CPUs read, ns]: pointer chase as for latency_ns on CPU {m['cpu']} over "
                   f"{_kib(m['dram_bytes'])} while 0, 1, ... of the other CPUs each read "
                   f"{_kib(m['loaded_stream_bytes'])} of their own in order, again and again; each the "
                   f"median over {TRIES} tries of the 10th percentile of {LOADED_BATCHES} samples of "
                   f"{LOADED_BATCH_LOADS} dependent loads, beside the median GB/s the readers read together "
                   f"(by reading CPUs: {steps})" + "".join(f"; {note}" for note in notes))]


def _not_below(measured: float, floor: float) -> float:
    """A figure as written (2 decimals), raised to ``floor``: noise must not make an outer level faster than an
    inner one."""
    return max(round(measured, 2), floor)


def _random_read_entry(written: float, measured: float, size: str, which: str, raised_to: str) -> str:
    """``random_read_ns`` as ``written``, from independent loads over ``size``, and whether it was raised."""
    return _entry("random_read_ns", f"{written:.2f}", f"independent loads: ns per load at random lines of {size} "
                  f"{which}, addresses not depending on each other, one thread; the best of {TRIES} tries"
                  + (f"; measured {measured:.2f}, raised to {raised_to}" if written > round(measured, 2) else ""))


def hierarchy_text(m: dict) -> str:
    """The ``[cache.lN]`` and ``[dram]`` sections for measurements ``m``, each value commented with its source."""
    out = ["", f"# The memory hierarchy: sizes, lines and sharing from {SYS_CPU}/cpu{m['cpu']}/cache/index*/ (data and",
           f"# unified caches); latencies and bandwidths measured on CPU {m['cpu']}, each the best of {TRIES} tries "
           "(large pages where", "# the kernel grants them, so the probes time the memory rather than page walks)."]
    floor = random_floor = 0.0
    for i, level in enumerate(m["levels"]):
        cache = level["cache"]
        latency = floor = _not_below(level["latency_ns"], floor)
        raised = latency > round(level["latency_ns"], 2)
        random_read = random_floor = _not_below(level["random_read_ns"], random_floor)
        size = _kib(level["probe_bytes"])
        out += [f"[cache.l{cache.level}]",
                _entry("size_kib", f"{cache.size_bytes // 1024}", _size_source(m, cache.size_bytes)
                       if i == len(m["levels"]) - 1 else "sysfs: size (per instance)"),
                _entry("line_bytes", f"{cache.line_bytes}", "sysfs: coherency_line_size"),
                _entry("shared_by", f'"{cache.shared_by}"', f"sysfs: shared_cpu_list {cache.shared_cpus}"
                       + (" (this core's hardware threads)" if cache.shared_by == "core" else " (beyond this core)")),
                _entry("latency_ns", f"{latency:.2f}", f"pointer chase: ns per dependent load around a random cycle "
                       f"of lines over {size} (half the level)"
                       + (f"; measured {level['latency_ns']:.2f}, raised to the level inside's" if raised else "")),
                _entry("bandwidth_gbs", f"{level['bandwidth_gbs']:.1f}", f"one thread reading every word of "
                       f"{size} in order, again and again, nothing stored: GB/s read"),
                _random_read_entry(random_read, level["random_read_ns"], size, "(half the level)",
                                   "the level inside's")]
        if i == 0:
            out += _stride_entries(m)
        out.append("")
    dram_latency = _not_below(m["dram_latency_ns"], floor)
    dram_random_read = _not_below(m["independent_ns"], random_floor)
    shared = m["shared_gbs"]
    best = max(range(len(shared)), key=lambda k: shared[k])
    size = _kib(m["dram_bytes"])
    out += ["[dram]",
            _entry("node", '"socket"', "one NUMA node: this file describes one socket"),
            _entry("size_gib", f"{m['memory_bytes'] / 2**30:.1f}", "/proc/meminfo: MemTotal"),
            _entry("latency_ns", f"{dram_latency:.2f}", f"pointer chase as for the caches, over {size} "
                   f"({DRAM_FACTOR} x the last level's size in sysfs)"
                   + (f"; measured {m['dram_latency_ns']:.2f}, raised to the last level's"
                      if dram_latency > round(m["dram_latency_ns"], 2) else "")),
            _random_read_entry(dram_random_read, m["independent_ns"], size,
                               f"({DRAM_FACTOR} x the last level's size in sysfs)", "the last level's"),
            _entry("bandwidth_gbs", f"{m['dram_bandwidth_gbs']:.1f}", f"one thread reading every word of "
                   f"{size} in order, as for the caches"),
            _entry("shared_bandwidth_gbs", f"{shared[best]:.1f}", f"the best aggregate of 1..{len(shared)} threads "
                   f"reading {size} split between them, all at once ({best + 1} thread(s)); GB/s by thread count: "
                   f"[{', '.join(f'{x:.1f}' for x in shared)}]"),
            *_loaded_entry(m),
            _entry("jitter_cv", f"{min(m['jitter_cv'], 0.5):.3f}", f"standard deviation / mean of the time of "
                   f"{JITTER_RUNS} identical passes of the stream kernel (each double loaded, incremented, stored "
                   f"back) over {size} on one core (capped at 0.5)"), ""]
    return "\n".join(out)
