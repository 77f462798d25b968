"""Loop tasks on a distributed task pool: lazy binary splitting and its variants, Offload, CellSs.

Each worker owns a task queue with a private part (owner only, no locking) and a public
part that thieves lock; the owner keeps at least one task public, and a thief takes half
of the public tasks. When the local store is full, the oldest private tasks are swapped
to main memory in blocks and fetched back when the local part runs dry.

SplitAndExecute runs a loop task's iterations one at a time (``ppt`` at a time) and,
whenever its queue is empty, splits the rest and pushes the split-off part, so work
becomes tasks only when some worker ran dry. The per-iteration queue check is lazy: a
running task is one event, and a thief that empties a queue schedules the owner's
reaction at the first iteration boundary after the owner can see it (a binary search on
the loop's prefix sums), so event counts grow with splits and steals, not iterations.

An iteration runs *serialized* when it runs inside a task after that task's first
iteration: with one task per iteration (offload, cellss) nothing is serialized.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

import numpy as np
from simpy.events import Event

from ..memory import Wait, fire_at
from ..spec import Param
from .base import Scheduler, block

LBS_COUNTERS = ("tasks_created", "iterations_serialized", "splits", "steal_attempts", "steals", "swaps")
STRATEGIES = ("half", "guided", "adapt-g", "adapt-l", "distrib")
LOOP, SINGLE, CREATE = "loop", "single", "create"


class Task:
    """A loop task [lo, hi) of one loop instance; SINGLE stands for hi - lo one-iteration tasks, CREATE for making them."""

    __slots__ = ("kind", "loop", "lo", "hi", "split_for", "join")

    def __init__(self, kind: str, loop: int, lo: int, hi: int, join: "Join", split_for: int = 0):
        self.kind, self.loop, self.lo, self.hi = kind, loop, lo, hi
        self.split_for = split_for
        self.join = join

    @property
    def size(self) -> int:
        """How many queue entries it stands for."""
        return self.hi - self.lo if self.kind == SINGLE else 1

    def cut(self, count: int) -> "Task":
        """Take the first ``count`` one-iteration tasks off a SINGLE range."""
        head = Task(SINGLE, self.loop, self.lo, self.lo + count, self.join)
        self.lo += count
        return head


class Join:
    """A loop instance's completion: iterations still to run, counted down on a line homed where it started."""

    __slots__ = ("loop", "remaining", "line", "done")

    def __init__(self, sim, loop: int, home: int):
        self.loop = loop
        self.remaining = sim.loops[loop].n
        self.line = sim.memory.line(f"loop[{loop}].join", self.remaining, home=home)
        self.done = sim.env.event()


class Queue:
    """One worker's task queue in its local store: a private part and a public part."""

    __slots__ = ("private", "public", "n_private", "n_public", "lock", "count", "idle", "period")

    def __init__(self, sim, w: int, idle: int):
        mem = sim.memory
        self.private: deque[Task] = deque()   # the owner pushes and pops at the right end
        self.public: deque[Task] = deque()    # thieves take from the left end, the oldest tasks
        self.n_private = self.n_public = 0
        self.lock = mem.line(f"queue[{w}].lock", 0, home=w)
        self.count = mem.line(f"queue[{w}].public", 0, home=w)  # the header thieves read
        self.idle = mem.line(f"queue[{w}].idle", idle, home=w)  # adapt-l: failed thieves this split period
        self.period = 0

    @property
    def empty(self) -> bool:
        return not (self.n_private or self.n_public)


def take(tasks: deque, count: int, from_left: bool) -> list[Task]:
    """Remove ``count`` queue entries from one end of ``tasks``, cutting a SINGLE range if needed."""
    taken = []
    while count > 0:
        task = tasks[0] if from_left else tasks[-1]
        if task.size <= count:
            taken.append(tasks.popleft() if from_left else tasks.pop())
            count -= task.size
        elif from_left:
            taken.append(task.cut(count))
            count = 0
        else:
            tail = Task(SINGLE, task.loop, task.hi - count, task.hi, task.join)
            task.hi -= count
            taken.append(tail)
            count = 0
    return taken


class Run:
    """A worker's current stretch of steps (iterations, or task creations), interruptible at step boundaries."""

    __slots__ = ("loop", "lo", "stop", "start", "step_ns", "compute", "every", "event")

    def __init__(self, loop, lo, stop, start, step_ns, compute, every, event):
        self.loop, self.lo, self.stop, self.start = loop, lo, stop, start   # stop: where it ends now
        self.step_ns, self.compute, self.every, self.event = step_ns, compute, every, event


class LoopTasks(Scheduler):
    """The task-pool runtime shared by the loop-task schedulers: queues, stealing, lazy runs, loop joins."""

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

    def distribute(self, sim, w: int, join: Join):
        """Give every worker an even share of the loop as its own task (a new split period for each)."""
        threads, n = sim.threads, sim.loops[join.loop].n
        shares = [(u, block(n, threads, k)) for k, u in enumerate((w + k) % threads for k in range(threads))]
        shares = [(u, lo, hi) for u, (lo, hi) in shares if hi > lo]
        t = sim.env.now
        for u, lo, hi in shares[1:]:
            t = self.hand(sim, u, Task(LOOP, join.loop, lo, hi, join), t + sim.costs["task_create"])
            # The share starts the receiver's split period: its idle estimate starts over.
            t = sim.memory.store(self.queues[u].idle, w, 0, at=t)
            self.queues[u].period += 1
        own = self.queues[w]
        t = sim.memory.store(own.idle, w, 0, at=t)
        own.period += 1
        sim.counters["tasks_created"] += len(shares)
        self.signal(sim, t)
        yield sim.wait(w, "create", t)
        _, lo, hi = shares[0]
        yield from self.execute(sim, w, Task(LOOP, join.loop, lo, hi, join))

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

    def set_idle(self, sim, w: int, idle: bool, t: float) -> float:
        """A busy/idle transition at ``t``, counted on a global line by adapt-g; returns when it is done."""
        if self.is_idle[w] != idle:
            self.is_idle[w] = idle
            if self.strategy == "adapt-g":
                _, t = sim.memory.fetch_add(self.idle_all, w, 1 if idle else -1, at=t)
        return t

    # -- queue operations -----------------------------------------------------------------
    def locked(self, sim, w: int, owner: int, t: float, change) -> float:
        """``w`` locks ``owner``'s public part, applies ``change()``, publishes the new count and unlocks."""
        mem, queue = sim.memory, self.queues[owner]
        _, t = mem.exchange(queue.lock, w, 1, at=t)
        t = change(t)
        t = mem.store(queue.count, w, queue.n_public, at=t)
        if queue.n_public:
            self.signal(sim, t)
        # The unlock store keeps the lock line busy until then: later lockers queue behind it.
        return mem.store(queue.lock, w, 0, at=t)

    def push(self, sim, w: int, owner: int, task: Task, t: float) -> float:
        """``w`` puts ``task`` in ``owner``'s queue: public when that part is empty, else private."""
        queue = self.queues[owner]
        if queue.n_public == 0 or owner != w:
            def add(t):
                queue.public.append(task)
                queue.n_public += task.size
                return t if owner == w else t + self.dma_local_ns
            return self.locked(sim, w, owner, t, add)
        queue.private.append(task)
        queue.n_private += task.size
        t += sim.costs["store"]
        return self.swap_out(sim, w, t)

    def refill(self, sim, w: int, t: float, everything: bool = False) -> float:
        """The owner's public part ran dry: move half of its private tasks (at least one), or all, there."""
        queue = self.queues[w]
        if queue.n_private == 0:
            return t

        def move(t):
            count = queue.n_private if everything else max(1, queue.n_private // 2)
            moved = take(queue.private, count, from_left=True)
            queue.public.extend(moved)
            count = sum(task.size for task in moved)
            queue.n_private -= count
            queue.n_public += count
            return t
        return self.locked(sim, w, w, t, move)

    def pop(self, sim, w: int, t: float):
        """The owner takes its newest task (a whole SINGLE range at once): (task or None, time)."""
        queue = self.queues[w]
        self.unseen[w] = None
        if queue.n_private:
            task = queue.private.pop()
            queue.n_private -= task.size
            t += sim.costs["store"]
        elif queue.n_public:
            popped = []

            def remove(t):
                popped.append(queue.public.pop())
                queue.n_public -= popped[0].size
                return t
            t = self.locked(sim, w, w, t, remove)
            task = popped[0]
        else:
            return None, t
        if queue.n_public == 0:
            t = self.refill(sim, w, t)
        return task, t

    def swap_out(self, sim, w: int, t: float) -> float:
        """The local store is full: DMA the oldest private tasks to the pool in memory, a block at a time."""
        queue, block_size = self.queues[w], self.params["swap_block"]
        while queue.n_private + queue.n_public > self.params["ls_tasks"] and queue.n_private > block_size:
            moved = take(queue.private, block_size, from_left=True)
            queue.n_private -= block_size
            t = self.pool_op(sim, w, t, lambda: self.pool.append(moved))
        return t

    def swap_in(self, sim, w: int, t: float) -> float:
        """An empty worker fetches the most recently swapped block from the pool into its private part."""
        queue = self.queues[w]

        def fetch():
            if self.pool:
                moved = self.pool.pop()
                queue.private.extend(moved)
                queue.n_private += sum(task.size for task in moved)
        return self.pool_op(sim, w, t, fetch)

    def pool_op(self, sim, w: int, t: float, change) -> float:
        """One locked block transfer between a local store and the pool in memory."""
        mem = sim.memory
        _, t = mem.exchange(self.pool_lock, w, 1, at=t)
        change()
        sim.counters["swaps"] += 1
        t += self.dma_memory_ns
        if self.pool:
            self.signal(sim, t)
        return mem.store(self.pool_lock, w, 0, at=t)

    # -- thieves --------------------------------------------------------------------------
    def steal(self, sim, w: int, t: float):
        """One attempt from ``t``: read a random victim's queue header; if it has public tasks, take half."""
        mem, threads = sim.memory, sim.threads
        sim.counters["steal_attempts"] += 1
        t += sim.costs["steal"]
        if threads == 1:
            yield sim.wait(w, "steal", t)
            return None
        victim, t = self.probe_victim(sim, w, t)
        queue = self.queues[victim]
        if queue.n_public == 0:
            if self.strategy in ("adapt-l", "distrib") and self.marked[w][victim] != queue.period:
                # Count this thief idle at the victim once per the victim's split period.
                self.marked[w][victim] = queue.period
                _, t = mem.fetch_add(queue.idle, w, 1, at=t)
            yield sim.wait(w, "steal", t)
            if self.futile(w):
                yield from self.wait_for_change(sim, w)
            return None
        stolen: list[Task] = []

        def grab(t):
            stolen.extend(take(queue.public, (queue.n_public + 1) // 2, from_left=True))
            queue.n_public -= sum(task.size for task in stolen)
            return t + self.dma_local_ns
        t = self.locked(sim, w, victim, t, grab)
        sim.counters["steals"] += 1
        if queue.n_public == 0:
            self.notice(sim, victim, queue.count.written_at + mem.lat[w][victim])
        yield sim.wait(w, "steal", self.set_idle(sim, w, False, t))
        own = self.queues[w]
        first = stolen.pop()
        own.private.extend(stolen)
        own.n_private += sum(task.size for task in stolen)
        if own.n_public == 0 and own.n_private:
            yield sim.wait(w, "schedule", self.refill(sim, w, sim.env.now))
        return first

    def probe_victim(self, sim, w: int, t: float) -> tuple[int, float]:
        """Pick a random victim and read its queue header: (victim, time)."""
        victim = int(sim.rng.integers(sim.threads - 1))
        victim += victim >= w
        _, t = self.probe(self.queues[victim].count, w, at=t)
        return victim, t

    def futile(self, w: int) -> bool:
        """Whether every probe ``w`` could make fails with no effect: nothing public anywhere, all marks made."""
        joining = self.awaiting[w]
        if self.pool or self.finished or self.inbox[w] or (joining is not None and not joining.remaining) \
                or any(queue.n_public for queue in self.queues):
            return False
        if self.strategy in ("adapt-l", "distrib"):
            marks = self.marked[w]
            return all(marks[v] == queue.period for v, queue in enumerate(self.queues) if v != w)
        return True

    def wait_for_change(self, sim, w: int):
        """Skip probes that must fail: wait for a change, then account the probes made meanwhile.

        The skipped probes are replayed without events (victims drawn from the run's generator,
        each probe costing what it would have), so the thief resumes probing where it would
        have been when the change came, and ``steal_attempts`` counts every probe.
        """
        since = sim.env.now
        self.waiting += 1
        sim.begin(w, "steal")
        yield self.changed
        sim.end(w)
        self.waiting -= 1
        yield sim.wait(w, "steal", self.replay_probes(sim, w, since))

    def replay_probes(self, sim, w: int, since: float) -> float:
        """Count the failed probes ``w`` made from ``since`` until now; return when the one under way ends."""
        mem, threads, now = sim.memory, sim.threads, sim.env.now
        cost = []
        for v, queue in enumerate(self.queues):
            line = queue.count
            cached = self.probe == mem.read and w in line.sharers
            cost.append(sim.costs["steal"] + (0.0 if cached or line.holder == w else mem.transfer[line.holder][w]))
        cost = np.asarray(cost)
        t = since
        while t < now:
            victims = sim.rng.integers(threads - 1, size=1024)
            victims += victims >= w
            ends = t + np.cumsum(cost[victims])
            done = min(int(np.searchsorted(ends, now)) + 1, ends.size)
            sim.counters["steal_attempts"] += done
            t = float(ends[done - 1])
        return t

    def hand(self, sim, u: int, task: Task, t: float) -> float:
        """Hand ``task`` to worker ``u`` directly at ``t``: a DMA of its descriptor, then a signal."""
        t += self.dma_local_ns + sim.costs["store"]
        self.inbox[u].append((task, t))
        self.signal(sim, t)
        return t

    def signal(self, sim, t: float) -> None:
        """Something a waiting thief could act on happened at ``t``: wake the waiting thieves."""
        if self.waiting:
            fire_at(sim.env, self.changed, t)
            self.changed = sim.env.event()

    # -- lazy runs ------------------------------------------------------------------------
    def step_time(self, sim, w: int, run: Run, k: int) -> float:
        """When step ``k`` of ``run`` ends."""
        t = run.start + (k - run.lo) * run.step_ns
        return sim.compute_end(w, t, sim.work(w, run.loop, run.lo, k)) if run.compute else t

    def run_steps(self, sim, w: int, loop: int, lo: int, hi: int, start: float, step_ns: float = 0.0,
                  compute: bool = True, every: int = 1):
        """Run steps [lo, hi) from ``start``; returns the step it stopped before (hi unless a thief interrupted)."""
        event = Wait(sim.env)
        run = Run(loop, lo, hi, start, step_ns, compute, every, event)
        self.running[w] = run
        self.resume(sim.env, event, self.step_time(sim, w, run, hi), hi)
        if self.unseen[w] is not None:
            self.notice(sim, w, self.unseen[w])
        stop = yield event
        self.running[w] = None
        steps = (stop - lo) * step_ns
        if compute:
            sim.record_chunk(w, loop, lo, stop, start + steps, since=start)
        else:
            sim.spend(w, "create", steps, start=start)
        return stop

    @staticmethod
    def resume(env, event: Event, when: float, stop: int) -> None:
        """Resume a run at ``when`` with ``stop``, unless an earlier resumption came first."""
        trigger = Event(env)
        trigger.callbacks.append(lambda _: event.triggered or event.succeed(stop))
        fire_at(env, trigger, when)

    def notice(self, sim, w: int, when: float) -> None:
        """``w``'s queue changed under it, visibly from ``when``: stop its run at the next step boundary after."""
        run = self.running[w]
        if run is None:
            self.unseen[w] = when   # the owner is between runs: its next run reacts
            return
        self.unseen[w] = None
        # The first boundary at or after ``when``: bisect on the boundaries' times.
        lo, hi = 1, (run.stop - run.lo + run.every - 1) // run.every
        while lo < hi:
            mid = (lo + hi) // 2
            if self.step_time(sim, w, run, run.lo + mid * run.every) >= when:
                hi = mid
            else:
                lo = mid + 1
        stop = min(run.lo + lo * run.every, run.stop)
        if stop < run.stop:
            run.stop = stop
            self.resume(sim.env, run.event, self.step_time(sim, w, run, stop), stop)

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

    def split(self, sim, w: int, task: Task):
        """Split ``task``'s remaining range by the strategy and push the split-off upper part."""
        mem, queue, threads = sim.memory, self.queues[w], sim.threads
        n = task.hi - task.lo
        t = sim.env.now + sim.costs["split"]
        split_for = 0
        strategy = self.strategy
        if strategy == "half":
            f = 2
        elif strategy == "guided":
            f = threads if task.split_for == 0 else max(task.split_for, 2)
        elif strategy == "adapt-g":
            idle, t = mem.read(self.idle_all, w, at=t)
            f = max(idle + 1, 2)
        else:  # adapt-l, distrib
            count, t = mem.read(queue.idle, w, at=t)
            if task.split_for > 0:
                count = min(count, task.split_for - 1)
            f = max(count + 1, 2)
            t = mem.store(queue.idle, w, 0, at=t)
        if n < f:
            f = 2
        if strategy in ("guided", "adapt-l", "distrib"):
            split_for, task.split_for = f - 1, 1
        queue.period += 1
        self.signal(sim, sim.env.now)
        keep = n // f
        part = Task(LOOP, task.loop, task.lo + keep, task.hi, task.join, split_for)
        task.hi = task.lo + keep
        sim.counters["splits"] += 1
        yield sim.wait(w, "split", t)
        yield from self.create(sim, w, w, part)

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


class LazySplitting(LoopTasks):
    """Lazy binary splitting (Hoffmann, Prell, Rauber): loop tasks split only when the own queue is empty."""

    name = "lbs"
    summary = "lazy binary splitting of loop tasks on a distributed task pool (split=half|guided|...)"
    PARAMS = {**LoopTasks.PARAMS,
              "split": Param("split", str, "half", lambda v: v in STRATEGIES, " | ".join(STRATEGIES),
                             help="how a loop task splits: half, guided, adapt-g, adapt-l, distrib")}

    def setup(self, sim) -> None:
        self.strategy = self.params.get("split", self.strategy)
        super().setup(sim)


class AdaptiveGlobal(LoopTasks):
    """LBS with adaptive splitting by a global count of idle workers."""

    name = "adapt-g"
    summary = "lazy splitting into idle+1 parts, idle counted on one global line"
    strategy = "adapt-g"


class AdaptiveLocal(LoopTasks):
    """LBS with adaptive splitting by per-worker idle estimates that failed thieves raise."""

    name = "adapt-l"
    summary = "lazy splitting by per-worker idle estimates raised by failed thieves"
    strategy = "adapt-l"


class Distributed(LoopTasks):
    """adapt-l that first spreads a loop evenly over all queues when every worker appears idle."""

    name = "distrib"
    summary = "adapt-l, distributing a loop evenly first when all workers appear idle"
    strategy = "distrib"


class Offload(LoopTasks):
    """One task per iteration: half of the workers create them (in parallel), the others steal and run them."""

    name = "offload"
    summary = "no splitting: half the workers create one task per iteration, the rest steal them"

    def setup(self, sim) -> None:
        super().setup(sim)
        self.started = sim.env.event()   # the signal that hands the creators their shares of a loop

    def creators(self, sim) -> int:
        return max(1, sim.threads // 2)

    def run_loop(self, sim, w: int, index: int):
        # Each creator is handed its share of iterations directly.
        join = Join(sim, index, w)
        n, creators = sim.loops[index].n, self.creators(sim)
        yield from sim.serial_code(w, index)
        t = sim.env.now + sim.costs["loop_setup"]
        for c in range(creators):
            lo, hi = block(n, creators, c)
            if hi > lo:
                t = self.hand(sim, c, Task(CREATE, index, lo, hi, join), t)
        started, self.started = self.started, sim.env.event()
        fire_at(sim.env, started, t)
        yield sim.wait(w, "create", t)
        yield from self.create_share(sim, w)
        if sim.threads == 1:   # a lone worker runs what it created
            yield from self.help_until_done(sim, w, join)
        if join.remaining:
            sim.begin(w, "steal")
            yield join.done
            sim.end(w)
        _, t = sim.memory.read(join.line, w)
        yield sim.wait(w, "sync", t)

    def worker(self, sim, w: int):
        if w == 0 or w >= self.creators(sim):
            yield from super().worker(sim, w)
            return
        while not self.finished:
            if not self.inbox[w]:
                sim.begin(w, "steal")
                yield self.started
                sim.end(w)
            yield from self.create_share(sim, w)

    def nested(self, sim, w: int, index: int):
        # The worker that reaches a nested loop creates its tasks itself, then helps run them.
        join = Join(sim, index, w)
        yield from self.create_singles(sim, w, Task(CREATE, index, 0, sim.loops[index].n, join))
        yield from self.help_until_done(sim, w, join)

    def create_share(self, sim, w: int):
        if self.inbox[w]:
            task, arrives = self.inbox[w].pop(0)
            yield sim.wait(w, "steal", arrives)
            yield from self.create_singles(sim, w, task)


class CellSs(LoopTasks):
    """A central master, the PPE, creates one task per iteration and hands each to the SPE that asks."""

    name = "cellss"
    summary = "the PPE creates one task per iteration and hands them out; workers never create tasks"

    def setup(self, sim) -> None:
        super().setup(sim)
        self.position = 0           # index into the program of the loop being handed out
        self.handed = 0             # iterations of that loop handed out
        self.join = Join(sim, sim.program[0], 0)
        self.loop_started = sim.env.event()
        # When the master (the PPE, not a worker) is free for the next request: after the serial code and set-up.
        self.master_free = sim.loops[sim.program[0]].serial_ns + sim.costs["loop_setup"]

    def worker(self, sim, w: int):
        while not self.finished:
            task = yield from self.request(sim, w)
            if task is not None:
                end = sim.run_chunk(w, task.loop, task.lo, task.hi, sim.env.now)
                inner = sim.children.get(task.loop, {}).get(task.lo)
                if inner is not None:  # tasks cannot create tasks: a nested loop runs inside its task
                    end = sim.run_chunks(w, inner, [(0, sim.loops[inner].n)], end)
                yield sim.until(end)
                self.report(sim, task.join)

    def request(self, sim, w: int):
        """Ask the master: it reads the request from the SPE's mailbox, creates a task and mails it back."""
        join = self.join
        if self.handed == sim.loops[join.loop].n:
            sim.begin(w, "steal")
            yield self.loop_started
            sim.end(w)
            return None
        # Both mailbox accesses are the master's MMIO, serialized on the master.
        t = max(sim.env.now + sim.costs["store"], self.master_free)
        self.master_free = t + 2 * sim.machine.memory_ns.get("mmio", 0.0) + sim.costs["task_create"]
        sim.counters["tasks_created"] += 1
        task = Task(SINGLE, join.loop, self.handed, self.handed + 1, join)
        self.handed += 1
        yield sim.wait(w, "steal", self.master_free)
        return task

    def report(self, sim, join: Join) -> None:
        """A worker finished a task; its next request tells the master, who starts the next loop after the last."""
        join.remaining -= 1
        if join.remaining:
            return
        now = sim.env.now + sim.costs["store"]
        sim.loop_end[join.loop] = now
        self.position += 1
        if self.position == len(sim.program):
            self.finished = True
            fire_at(sim.env, self.done, now)
        else:
            self.join, self.handed = Join(sim, sim.program[self.position], 0), 0
            self.master_free = (max(self.master_free, now) + sim.loops[self.join.loop].serial_ns
                                + sim.costs["loop_setup"])
        started, self.loop_started = self.loop_started, sim.env.event()
        fire_at(sim.env, started, now)
