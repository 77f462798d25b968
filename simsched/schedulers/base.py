"""The scheduler interface and the fork-join loop skeleton most schedulers share."""

from __future__ import annotations

from typing import Any, ClassVar

from ..spec import Param, format_spec, resolve_params


class Scheduler:
    """A parallel-loop scheduling algorithm; ``worker`` is the SimPy process each worker runs."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Param]] = {}
    # Counter names the scheduler always reports (0 when nothing happened): a contract for tools.
    COUNTERS: ClassVar[tuple[str, ...]] = ()
    # Whether it runs loops nested in iterations (``Loop.inner``).
    NESTED: ClassVar[bool] = False
    # Whether it charges chunks for their data (Simulation.chunk_time once per chunk, when it starts).
    LOCALITY: ClassVar[bool] = True

    def __init__(self, **params: Any):
        self.params = resolve_params(f"scheduler {self.name}", self.PARAMS, params)

    @property
    def spec(self) -> str:
        """The canonical ``name:key=value`` string, listing parameters that differ from defaults."""
        changed = {k: v for k, v in self.params.items() if v != self.PARAMS[k].default}
        return format_spec(self.name, changed)

    def oracle(self) -> str:
        """What the scheduler is given of a loop's exact iteration costs before it runs ('' when nothing)."""
        return ""

    def min_chunks(self, n: int, threads: int) -> int:
        """A cheap lower bound on the chunks a loop of ``n`` iterations takes on ``threads`` workers, from the
        scheduler's rules: at least one; a family whose rules say more overrides it (``simsched.budget``
        refuses a run by it before anything runs)."""
        return 1

    def setup(self, sim) -> None:
        """Allocate the run's shared lines before the workers start."""

    def worker(self, sim, w: int):
        raise NotImplementedError

    def completion(self, sim, processes):
        """The event that ends the run: by default the master (worker 0) finishing its program."""
        return processes[0]


class ForkJoin(Scheduler):
    """A master-driven loop: the master publishes each loop, workers run their share, the master waits for all.

    Subclasses give the start and end synchronization (``fork``, ``join``) and how a
    worker gets its iterations (``share``).
    """

    def setup(self, sim) -> None:
        # The loop descriptor (body, bounds, schedule) the master writes and every worker reads.
        self.descriptor = sim.memory.line("loop.descriptor", -1, home=0)
        # Reduction views, when the loop has a reduction (subclasses decide how they are combined).
        self.views = None

    def worker(self, sim, w: int):
        for index in range(len(sim.loops)):
            if w == 0:
                yield from sim.serial_code(0, index)
                self.prepare(sim, index)
                t = sim.env.now + sim.costs["loop_setup"]
                t = sim.memory.store(self.descriptor, 0, index, at=t)
                sim.loop_begins(t)
                yield sim.wait(0, "schedule", t)
            yield from self.fork(sim, w)
            yield from sim.arrive(w)
            _, t = sim.memory.read(self.descriptor, w)
            yield sim.wait(w, "schedule", t)
            yield from self.share(sim, w, index)
            if self.views is not None:
                yield sim.wait(w, "sync", self.views.publish(w))
            yield from self.join(sim, w)
            if w == 0:
                sim.loop_end[index] = sim.env.now

    def prepare(self, sim, index: int) -> None:
        """Master-side set-up of loop ``index`` before it is published."""

    def fork(self, sim, w: int):
        raise NotImplementedError

    def join(self, sim, w: int):
        raise NotImplementedError

    def share(self, sim, w: int, index: int):
        raise NotImplementedError


# The counters every self-scheduling and work-stealing scheduler reports (a contract for tools).
STEALING_COUNTERS = ("steal_attempts", "steals", "tasks_created", "claims", "failed_claims", "wakeups")


def block(n: int, threads: int, w: int) -> tuple[int, int]:
    """Worker ``w``'s contiguous, near-equal block of [0, n)."""
    return (w * n) // threads, ((w + 1) * n) // threads


def run_block(sim, w: int, index: int):
    """Worker ``w`` runs its static block of loop ``index`` (nothing if the block is empty)."""
    yield sim.until(sim.run_chunks(w, index, [block(sim.loops[index].n, sim.threads, w)], sim.env.now))


def default_grain(n: int, threads: int) -> int:
    """cilk_for's default leaf size for a loop of ``n`` iterations on ``threads`` workers: max(1, min(2048, N/(8P)))."""
    return max(1, min(2048, n // (8 * threads)))
