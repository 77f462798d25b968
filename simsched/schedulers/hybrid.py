"""Static partitions claimed with fetch-or plus work stealing (hybrid), and Cilk with fine-grain loops."""

from __future__ import annotations

from ..simpy_access import fire_at
from .barriers import make_barrier
from .base import block, run_block
from .forkjoin import RANGE, Frame, WorkStealing

CLAIM = "claim"  # deque item (CLAIM, owner, i, frame): the claiming loop DoHybridLoop(owner), at step i


class Hybrid(WorkStealing):
    """Handleman et al.'s hybrid: each worker claims its own static partition first, then others by XOR order.

    R = the smallest power of two >= P partitions; Claim(i, w) fetch-ors flag A[i XOR w]
    and succeeds if it was clear. DoHybridLoop(w) gives up at once if its own partition
    is taken; otherwise it spawns each partition it claims (as an ordinary cilk loop) and
    after a failed claim skips ahead by the lowest set bit of i, so it fails at most
    log2(R) times. A thief that finds a claiming loop at a victim's head starts its own
    DoHybridLoop instead, if its own partition is still unclaimed.
    """

    name = "hybrid"
    summary = "static partitions claimed by fetch-or in XOR order, balanced by Cilk work stealing"
    COUNTERS = WorkStealing.COUNTERS + ("max_failed_claims",)

    def setup(self, sim) -> None:
        super().setup(sim)
        threads = sim.threads
        self.partitions = 1 << (threads - 1).bit_length()
        # Claim flags, one line each, allocated per loop when the loop starts.
        self.flags: dict[int, list] = {}

    def first_item(self, sim, w: int, root: Frame) -> tuple:
        mem = sim.memory
        self.flags[root.loop] = [mem.line(f"loop[{root.loop}].claim[{r}]", 0, home=r % sim.threads)
                                 for r in range(self.partitions)]
        return (CLAIM, w, 0, root)

    def run_item(self, sim, w: int, frame: Frame, item: tuple, t: float):
        """Continue the claiming loop DoHybridLoop(owner) from step i: (the claimed partition's range or None, time)."""
        _, owner, i, _ = item
        flags, mem, counters = self.flags[frame.loop], sim.memory, sim.counters
        n, parts = sim.loops[frame.loop].n, self.partitions
        failed = 0
        while i < parts:
            r = i ^ owner
            old, t = mem.fetch_or(flags[r], w, 1, at=t)
            counters["claims"] += 1
            if old == 0:
                if i + 1 < parts:
                    t = self.push(sim, w, (CLAIM, owner, i + 1, frame), t)
                lo, hi = block(n, parts, r)
                return (RANGE, lo, hi, frame), t
            counters["failed_claims"] += 1
            failed += 1
            counters["max_failed_claims"] = max(counters["max_failed_claims"], failed)
            if i == 0:
                break  # its own partition is taken: the loop is already well under way
            i += i & -i
        return None, t

    def take(self, sim, w: int, victim: int, t: float):
        head = self.deques[victim][0]
        if head[0] == CLAIM:
            # A claiming loop is up for grabs: first look at our own partition.
            flag = self.flags[head[-1].loop][w]
            value, t = sim.memory.read(flag, w, at=t)
            if value == 0:
                # Like any steal it needs a stack to run on; the victim's frame stays where it is.
                t += sim.costs["steal"] + sim.costs["stack_switch"]
                sim.counters["steals"] += 1
                frame, t = self.child_frame(sim, w, head[-1], t)
                return (frame, (CLAIM, w, 0, frame), t), t
        return super().take(sim, w, victim, t)


class CilkFineGrain(WorkStealing):
    """Cilk whose idle workers also poll a fine-grain flag: loops run as half-barrier static loops.

    Idle workers alternate one steal attempt with one poll of their release flag. The
    master starts each loop marked fine-grain (``Loop.fine_grain``) like ``fg-tree`` (a
    release half-barrier down the NUMA tree, static blocks, a join half-barrier), after
    waking any sleeping worker. Loops in a simsched program are reached from the main
    strand with no parallelism outstanding, so a marked loop always takes that path. A
    loop not marked is an ordinary ``cilk_for``: the master splits it and runs its strand,
    then steals until every stolen piece is done, and only then continues the program.
    """

    name = "cilk-fg"
    summary = "Cilk plus fine-grain loops: thieves poll a release flag between steal attempts"
    PARAMS = {"sleep_after": WorkStealing.PARAMS["sleep_after"]}

    def min_chunks(self, n, threads):
        # A fine-grain loop: a block per worker; another: cilk_for's default grain, at most N/8P (or 1).
        return min(n, threads)

    def setup(self, sim) -> None:
        super().setup(sim)
        self.barrier = make_barrier("numa", sim)
        self.descriptor = sim.memory.line("loop.descriptor", -1, home=0)
        self.joined = [0] * sim.threads
        # The program loops marked fine-grain, in order: the n-th release runs the n-th of them.
        self.fine = [index for index in range(len(sim.program)) if sim.loops[index].fine_grain]

    def worker(self, sim, w: int):
        if w == 0:
            yield from self.master(sim)
            return
        mem, flag = sim.memory, self.barrier.go[w]
        failures = 0
        while not self.finished:
            value, t = mem.read(flag, w)
            yield sim.wait(w, "sync", t)
            if value > self.joined[w]:
                yield from self.barrier.forward(w)
                self.wake_children(sim, w)
                yield from sim.arrive(w)
                yield from self.run_block(sim, w)
                yield from self.barrier.join(w)
                failures = 0
                continue
            if sim.noise is not None:  # a late worker makes no steal attempt before it arrives
                yield from sim.arrive(w)
            work = yield from self.steal(sim, w)
            if work is not None:
                yield from self.strand(sim, w, *work)
                failures = 0
            else:
                failures += 1
                # Check the flag once more before sleeping: the master may have released a loop
                # (and woken the sleepers) since the poll above.
                if failures >= self.params["sleep_after"] and flag.value <= self.joined[w]:
                    yield from self.sleep(sim, w)
                    failures = 0

    def master(self, sim):
        env = sim.env
        for index in range(len(sim.program)):
            yield from sim.serial_code(0, index)
            if not sim.loops[index].fine_grain:
                yield from self.cilk_loop(sim, index)
                sim.loop_end[index] = env.now
                continue
            t = sim.memory.store(self.descriptor, 0, index, at=env.now + sim.costs["loop_setup"])
            sim.loop_begins(t)
            while self.sleepers:
                self.wake(sim, t)
            yield sim.wait(0, "schedule", t)
            yield from self.barrier.release(0)
            self.wake_children(sim, 0)
            yield from self.run_block(sim, 0)
            yield from self.barrier.join(0)
            sim.loop_end[index] = env.now
        self.finished = True
        fire_at(env, self.done, env.now)
        while self.sleepers:
            self.wake(sim, env.now, count=False)

    def cilk_loop(self, sim, index: int):
        """The master runs loop ``index`` as ``cilk_for`` and steals until the loop's root frame is complete."""
        self.next_loop = index
        root, item, t = self.begin_loop(sim, 0, sim.env.now)
        yield from self.strand(sim, 0, root, item, t)
        # The master, not the worker that finishes the last stolen piece, continues the program (the
        # next fine-grain loop's release starts at the root of the tree). It steals while there is
        # work to steal, then spins on the loop's join counter (stolen pieces outstanding) until 0.
        failures = 0
        while root.pending and failures < self.params["sleep_after"]:
            work = yield from self.steal(sim, 0)
            if work is None:
                failures += 1
                continue
            yield from self.strand(sim, 0, *work)
            failures = 0
        sim.begin(0, "sync")
        yield sim.memory.spin_until(root.line, 0, lambda pending: pending == 0)
        sim.end(0)

    def end_loop(self, sim, w: int, root: Frame, t: float):
        """A Cilk loop is complete: the master, waiting in ``cilk_loop``, continues the program, not ``w``."""
        return None

    def wake_children(self, sim, w: int) -> None:
        """A child that fell asleep after the master's wake-up call is woken by the parent that releases it."""
        for child in self.barrier.tree.children[w]:
            self.wake(sim, sim.env.now, worker=child)

    def run_block(self, sim, w: int):
        """Read the loop descriptor and run this worker's static block."""
        index = self.fine[self.joined[w]]
        self.joined[w] += 1
        _, t = sim.memory.read(self.descriptor, w)
        yield sim.wait(w, "schedule", t)
        yield from run_block(sim, w, index)
