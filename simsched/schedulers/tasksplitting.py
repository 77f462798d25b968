"""How a loop task splits under each strategy (half, guided, adapt-g, adapt-l, distrib); distrib's spread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import block
from .taskpool import LOOP, Task

if TYPE_CHECKING:
    from .looptasks import Join

STRATEGIES = ("half", "guided", "adapt-g", "adapt-l", "distrib")


class Splitting:
    """The splitting rules of the strategies, the idle counts they read, and distrib's spread of a loop.

    A mixin of :class:`~simsched.schedulers.looptasks.LoopTasks`, whose ``setup`` makes the
    idle counts; ``strategy`` names the rule.
    """

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

    def set_idle(self, sim, w: int, idle: bool, t: float) -> float:
        """A busy/idle transition at ``t``, counted on a global line by adapt-g; returns when it is done."""
        if self.is_idle[w] != idle:
            self.is_idle[w] = idle
            if self.strategy == "adapt-g":
                _, t = sim.memory.fetch_add(self.idle_all, w, 1 if idle else -1, at=t)
        return t

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
