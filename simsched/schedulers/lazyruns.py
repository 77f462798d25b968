"""Lazy runs of the loop-task runtime: a stretch of steps as one event, cut where a thief's change is seen.

The per-iteration queue check is lazy: a running task is one event, and a thief that
empties a queue schedules the owner's reaction at the first iteration boundary after the
owner can see it (a binary search on the loop's prefix sums), so event counts grow with
splits and steals, not iterations.
"""

from __future__ import annotations

from simpy.events import Event

from ..memory import Wait
from ..simpy_access import fire_at


class Run:
    """A worker's current stretch of steps (iterations, or task creations), interruptible at step boundaries."""

    __slots__ = ("loop", "lo", "stop", "start", "step_ns", "compute", "every", "event")

    def __init__(self, loop, lo, stop, start, step_ns, compute, every, event):
        self.loop, self.lo, self.stop, self.start = loop, lo, stop, start   # stop: where it ends now
        self.step_ns, self.compute, self.every, self.event = step_ns, compute, every, event


class LazyRuns:
    """Running steps as one event and interrupting the run at a step boundary.

    A mixin of :class:`~simsched.schedulers.looptasks.LoopTasks`, whose ``setup`` makes the
    per-worker ``running`` and ``unseen`` slots.
    """

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
