"""Measure this machine into a machine file: core-to-core latencies, atomics, wake-up, loop and chunk costs,
and its memory hierarchy (cache sizes from sysfs; latencies and bandwidths measured)."""

from __future__ import annotations

import datetime
import platform
import tempfile
import tomllib
import warnings
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..machine import Machine, load_machine
from ..output import check_output, write_whole
from . import hostload
from .extension import check_threads, require
from .memprobe import hierarchy_text
from .omp_calibrate import Probe, costs_text, fit_costs, section_text
from .pinned_runs import run
from .probe_figure import LOW_PERCENTILE, Figure


def _clock_ghz() -> tuple[float, str]:
    """The CPU clock and where it was read."""
    for path in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
                 "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq"):
        try:
            return int(Path(path).read_text().split()[0]) / 1e6, path
        except (OSError, ValueError, IndexError):
            pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("cpu mhz"):
                return float(line.split(":")[1]) / 1e3, "/proc/cpuinfo (cpu MHz, current)"
    except (OSError, ValueError, IndexError):
        pass
    return 1.0, "not readable here; 1.0 is a placeholder"


def atomics_line(arch: str | None = None, cpuinfo: str | None = None) -> str:
    """The ``[coherence] atomics`` line for this CPU's architecture, or a comment where it is not known."""
    arch = (arch if arch is not None else platform.machine()).lower()
    if arch in ("x86_64", "amd64", "i386", "i686"):
        return f'atomics = "locked"         # {arch}: a LOCK-prefixed read-modify-write holds the line (cache locking)'
    if arch in ("aarch64", "arm64"):
        if cpuinfo is None:
            try:
                cpuinfo = Path("/proc/cpuinfo").read_text()
            except OSError:
                cpuinfo = ""
        features = {word for line in cpuinfo.splitlines() if line.lower().startswith("features")
                    for word in line.split(":", 1)[1].split()}
        if "atomics" in features:
            return (f'atomics = "locked"         # {arch} with LSE (/proc/cpuinfo: atomics): single-instruction '
                    "atomics, which the runtime's atomics compile to where the CPU has them")
        return (f'atomics = "reservation"    # {arch} without LSE (no "atomics" in /proc/cpuinfo): atomics are '
                "load-exclusive / store-exclusive loops")
    if arch.startswith(("ppc", "powerpc")):
        return (f'atomics = "reservation"    # {arch}: atomics are lwarx / stwcx. loops (load and reserve, '
                "store conditional)")
    return f"# atomics: not known for {arch}; the simulator's default (locked) applies"


# Tries of each ping-pong per pair of CPUs, each timed in batches of at most this many round trips.
PINGPONG_TRIES = 5
PINGPONG_BATCH = 100
# A probe whose tries' low percentiles are further apart than this measured something besides the hardware.
TRIES_APART = 1.5
# Upper bounds no healthy shared-memory host reaches: a one-way cache-line transfer across the sockets of the
# largest machines modeled here is a few hundred ns (machines/*.toml), and a chunk claim is one atomic and a
# few stores (tens of ns).
IMPLAUSIBLE = {"latency_ns": 2000.0, "chunk_ns": 1000.0}
# The fetch-and-add probe, for each number of contending threads: tries of so many operations on one line.
ATOMIC_TRIES = 10
ATOMIC_OPS = 20000
WAKEUP_ROUNDS = 200
# The clock probe: tries of so many reads in a row.
CLOCK_TRIES = 20
CLOCK_READS = 50000
# The chunk probe: loops of this many one-iteration chunks; the loop probe: this many one-iteration loops.
CHUNK_PROBE_N = 20000
CHUNK_PROBE_LOOPS = 20
LOOP_PROBE_LOOPS = 200


def _check_rounds(rounds) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 10_000_000:
        raise SimschedError(f"rounds must be an integer in [1, 10000000], got {rounds!r}")


def measure(threads: int | None = None, rounds: int = 20000, progress=print, openmp=None) -> dict:
    """Run every probe on the first ``threads`` CPUs (default: all): a dict of the measured values.

    Each figure is a low percentile of many short samples (see :class:`Figure`): other work on
    a shared host only ever makes a sample slower, so the fastest samples are the hardware's.
    ``m["doubts"]`` lists what makes the figures doubtful: other work on the CPUs while they
    were measured (``m["load"]``), or tries of one probe that disagree. With ``openmp`` (an
    :class:`.omp_calibrate.Probe`), ``m["openmp"]`` holds that OpenMP runtime's figures.
    """
    from .extension import _native, cores

    require()
    _check_rounds(rounds)
    cpus = check_threads(threads if threads is not None else len(cores()))
    p = len(cpus)
    meter = hostload.Meter(cpus)
    doubts = []
    # The OpenMP runtime first: a probe that fails, fails before the long probes rather than after them.
    omp = openmp.measure(progress) if openmp is not None else None
    batch = max(1, min(PINGPONG_BATCH, rounds // 10))
    rounds = rounds // batch * batch
    progress(f"ping-pong over {p * (p - 1) // 2} core pair(s) by store and by CAS, {PINGPONG_TRIES} tries of "
             f"{rounds} round trips in batches of {batch}: the median of the tries' {LOW_PERCENTILE}th "
             "percentiles")
    # The model's latency is a write until a spinning reader sees it (an invalidation, then the re-fetch): what
    # a barrier's flags cost. A compare-and-swap ping-pong instead times one line taken over by an atomic. The
    # two alternate, each timed in short batches: a shared host takes the CPUs away now and then, and a batch
    # it interrupts is far off, while the others are not.
    matrix, cas = np.zeros((p, p)), np.zeros((p, p))
    pairs = {}
    for a in range(p):
        for b in range(a + 1, p):
            tries = {True: [], False: []}
            for _ in range(PINGPONG_TRIES):
                for handoff in (True, False):
                    raw = _native.pingpong(cpus[a], cpus[b], rounds, handoff, batch)[2]
                    tries[handoff].append(np.frombuffer(raw, dtype=np.float64))
            meter.sample()
            handoff, atomic_handoff = (Figure.of_tries(tries[kind]) for kind in (True, False))
            matrix[a, b] = matrix[b, a] = handoff.value
            cas[a, b] = cas[b, a] = atomic_handoff.value
            pairs[cpus[a], cpus[b]] = (handoff, atomic_handoff)
            progress(f"  CPUs {cpus[a]}-{cpus[b]}: one way {handoff.spread()}; "
                     f"by CAS {atomic_handoff.spread()}")
            for figure, name in ((handoff, "ping-pong"), (atomic_handoff, "CAS ping-pong")):
                if figure.apart > TRIES_APART:
                    doubts.append(f"the {name} of CPUs {cpus[a]}-{cpus[b]} differed {figure.apart:.1f}x "
                                  "between its tries")
    progress(f"fetch-and-add with 1..{p} contending threads, {ATOMIC_TRIES} tries of {ATOMIC_OPS} each")
    fetch_add = []
    for k in range(1, p + 1):
        # Contended tries whose threads overlap less also run faster, so those take the median, not a low one.
        figure = Figure.of([_native.fetch_add(cpus[:k], ATOMIC_OPS) for _ in range(ATOMIC_TRIES)],
                           LOW_PERCENTILE if k == 1 else 50)
        fetch_add.append(figure)
        progress(f"  {k} thread(s): {figure.spread()}")
    meter.sample()
    progress(f"thread wake-up latency, {WAKEUP_ROUNDS} wake-ups: the median")
    wakeups = _native.wakeup(cpus[0], cpus[-1], WAKEUP_ROUNDS)[1]
    wakeup = Figure.of(np.frombuffer(wakeups, dtype=np.float64), 50)
    progress(f"  {wakeup.spread()}")
    clock_read = Figure.of([_native.clock_read(CLOCK_READS) for _ in range(CLOCK_TRIES)])
    progress(f"one clock read: {clock_read.spread(digits=2)}")
    progress("loop and chunk overheads on one thread")
    # Per chunk: one thread claims 20,000 one-iteration chunks, less their work (and, below, the uncontended
    # atomic). The iterations busy-wait, as every iteration with a cost does: a chunk of them ends a clock read
    # or so past its deadline, which a chunk of empty iterations never pays.
    work = f"cost_ns={CHUNK_PROBE_NS:g}"
    dynamic = run("omp-dynamic:chunk=1", f"uforall:n={CHUNK_PROBE_N},{work}", 1, repeat=CHUNK_PROBE_LOOPS + 1)
    per_chunk = Figure.of(np.asarray(dynamic.loop_ns[1:]) / CHUNK_PROBE_N - CHUNK_PROBE_NS)
    progress(f"  chunk: {per_chunk.spread()}")
    # Per loop: a one-iteration static loop, less its work (and, below, one chunk).
    static = run("omp-static", f"uforall:n=1,{work}", 1, repeat=LOOP_PROBE_LOOPS + 1)
    per_loop = Figure.of(np.asarray(static.loop_ns[1:]) - CHUNK_PROBE_NS)
    progress(f"  loop: {per_loop.spread()}")
    meter.sample()
    progress(f"OS noise: fixed work quanta of {NOISE_QUANTUM_NS / 1e3:g} us, {NOISE_SAMPLES} per CPU")
    noise = noise_profile(cpus)
    progress(f"OS noise: {noise['rate_hz']:.0f} interruption(s) per second per CPU, "
             f"mean {noise['duration_us']:.1f} us, longest {noise['max_us']:.1f} us ({noise['share']:.3%} of each CPU)")
    ghz, clock_source = _clock_ghz()
    from .memprobe import measure_hierarchy

    memory = measure_hierarchy(cpus, progress)
    for point in memory.get("loaded", []) if memory else []:
        progress(f"  chase with {point['readers']} other CPU(s) reading ({point['gbs']:.1f} GB/s): "
                 f"{point['figure'].spread()}")
        if point["figure"].apart > TRIES_APART:
            doubts.append(f"the pointer chase with {point['readers']} other CPU(s) reading differed "
                          f"{point['figure'].apart:.1f}x between its tries")
    meter.sample()
    load = meter.read()
    if load is not None:
        progress(f"while measuring: {load.describe()}")
        if load.busy():
            doubts.insert(0, load.busy())
    # However quiet the host looked, a figure past what any shared-memory machine shows is no measurement.
    for name, value, limit in (("one-way latency", float(matrix.max()), IMPLAUSIBLE["latency_ns"]),
                               ("chunk cost", per_chunk.value, IMPLAUSIBLE["chunk_ns"])):
        if value > limit:
            doubts.append(f"the {name}, {value:.4g} ns, is past the {limit:g} ns no shared-memory host shows")
    return {"cpus": cpus, "rounds": rounds, "batch": batch, "matrix": matrix, "cas": cas,
            "fetch_add": [f.value for f in fetch_add], "wakeup": wakeup.value, "clock_read": clock_read.value,
            "per_chunk": per_chunk.value, "per_loop": per_loop.value, "ghz": ghz,
            "clock_source": clock_source, "memory": memory, "noise": noise, "load": load, "doubts": doubts,
            "openmp": omp,
            "figures": {"pairs": pairs, "fetch_add": fetch_add, "wakeup": wakeup, "clock_read": clock_read,
                        "per_chunk": per_chunk, "per_loop": per_loop}}


def transfer_fraction(handoff: np.ndarray, cas: np.ndarray, atomic: float) -> float:
    """One line transfer as a share of the one-way latency, from the two ping-pongs of each pair of CPUs.

    A compare-and-swap ping-pong's one way is the line taken over by an atomic, one transfer
    and the atomic itself; the read-spin ping-pong's, an invalidation and a re-fetch. The
    simulator's default (0.5) where one CPU gives no pair.
    """
    pairs = ~np.eye(handoff.shape[0], dtype=bool)
    if not pairs.any():
        return 0.5
    shares = (cas[pairs] - atomic) / handoff[pairs]
    return float(np.clip(np.median(shares), 0.05, 1.0))


# The work of each iteration of the chunk and loop probes: EPCC schedbench's default delay.
CHUNK_PROBE_NS = 100.0

# The noise probe: a fixed amount of work timed again and again on each CPU (fixed-work-quantum style).
NOISE_QUANTUM_NS = 10_000
NOISE_SAMPLES = 50_000
# A quantum counts as interrupted when it runs this much over the undisturbed ones (its 10th percentile),
# or this share over them, whichever is more: below it is clock and cache jitter, not the OS.
NOISE_THRESHOLD_NS = 1_000
NOISE_THRESHOLD_SHARE = 0.1


def noise_profile(cpus: list[int], quantum_ns: float = NOISE_QUANTUM_NS, samples: int = NOISE_SAMPLES) -> dict:
    """Interruptions per second and their mean duration, from fixed work quanta timed on each CPU in turn."""
    from .extension import _native

    count, lost, total, longest = 0, 0.0, 0.0, 0.0
    for cpu in cpus:
        raw, _ = _native.quanta(int(cpu), float(quantum_ns), int(samples))
        durations = np.frombuffer(raw, dtype=np.float64)
        undisturbed = float(np.percentile(durations, 10))
        excess = durations - undisturbed
        hit = excess > max(NOISE_THRESHOLD_NS, NOISE_THRESHOLD_SHARE * undisturbed)
        count += int(hit.sum())
        lost += float(excess[hit].sum())
        total += float(durations.sum())
        longest = max(longest, float(excess.max()))
    rate = count / (total / 1e9) if total > 0 else 0.0   # per CPU: both sums run over every CPU
    return {"quantum_ns": quantum_ns, "samples": samples, "rate_hz": rate,
            "duration_us": lost / count / 1e3 if count else 0.0, "max_us": longest / 1e3,
            "share": lost / total if total > 0 else 0.0}


def machine_text(m: dict, command: str) -> str:
    """The machine file for measurements ``m``, every value commented with how it was measured."""
    p = len(m["cpus"])
    when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    host = platform.node() or "this machine"
    atomic = m["fetch_add"][0]
    # Contention: each extra thread on one line adds about one line hand-over per operation.
    serve = max((m["fetch_add"][-1] - atomic) / (p - 1), 0.0) if p > 1 else 0.0
    chunk = max(m["per_chunk"] - atomic, 0.0)
    fraction = transfer_fraction(m["matrix"], m["cas"], atomic)
    loop_setup = max(m["per_loop"] - m["per_chunk"], 0.0)
    probe = f"{CHUNK_PROBE_NS:g}"
    rows = ",\n".join("    [" + ", ".join(f"{x:.1f}" for x in row) + "]" for row in m["matrix"])
    curve = ", ".join(f"{x:.1f}" for x in m["fetch_add"])
    low = f"{LOW_PERCENTILE}th percentile"
    omp = m.get("openmp")
    if omp is None:
        loop_chunk = f'''\
# loop_setup: the {low} of {LOOP_PROBE_LOOPS} native omp-static loops of one {probe} ns iteration on
# one thread, less the iteration and a chunk; chunk: the {low} of {CHUNK_PROBE_LOOPS} native omp-dynamic
# chunk=1 loops of {CHUNK_PROBE_N:,} one-iteration chunks of {probe} ns on one thread, per chunk, less the
# iteration and an atomic (a chunk of busy-waited iterations ends a clock read or so past its deadline)
loop_setup = {loop_setup:.1f}
chunk = {chunk:.1f}
'''
    else:
        loop_chunk = costs_text(omp, loop_setup, chunk)
    whose = f", loop and chunk costs of {omp['runtime']}" if omp is not None else ""
    return f'''# Measured by `{command}` on {host}, {when}, on CPUs {m["cpus"]}.
# Every value below was measured by that command unless its comment says otherwise.
{trust_text(m)}name = "host"
description = "{host}: {p} CPU(s) measured by simsched native calibrate on {when[:10]}{whose}"

[topology]
sockets = 1                # the measured matrix carries the topology; one socket of {p} cores is only its shape
cores_per_socket = {p}
threads_per_core = 1

[clock]
base_ghz = {m["ghz"]:.3f}          # {m["clock_source"]}

[latency_ns]
# One-way latency by ping-pong between two pinned threads, each spinning on reads of one line until the
# other's store shows, then storing its reply: round trip / 2, timed in batches of {m["batch"]} round trips;
# the median over {PINGPONG_TRIES} tries of {m["rounds"]} round trips of each try's {low} of its batches, per
# pair (the diagonal is the same core).
matrix = [
{rows},
]
transfer_fraction = {fraction:.3f}   # median over pairs of (compare-and-swap ping-pong one-way - atomic) / the above

[coherence]
protocol = "snoop"
serve_ns = {serve:.2f}          # (fetch-and-add with all {p} threads contending - uncontended) / {max(p - 1, 1)}
{atomics_line()}

[costs_ns]
# atomic: uncontended fetch-and-add on one thread, the {low} of {ATOMIC_TRIES} tries of {ATOMIC_OPS:,}
atomic = {atomic:.2f}
store = 1.0                # assumed, not measured: a store retires into the store buffer in about a cycle
{loop_chunk}combine = 1.0              # assumed, not measured: combining two partial results is an add or two
# timer: one CLOCK_MONOTONIC read (the clock the native runtime times chunks with), the {low} of
# {CLOCK_TRIES} tries of {CLOCK_READS:,} reads in a row
timer = {m["clock_read"]:.1f}
# fetch-and-add ns per operation with 1..{p} contending threads, of {ATOMIC_TRIES} tries each the {low}
# for one thread, the median for more (tries whose threads overlap less run faster): [{curve}]

[os]
# wakeup_ns: condition-variable signal until the blocked thread runs, the median of {WAKEUP_ROUNDS} (a
# wake-up's own latency varies widely even on an idle host: a low percentile would understate it)
wakeup_ns = {m["wakeup"]:.0f}
''' + openmp_text(omp) + noise_text(m["noise"]) + hierarchy_text(m["memory"])


def fit_openmp(m: dict, command: str) -> None:
    """Fit [costs_ns] to the OpenMP runtime measured in ``m["openmp"]``, if any (see ``fit_costs``)."""
    if m.get("openmp") is None:
        return

    def model():
        return Machine.from_dict(tomllib.loads(machine_text(m, command)), "the calibration")

    fit_costs(m["openmp"], m["fetch_add"][0], model)


def openmp_text(omp: dict | None) -> str:
    """The [openmp] section of a calibration with ``--openmp``; nothing without."""
    return section_text(omp) if omp is not None else ""


# How a machine file's header marks a doubt about its figures (``native validate`` warns of them).
DOUBTFUL = "# DOUBTFUL (written with --force):"


def trust_text(m: dict) -> str:
    """Comment lines on the host's load while measured, and what makes the figures doubtful, if anything."""
    lines = []
    if m.get("load") is not None:
        lines.append(f"# While measuring: {m['load'].describe()}.")
    for doubt in m.get("doubts", []):
        lines.append(f"{DOUBTFUL} {doubt}.")
    return "".join(line + "\n" for line in lines)


def noise_text(noise: dict) -> str:
    """The measured noise profile as a [noise] section, left commented out: simulations stay noise-free by default."""
    return f'''
# OS noise measured by fixed work quanta: {noise["samples"]} quanta of {noise["quantum_ns"] / 1e3:g} us on each
# CPU, a quantum interrupted when over its CPU's 10th percentile by more than {NOISE_THRESHOLD_NS / 1e3:g} us or
# {NOISE_THRESHOLD_SHARE:.0%}; interruptions took {noise["share"]:.3%} of each CPU, the longest
# {noise["max_us"]:.1f} us.
# Uncomment the section (or run with --set noise.rate_hz=... --set noise.duration_us=...) to simulate it.
# [noise]
# rate_hz = {noise["rate_hz"]:.1f}       # interrupted quanta per second per CPU
# duration_us = {noise["duration_us"]:.2f}     # mean time an interrupted quantum ran over the undisturbed ones
# duration = "exponential"
'''


def calibrate(out: str | Path, threads: int | None = None, rounds: int = 20000, command: str = "",
              progress=print, force: bool = False, openmp: str | None = None) -> Path:
    """Measure this machine and write its machine file to ``out`` (checked loadable before it is kept).

    A host too busy to measure is refused before anything is measured, and figures that turn
    out doubtful (other work while they were measured, tries that disagree) are not written:
    unless ``force``, which writes them with a warning and the doubts in the file's header.
    With ``openmp`` (a runtime's library, ``gnu``, or "" for the default: see :mod:`.omp_calibrate`),
    [costs_ns] loop_setup and chunk are that OpenMP runtime's, and [openmp] holds its figures.
    """
    from .extension import cores

    out = check_output(out, "--out")
    require()
    _check_rounds(rounds)
    cpus = check_threads(threads if threads is not None else len(cores()))
    with tempfile.TemporaryDirectory(prefix="simsched-calibrate-") as folder:
        # A runtime that is none, or no compiler to build its probe, is refused before anything is measured.
        probe = Probe.build(openmp, Path(folder), cpus) if openmp is not None else None
        before = hostload.look(cpus)
        doubts = []
        if before is not None:
            if before.busy():
                if not force:
                    raise SimschedError(f"this host is too busy to calibrate: {before.busy()}; calibrate on "
                                        "an idle host, or give --force to write the figures anyway, marked "
                                        "doubtful")
                doubts.append(f"before measuring, {before.busy()}")
            progress(f"before measuring: {before.describe()}")
        else:
            progress("the host's load is not readable here (/proc/stat): the figures are not checked against "
                     "it")
        try:
            measured = measure(threads, rounds, progress, probe)
        except TimeoutError as exc:  # a probe's own time bound
            raise SimschedError(f"calibration stopped: {exc}") from None
    measured["doubts"] = doubts + measured["doubts"]
    if measured["doubts"]:
        if not force:
            raise SimschedError(f"the measured figures are doubtful: {'; '.join(measured['doubts'])}; "
                                "nothing was written: calibrate on an idle host, or give --force to write "
                                "them anyway")
        warnings.warn(f"writing doubtful figures (--force): {'; '.join(measured['doubts'])}", RuntimeWarning,
                      stacklevel=2)
    command = command or "simsched native calibrate"
    fit_openmp(measured, command)
    text = machine_text(measured, command)

    def write(partial):
        partial.write_text(text, encoding="utf-8")
        load_machine(partial)

    return write_whole(out, write, "--out")
