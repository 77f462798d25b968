"""Simulator speed: each family's event and chunk rates next to bare SimPy's (same run), sweep wall times, peak memory.

Run:  python benchmarks/bench_speed.py                 # rates, memory of a 10^7-chunk run, the E1 sweep
      python benchmarks/bench_speed.py --sweeps e1,e2,e4   # also the E2 and E4 sweeps (many minutes)
      python benchmarks/bench_speed.py --events --sweeps none --no-memory   # also events per loop as P grows
      python benchmarks/bench_speed.py --against DIR --sweeps none --no-memory
                                                       # also each family's time a chunk against the
                                                       # checkout in DIR (its extensions built in place)
Prints each figure (a sweep also its events, and the time an event took per scheduler family);
nothing here is a pass/fail test (these machines are noisy).

"Bare events per chunk" is what a simulated chunk costs in units of one event of SimPy
itself (a process doing nothing but timeouts), measured alternately in the same run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import simpy

import simsched
from simsched import memory
from simsched.simpy_access import event_count
from simsched.sweep import load_experiment, run_sweep

ROOT = Path(__file__).resolve().parent.parent

# (label, machine, scheduler, workload, threads): one run per scheduler family.
FAMILIES = [
    ("self-scheduling", "xeon-e7-4860v2", "omp-dynamic:chunk=1", "uforall:n=100000", 48),
    ("chunked stealing", "haswell-e5-2695v3", "stealing:chunk=1", "exp-inc:n=100000", 28),
    ("iCh", "haswell-e5-2695v3", "ich", "exp-inc:n=100000", 28),
    ("work stealing", "xeon-e7-4860v2", "cilk:grain=1", "uforall:n=20000", 48),
    ("hybrid", "xeon-e7-4860v2", "hybrid", "uforall:n=20000", 48),
    ("loop tasks", "cell-qs22", "lbs", "matmul:b=32", 16),
]
SWEEPS = {"e1": "e1-burden-xeon-e7.toml", "e2": "e2-lbs-cell.toml", "e4": "e4-ich-haswell.toml"}
MEMORY_RUN = ("xeon-e7-4860v2", "omp-dynamic:chunk=1", "uforall:n=10000000", 48)


def bare_simpy_rate(processes: int, events: int) -> float:
    """Events per second of SimPy itself: ``processes`` processes doing nothing but timeouts."""
    env = simpy.Environment()
    per = max(1, events // processes)

    def proc():
        for _ in range(per):
            yield env.timeout(1.0)

    for _ in range(processes):
        env.process(proc())
    start = time.perf_counter()
    env.run()
    return event_count(env) / (time.perf_counter() - start)  # every scheduled event, as Result.events counts them


def family_rates(machine, scheduler, workload, threads, repeats):
    """Best of ``repeats`` alternating runs: (events/s, chunks/s, bare SimPy events/s, events, chunks)."""
    ours, bare = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        result = simsched.simulate(machine, scheduler, workload, threads, keep_chunks=False)
        wall = time.perf_counter() - start
        ours.append((result.events / wall, result.chunk_count / wall, result.events, result.chunk_count))
        bare.append(bare_simpy_rate(threads, result.events))
    events_rate, chunks_rate, events, chunks = max(ours)
    return events_rate, chunks_rate, max(bare), events, chunks


# One family's time a chunk in a fresh process on the simsched in ``tree``: a run to warm up (imports, the loop drawn
# and kept), then the best of ``repeats`` timed runs. An editable install's finder would import the installed
# checkout whatever the path says, so it is set aside.
CHUNK_TIME = """
import sys, time
sys.meta_path = [finder for finder in sys.meta_path if "editable" not in type(finder).__module__]
sys.path.insert(0, {tree!r})
import simsched
args, repeats = {args!r}, {repeats}
simsched.simulate(*args, keep_chunks=False)
best = min((lambda t: (simsched.simulate(*args, keep_chunks=False), time.perf_counter() - t))(time.perf_counter())[1]
           for _ in range(repeats))
r = simsched.simulate(*args, keep_chunks=False)
print(simsched.__file__, best / r.chunk_count, r.makespan_ns, r.events)
"""


def chunk_time_in(tree: Path, args: tuple, repeats: int) -> tuple[float, float, int]:
    """(seconds a chunk, makespan, events) of ``args`` run by the simsched in ``tree``."""
    out = subprocess.run([sys.executable, "-c", CHUNK_TIME.format(tree=str(tree), args=args, repeats=repeats)],
                         capture_output=True, text=True, check=True).stdout.split()
    if not out[0].startswith(str(tree)):
        raise SystemExit(f"--against: {tree} did not provide simsched (got {out[0]})")
    return float(out[1]), float(out[2]), int(out[3])


def against(other: Path, rounds: int, repeats: int) -> None:
    """Each family's time a chunk here and in ``other``, alternating fresh processes ``rounds`` times."""
    print(f"time a chunk against {other} (median of {rounds} alternating rounds, each the best of {repeats} runs):")
    print(f"{'family':<18} {'scheduler':<22} {'P':>3} {'here us':>8} {'there us':>9} {'there/here':>10}  same run")
    for label, machine, scheduler, workload, threads in FAMILIES:
        args = (machine, scheduler, workload, threads)
        here, there, same = [], [], True
        for _ in range(rounds):
            a, b = chunk_time_in(ROOT, args, repeats), chunk_time_in(other, args, repeats)
            here.append(a[0])
            there.append(b[0])
            same &= a[1:] == b[1:]
        h, t = sorted(here)[len(here) // 2], sorted(there)[len(there) // 2]
        print(f"{label:<18} {scheduler:<22} {threads:>3} {h * 1e6:>8.3f} {t * 1e6:>9.3f} {t / h:>10.2f}  "
              f"{'yes' if same else 'NO: makespan or events differ'}")


# Events of one loop as the thread count grows, 16 iterations a thread (the families of FAMILIES that run on any
# machine): a family whose events grow faster than P pays for something beyond its chunks.
SCALING_THREADS = (256, 1024, 4096)
SCALING_MACHINE = "uniform:cores=4096"
SCALING = ["omp-dynamic:chunk=1", "omp-static", "fg-tree", "cilk", "hybrid", "stealing:chunk=1", "ich",
           "stealing:chunk=1,give_up=16", "ich:give_up=16"]   # the other give-up rule: linear


def events_per_loop() -> None:
    """Print each family's events for one loop on P = 256, 1,024, 4,096 threads of a uniform machine.

    Stealing and iCh take minutes at 4,096 threads: their thieves' give-up costs 2P(P - 1) events.
    """
    print(f"events of one loop of 16 iterations a thread on {SCALING_MACHINE} (P = "
          f"{', '.join(map(str, SCALING_THREADS))}; the last column: events / P at the largest over the smallest)")
    for scheduler in SCALING:
        events = []
        for threads in SCALING_THREADS:
            result = simsched.simulate(SCALING_MACHINE, scheduler, f"uforall:n={16 * threads}", threads,
                                       keep_chunks=False)
            events.append(result.events)
        growth = (events[-1] / SCALING_THREADS[-1]) / (events[0] / SCALING_THREADS[0])
        print(f"  {scheduler:<22} " + " ".join(f"{e:>10,}" for e in events) + f"   {growth:6.1f}x")


def peak_memory_mib(keep: bool) -> tuple[float, float, int]:
    """Peak resident memory of a fresh process simulating MEMORY_RUN: (MiB, wall seconds, chunks)."""
    code = ("import resource, time, simsched\n"
            "t = time.perf_counter()\n"
            f"r = simsched.simulate(*{MEMORY_RUN!r}, keep_chunks={keep})\n"
            "w = time.perf_counter() - t\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, w, r.chunk_count)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="best of this many runs per rate")
    parser.add_argument("--jobs", type=int, default=2, help="processes for the sweeps")
    parser.add_argument("--sweeps", default="e1", help="comma-separated sweeps to time, of e1, e2, e4 (or none)")
    parser.add_argument("--no-memory", action="store_true", help="skip the 10^7-chunk memory runs")
    parser.add_argument("--against", type=Path, help="another checkout (extensions built in place) to time against")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds for --against")
    parser.add_argument("--events", action="store_true", help="also each family's events per loop as P grows")
    args = parser.parse_args()
    if args.repeats < 1 or args.jobs < 1 or args.rounds < 1:
        parser.error("--repeats, --jobs and --rounds must be >= 1")
    if args.against is not None and not (args.against / "simsched" / "__init__.py").is_file():
        parser.error(f"--against: {args.against} is not a simsched checkout")
    sweeps = [s for s in args.sweeps.split(",") if s and s != "none"]
    unknown = [s for s in sweeps if s not in SWEEPS]
    if unknown:
        parser.error(f"unknown sweep {unknown[0]!r} (known: {', '.join(SWEEPS)})")

    print("hot loops:", "compiled (simsched._speedups)" if memory.speedups is not None and memory.INLINE
          else "Python (simsched._speedups not built)")
    print(f"{'family':<18} {'scheduler':<22} {'P':>3} {'events':>8} {'chunks':>8} {'events/s':>10} "
          f"{'chunks/s':>10} {'bare ev/s':>10} {'ev ratio':>8} {'bare ev/chunk':>13}")
    for label, machine, scheduler, workload, threads in FAMILIES:
        events_rate, chunks_rate, bare, events, chunks = family_rates(machine, scheduler, workload, threads,
                                                                     args.repeats)
        print(f"{label:<18} {scheduler:<22} {threads:>3} {events:>8} {chunks:>8} {events_rate:>10,.0f} "
              f"{chunks_rate:>10,.0f} {bare:>10,.0f} {events_rate / bare:>8.2f} {bare / chunks_rate:>13.2f}")
    print("  (self-scheduling target: <= 0.2 bare events per chunk)")
    if args.against is not None:
        against(args.against.resolve(), args.rounds, args.repeats)
    if args.events:
        events_per_loop()

    start = time.perf_counter()
    result = simsched.simulate("cell-qs22", "lbs", "uforall:n=1000000,cost_ns=1000", 16)
    print(f"lbs on cell-qs22, 16 SPEs, 1,000,000 iterations of 1 us: {result.events} events, "
          f"{result.counters['splits']} splits, in {time.perf_counter() - start:.2f} s (target < 10 s)")

    if not args.no_memory:
        for keep in (True, False):
            mib, wall, chunks = peak_memory_mib(keep)
            what = "keeping its chunk table" if keep else "keeping counters only (keep_chunks=False)"
            print(f"{MEMORY_RUN[1]} on {MEMORY_RUN[3]} threads, {chunks:,} chunks, {what}: "
                  f"peak {mib:,.0f} MiB in {wall:.0f} s (target < 1024 MiB)")

    for name in sweeps:
        experiment = load_experiment(ROOT / "experiments" / SWEEPS[name])
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            frame = run_sweep(experiment, out=Path(out), jobs=args.jobs, progress=False)
            wall = time.perf_counter() - start
        print(f"{name.upper()} sweep ({SWEEPS[name]}): {len(frame)} runs on {args.jobs} processes in {wall:.1f} s")
        # What the wall time is made of: every simulated run's events at the rate its family simulates them
        # (a seed-independent run's copies for the other seeds cost nothing and are left out).
        ran = frame[frame["reused_from"].fillna("") == ""] if "reused_from" in frame else frame
        events, simulated = int(ran["events"].sum()), float(ran["wall_s"].sum())
        print(f"  {len(ran)} runs simulated ({len(frame) - len(ran)} copied), {events:,} events, {simulated:.1f} s "
              f"of simulation in all: {simulated / events * 1e6:.2f} us an event "
              f"(bare SimPy here: {1e6 / bare_simpy_rate(28, 10**6):.2f} us)")
        family = ran["scheduler"].str.split(":").str[0]
        by = ran.groupby(family)[["events", "wall_s"]].sum().sort_values("wall_s", ascending=False)
        print("  " + ", ".join(f"{s} {row.wall_s:.1f} s ({row.wall_s / row.events * 1e6:.2f} us/event)"
                               for s, row in by.iterrows() if row.events))


if __name__ == "__main__":
    main()
