"""The scheduler interface and the fork-join loop skeleton most schedulers share."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry import SCHEDULERS, on_subclass
from ..spec import Param, format_spec, resolve_params

if TYPE_CHECKING:
    from simpy.events import Event, Process

    from ..engine import Simulation

# What a worker's hooks return: SimPy process steps, run inside the worker's process (``yield from``).
Steps = Generator["Event", Any, Any]


class Scheduler:
    """A parallel-loop scheduling algorithm; ``worker`` is the SimPy process each worker runs.

    A subclass with a ``name`` of its own is registered when it is defined. Its ``PARAMS`` are
    what a spec may set (checked into ``self.params`` by ``__init__``); a check no single
    ``Param`` can make belongs in ``__init__``, after ``super().__init__``, raising
    ``SimschedError``. One Scheduler object runs one simulation at a time: ``setup`` starts each.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Param]] = {}
    # Counter names the scheduler always reports (0 when nothing happened): a contract for tools.
    COUNTERS: ClassVar[tuple[str, ...]] = ()
    # Whether it runs loops nested in iterations (``Loop.inner``).
    NESTED: ClassVar[bool] = False
    # Whether it charges chunks for their data (Simulation.chunk_time once per chunk, when it starts).
    LOCALITY: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any):
        # Defining a subclass with a name of its own registers it: built-in schedulers and plugins alike.
        super().__init_subclass__(**kwargs)
        on_subclass(SCHEDULERS, cls)

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

    def setup(self, sim: Simulation) -> None:
        """Allocate the run's shared lines (``sim.memory.line``) and state before the workers start."""

    def worker(self, sim: Simulation, w: int) -> Steps:
        """The SimPy process of worker ``w``: every loop of ``sim.loops``, each of its iterations run exactly
        once by some worker (``sim.run_chunk``), ``sim.loop_end[index]`` set when loop ``index`` ends."""
        raise NotImplementedError

    def completion(self, sim: Simulation, processes: Sequence[Process]) -> Event:
        """The event that ends the run: by default the master (worker 0) finishing its program."""
        return processes[0]


class ForkJoin(Scheduler):
    """A master-driven loop: the master publishes each loop, workers run their share, the master waits for all.

    Subclasses give the start and end synchronization (``fork``, ``join``) and how a
    worker gets its iterations (``share``).
    """

    def setup(self, sim: Simulation) -> None:
        # The loop descriptor (body, bounds, schedule) the master writes and every worker reads.
        self.descriptor = sim.memory.line("loop.descriptor", -1, home=0)
        # Reduction views, when the loop has a reduction (subclasses decide how they are combined).
        self.views = None

    def worker(self, sim: Simulation, w: int) -> Steps:
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

    def prepare(self, sim: Simulation, index: int) -> None:
        """Master-side set-up of loop ``index`` before it is published, e.g. a fresh shared counter for it:
        runs on worker 0, in no simulated time of its own (the ``loop_setup`` cost that follows covers it)."""

    def fork(self, sim: Simulation, w: int) -> Steps:
        """Worker ``w``'s start of a loop: the synchronization after which it may read the published loop."""
        raise NotImplementedError

    def join(self, sim: Simulation, w: int) -> Steps:
        """Worker ``w``'s end of a loop: the synchronization after which the master may go on."""
        raise NotImplementedError

    def share(self, sim: Simulation, w: int, index: int) -> Steps:
        """Worker ``w`` runs its part of loop ``index``: claims iterations and runs them (``sim.run_chunk``)
        until none is left for it."""
        raise NotImplementedError


# The counters every self-scheduling and work-stealing scheduler reports (a contract for tools).
STEALING_COUNTERS = ("steal_attempts", "steals", "tasks_created", "claims", "failed_claims", "wakeups")


def block(n: int, threads: int, w: int) -> tuple[int, int]:
    """Worker ``w``'s contiguous, near-equal block of [0, n)."""
    return (w * n) // threads, ((w + 1) * n) // threads


def run_block(sim: Simulation, w: int, index: int) -> Steps:
    """Worker ``w`` runs its static block of loop ``index`` (nothing if the block is empty)."""
    yield sim.until(sim.run_chunks(w, index, [block(sim.loops[index].n, sim.threads, w)], sim.env.now))


def default_grain(n: int, threads: int) -> int:
    """cilk_for's default leaf size for a loop of ``n`` iterations on ``threads`` workers: max(1, min(2048, N/(8P)))."""
    return max(1, min(2048, n // (8 * threads)))
