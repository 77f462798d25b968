"""Measure this machine into a machine file: core-to-core latencies, atomics, wake-up, loop and chunk costs,
and its memory hierarchy (cache sizes from sysfs; latencies and bandwidths measured)."""

from __future__ import annotations

import datetime
import platform
import statistics
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..machine import load_machine
from ..output import check_output, write_whole
from . import check_threads, require, run
from .memprobe import hierarchy_text


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


def measure(threads: int | None = None, rounds: int = 20000, progress=print) -> dict:
    """Run every probe on the first ``threads`` CPUs (default: all): a dict of the measured values."""
    from . import _native, cores

    require()
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 10_000_000:
        raise SimschedError(f"rounds must be an integer in [1, 10000000], got {rounds!r}")
    cpus = check_threads(threads if threads is not None else len(cores()))
    p = len(cpus)
    progress(f"ping-pong over {p * (p - 1) // 2} core pair(s), {rounds} round trips each, by store and by CAS, "
             f"the median of {PINGPONG_TRIES} tries")
    # The model's latency is a write until a spinning reader sees it (an invalidation, then the re-fetch): what
    # a barrier's flags cost. A compare-and-swap ping-pong instead times one line taken over by an atomic. The
    # two alternate, and each is the median of its tries: a shared host has moments when either is far off.
    matrix, cas = np.zeros((p, p)), np.zeros((p, p))
    for a in range(p):
        for b in range(a + 1, p):
            tries = [[_native.pingpong(cpus[a], cpus[b], rounds, handoff)[0] for handoff in (True, False)]
                     for _ in range(PINGPONG_TRIES)]
            handoff, atomic_handoff = np.median(tries, axis=0)
            matrix[a, b] = matrix[b, a] = handoff
            cas[a, b] = cas[b, a] = atomic_handoff
    progress("fetch-and-add with 1.." + str(p) + " contending threads")
    fetch_add = [_native.fetch_add(cpus[:k], 200000) for k in range(1, p + 1)]
    progress("thread wake-up latency")
    wakeup = _native.wakeup(cpus[0], cpus[-1], 200) if p > 1 else _native.wakeup(cpus[0], cpus[0], 200)
    clock_read = _native.clock_read()
    progress("loop and chunk overheads on one thread")
    # Per chunk: one thread claims 20,000 one-iteration chunks, less their work (and, below, the uncontended
    # atomic). The iterations busy-wait, as every iteration with a cost does: a chunk of them ends a clock read
    # or so past its deadline, which a chunk of empty iterations never pays.
    work = f"cost_ns={CHUNK_PROBE_NS:g}"
    dynamic = run("omp-dynamic:chunk=1", f"uforall:n=20000,{work}", 1, repeat=5)
    per_chunk = statistics.median(dynamic.loop_ns[1:]) / 20000 - CHUNK_PROBE_NS
    # Per loop: a one-iteration static loop, less its work (and, below, one chunk).
    static = run("omp-static", f"uforall:n=1,{work}", 1, repeat=201)
    per_loop = statistics.median(static.loop_ns[1:]) - CHUNK_PROBE_NS
    progress(f"OS noise: fixed work quanta of {NOISE_QUANTUM_NS / 1e3:g} us, {NOISE_SAMPLES} per CPU")
    noise = noise_profile(cpus)
    progress(f"OS noise: {noise['rate_hz']:.0f} interruption(s) per second per CPU, "
             f"mean {noise['duration_us']:.1f} us, longest {noise['max_us']:.1f} us ({noise['share']:.3%} of each CPU)")
    ghz, clock_source = _clock_ghz()
    from .memprobe import measure_hierarchy

    memory = measure_hierarchy(cpus, progress)
    return {"cpus": cpus, "rounds": rounds, "matrix": matrix, "cas": cas, "fetch_add": fetch_add, "wakeup": wakeup,
            "clock_read": clock_read, "per_chunk": per_chunk, "per_loop": per_loop, "ghz": ghz,
            "clock_source": clock_source, "memory": memory, "noise": noise}


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


# Tries of each ping-pong per pair of CPUs, of which the file takes the median.
PINGPONG_TRIES = 5

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
    from . import _native

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
    return f'''# Measured by `{command}` on {host}, {when}, on CPUs {m["cpus"]}.
# Every value below was measured by that command unless its comment says otherwise.
name = "host"
description = "{host}: {p} CPU(s) measured by simsched native calibrate on {when[:10]}"

[topology]
sockets = 1                # the measured matrix carries the topology; one socket of {p} cores is only its shape
cores_per_socket = {p}
threads_per_core = 1

[clock]
base_ghz = {m["ghz"]:.3f}          # {m["clock_source"]}

[latency_ns]
# One-way latency by ping-pong between two pinned threads, each spinning on reads of one line until the
# other's store shows, then storing its reply: round trip / 2, {m["rounds"]} round trips, the median of
# {PINGPONG_TRIES} tries per pair (the diagonal is the same core).
matrix = [
{rows},
]
transfer_fraction = {fraction:.3f}   # median over pairs of (compare-and-swap ping-pong one-way - atomic) / the above

[coherence]
protocol = "snoop"
serve_ns = {serve:.2f}          # (fetch-and-add with all {p} threads contending - uncontended) / {max(p - 1, 1)}
{atomics_line()}

[costs_ns]
atomic = {atomic:.2f}            # uncontended fetch-and-add, 200,000 in a row on one thread
store = 1.0                # assumed, not measured: a store retires into the store buffer in about a cycle
# loop_setup: the median native omp-static loop of one {probe} ns iteration on one thread, less the iteration
# and a chunk; chunk: the median native omp-dynamic chunk=1 chunk of one {probe} ns iteration on one thread,
# less the iteration and an atomic (a chunk of busy-waited iterations ends a clock read or so past its deadline)
loop_setup = {loop_setup:.1f}
chunk = {chunk:.1f}
combine = 1.0              # assumed, not measured: combining two partial results is an add or two
timer = {m["clock_read"]:.1f}             # one CLOCK_MONOTONIC read (the clock the native runtime times chunks with), mean of 10^6
# fetch-and-add ns per operation with 1..{p} contending threads: [{curve}]

[os]
wakeup_ns = {m["wakeup"]:.0f}          # condition-variable signal until the blocked thread runs, mean of 200
''' + noise_text(m["noise"]) + hierarchy_text(m["memory"])


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
              progress=print) -> Path:
    """Measure this machine and write its machine file to ``out`` (checked loadable before it is kept)."""
    out = check_output(out, "--out")
    try:
        measured = measure(threads, rounds, progress)
    except TimeoutError as exc:  # a probe's own time bound
        raise SimschedError(f"calibration stopped: {exc}") from None
    text = machine_text(measured, command or "simsched native calibrate")

    def write(partial):
        partial.write_text(text, encoding="utf-8")
        load_machine(partial)

    return write_whole(out, write, "--out")
