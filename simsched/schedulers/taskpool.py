"""The task pool of the loop-task schedulers: loop tasks, each worker's queue, and blocks swapped to memory.

Each worker owns a task queue with a private part (owner only, no locking) and a public
part that thieves lock; the owner keeps at least one task public, and a thief takes half
of the public tasks. When the local store is full, the oldest private tasks are swapped
to main memory in blocks and fetched back when the local part runs dry.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .looptasks import Join

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


class TaskPool:
    """The queue operations of the loop-task runtime: locking, pushing, refilling, popping and swapping tasks.

    A mixin of :class:`~simsched.schedulers.looptasks.LoopTasks`, whose ``setup`` makes the
    queues, the pool and its lock.
    """

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
