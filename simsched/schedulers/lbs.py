"""Loop tasks on a distributed task pool: lazy binary splitting and its variants, Offload, CellSs.

The runtime they share, its queues, thieves, lazy runs and splitting rules, is
:class:`~simsched.schedulers.looptasks.LoopTasks`.
"""

from __future__ import annotations

from ..simpy_access import fire_at
from ..spec import Param
from .base import block
from .looptasks import Join, LoopTasks
from .taskpool import CREATE, SINGLE, Task
from .tasksplitting import STRATEGIES


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
