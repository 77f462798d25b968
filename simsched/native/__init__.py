"""Native mode: the scheduler algorithms on pinned threads of this machine (a C extension, optional).

``run`` executes a loop program on real threads and returns a :class:`~simsched.result.Result`
of the same shape as a simulated one; ``calibrate`` measures this machine into a machine
file the simulator can load. Without the compiled extension the simulator works as
before and every native entry point says, in one line, that native mode is not built.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache

import numpy as np
import pandas as pd

from .. import affinity
from ..engine import STATES, verify_exactly_once
from ..schedulers.base import default_grain
from ..schedulers.runtimes import guided_sizes
from ..spec import MAX_INT
from ..errors import ExecutionError, SimschedError
from ..locality import ELEMENT_BYTES, Footprint
from ..result import CHUNK_COLUMNS, SEGMENT_COLUMNS, Result

try:
    from . import _native
except ImportError:  # built without a C compiler: the simulator works, native mode says it is missing
    _native = None

# Registry name -> (how iterations are shared, full barrier at the fork, full barrier at the join,
# the barrier kind when the scheduler has no ``barrier`` parameter).
NATIVE = {
    "omp-static": ("static", True, True, None),
    "fg-tree": ("static", False, False, "tree"),
    "fg-central": ("static", False, False, "central"),
    "fg-tree-full": ("static", True, True, "tree"),
    "omp-dynamic": ("dynamic", True, True, None),
    "omp-guided": ("guided", True, True, None),
    "stealing": ("stealing", True, True, None),
    "ich": ("ich", True, True, None),
    "hybrid": ("hybrid", True, True, "tree"),
    "wf": ("wf", True, True, None),
    "awf-b": ("awf-b", True, True, None),
    "awf-c": ("awf-c", True, True, None),
    "awf-d": ("awf-d", True, True, None),
    "awf-e": ("awf-e", True, True, None),
    "af": ("af", True, True, None),
    # Chunk tables computed by the scheduler's own ``bounds`` and claimed by index (pls: its static blocks first).
    **{name: ("table", True, True, None) for name in ("tss", "fac2", "fsc", "mfsc", "fac", "tfss", "fiss", "viss",
                                                      "rnd")},
    "pls": ("static-table", True, True, None),
    "static-steal": ("static_steal", True, True, None),
    "nonmonotonic-dynamic": ("static_steal", True, True, None),
    "tbb-simple": ("tbb_simple", True, True, "tree"),
    "tbb-auto": ("tbb_auto", True, True, "tree"),
    "tbb-affinity": ("tbb_affinity", True, True, "tree"),
}
# The native runtime's idle workers spin until work or the next loop comes; none ever sleeps. A simulation
# set beside a native run gives a scheduler that can sleep a count of failed steals that no run reaches.
NEVER_SLEEPS = {"sleep_after": MAX_INT}
DEFAULT_TIMEOUT_S = 60.0
MAX_REPEAT = 1_000_000
INT32 = 2**31 - 1


def _check_integer(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise SimschedError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _check_timeout(timeout_s) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise SimschedError(f"timeout must be a finite number of seconds > 0, got {timeout_s!r}")
    return float(timeout_s)


def available() -> bool:
    """Whether the native runtime was built."""
    return _native is not None


def require() -> None:
    """Raise a one-line error unless the native runtime was built."""
    if _native is None:
        raise SimschedError("native mode is not built: reinstall simsched on a machine with a C compiler "
                            "(pip install .)")


def cores() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def check_threads(threads: int) -> list[int]:
    """The CPUs for ``threads`` workers; refuses more workers than CPUs (oversubscribed spinning is meaningless)."""
    cpus = cores()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise SimschedError(f"threads must be an integer >= 1, got {threads!r}")
    if threads > len(cpus):
        raise SimschedError(f"threads={threads} exceeds the {len(cpus)} CPU(s) available here: spinning threads "
                            "must not share a CPU")
    return cpus[:threads]


# What a chunk-rule scheduler does around its ``bounds`` in a simulation: natively the runtime itself runs the
# loop between its barriers and claims the table ``bounds`` gives, so a plugin's rule runs natively only if it
# leaves these as its built-in ancestor has them.
TABLE_HOOKS = ("setup", "worker", "prepare", "fork", "share", "claim", "join")


def _builtin(cls: type) -> bool:
    return cls.__module__.startswith("simsched.")


def native_entry(scheduler) -> tuple:
    """``scheduler``'s row of :data:`NATIVE`: a built-in's own; for a scheduler defined outside simsched that
    is a chunk rule (an IndexedChunks subclass), the table share of its nearest built-in ancestor."""
    from ..schedulers.selfsched import IndexedChunks

    cls = type(scheduler)
    if _builtin(cls):
        if scheduler.name not in NATIVE:
            raise SimschedError(f"native mode runs {', '.join(NATIVE)}; not {scheduler.name}")
        return NATIVE[scheduler.name]
    if not isinstance(scheduler, IndexedChunks):
        raise SimschedError("native mode runs only chunk-rule schedulers (IndexedChunks/ChunkRule "
                            "subclasses) among those defined outside simsched: the runtime claims the table "
                            f"their bounds give; {scheduler.name} ({cls.__module__}.{cls.__qualname__}) is not one")
    base = next(c for c in cls.__mro__ if _builtin(c))
    changed = [hook for hook in TABLE_HOOKS if getattr(cls, hook) is not getattr(base, hook)]
    if changed:
        raise SimschedError(f"native mode: scheduler {scheduler.name} overrides {', '.join(changed)} of "
                            f"{base.__qualname__}; natively the runtime itself claims the table its bounds "
                            f"give, so a chunk rule runs there only with {', '.join(TABLE_HOOKS)} as "
                            f"{base.__qualname__} has them")
    if tuple(cls.COUNTERS) != tuple(base.COUNTERS):
        own = ", ".join(sorted(set(cls.COUNTERS) - set(base.COUNTERS))) or "fewer"
        raise SimschedError(f"native mode: scheduler {scheduler.name} reports counters of its own ({own}), "
                            "which the native runtime does not count")
    return NATIVE.get(base.name, ("table", True, True, None))


def native_config(scheduler, n: int = 0, threads: int = 1) -> tuple[str, str, bool, bool, int]:
    """How the native runtime runs ``scheduler`` on ``n`` iterations: (share, barrier, fork full, join full, chunk)."""
    share, fork_full, join_full, barrier = native_entry(scheduler)
    if barrier is None:
        # The native runtime has one tree barrier: the simulator's tree-shaped kinds all map to it.
        kind = getattr(scheduler, "barrier_kind", None) or scheduler.params.get("barrier", "tree")
        if kind == "dissemination":
            raise SimschedError("native mode has central and tree barriers, not dissemination")
        barrier = "central" if kind == "central" else "tree"
    params = scheduler.params
    if "sleep_after" in scheduler.PARAMS and params["sleep_after"] != scheduler.PARAMS["sleep_after"].default:
        raise SimschedError(f"native mode: {scheduler.name}'s idle workers spin and never sleep, so "
                            f"sleep_after={params['sleep_after']} has no native counterpart")
    if "mu_every" in scheduler.PARAMS and params["mu_every"] != scheduler.PARAMS["mu_every"].default:
        raise SimschedError(f"native mode: {scheduler.name}'s threads read every progress counter after each chunk, "
                            f"so mu_every={params['mu_every']} has no native counterpart")
    # The TBB partitioners' grainsize and hybrid's grain are the native runtime's chunk: ranges above it split.
    given = params.get("chunk", params.get("grainsize", params.get("grain", 0)))
    chunk = _check_integer("chunk", int(given or 0), 0, INT32)
    if chunk == 0 and share in ("hybrid", "dynamic", "guided"):
        chunk = default_grain(n, threads)  # cilk_for's grain: hybrid's leaves, and omp chunk=0
    if share == "guided" and scheduler.runtime.guided == "llvm":
        share = "guided_llvm"  # libomp's rule: R/2P by CAS, then chunks of k by fetch-and-add
    return share, barrier, fork_full, join_full, chunk


def as_run_natively(scheduler):
    """``scheduler`` as the native runtime runs it, for a simulation beside a native run: no worker sleeps.

    An idle simulated thief then makes one steal attempt after another, an event each, for as
    long as it is idle: a loop whose workers idle for milliseconds simulates in seconds.
    """
    from ..schedulers import get_scheduler

    scheduler = get_scheduler(scheduler)
    if "sleep_after" in scheduler.PARAMS:
        return get_scheduler(scheduler, **NEVER_SLEEPS)
    return scheduler


MAX_ARRAYS_BYTES = 2**31
# What a native run holds for each iteration (its costs as drawn, their prefix sums and their differences,
# at once) and for each chunk it records (the runtime's record, its copy for Python and the chunk table built
# from it): peaks measured on runs of 10^6 to 10^7 iterations and chunks (25 and 190 bytes), rounded up.
ITERATION_BYTES = 32
CHUNK_BYTES = 200


# The shares whose chunks are at most ``chunk`` iterations, at least where there are more left.
SPLIT_TO_CHUNK = ("dynamic", "stealing", "static_steal", "hybrid", "tbb_simple", "tbb_auto", "tbb_affinity")


def expected_chunks(share: str, chunk: int, sizes, loops: int, threads: int) -> int:
    """About how many chunks a run of ``loops`` loops records: ``sizes`` are the program's loop sizes, run
    over and over; ``share`` and ``chunk`` as :func:`native_config` gives them (tables: their own count).

    Exact for the static, dynamic and guided shares; at most so many for the shares that split down
    to ``chunk`` (stealing, static stealing, hybrid, TBB); for iCh and the factoring shares, whose
    chunks shrink geometrically, P (log2 n + 2) per loop.
    """
    sizes = [int(n) for n in sizes]
    step = max(int(chunk), 1)

    def per_loop(n: int) -> int:
        if share == "static":
            return min(threads, n) if chunk <= 0 else -(-n // step)
        if share == "guided":
            count, left = 0, n
            while left > 0:   # as the runtime sizes them: the rest over P, at least the chunk
                left -= min(max(-(-left // threads), step), left)
                count += 1
            return count
        if share == "guided_llvm":
            return len(guided_sizes("llvm", n, threads, step))
        if share in SPLIT_TO_CHUNK:
            return -(-n // step)
        return min(n, threads * (n.bit_length() + 2))

    per_program = sum(per_loop(n) for n in sizes)
    return per_program * (loops // len(sizes)) + sum(per_loop(n) for n in sizes[:loops % len(sizes)])


def check_memory(need: int, what: str) -> None:
    """Refuse, in one line, a run that would need more of the memory available here than a simulated run may
    take (the simulator's budget, ``chunks.memory_room``)."""
    from ..chunks import memory_room

    limit, room = memory_room()
    if need > limit:
        raise SimschedError(f"native mode: {what} would need about {need / 2**30:.1f} GiB of memory, {room}: "
                            "run fewer iterations or loops, or larger chunks")


def _iterations(spec) -> int:
    """The iterations of a workload's loop, from its ``n`` where it has one (0: known only once drawn)."""
    n = spec.params.get("n")
    return n if isinstance(n, int) and 0 < n <= INT32 else 0


def _program(spec, seed: int):
    """The run's one loop, drawn from the run's one generator: its costs, its footprint (or None), the generator."""
    _check_integer("seed", seed, 0, 2**63 - 1)
    if spec.params.get("n", 0) > INT32:
        raise SimschedError(f"native mode runs loops of at most {INT32} iterations")
    rng = np.random.default_rng(seed)
    loops = spec.loops(rng)
    if any(loop.inner for loop in loops):
        raise SimschedError(f"native mode runs flat loops; workload {spec.spec} nests loops in its iterations")
    if len(loops) > 1:
        raise SimschedError(f"native mode runs one loop (repeated with --repeat); workload {spec.spec} is a "
                            f"program of {len(loops)} loops")
    loop = loops[0]
    if loop.n > INT32:
        raise SimschedError(f"native mode runs loops of at most {INT32} iterations")
    # The simulator charges these prefix sums; their differences are the costs it sees.
    costs = np.ascontiguousarray(np.diff(loop.prefix), dtype=np.float64)
    # Data the workload gives unasked (an application's) is left out: the kernel runs declared data only.
    data = None if loop.data is not None and loop.data.optional else loop.data
    return costs, data, rng


def _footprint(spec, footprint, n: int, array_bytes):
    """What each iteration's memory kernel touches: the workload's footprint, or ``--array-bytes`` for all alike."""
    if isinstance(array_bytes, bool) or not isinstance(array_bytes, (int, np.integer)) or array_bytes < 0:
        raise SimschedError(f"array bytes must be an integer >= 0, got {array_bytes!r}")
    if not array_bytes:
        return footprint
    if footprint is not None or "bytes" in spec.given:
        raise SimschedError(f"--array-bytes gives every iteration an array; workload {spec.spec} already says "
                            "what its iterations touch (bytes=): give one or the other")
    if array_bytes < ELEMENT_BYTES:
        raise SimschedError("array bytes must be 0 (no memory kernel) or at least 8 (one double)")
    return Footprint(bytes=np.full(n, int(array_bytes), dtype=np.int64))


def _numa_nodes() -> list[int]:
    """This host's NUMA nodes with memory (node 0 where sysfs does not say)."""
    from .memprobe import _cpu_list

    for name in ("has_memory", "online"):
        try:
            with open(f"/sys/devices/system/node/{name}") as file:
                return sorted(_cpu_list(file.read()))
        except (OSError, ValueError):
            pass
    return [0]


def kernel(footprint, rng) -> tuple:
    """The extension's memory-kernel arguments for ``footprint``: doubles per iteration, pattern, doubles per
    line, the random cycles' seed and the interleave node mask; () without a footprint.

    Each iteration's array is its bytes rounded up to whole doubles, and starts on a line of its
    own (so iterations run by different workers never share a line). The whole must fit within
    2 GiB and the memory free here.
    """
    if footprint is None or not footprint.bytes.any():
        return ()
    from .memprobe import caches, memory_available

    levels = caches()
    line = levels[0].line_bytes if levels else 64
    elems = -(-footprint.bytes // ELEMENT_BYTES)
    mapped = int((-(-elems // (line // ELEMENT_BYTES))).sum()) * line
    n = footprint.bytes.size
    what = (f"{n} iterations x {int(footprint.bytes[0])} bytes" if (footprint.bytes == footprint.bytes[0]).all()
            else f"{n} iterations, {footprint.total} bytes in all")
    if mapped > MAX_ARRAYS_BYTES:
        raise SimschedError(f"the memory kernel would need {mapped / 2**30:.1f} GiB ({what}, each iteration's "
                            "array on lines of its own); at most 2 GiB")
    free = memory_available()
    if mapped > free:
        raise SimschedError(f"the memory kernel would need {mapped / 2**30:.2f} GiB ({what}); only "
                            f"{free / 2**30:.2f} GiB of memory is free here")
    if footprint.gather is not None:
        raise SimschedError("native mode's memory kernel runs each iteration's own data; these iterations "
                            "also read an array they share: give the workload data=0 to run its compute alone")
    if footprint.placement == "master" and len(_numa_nodes()) > 1:
        raise SimschedError("placement=master: native mode places pages by first touch or interleave")
    mask = 0
    if footprint.placement == "interleave":  # on a one-node host this changes nothing
        nodes = _numa_nodes()
        if max(nodes) >= 64:
            raise SimschedError("placement=interleave: native mode deals pages over NUMA nodes 0..63 only")
        mask = sum(1 << node for node in nodes)
    seed = int(rng.integers(2**63)) if footprint.pattern == "random" else 0
    return (np.ascontiguousarray(elems, dtype=np.int64).tobytes(), footprint.pattern, line // ELEMENT_BYTES,
            seed, mask)


def run(scheduler, workload, threads: int, seed: int = 0, repeat: int = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S, array_bytes: int = 0, timeline: bool = False,
        late_us: float = 0.0) -> Result:
    """Run ``workload`` ``repeat`` times back to back on ``threads`` pinned threads under ``scheduler``.

    An iteration whose workload has a footprint (``bytes=``, or ``array_bytes`` for every
    iteration of a workload without one) first runs the memory kernel over an array of its own,
    then busy-waits its cost: ``stride`` steps 13 doubles modulo the array, ``stream`` passes
    over it in order, ``random`` chases a random cycle through its lines. The loops share the
    data, so an iteration finds its array warm on the core that ran it in the previous loop.
    The arrays are not touched before the first loop: its workers fault their pages in (first
    touch), unless ``placement=interleave`` deals the pages over the NUMA nodes. With
    ``timeline``, each worker also records when it reached and left each loop's fork and join,
    from which ``Result.segments`` holds its sync and schedule stretches. With ``late_us``, the
    last worker spins that long after it sees each loop released before it joins in: the late
    arrival a machine's ``[noise] late_us, late_workers = 1`` simulates.
    """
    from ..schedulers import get_scheduler
    from ..workloads import get_workload

    require()
    sched = get_scheduler(scheduler)
    native_config(sched)
    check_threads(threads)
    repeat = _check_integer("repeat", repeat, 1, MAX_REPEAT)
    timeout_s = _check_timeout(timeout_s)
    if isinstance(late_us, bool) or not isinstance(late_us, (int, float)) or not 0 <= late_us <= 1e6:
        raise SimschedError(f"late_us must be a number in [0, 1e6] (us), got {late_us!r}")
    if late_us and threads < 2:
        raise SimschedError("a late worker needs at least 2 threads (the master is never late)")
    spec = get_workload(workload)
    n = _iterations(spec)
    if n:   # before the costs are drawn: drawing them takes the most
        share, _, _, _, chunk = native_config(sched, n, threads)
        chunks = 0 if share in ("table", "static-table") else expected_chunks(share, chunk, [n], repeat,
                                                                                threads)
        check_memory(n * ITERATION_BYTES + chunks * CHUNK_BYTES,
                     f"{repeat} loop(s) of {n} iterations ({chunks} chunk records)")
    costs, footprint, rng = _program(spec, seed)
    memory = kernel(_footprint(spec, footprint, costs.size, array_bytes), rng)
    return execute(sched, spec.spec, threads, costs, [costs.size], repeat, seed=seed, timeout_s=timeout_s,
                   memory=memory, timeline=timeline, rng=rng, late=(threads - 1, late_us * 1e3))[0]


def execute(sched, workload: str, threads: int, costs: np.ndarray, sizes, repeat: int, seed: int = 0,
            timeout_s: float = DEFAULT_TIMEOUT_S, memory: tuple = (), csr: tuple = (),
            timeline: bool = False, plan: tuple | None = None, rng=None,
            late: tuple[int, float] = (-1, 0.0)) -> tuple[Result, bytes]:
    """Run a program of loops of ``sizes`` iterations (``costs`` for all of them, in order) ``repeat`` times
    under the scheduler object ``sched``; each iteration runs the memory kernel (``memory``: :func:`kernel`'s
    arguments) or the CSR-row kernel (``csr``), then busy-waits its cost. Returns the Result and the CSR
    kernel's outputs (empty without it).

    With ``plan`` = (int64 (loop, lo, hi) rows by worker, int64 offsets of each worker's first row, P + 1),
    the workers run exactly those chunks in that order instead, loop by loop between full barriers.
    A scheduler with a chunk table draws it from ``rng``, the run's generator (default: one seeded with ``seed``).
    ``late`` = (worker, ns): that worker arrives ns late at every loop.
    """
    cpus = check_threads(threads)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    if sizes.sum() != costs.size:
        raise ExecutionError(f"loops of {int(sizes.sum())} iterations in all, but {costs.size} costs")
    loops = _check_integer("loops", int(repeat) * sizes.size, 1, MAX_REPEAT)
    share, barrier, fork_full, join_full, chunk = native_config(sched, int(sizes.max()), threads)
    memory = memory or (b"", "stride", 8, 0, 0)  # the extension's defaults: no memory kernel
    rows, offsets = b"", b""
    if plan is not None:
        share, barrier, fork_full, join_full, chunk = "replay", "tree", True, True, 0
        rows, offsets = (np.ascontiguousarray(part, dtype=np.int64).tobytes() for part in plan)
    elif "weights" in sched.params:
        # The weighted shares read their normalised starting weights where replay reads its plan.
        from ..schedulers.adaptive import normalised

        rows = np.asarray(normalised(sched.weights, threads, f"scheduler {sched.name}"), dtype=np.float64).tobytes()
    elif share in ("table", "static-table"):
        rng = np.random.default_rng(seed) if rng is None else rng
        rows, offsets = chunk_tables(sched, costs, sizes, loops, cpus, rng)
    if plan is not None:
        chunks = len(rows) // 24   # (loop, lo, hi) of every chunk of every loop
    elif share in ("table", "static-table"):
        bounds = np.frombuffer(offsets, dtype=np.int64)
        tables = bounds.size - 1
        per_table = np.diff(bounds) - 1
        chunks = int(per_table.sum()) * (loops // tables) + int(per_table[:loops % tables].sum())
    else:
        chunks = expected_chunks(share, chunk, sizes, loops, threads)
    # The costs are drawn already; the runtime reads them in place. What is left to take: the chunk records.
    check_memory(chunks * CHUNK_BYTES, f"{loops} loop(s) of {int(sizes.sum())} iterations in all "
                                       f"({chunks} chunk records)")
    try:
        trace = _native.run(np.ascontiguousarray(costs, dtype=np.float64), loops, list(cpus), share,
                            barrier, fork_full, join_full, chunk, float(_check_timeout(timeout_s)), rows, offsets,
                            float(sched.params.get("eps", 0.33)), bool(timeline), *memory, sizes.tobytes(),
                            tuple(csr), int(late[0]), float(late[1]))
    except TimeoutError as exc:  # the watchdog stopped the threads
        raise SimschedError(f"{exc} (raise --timeout for longer loops)") from None
    except OSError as exc:  # mbind refused
        raise SimschedError(f"placement=interleave: the kernel refused to interleave the pages ({exc})") from None
    if not trace["pinned"]:
        warnings.warn("the threads could not be pinned to CPUs; they ran unpinned", RuntimeWarning, stacklevel=2)
    result = _result(trace, sched.spec, workload, threads, seed, costs, list(sizes) * int(repeat), int(repeat))
    result.counters = simulator_counters(sched.spec, result.counters)
    return result, trace["out"]


def chunk_tables(sched, costs: np.ndarray, sizes: np.ndarray, loops: int, cpus: list[int], rng) -> tuple[bytes, bytes]:
    """The int64 chunk bounds of a table scheduler, computed by its own ``bounds`` as a simulation does, and the
    offsets of each table: one table per program loop, or per loop run when the rule draws from ``rng``.

    fsc without ``h`` takes the claim overhead measured here: the mean fetch-and-add time of two
    threads on one line (of one, for one thread).
    """
    from ..loop import Loop
    from ..schedulers.selfsched import chunk_bounds

    if "h" in sched.PARAMS and sched.params["h"] is None:
        sched.claim_ns = float(_native.fetch_add(list(cpus[:2]), 20000))
    starts = np.concatenate(([0], np.cumsum(sizes)))
    program = [Loop(costs[starts[i]:starts[i + 1]]) for i in range(sizes.size)]
    count = loops if sched.RANDOM else sizes.size
    tables = [np.asarray(chunk_bounds(sched, program[t % sizes.size], len(cpus), rng), dtype=np.int64)
              for t in range(count)]
    offsets = np.cumsum([0] + [table.size for table in tables], dtype=np.int64)
    return np.concatenate(tables).tobytes(), offsets.tobytes()


# Counters the simulator reports that are zero natively by construction.
ZERO_NATIVELY = {
    "wakeups": "native workers spin between loops; they never sleep",
}


@lru_cache(maxsize=64)
def simulated_counter_keys(scheduler: str) -> tuple[str, ...]:
    """The counters a simulation of ``scheduler`` reports, less the memory model's (no hardware counterpart).

    Read from a tiny simulation, so the two modes cannot drift apart: the schedulers declare
    their counters, present even when zero.
    """
    from ..engine import simulate
    from ..memory import Memory

    counters = simulate("haswell-e5-2695v3", scheduler, "uforall:n=64", 2).counters
    return tuple(sorted(k for k in counters if k not in Memory.COUNTERS))


def simulator_counters(scheduler: str, measured: dict) -> dict[str, int]:
    """The native ``measured`` counters under exactly the simulator's keys for ``scheduler``."""
    counters = {}
    for key in simulated_counter_keys(scheduler):
        if key in measured:
            counters[key] = int(measured[key])
        elif key in ZERO_NATIVELY:
            counters[key] = 0
        else:
            raise ExecutionError(f"the native runtime does not count {key}, which a simulated {scheduler} reports")
    return counters


def _result(trace, scheduler: str, workload: str, threads: int, seed: int, costs, sizes: list,
            repeat: int) -> Result:
    """A Result from the extension's trace of loops of ``sizes`` iterations (``costs``' program ``repeat`` times),
    checked for exactly-once execution."""
    records = np.frombuffer(trace["chunks"], dtype=[("loop", "<i8"), ("lo", "<i8"), ("hi", "<i8"),
                                                     ("start", "<f8"), ("end", "<f8")])
    workers = np.frombuffer(trace["workers"], dtype="<i8")
    chunks = pd.DataFrame({"worker": workers, **{name: records[name] for name in CHUNK_COLUMNS[1:]}})
    chunks = chunks.sort_values(["start", "worker"], kind="stable").reset_index(drop=True)
    sizes = [int(n) for n in sizes]
    verify_exactly_once(chunks, sizes, scheduler)
    ends = [float(x) for x in trace["loop_end"]]
    makespan = ends[-1]
    measured = np.frombuffer(trace["state"], dtype="<f8").reshape(threads, 3)
    state = {name: np.zeros(threads) for name in STATES}
    state["compute"], state["schedule"], state["sync"] = (measured[:, 0].copy(), measured[:, 1].copy(),
                                                          measured[:, 2].copy())
    busy = state["compute"] + state["schedule"] + state["sync"]
    state["idle"] = np.maximum(makespan - busy, 0.0)
    marks = np.frombuffer(trace.get("marks", b""), dtype="<f8")
    segments = _segments(marks.reshape(threads, repeat, 4), chunks, makespan) if marks.size else None
    return Result(machine="host", scheduler=scheduler, workload=workload, threads=threads, seed=seed,
                  makespan_ns=makespan, sequential_ns=float(costs.sum()) * repeat, state_ns=state, chunks=chunks,
                  counters=dict(sorted(trace["counters"].items())),
                  loop_ns=[float(x) for x in np.diff([0.0] + ends)],
                  events=0, repeat=repeat, segments=segments, affinity=affinity.from_chunks(chunks, sizes))


def _segments(marks: np.ndarray, chunks: pd.DataFrame, makespan: float) -> pd.DataFrame:
    """Each worker's sync and schedule stretches (SEGMENT_COLUMNS) from its fork and join marks.

    ``marks[w, loop]`` holds when worker w reached the loop's fork, left it, reached its join
    and left it. The runtime accounts fork and join as sync and whatever the worker does
    between them outside its chunks (claims, steal attempts) as schedule; those gaps are
    exactly the schedule stretches. Outside the loops a worker is idle.
    """
    from ..timeline import gaps

    frames = []
    for w in range(marks.shape[0]):
        entered, begun, ended, joined = marks[w].T
        mine = chunks[chunks["worker"] == w].sort_values("start")
        starts = np.concatenate((entered, ended, mine["start"].to_numpy()))
        ends = np.concatenate((begun, joined, mine["end"].to_numpy()))
        order = np.argsort(starts, kind="stable")
        lo, hi = gaps(starts[order], ends[order], makespan)
        # A gap between a loop's fork and join is schedule time; any other is idle.
        loop = np.searchsorted(begun, lo, side="right") - 1
        inside = (loop >= 0) & (hi <= ended[np.maximum(loop, 0)])
        frames.append(pd.DataFrame({"worker": w, "state": "sync", "start": np.concatenate((entered, ended)),
                                    "end": np.concatenate((begun, joined))}))
        frames.append(pd.DataFrame({"worker": w, "state": "schedule", "start": lo[inside], "end": hi[inside]}))
    table = pd.concat(frames, ignore_index=True)
    table = table[table["end"] > table["start"]].sort_values(["worker", "start"], kind="stable")
    return table[SEGMENT_COLUMNS].reset_index(drop=True)


def summary(result: Result) -> dict:
    """Per loop: the median loop time over a native run's loops (the first included), its spread, one loop's
    sequential time and their ratio; ``total_ns`` is the whole run, over which the state times are summed.
    """
    times = np.asarray(result.loop_ns, dtype=float)
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    sequential = result.sequential_ns / result.repeat
    return {"makespan_ns": float(median), "sequential_ns": sequential,
            "speedup": sequential / float(median) if median > 0 else float("inf"),
            "makespan_spread_ns": {"min": float(times.min()), "q1": float(q1), "q3": float(q3),
                                   "max": float(times.max())},
            "total_ns": result.makespan_ns}


def report(result: Result) -> str:
    """The human-readable form of a native run: the figures of :func:`summary`, then states and counters."""
    figures = summary(result)
    spread = figures["makespan_spread_ns"]
    lines = [
        f"{result.scheduler} on {result.machine}, {result.threads} thread(s), workload {result.workload}, "
        f"seed {result.seed}, {result.repeat} loop(s)",
        f"  makespan     {figures['makespan_ns'] / 1e3:14.3f} us  median loop (min {spread['min'] / 1e3:.3f}, "
        f"max {spread['max'] / 1e3:.3f} us)",
        f"  sequential   {figures['sequential_ns'] / 1e3:14.3f} us  one loop",
        f"  speedup      {figures['speedup']:14.3f}",
        f"  whole run    {figures['total_ns'] / 1e3:14.3f} us  all {result.repeat} loop(s): the chunks, states "
        "and counters below",
        f"  chunks       {len(result.chunks):14d}",
    ]
    return "\n".join(lines + result.detail_lines())


def replay(chunks: pd.DataFrame, workload, seed: int = 0, threads: int | None = None,
           timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[Result, pd.DataFrame]:
    """Execute exactly the chunks of a (simulated) chunk table: the same workers, in the same order.

    Each loop of the table runs between full barriers. Returns the measured Result and a
    table of every chunk with its simulated and measured duration.
    """
    from ..workloads import get_workload

    require()
    missing = [c for c in CHUNK_COLUMNS if c not in chunks.columns]
    if missing:
        raise SimschedError(f"the chunk table lacks column {missing[0]!r}: is it one written by --chunks?")
    if chunks.empty:
        raise SimschedError("the chunk table is empty")
    timeout_s = _check_timeout(timeout_s)
    spec = get_workload(workload)
    check_memory(_iterations(spec) * ITERATION_BYTES + len(chunks) * CHUNK_BYTES,
                 f"a replay of {len(chunks)} chunks of workload {spec.spec}")
    costs, footprint, rng = _program(spec, seed)
    memory = kernel(footprint, rng)
    for column in ("worker", "loop", "lo", "hi"):
        values = pd.to_numeric(chunks[column], errors="coerce")
        if values.isna().any() or (values != np.floor(values)).any() or (values < 0).any():
            raise SimschedError(f"the chunk table's {column!r} column must hold integers >= 0")
    for column in ("start", "end"):
        if pd.to_numeric(chunks[column], errors="coerce").isna().any():
            raise SimschedError(f"the chunk table's {column!r} column must hold numbers")
    if (chunks["lo"] >= chunks["hi"]).any():
        raise SimschedError("the chunk table has a chunk with lo >= hi")
    if chunks["loop"].max() >= MAX_REPEAT:
        raise SimschedError(f"the chunk table has more than {MAX_REPEAT} loops")
    chunks = chunks.astype({"worker": np.int64, "loop": np.int64, "lo": np.int64, "hi": np.int64,
                            "start": float, "end": float})
    plan = chunks.sort_values(["worker", "loop", "start"], kind="stable")
    workers = plan["worker"].to_numpy(dtype=np.int64)
    threads = int(workers.max()) + 1 if threads is None else threads
    if workers.min() < 0 or workers.max() >= threads:
        raise SimschedError(f"the chunk table names workers outside 0..{threads - 1}")
    cpus = check_threads(threads)
    loops = int(plan["loop"].max()) + 1
    try:
        verify_exactly_once(plan, [costs.size] * loops, "the chunk table")
    except Exception as exc:  # the table does not cover this workload's loop: bad input, not a bug
        raise SimschedError(f"the chunk table does not fit workload {spec.spec}: {exc}") from None
    triples = np.ascontiguousarray(plan[["loop", "lo", "hi"]].to_numpy(dtype=np.int64))
    offsets = np.searchsorted(workers, np.arange(threads + 1)).astype(np.int64)
    try:
        trace = _native.run(costs.tobytes(), loops, list(cpus), "replay", "tree", True, True, 0, float(timeout_s),
                            triples.tobytes(), offsets.tobytes(), 0.33, False, *memory)
    except TimeoutError as exc:
        raise SimschedError(f"{exc} (raise --timeout for longer schedules)") from None
    except OSError as exc:
        raise SimschedError(f"placement=interleave: the kernel refused to interleave the pages ({exc})") from None
    measured = _result(trace, "replay", spec.spec, threads, seed, costs, [costs.size] * loops, loops)
    keys = ["worker", "loop", "lo", "hi"]
    simulated = chunks[keys].assign(simulated_ns=(chunks["end"] - chunks["start"]).to_numpy())
    ran = measured.chunks[keys].assign(measured_ns=(measured.chunks["end"] - measured.chunks["start"]).to_numpy())
    table = simulated.merge(ran, on=keys, how="left")
    return measured, table
