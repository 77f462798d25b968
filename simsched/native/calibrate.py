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


def measure(threads: int | None = None, rounds: int = 20000, progress=print) -> dict:
    """Run every probe on the first ``threads`` CPUs (default: all): a dict of the measured values."""
    from . import _native, cores

    require()
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 10_000_000:
        raise SimschedError(f"rounds must be an integer in [1, 10000000], got {rounds!r}")
    cpus = check_threads(threads if threads is not None else len(cores()))
    p = len(cpus)
    progress(f"ping-pong over {p * (p - 1) // 2} core pair(s), {rounds} round trips each")
    matrix = np.zeros((p, p))
    for a in range(p):
        for b in range(a + 1, p):
            one_way, _ = _native.pingpong(cpus[a], cpus[b], rounds)
            matrix[a, b] = matrix[b, a] = one_way
    progress("fetch-and-add with 1.." + str(p) + " contending threads")
    fetch_add = [_native.fetch_add(cpus[:k], 200000) for k in range(1, p + 1)]
    progress("thread wake-up latency")
    wakeup = _native.wakeup(cpus[0], cpus[-1], 200) if p > 1 else _native.wakeup(cpus[0], cpus[0], 200)
    clock_read = _native.clock_read()
    progress("loop and chunk overheads on one thread")
    # Per chunk: one thread claims 20,000 empty one-iteration chunks; less the uncontended atomic.
    dynamic = run("omp-dynamic:chunk=1", "uforall:n=20000,cost_ns=0", 1, repeat=5)
    per_chunk = statistics.median(dynamic.loop_ns[1:]) / 20000
    # Per loop: an empty one-iteration static loop, less one chunk.
    static = run("omp-static", "uforall:n=1,cost_ns=0", 1, repeat=201)
    per_loop = statistics.median(static.loop_ns[1:])
    progress(f"OS noise: fixed work quanta of {NOISE_QUANTUM_NS / 1e3:g} us, {NOISE_SAMPLES} per CPU")
    noise = noise_profile(cpus)
    progress(f"OS noise: {noise['rate_hz']:.0f} interruption(s) per second per CPU, "
             f"mean {noise['duration_us']:.1f} us, longest {noise['max_us']:.1f} us ({noise['share']:.3%} of each CPU)")
    ghz, clock_source = _clock_ghz()
    from .memprobe import measure_hierarchy

    memory = measure_hierarchy(cpus, progress)
    return {"cpus": cpus, "rounds": rounds, "matrix": matrix, "fetch_add": fetch_add, "wakeup": wakeup,
            "clock_read": clock_read, "per_chunk": per_chunk, "per_loop": per_loop, "ghz": ghz,
            "clock_source": clock_source, "memory": memory, "noise": noise}


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
    loop_setup = max(m["per_loop"] - m["per_chunk"], 0.0)
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
# One-way latency by compare-and-swap ping-pong between two pinned threads, round trip / 2,
# {m["rounds"]} round trips per pair (the diagonal is the same core).
matrix = [
{rows},
]

[coherence]
protocol = "snoop"
serve_ns = {serve:.2f}          # (fetch-and-add with all {p} threads contending - uncontended) / {max(p - 1, 1)}

[costs_ns]
atomic = {atomic:.2f}            # uncontended fetch-and-add, 200,000 in a row on one thread
store = 1.0                # assumed, not measured: a store retires into the store buffer in about a cycle
loop_setup = {loop_setup:.1f}        # median native empty one-iteration omp-static loop on one thread, less a chunk
chunk = {chunk:.1f}             # median native per-chunk time of omp-dynamic chunk=1 on one thread, less an atomic
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
