"""The simulation driver: one SimPy process per worker running a scheduler over a program of loops."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from heapq import heappush
from typing import Any, NamedTuple

import numpy as np
from simpy.events import Event

from .budget import check_memory
from .chunklog import ChunkLog, chunk_limit, verify_exactly_once
from .errors import SimschedError
from .footprint import only_optional, without_optional
from .instrumentation import loop_slowdowns
from .locality import DataState
from .loop import Loop, check_total
from .machine import Machine, load_machine
from . import memory
from .memory import Memory, Wait
from .noise import Noise
from .result import SEGMENT_COLUMNS, Result
from .simpy_access import NORMAL, Environment, event_count, fire_at, processed_event, succeeded

__all__ = ["STATES", "ChunkSink", "Simulation", "simulate", "simulate_program", "verify_exactly_once"]

# Split and create are the task-pool runtimes' (schedulers/looptasks.py): splitting and creating tasks.
STATES = ("compute", "schedule", "steal", "split", "create", "sync", "idle")


def run_generator(seed) -> np.random.Generator:
    """The one seeded generator of a run, refused unless ``seed`` is an integer >= 0."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SimschedError(f"seed must be an integer >= 0, got {seed!r}")
    return np.random.default_rng(seed)


def generator_position(rng: np.random.Generator) -> tuple:
    """How far a run's generator has been used: its state, and how many child streams it has spawned."""
    # Spawning a stream (each core's noise) leaves the state as it was, yet what the stream draws still
    # depends on the seed: a run that spawned one is not seed-independent.
    return rng.bit_generator.state, rng.bit_generator.seed_seq.n_children_spawned


class ChunkSink(NamedTuple):
    """What a hot claim loop binds to record its chunks as ``record_chunk`` does (``Simulation.inline_chunks``)."""

    prefix: Callable[[int], float]      # prefix(i): the summed cost of the loop's iterations [0, i)
    slow: float                         # the worker's time per ns of work in this loop
    plain: bool                         # no data, no noise: a chunk costs its compute alone
    pending: bytearray                  # the chunk log's pending records (chunklog.pack_record)
    full: int                           # how many bytes ``pending`` holds when it is to be flushed
    flush: Callable[[], None]           # moves ``pending`` into the chunk table
    mark: Callable[[tuple], None] | None  # takes a scheduling segment, with a timeline (None without)


# The already processed event a passed wait yields: SimPy resumes the process with it at once.
# Only the worker's own ``yield`` may take it (no condition, no other process).
PASSED = processed_event()


def run_until(env: Environment, until: Event) -> Any:
    """``env.run(until=until)``: SimPy's loop, or the same loop compiled where ``memory.speedups`` is built.

    The cyclic garbage collector pauses meanwhile: a run allocates an event tuple per step, and each
    collection they set off would walk every live worker, line and process (a quarter of a 16,384-thread
    run's time). What a run leaves in cycles is collected after it.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        if memory.speedups is None:
            return env.run(until=until)
        return memory.speedups.run(env, until)
    finally:
        if collecting:
            gc.enable()


class Simulation:
    """The state of one run: SimPy environment, modeled memory, per-worker accounting and the chunk log."""

    def __init__(self, machine: Machine, threads: int, loops: Sequence[Loop] = (), seed: int = 0,
                 keep_chunks: bool = True, timeline: bool = False):
        self.rng = run_generator(seed)
        # Its state before anything draws: a run that leaves it so gives the same result for every seed.
        self._rng_start = generator_position(self.rng)
        self.machine = machine
        self.threads = machine.check_threads(threads)
        self.seed = seed
        self.env = Environment()
        # The compiled run's heap of the drivers' waits (beside SimPy's): a wait passed without the queue
        # must end before its first too. None without the compiled loops.
        self.driven = None
        if memory.speedups is not None:
            self.driven = memory.speedups.waits(self.env)
            self.env.event_ids = memory.speedups.Numbers()   # counted in C, from 0 as SimPy's count()
        self.cores = machine.placement(self.threads)
        self.costs = machine.costs
        self.counters: Counter = Counter()
        self.memory = Memory(self.env, machine.latencies.of(self.cores),
                             self.costs, machine.serve_ns, machine.transfer_fraction,
                             directory=machine.coherence == "directory",
                             reservations=machine.atomics == "reservation", hold=machine.hold == "request")
        self.slowdown = [float(x) for x in machine.speed_factors(self.threads)]
        # Interruptions and late arrivals drawn from the machine's [noise]; None without (chunks cost their work).
        self.noise = Noise.of(machine, self.cores, self.rng)
        self.time = {state: [0.0] * self.threads for state in STATES}
        # Each worker's most recent accounted segments (state, start, end): the ones that may reach
        # past the end of a run that finishes while the worker is busy (see ``run``).
        self.last: list[tuple] = [()] * self.threads
        # A wait each worker is in (state, since), timed by ``begin``/``end``.
        self.open: list[tuple | None] = [None] * self.threads
        # Without the table, chunks are only counted and checked (a run of 10^8 chunks fits in memory).
        self.keep_chunks = keep_chunks
        # With ``timeline``, every accounted segment outside compute (the chunk table holds those) as
        # (worker, state, start, end); None otherwise, so that a run without a timeline stores nothing.
        self.segments: list[tuple[int, str, float, float]] | None = [] if timeline else None
        self.load(loops)

    def load(self, loops: Sequence[Loop]) -> None:
        """Set the program: the loops the master runs one after another.

        ``loops`` lists all loops by index (the chunk table's ``loop``): the program's loops
        first, in order, then the loops nested in their iterations. ``program`` holds the
        indices of the program's loops and ``children[index]`` maps an iteration of loop
        ``index`` to the index of the loop nested in it. Only ``n``, ``total`` and
        ``serial_ns`` are used up front (and, with data, each footprint in turn, by the locality
        model's check): a streamed loop (a trace's) reads its costs when the run first reaches
        for its ``prefix`` or ``data``, as the loop starts.
        """
        self.loops = list(loops)
        self.program = list(range(len(self.loops)))
        self.children: dict[int, dict[int, int]] = {}
        for index in self.program:
            inner = self.loops[index].inner
            if inner:
                self.children[index] = {}
                for i in sorted(inner):
                    self.children[index][i] = len(self.loops)
                    self.loops.append(inner[i])
        self.loop_end = [0.0] * len(self.loops)
        if self.machine.hierarchy is None:  # no data model here: the footprints workloads give unasked are left out
            self.loops = without_optional(self.loops)
        # Where the program's data sits, when its loops touch data (None otherwise: chunks cost their compute).
        self.locality = (DataState(self.machine, self.cores, self.loops, self.rng)
                         if any(loop.data is not None for loop in self.loops) else None)
        self._chunks = ChunkLog([loop.n for loop in self.loops], self.keep_chunks,
                                chunk_limit() if self.keep_chunks else None, program=len(self.program))
        check_total(sum(loop.total + loop.serial_ns for loop in self.loops),
                    "the iteration costs of all the program's loops (repeats and nested loops included)")
        if any(loop.instrumentation for loop in self.loops):
            check_total(sum(loop.total * (1.0 + loop.instrumentation) for loop in self.loops),
                        "the iteration costs of all the program's loops, with their instrumentation,")

    # Workers index the memory's latency rows by worker number, since worker w sits on cores[w].

    def spend(self, worker: int, state: str, ns: float, start: float | None = None) -> None:
        """Account ``ns`` of ``worker``'s time to ``state`` (from ``start``, which a timeline needs)."""
        self.time[state][worker] += ns
        if self.segments is not None and start is not None and ns > 0:
            self.segments.append((worker, state, start, start + ns))

    def begin(self, worker: int, state: str) -> None:
        """Start timing ``worker`` in ``state`` (a wait whose end is not known yet) until ``end``."""
        self.open[worker] = (state, self.env.now)

    def end(self, worker: int) -> None:
        """Account the time since ``begin`` to its state."""
        state, since = self.open[worker]
        self.open[worker] = None
        self.time[state][worker] += self.env.now - since
        if self.segments is not None and self.env.now > since:
            self.segments.append((worker, state, since, self.env.now))

    def serial_code(self, worker: int, index: int) -> Generator[Event, Any, None]:
        """``worker`` runs the sequential code before program loop ``index`` (a process step; none without it)."""
        ns = self.loops[index].serial_ns
        if ns > 0:  # no zero-length step: a program without serial code keeps its exact event sequence
            end = self.env.now + ns if self.noise is None else self.noise.charge(worker, self.env.now, ns)
            yield self.wait(worker, "compute", end)

    def compute_end(self, worker: int, start: float, work: float) -> float:
        """When ``worker`` ends ``work`` ns of computing begun at ``start`` (later by interruptions, with noise)."""
        return start + work if self.noise is None else self.noise.finish(worker, start, work)

    def loop_begins(self, t: float) -> None:
        """A loop of the program is published at ``t``: with noise, draw which workers arrive late to it."""
        if self.noise is not None:
            self.noise.loop_begins(t)

    def arrive(self, worker: int) -> Generator[Event, Any, None]:
        """``worker`` arrives at the published loop: at once, or as late as the noise model says (a process step)."""
        if self.noise is not None:
            until = self.noise.arrival(worker, self.env.now)
            if until > self.env.now:
                yield self.until(until)

    def run_chunks(self, worker: int, loop: int, ranges, start: float) -> float:
        """Record ``worker`` running the iteration ranges back to back from ``start``; return the end time."""
        t = start
        for lo, hi in ranges:
            if hi > lo:
                t = self.run_chunk(worker, loop, lo, hi, t, since=t)
        return t

    def run_chunk(self, worker: int, loop: int, lo: int, hi: int, claimed: float,
                  since: float | None = None) -> float:
        """Record one chunk claimed at time ``claimed``; return when it ends.

        The time from ``since`` (default: now) to the claim and the per-chunk dispatch cost
        count as scheduling.
        """
        since = self.env.now if since is None else since
        return self.record_chunk(worker, loop, lo, hi, claimed + self.costs["chunk"], since)

    def work(self, worker: int, loop: int, lo: int, hi: int) -> float:
        """The time ``worker`` computes iterations [lo, hi) of ``loop``."""
        prefix = self.loops[loop].prefix
        return (prefix.item(hi) - prefix.item(lo)) * self.loop_slowdown[loop][worker]

    def chunk_time(self, worker: int, loop: int, lo: int, hi: int, start: float) -> float:
        """How long ``worker`` takes to run [lo, hi) from ``start``: compute, plus reaching the data if it has any.

        With data, running the chunk also moves its data into the worker's caches, so call
        this once per chunk, when it starts.
        """
        work = self.work(worker, loop, lo, hi)
        data = self.loops[loop].data
        if data is not None:
            work += self.locality.chunk(worker, data, lo, hi, start, now=self.env.now, work=work)
        if self.noise is not None:
            work = self.noise.charge(worker, start, work) - start
        return work

    def record_chunk(self, worker: int, loop: int, lo: int, hi: int, start: float, since: float) -> float:
        """Record ``worker`` computing [lo, hi) from ``start``, scheduling since ``since``; return its end."""
        if self.loops[loop].data is None and self.noise is None:
            work = self.work(worker, loop, lo, hi)   # what chunk_time comes to, one call fewer
        else:
            work = self.chunk_time(worker, loop, lo, hi, start)
        end = start + work
        self._chunks.append((worker, loop, lo, hi, start, end))
        spent = self.time
        spent["schedule"][worker] += start - since
        spent["compute"][worker] += work
        if self.segments is not None and start > since:
            self.segments.append((worker, "schedule", since, start))
        self.last[worker] = (("schedule", since, start), ("compute", start, end))
        return end

    def inline_chunks(self, worker: int, loop: int) -> ChunkSink:
        """What a hot claim loop binds to record its chunks as ``record_chunk`` does, without a call per chunk.

        Returns a ``ChunkSink`` ``(prefix, slow, plain, pending, full, flush, mark)``: a chunk [lo, hi) costs
        ``(prefix(hi) - prefix(lo)) * slow`` when ``plain`` (no data, no noise; else
        ``chunk_time``); its (worker, loop, lo, hi, start, end) goes onto ``pending`` as
        ``chunklog.pack_record`` packs it, with ``flush()`` once that holds ``full`` bytes;
        ``mark``, when set, takes its scheduling segment. The loop accounts the time itself. Only
        for loops whose chunks all end before the run can (those of a full barrier's loop):
        ``last`` is left alone.
        """
        spec, log = self.loops[loop], self._chunks
        # A memoryview reads one float of the prefix sums at a third of what ndarray.item costs.
        return ChunkSink(memoryview(spec.prefix).__getitem__, self.loop_slowdown[loop][worker],
                         spec.data is None and self.noise is None, log.pending, log.FLUSH_AT, log.flush,
                         None if self.segments is None else self.segments.append)

    def sequential_memory_ns(self) -> float:
        """The memory time of the program run sequentially on the first worker's core (0 without data)."""
        if self.locality is None:
            return 0.0
        alone = DataState(self.machine, self.cores[:1], self.loops)
        t = 0.0
        for loop in self.loops:
            if loop.data is not None:
                t += alone.chunk(0, loop.data, 0, loop.n, t, work=loop.total)
        return t

    def until(self, when: float) -> Event:
        """What the calling worker yields, at once, to wait until absolute time ``when`` (now, if that has passed).

        The wait is passed without the queue when the worker was resumed by a ``Wait`` of its
        own and nothing queued ends sooner; the clock is then already at ``when`` on return.
        """
        env = self.env
        now = env.clock
        delay = when - now
        at = now + delay if delay > 0 else now
        queue, proc = env.heap, env.running
        if (proc is not None and type(proc.waits_on) is Wait and (not queue or at < queue[0][0])
                and (self.driven is None or at < self.driven.first)):
            next(env.event_ids)  # numbered as if scheduled, so the run's event count and ties are unchanged
            env.clock = at
            return PASSED
        event = Wait(env)
        fire_at(env, event, when)
        return event

    def wait(self, worker: int, state: str, when: float) -> Event:
        """Advance ``worker`` to ``when``, accounting the time to ``state``."""
        return self.until(self.charged(worker, state, when))

    def charged(self, worker: int, state: str, when: float) -> float:
        """Account the time from now to ``when`` to ``worker``'s ``state`` and return ``when``.

        It is ``wait`` without the timeout: what a step run by ``drive`` yields (or returns).
        """
        now = self.env.clock
        if when > now:
            self.time[state][worker] += when - now
            self.last[worker] = ((state, now, when),)
            if self.segments is not None:
                self.segments.append((worker, state, now, when))
        return when

    def drive(self, steps: Generator[float, Any, tuple[float, Any]]) -> Generator[Event, Any, Any]:
        """Run ``steps`` inside the calling process, each wait a callback on one reused event; return its value.

        ``steps`` is a generator that yields the absolute times it waits until (having
        accounted them) and finally returns ``(when, value)``: the caller resumes at ``when``.
        Its waits run exactly as the process's own timeouts would, in the same order, but
        cost no timeout object and no process switch (and no queue, for a wait that ends
        before every queued event); they must be plain waits, during which nothing else of
        this worker's can happen.
        """
        env = self.env
        done = Wait(env)
        if memory.speedups is not None:   # the same stepping compiled, the driver the event of each wait
            memory.speedups.Driver(env, steps, done)()
            return (yield done)
        event = succeeded(Event(env))
        callbacks = []  # SimPy takes the list off the event before calling it, so one list serves every wait
        advance, queue, eid = steps.__next__, env.heap, env.event_ids

        def step(_event=None):
            while True:
                try:
                    when = advance()
                except StopIteration as stop:
                    when, value = stop.value
                    fire_at(env, done, when, value)
                    return
                now = env.clock
                delay = when - now
                # As Environment.schedule computes it (now + delay can differ from when in the last bit).
                when = now + delay if delay > 0 else now
                # A wait that ends before every queued event would be the next one popped: it is
                # passed here instead, numbered as if scheduled (the run's events and ties are
                # unchanged). Only as the one callback of drive's own event: the first call runs
                # in the process, resumed by an event that may have other callbacks still to run.
                if _event is not None and (not queue or when < queue[0][0]):
                    next(eid)
                    env.clock = when
                    continue
                event.callbacks = callbacks
                # Environment.schedule's own push, inlined: this runs once per chunk of every claim loop.
                heappush(queue, (when, NORMAL, next(eid), event))
                return

        callbacks.append(step)
        step()
        return (yield done)

    def run(self, scheduler) -> Result:
        """Simulate the program under ``scheduler`` and return its checked Result."""
        if self.locality is not None and not scheduler.LOCALITY and only_optional(self.loops):
            # The data the workloads gave unasked is left out, as on a machine without a memory hierarchy.
            self.loops, self.locality = without_optional(self.loops), None
        # Per loop, each worker's time per ns of work: its core's (``slowdown``), more in loops a benchmark
        # instruments (simsched.instrumentation).
        self.loop_slowdown = loop_slowdowns(self.machine, self.threads, self.slowdown, self.loops)
        if self.locality is not None and not scheduler.LOCALITY:
            raise SimschedError(f"scheduler {scheduler.name} does not model data locality; run workloads with "
                                "bytes= or data=1 under the fork-join, self-scheduling and work-stealing schedulers")
        if self.children and not scheduler.NESTED:
            raise SimschedError(f"scheduler {scheduler.name} cannot run nested loops; "
                                "the loop-task schedulers (lbs, adapt-g, adapt-l, distrib, offload, cellss) can")
        # Refuse up front a run that cannot fit rather than die after hours of simulation (simulate_program
        # checked before drawing the loops; a Simulation loaded directly is checked only here).
        check_memory(scheduler, [(loop.n, 1) for loop in self.loops], self.threads, self.keep_chunks,
                     self.segments is not None, drawn=True)
        self._chunks.coverage.what = scheduler.spec
        scheduler.setup(self)
        env = self.env
        processes = [env.process(scheduler.worker(self, w)) for w in range(self.threads)]
        run_until(env, scheduler.completion(self, processes))
        makespan = float(env.now)
        self.memory.tally(self.counters)
        if self.noise is not None:
            self.noise.tally(self.counters)
        if self.locality is not None:
            self.locality.tally(self.counters)
        for name in scheduler.COUNTERS:
            self.counters[name] += 0
        for w in range(self.threads):
            # Work in flight when the run ended (a steal attempt, a chunk) counts only up to the end,
            # and a wait still open (a worker spinning at a barrier) counts until the end.
            for state, start, end in self.last[w]:
                cut = end - max(start, makespan)
                if cut > 0:
                    self.time[state][w] -= cut
            if self.open[w] is not None:
                state, since = self.open[w]
                self.time[state][w] += max(makespan - since, 0.0)
                if self.segments is not None and makespan > since:
                    self.segments.append((w, state, since, makespan))
        idle = self.time["idle"]
        for w in range(self.threads):
            busy = sum(self.time[s][w] for s in STATES if s != "idle")
            idle[w] = max(makespan - busy, 0.0)
        self._chunks.finish()
        serial = sum(self.loops[index].serial_ns for index in self.program)
        sequential = sum(loop.total for loop in self.loops) + serial + self.sequential_memory_ns()
        ends = [self.loop_end[index] for index in self.program]
        # A program loop's time runs from the end of its serial code (the previous loop's end plus it) to its end.
        loop_ns = np.diff([0.0] + ends) - [self.loops[index].serial_ns for index in self.program]
        return Result(
            machine=self.machine.name,
            scheduler=scheduler.spec,
            workload="",
            threads=self.threads,
            seed=self.seed,
            makespan_ns=makespan,
            sequential_ns=sequential,
            state_ns={s: np.asarray(v) for s, v in self.time.items()},
            chunks=self._chunks,
            counters=dict(sorted(self.counters.items())),
            loop_ns=[float(x) for x in loop_ns],
            serial_ns=serial,
            loop_names=[self.loops[index].name for index in self.program],
            events=event_count(env),  # SimPy numbers every scheduled event
            segments=None if self.segments is None else segment_table(self.segments, makespan),
            affinity=self._chunks.affinity.result() if self._chunks.affinity is not None else None,
            seed_independent=generator_position(self.rng) == self._rng_start,
        )


def segment_table(segments, makespan: float):
    """The recorded segments as a table (worker, state, start, end), cut at ``makespan`` like the state totals.

    Back-to-back segments of one worker in one state merge into one, so a worker that probes
    or spins in many short steps shows as one stretch.
    """
    import pandas as pd

    frame = pd.DataFrame(segments, columns=SEGMENT_COLUMNS).astype({"worker": np.int64, "start": float,
                                                                     "end": float})
    if frame.empty:
        return frame
    frame["end"] = frame["end"].clip(upper=makespan)
    frame = frame[frame["end"] > frame["start"]].sort_values(["worker", "start"], kind="stable")
    same = ((frame["worker"] == frame["worker"].shift()) & (frame["state"] == frame["state"].shift())
            & (frame["start"] == frame["end"].shift()))
    group = (~same).cumsum()
    merged = frame.groupby(group, sort=False).agg(worker=("worker", "first"), state=("state", "first"),
                                                  start=("start", "first"), end=("end", "last"))
    return merged.reset_index(drop=True)


def simulate(machine, scheduler, workload, threads: int, seed: int = 0, repeat: int = 1,
             keep_chunks: bool = True, timeline: bool = False, **params) -> Result:
    """Simulate one parallel loop: ``machine``, ``scheduler`` and ``workload`` are objects or spec strings.

    ``repeat`` runs the same loop that many times back to back (EPCC style), so the
    makespan includes how one loop's end overlaps the next one's start. With
    ``keep_chunks=False`` the result has no chunk table (``chunk_count`` still counts them);
    with ``timeline`` it also holds every worker's state segments (``Result.segments``).
    """
    return simulate_program(machine, scheduler, [workload], threads, seed=seed, repeat=repeat,
                            keep_chunks=keep_chunks, timeline=timeline, **params)


def simulate_program(machine, scheduler, workloads, threads: int, seed: int = 0, repeat: int = 1,
                     keep_chunks: bool = True, timeline: bool = False, **params) -> Result:
    """Simulate a sequence of parallel loops run back to back by the same workers (``repeat`` times over)."""
    from .schedulers import get_scheduler
    from .workloads import draw_loops, get_workload

    if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
        raise SimschedError(f"repeat must be an integer >= 1, got {repeat!r}")
    machine = load_machine(machine)
    sched = get_scheduler(scheduler, **params)
    if isinstance(workloads, (str, np.ndarray)) or hasattr(workloads, "costs"):
        workloads = [workloads]
    specs = [get_workload(w) for w in workloads]
    if not specs:
        raise SimschedError("a program needs at least one loop")
    machine.check_threads(threads)
    # Before anything is drawn: a run that surely cannot fit is refused at once, not after minutes of drawing.
    sizes = [size for w in specs for size in (w.loop_sizes() or [])]
    check_memory(sched, sizes, threads, keep_chunks, timeline, repeat=int(repeat),
                 data=any(w.touches_data() for w in specs))
    sim = Simulation(machine, threads, seed=seed, keep_chunks=keep_chunks, timeline=timeline)
    # The run's one generator draws the costs, so the same seed gives the same loops.
    sim.load([loop for w in specs for loop in draw_loops(w, sim.rng)] * int(repeat))
    result = sim.run(sched)
    result.workload = " ; ".join(w.spec for w in specs)
    result.repeat = int(repeat)
    return result
