"""The task-pool runtime shared by the loop-task schedulers: its workers, loop joins, and running loop tasks.

SplitAndExecute runs a loop task's iterations one at a time (``ppt`` at a time) and,
whenever its queue is empty, splits the rest and pushes the split-off part, so work
becomes tasks only when some worker ran dry (a run stays one event: see :mod:`.lazyruns`).

An iteration runs *serialized* when it runs inside a task after that task's first
iteration: with one task per iteration (offload, cellss) nothing is serialized.
"""

from __future__ import annotations

from bisect import bisect_left

from ..simpy_access import fire_at
from ..spec import Param
from .base import Scheduler
from .lazyruns import LazyRuns, Run
from .taskpool import CREATE, LOOP, SINGLE, Queue, Task, TaskPool
from .tasksplitting import Splitting
from .taskthieves import Thieves

LBS_COUNTERS = ("tasks_created", "iterations_serialized", "splits", "steal_attempts", "steals", "swaps")


class Join:
    """A loop instance's completion: iterations still to run, counted down on a line homed where it started."""

    __slots__ = ("loop", "remaining", "line", "done")

    def __init__(self, sim, loop: int, home: int):
        self.loop = loop
        self.remaining = sim.loops[loop].n
        self.line = sim.memory.line(f"loop[{loop}].join", self.remaining, home=home)
        self.done = sim.env.event()


class LoopTasks(Splitting, Thieves, TaskPool, LazyRuns, Scheduler):
    """The task-pool runtime shared by the loop-task schedulers: queues, stealing, lazy runs, loop joins.

    Its parts are mixins, one job each: the queues (:class:`.taskpool.TaskPool`), the thieves
    (:class:`.taskthieves.Thieves`), the lazy runs (:class:`.lazyruns.LazyRuns`) and the splitting
    rules (:class:`.tasksplitting.Splitting`); this class makes their state, runs the workers and
    executes the tasks.
    """

    COUNTERS = LBS_COUNTERS
    NESTED = True
    # A lazy run's end is worked out ahead from its compute alone (a thief may cut it at any iteration).
    LOCALITY = False
    PARAMS = {
        "ppt": Param("ppt", int, 1, lambda v: v >= 1, ">= 1",
                     help="profitable parallelism threshold: iterations run between queue checks"),
        "ls_tasks": Param("ls_tasks", int, 256, lambda v: v >= 2, ">= 2",
                          help="tasks the local store holds before blocks go to memory (assumed: 16 KB of the "
                               "256 KB local store for 64-byte descriptors)"),
        "swap_block": Param("swap_block", int, 32, lambda v: v >= 1, ">= 1",
                            help="tasks per block swapped between local store and memory (assumed)"),
    }
    strategy = "half"

    def setup(self, sim) -> None:
        threads = sim.threads
        # At the start every other worker is idle: the adaptive estimates start there.
        self.queues = [Queue(sim, w, threads - 1) for w in range(threads)]
        # marked[t][v]: the split period of v in which thief t last counted itself idle at v.
        self.marked = [[0] * threads for _ in range(threads)]
        self.idle_all = sim.memory.line("idle.workers", threads, home=0)  # adapt-g's global count
        # Blocks of tasks swapped out of full local stores: the pool's shared level in main memory.
        self.pool: list[list[Task]] = []
        self.pool_lock = sim.memory.line("pool.lock", 0, home=0)
        self.is_idle = [True] * threads
        self.running: list[Run | None] = [None] * threads
        # Tasks handed to a worker directly (a DMA into its local store and a signal), not through
        # its queue, so no thief can take them first: (task, when it arrives).
        self.inbox: list[list[tuple[Task, float]]] = [[] for _ in range(threads)]
        # A change to a worker's queue between its last check and its next run: when it becomes visible.
        self.unseen: list[float | None] = [None] * threads
        self.finished = False
        self.done = sim.env.event()
        # Local stores are not coherent: a thief DMAs a victim's header on every probe.
        memory_ns = sim.machine.memory_ns
        self.probe = sim.memory.peek if "dma_local_store" in memory_ns else sim.memory.read
        self.dma_local_ns = memory_ns.get("dma_local_store", 0.0)   # descriptors to or from another worker
        self.dma_memory_ns = memory_ns.get("dma_memory", 0.0)      # a block to or from main memory
        # Thieves whose probes cannot succeed wait for ``changed`` instead of probing (see ``steal``).
        self.changed = sim.env.event()
        self.waiting = 0
        self.awaiting: list[Join | None] = [None] * threads   # the loop each worker is joining, if any

    def completion(self, sim, processes):
        return self.done

    # -- the worker -----------------------------------------------------------------------
    def worker(self, sim, w: int):
        if w == 0:
            for index in sim.program:
                yield from self.run_loop(sim, w, index)
                sim.loop_end[index] = sim.env.now
            self.finished = True
            fire_at(sim.env, self.done, sim.env.now)
            return
        while not self.finished:
            if sim.noise is not None:  # no generator per attempt in the runs without noise
                yield from sim.arrive(w)
            task = yield from self.find_work(sim, w)
            if task is not None:
                yield from self.execute(sim, w, task)

    def run_loop(self, sim, w: int, index: int):
        """``w`` starts loop ``index`` as a task, runs it, and helps until every part of it is done."""
        join = Join(sim, index, w)
        yield from sim.serial_code(w, index)
        t = sim.env.now + sim.costs["loop_setup"]
        sim.loop_begins(t)
        yield sim.wait(w, "schedule", t)
        yield from self.start(sim, w, join)
        yield from self.help_until_done(sim, w, join)

    def help_until_done(self, sim, w: int, join: Join):
        """Run other tasks (own, then stolen) until ``join``'s loop is done, and see it done."""
        outer, self.awaiting[w] = self.awaiting[w], join
        while join.remaining:
            task = yield from self.find_work(sim, w)
            if task is not None:
                yield from self.execute(sim, w, task)
        self.awaiting[w] = outer
        _, t = sim.memory.read(join.line, w)
        yield sim.wait(w, "sync", t)

    def start(self, sim, w: int, join: Join):
        """Create the loop's root task and run it; distrib first spreads the loop when all appear idle."""
        t = self.set_idle(sim, w, False, sim.env.now)   # the worker starting a loop is busy
        if self.strategy == "distrib" and sim.threads > 1:
            count, t = sim.memory.read(self.queues[w].idle, w, at=t)
            if count >= sim.threads - 1:
                yield sim.wait(w, "schedule", t)
                yield from self.distribute(sim, w, join)
                return
        n = sim.loops[join.loop].n
        root = Task(LOOP, join.loop, 0, n, join)
        yield sim.wait(w, "create", t + sim.costs["task_create"])
        sim.counters["tasks_created"] += 1
        yield from self.execute(sim, w, root)

    def find_work(self, sim, w: int):
        """A task handed to ``w`` or from its own queue, else one steal attempt: the task or None."""
        t = sim.env.now
        if self.inbox[w]:
            task, arrives = self.inbox[w].pop(0)
            if arrives > t:
                yield sim.wait(w, "steal", arrives)
                t = arrives
        else:
            task, t = self.pop(sim, w, t)
            if task is None and self.pool:
                t = self.swap_in(sim, w, t)
                task, t = self.pop(sim, w, t)
        if task is None:
            return (yield from self.steal(sim, w, self.set_idle(sim, w, True, t)))
        yield sim.wait(w, "schedule", self.set_idle(sim, w, False, t))
        return task

    # -- executing tasks ------------------------------------------------------------------
    def execute(self, sim, w: int, task: Task):
        """The steps that run ``task``, returned rather than delegated to: each resumption passes one level fewer."""
        if task.kind == SINGLE:
            return self.execute_singles(sim, w, task)
        if task.kind == CREATE:
            return self.create_singles(sim, w, task)
        return self.split_and_execute(sim, w, task)

    def finish(self, sim, w: int, join: Join, executed: int, t: float) -> float:
        """Report ``executed`` iterations of ``join``'s loop done (one atomic per finished stretch)."""
        join.remaining -= executed
        _, t = sim.memory.fetch_add(join.line, w, -executed, at=t)
        if not join.remaining:
            fire_at(sim.env, join.done, t)
            self.signal(sim, t)
        return t

    def split_and_execute(self, sim, w: int, task: Task):
        """Run a loop task, splitting off the rest whenever the own queue is empty."""
        env, queue, ppt = sim.env, self.queues[w], self.params["ppt"]
        children = sim.children.get(task.loop, {})
        t = env.now + sim.costs["chunk"]
        yield sim.wait(w, "schedule", t)
        executed = 0
        while task.lo < task.hi:
            _, t = sim.memory.read(queue.count, w)   # the queue check (the header a thief may have written)
            self.unseen[w] = None
            if queue.empty:
                if task.hi - task.lo > ppt and sim.threads > 1:
                    yield sim.wait(w, "schedule", t)
                    yield from self.split(sim, w, task)
                    t = env.now
            elif queue.n_public == 0:
                t = self.refill(sim, w, t)
            yield sim.wait(w, "schedule", t)
            stop = yield from self.run_steps(sim, w, task.loop, task.lo, self.next_stop(sim, task), env.now,
                                             every=ppt)
            executed += stop - task.lo
            task.lo = stop
            if stop - 1 in children:
                yield from self.nested(sim, w, children[stop - 1])
        sim.counters["iterations_serialized"] += max(executed - 1, 0)
        yield sim.wait(w, "sync", self.finish(sim, w, task.join, executed, env.now))

    def create(self, sim, w: int, owner: int, task: Task):
        """``w`` creates ``task`` and puts it in ``owner``'s queue."""
        t = self.push(sim, w, owner, task, sim.env.now + sim.costs["task_create"])
        sim.counters["tasks_created"] += 1
        yield sim.wait(w, "create", t)

    def next_stop(self, sim, task: Task) -> int:
        """Where a run of ``task`` must stop: its end, or just after the next iteration with a nested loop."""
        children = sim.children.get(task.loop)
        if children:
            nested = list(children)   # the engine lists them in iteration order
            k = bisect_left(nested, task.lo)
            if k < len(nested) and nested[k] < task.hi:
                return nested[k] + 1
        return task.hi

    def nested(self, sim, w: int, index: int):
        """``w`` reached an iteration with a nested loop: run that loop as a task and join it."""
        yield from self.run_loop(sim, w, index)

    def execute_singles(self, sim, w: int, task: Task):
        """Run a range of one-iteration tasks from the own queue, popping each; a thief's steal interrupts."""
        queue = self.queues[w]
        step = sim.costs["store"] + sim.costs["chunk"]
        if queue.n_public == 0 and task.size > 1:
            # The tasks not yet popped are in the queue: with nothing public, half of them go public
            # first, so thieves can take them while this worker runs the rest one by one.
            queue.private.append(task)
            queue.n_private += task.size
            t = self.refill(sim, w, sim.env.now)
            task = queue.private.pop()
            queue.n_private -= task.size
            yield sim.wait(w, "schedule", t)
        lo = task.lo
        stop = yield from self.run_steps(sim, w, task.loop, lo, self.next_stop(sim, task), sim.env.now, step)
        if stop < task.hi:  # interrupted, or a nested loop next: the rest goes back (public if needed)
            task.lo = stop
            queue.private.append(task)
            queue.n_private += task.size
            if queue.n_public == 0:
                yield sim.wait(w, "schedule", self.refill(sim, w, sim.env.now))
        inner = sim.children.get(task.loop, {}).get(stop - 1)
        if inner is not None:
            yield from self.nested(sim, w, inner)
        yield sim.wait(w, "sync", self.finish(sim, w, task.join, stop - lo, sim.env.now))

    def create_singles(self, sim, w: int, task: Task):
        """Create one task per iteration of [lo, hi) in the own queue (a refill interrupts)."""
        queue = self.queues[w]
        step = sim.costs["task_create"] + sim.costs["store"]
        lo = task.lo
        while lo < task.hi:
            if queue.n_public == 0:  # the first task of a stretch goes public
                t = self.push(sim, w, w, Task(SINGLE, task.loop, lo, lo + 1, task.join),
                              sim.env.now + sim.costs["task_create"])
                sim.counters["tasks_created"] += 1
                lo += 1
                yield sim.wait(w, "create", t)
                continue
            stop = yield from self.run_steps(sim, w, task.loop, lo, task.hi, sim.env.now, step, compute=False)
            sim.counters["tasks_created"] += stop - lo
            queue.private.append(Task(SINGLE, task.loop, lo, stop, task.join))
            queue.n_private += stop - lo
            lo = stop
            t = self.swap_out(sim, w, sim.env.now)
            if queue.n_public == 0:
                t = self.refill(sim, w, t)
            yield sim.wait(w, "create", t)
        if queue.n_private:  # a creator runs none of its tasks: when done, it publishes the rest
            yield sim.wait(w, "create", self.refill(sim, w, sim.env.now, everything=True))
