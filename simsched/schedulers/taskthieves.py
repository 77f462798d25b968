"""Thieves of the loop-task runtime: probing random victims, taking half of their public tasks, or waiting."""

from __future__ import annotations

import numpy as np

from ..simpy_access import fire_at
from .taskpool import Task, take


class Thieves:
    """Stealing, handing a task to a worker directly, and waking the thieves that wait for a change.

    A mixin of :class:`~simsched.schedulers.looptasks.LoopTasks`, whose ``setup`` makes the
    marks, inboxes and the ``changed`` event the thieves wait for.
    """

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
