"""Fork-join work stealing as in Cilk: THE-protocol deques, random victims, sleeping thieves.

Each worker owns a deque of continuations. Splitting a range pushes its upper half at
the tail (a spawn); the owner pops at the tail; a thief locks a random victim's deque
and takes the head, the oldest and largest piece. Stolen work runs in a new *frame*
whose completion is reported to its parent's join counter; a loop is done when its
root frame's own strand and every stolen descendant have finished. The worker that
finishes a frame last resumes what follows its sync, as in Cilk, so the next loop of a
program starts on whichever worker completed the previous one.

Deque operations by the owner are charged on the deque's head and tail lines; they
cost little unless a thief touched them. Pushes and pops are folded into the next
leaf's single event, so events grow with leaves and steal attempts, not iterations.

``WorkStealing`` is also the base of the TBB (``tbb``) and hybrid (``hybrid``) schedulers.
"""

from __future__ import annotations

from collections import deque

from ..memory import Wait
from ..simpy_access import fire_at
from ..spec import Param
from .base import STEALING_COUNTERS, Scheduler, default_grain

RANGE = "range"  # deque item (RANGE, lo, hi, frame): iterations [lo, hi) of frame's loop
NEXT_LOOP = ("next loop",)  # the work of a worker that finished a loop: start the program's next one


class Frame:
    """A full frame: a loop's root or stolen work, complete when its strand and all stolen children are."""

    __slots__ = ("parent", "line", "pending", "strand_done", "loop")

    def __init__(self, parent: "Frame | None", line, loop: int):
        self.parent = parent
        self.line = line          # its join counter, homed where the frame runs
        self.pending = 0          # stolen children not yet finished
        self.strand_done = False
        self.loop = loop


class WorkStealing(Scheduler):
    """Deques of continuations per worker; idle workers steal from random victims and sleep after failing."""

    COUNTERS = STEALING_COUNTERS
    # Whether a thief resumes a stolen continuation on a fresh stack (Cilk) rather than run a stolen task on its own.
    STACK_SWITCH = True

    PARAMS = {
        "grain": Param("grain", int, None, lambda v: v >= 1, ">= 1",
                       help="leaf size of the binary splitting (default: max(1, min(2048, N/(8P))))"),
        "sleep_after": Param("sleep_after", int, 128, lambda v: v >= 1, ">= 1",
                             help="consecutive failed steals before a worker sleeps (assumed, the order of "
                                  "Cilk Plus's max_steal_failures)"),
    }

    def setup(self, sim) -> None:
        mem, threads = sim.memory, sim.threads
        self.deques = [deque() for _ in range(threads)]
        self.head = [mem.line(f"deque[{w}].head", 0, home=w) for w in range(threads)]
        self.tail = [mem.line(f"deque[{w}].tail", 0, home=w) for w in range(threads)]
        self.lock = [mem.line(f"deque[{w}].lock", 0, home=w) for w in range(threads)]
        self.sleepers: list = []
        self.finished = False
        self.done = sim.env.event()
        self.next_loop = 0

    def completion(self, sim, processes):
        return self.done

    def min_chunks(self, n, threads):
        # Ranges split until no more than the grain: every chunk is a leaf of at most that many iterations.
        return -(-n // (self.params.get("grain") or default_grain(n, threads)))

    def grain(self, sim, index: int) -> int:
        """Leaf size of the binary splitting of loop ``index``."""
        if self.params.get("grain"):
            return self.params["grain"]
        return default_grain(sim.loops[index].n, sim.threads)

    # -- the worker ---------------------------------------------------------------------
    def worker(self, sim, w: int):
        work = NEXT_LOOP if w == 0 else None
        failures = 0
        while not self.finished:
            if work is None and self.resumes(w):
                work = NEXT_LOOP
            if work is NEXT_LOOP:
                # The program's sequential code before the loop runs on the worker that reached it.
                yield from sim.serial_code(w, self.next_loop)
                work = self.begin_loop(sim, w, sim.env.now)
            if work is not None:
                work = yield from self.strand(sim, w, *work)
                failures = 0
                continue
            if sim.noise is not None:  # no generator per attempt in the runs without noise
                yield from sim.arrive(w)
            work = yield from self.steal(sim, w)
            if work is None:
                failures += 1
                if failures >= self.params["sleep_after"]:
                    yield from self.sleep(sim, w)
                    failures = 0

    def begin_loop(self, sim, w: int, t: float):
        """Worker ``w`` reaches the next loop of the program at time ``t``: (root frame, first item, time)."""
        index = self.next_loop
        self.next_loop += 1
        t += sim.costs["loop_setup"]
        sim.loop_begins(t)
        root = Frame(None, sim.memory.line(f"loop[{index}].root", 0, home=w), index)
        return root, self.first_item(sim, w, root), t

    def first_item(self, sim, w: int, root: Frame) -> tuple:
        """What the worker that starts a loop runs first: the whole range."""
        return (RANGE, 0, sim.loops[root.loop].n, root)

    def strand(self, sim, w: int, frame: Frame, item: tuple, t: float):
        """Run ``item`` of ``frame`` on ``w``, then whatever ``w`` pops, until its deque is empty.

        Returns the work ``w`` picks up next (a new loop it must start) or None.
        """
        mem, costs = sim.memory, sim.costs
        own = self.deques[w]
        while True:
            if item[0] == RANGE:
                t = yield from self.run_range(sim, w, frame, item, t)
            else:
                item, t = self.run_item(sim, w, frame, item, t)
                if item is not None:
                    continue
            # Pop the tail: store the new tail, fence, read the head a thief may have moved.
            t = mem.store(self.tail[w], w, len(own) - 1, at=t) + costs["atomic"]
            _, t = mem.read(self.head[w], w, at=t)
            if not own:
                break
            item = own.pop()
        yield sim.wait(w, "schedule", t)
        work, t = self.finish_strand(sim, w, frame, t)
        yield sim.wait(w, "sync", t)
        return work

    def run_range(self, sim, w: int, frame: Frame, item: tuple, t: float):
        """Run a range item: split it down to the grain and run the first leaf; returns when that leaf ends."""
        _, lo, hi, _ = item
        # Spawn the upper halves, continue with the lower: the work-first order. The
        # spawns and the pop before them count as scheduling time in run_chunk.
        grain = self.grain(sim, frame.loop)
        while hi - lo > grain:
            mid = (lo + hi) // 2
            t = self.push(sim, w, (RANGE, mid, hi, frame), t)
            hi = mid
        yield sim.until(sim.run_chunk(w, frame.loop, lo, hi, t))
        return sim.env.now

    def resumes(self, w: int) -> bool:
        """Whether idle worker ``w`` must start the program's next loop (Cilk: never; whoever ends a loop does)."""
        return False

    def push(self, sim, w: int, item: tuple, t: float) -> float:
        """Spawn: ``w`` pushes ``item`` at its deque's tail at time ``t``; returns when that is done."""
        own = self.deques[w]
        own.append(item)
        t = sim.memory.store(self.tail[w], w, len(own), at=t + sim.costs["spawn"])
        sim.counters["tasks_created"] += 1
        if self.sleepers:
            self.wake(sim, t)
        return t

    def run_item(self, sim, w: int, frame: Frame, item: tuple, t: float):
        """Run a deque item that is not a range: (the range to run next or None, time)."""
        raise NotImplementedError(item[0])

    def finish_strand(self, sim, w: int, frame: Frame, t: float):
        """``w`` reached ``frame``'s sync: complete it and its ancestors while nothing else is pending.

        Returns (the next loop's work if ``w`` completed a loop and another follows, time).
        """
        frame.strand_done = True
        while frame.strand_done and frame.pending == 0:
            parent = frame.parent
            if parent is None:
                return self.end_loop(sim, w, frame, t), t
            _, t = sim.memory.fetch_add(parent.line, w, -1, at=t)
            parent.pending -= 1
            frame = parent
        return None, t

    def end_loop(self, sim, w: int, root: Frame, t: float):
        """The loop's root frame is complete: ``w`` continues the program after its sync (NEXT_LOOP, or None)."""
        sim.loop_end[root.loop] = t
        if self.next_loop < len(sim.loops):
            return NEXT_LOOP
        self.finished = True
        fire_at(sim.env, self.done, t)
        while self.sleepers:
            self.wake(sim, t, count=False)
        return None

    # -- thieves --------------------------------------------------------------------------
    def steal(self, sim, w: int):
        """One steal attempt on a random victim: the stolen work (frame, lo, hi, t), or None."""
        mem, env, threads = sim.memory, sim.env, sim.threads
        now = env.now
        sim.counters["steal_attempts"] += 1
        if threads == 1:
            yield sim.wait(w, "steal", now + sim.costs["steal"])
            return None
        victim = int(sim.rng.integers(threads - 1))
        victim += victim >= w
        lock = self.lock[victim]
        _, t = mem.exchange(lock, w, 1)
        _, t = mem.read(self.tail[victim], w, at=t)
        work = None
        if self.deques[victim]:
            work, t = self.take(sim, w, victim, t)
        # The unlock store keeps the lock line busy until then: later lockers queue behind it.
        t = mem.store(lock, w, 0, at=t)
        yield sim.wait(w, "steal", t)
        return work

    def take(self, sim, w: int, victim: int, t: float):
        """The thief holds the victim's lock and the deque is not empty: take the head. (work, time)."""
        mem = sim.memory
        item = self.deques[victim].popleft()
        parent = item[-1]
        # Steal bookkeeping, then a fresh stack on which to resume the stolen continuation.
        t = mem.store(self.head[victim], w, 0, at=t) + sim.costs["steal"]
        if self.STACK_SWITCH:
            t += sim.costs["stack_switch"]
        sim.counters["steals"] += 1
        frame, t = self.child_frame(sim, w, parent, t)
        return (frame, item, t), t

    def child_frame(self, sim, w: int, parent: Frame, t: float):
        """A new full frame on ``w`` whose completion ``parent``'s sync will wait for: (frame, time)."""
        parent.pending += 1
        _, t = sim.memory.fetch_add(parent.line, w, 1, at=t)
        return Frame(parent, sim.memory.line("frame", 0, home=w), parent.loop), t

    def sleep(self, sim, w: int):
        """Sleep until new work appears, then pay the OS wake-up latency."""
        event = Wait(sim.env)
        self.sleepers.append((w, event))
        yield event
        if not self.finished:
            yield sim.env.timeout(sim.machine.wakeup_ns)

    def wake(self, sim, t: float, count: bool = True, worker: int | None = None) -> None:
        """Wake ``worker`` if it sleeps (by default the longest-sleeping worker) at time ``t``."""
        if worker is None:
            _, event = self.sleepers.pop(0)
        else:
            found = [i for i, (w, _) in enumerate(self.sleepers) if w == worker]
            if not found:
                return
            _, event = self.sleepers.pop(found[0])
        fire_at(sim.env, event, t)
        if count:
            sim.counters["wakeups"] += 1


class Cilk(WorkStealing):
    """``cilk_for``: recursive binary splitting down to a grain, balanced by randomized work stealing."""

    name = "cilk"
    summary = "Cilk cilk_for: binary splitting, THE-protocol deques, random stealing, sleeping thieves"
