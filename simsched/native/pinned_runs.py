"""Runs on pinned threads: a workload's loop, a program of loops, and a replayed chunk table."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..engine import verify_exactly_once
from ..errors import ExecutionError, SimschedError
from ..result import CHUNK_COLUMNS, Result
from . import extension
from .extension import (DEFAULT_TIMEOUT_S, INT32, MAX_REPEAT, _check_integer, _check_timeout,
                        check_threads, require)
from .memkernel import CHUNK_BYTES, ITERATION_BYTES, _footprint, check_memory, kernel
from .run_result import _result, simulator_counters
from .shares import expected_chunks, native_config


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
            late: tuple[int, float] = (-1, 0.0), runs_each: int = 1) -> tuple[Result, bytes]:
    """Run a program of loops of ``sizes`` iterations (``costs`` for all of them, in order) ``repeat`` times
    under the scheduler object ``sched``; each iteration runs the memory kernel (``memory``: :func:`kernel`'s
    arguments) or the CSR-row kernel (``csr``), then busy-waits its cost. Returns the Result and the CSR
    kernel's outputs (empty without it).

    With ``plan`` = (int64 (loop, lo, hi) rows by worker, int64 offsets of each worker's first row, P + 1),
    the workers run exactly those chunks in that order instead, loop by loop between full barriers;
    ``runs_each``: the plan runs each of its chunks that many times (a chunk's rows one after another).
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
        trace = extension._native.run(np.ascontiguousarray(costs, dtype=np.float64), loops, list(cpus), share,
                            barrier, fork_full, join_full, chunk, float(_check_timeout(timeout_s)), rows, offsets,
                            float(sched.params.get("eps", 0.33)), bool(timeline), *memory, sizes.tobytes(),
                            tuple(csr), int(late[0]), float(late[1]))
    except TimeoutError as exc:  # the watchdog stopped the threads
        raise SimschedError(f"{exc} (raise --timeout for longer loops)") from None
    except OSError as exc:  # mbind refused
        raise SimschedError(f"placement=interleave: the kernel refused to interleave the pages ({exc})") from None
    if not trace["pinned"]:
        warnings.warn("the threads could not be pinned to CPUs; they ran unpinned", RuntimeWarning, stacklevel=2)
    result = _result(trace, sched.spec, workload, threads, seed, costs, list(sizes) * int(repeat), int(repeat),
                     runs_each)
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
        sched.claim_ns = float(extension._native.fetch_add(list(cpus[:2]), 20000))
    starts = np.concatenate(([0], np.cumsum(sizes)))
    program = [Loop(costs[starts[i]:starts[i + 1]]) for i in range(sizes.size)]
    count = loops if sched.RANDOM else sizes.size
    tables = [np.asarray(chunk_bounds(sched, program[t % sizes.size], len(cpus), rng), dtype=np.int64)
              for t in range(count)]
    offsets = np.cumsum([0] + [table.size for table in tables], dtype=np.int64)
    return np.concatenate(tables).tobytes(), offsets.tobytes()


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
        trace = extension._native.run(costs.tobytes(), loops, list(cpus), "replay", "tree", True, True, 0, float(timeout_s),
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
