"""Modeled shared memory: cache lines whose operations are charged with the machine's core-to-core latencies.

Every shared word a scheduler uses lives on a :class:`Line`. The cost model:

* The machine gives the one-way latency ``lat(a, b)`` as a ping-pong measures it
  (round trip / 2): the time from a write on core a until core b, spinning on the
  line, sees it. That is two line transfers: the writer's invalidation of the
  spinner's copy, then the spinner's re-fetch. One *transfer* is therefore
  ``lat(a, b) / 2``.
* A line has a *holder*, the core that last wrote it, and a set of cores that hold a
  valid copy. Reading it from elsewhere costs one transfer from the holder.
* Exclusive operations (stores and atomic read-modify-writes) on one line are served
  first come, first served: each waits until the previous one is done, and an atomic
  by a core that does not hold the line first pays one transfer from the holder. That
  queue is where contention comes from.
* A core keeps a line after its own exclusive operation for its *hold window*, half the
  shortest transfer to another core: a request issued meanwhile has not reached it yet. An
  operation it issues within the window (a failed compare-and-swap's retry) runs on the line
  it has, ahead of those requests; the caller chains it (``at``) rather than queueing it.
* A core spinning on a line learns of a write ``lat(writer, spinner)`` after it
  becomes visible; the line's source then serves the spinners' re-reads one after
  another, ``serve_ns`` each (near zero for a snooping broadcast).
* With *reservation* atomics (load-linked / store-conditional, as the Cell SPE's
  getllar / putllc) a core does not queue for a line: it reserves it and writes it
  conditionally. An atomic issued while another core's write to the line is still
  pending loses its reservation to that write and retries once it sees it: it starts
  ``lat(writer, core)`` after the write, not one transfer after, and counts a
  ``lost_reservations``.

Operations are issued at the current simulation time and return the time at which
they complete, so a caller can fold several costs into one SimPy timeout: the event
count grows with operations, never with iterations.
"""

from __future__ import annotations

from heapq import heappush, heapreplace
from typing import Any, Callable

import numpy as np
from simpy.core import StopSimulation
from simpy.events import Event

from .machine.latencies import Latencies
from .simpy_access import NORMAL, clock_slot, event_slots, fire_at

# The hottest scheduler loops (the self-scheduling claim, the stealing loop's take from its own
# queue) issue their line operations inline, exactly as the methods below would, to save a call
# each (and the stealing loop skips the policy hooks its class does not override). The claim's copy
# has no lost reservations, so on a machine with reservation atomics it calls the method. With this
# False they call the methods and every hook instead; the tests run both ways and compare.
INLINE = True

# The same inline loops compiled (simsched/_speedups.c: the claim, the stealing loop, and iCh's policy), taken
# where built and INLINE holds (a chunk with data or noise timed by Simulation.chunk_time, as in the Python
# loops), and the event loop that steps them (engine.run_until, Simulation.drive), taken wherever built; None
# where the extension is not built, or to run SimPy's loop and the Python loops, which are the reference: the
# tests compare all the ways.
try:
    from . import _speedups as speedups
except ImportError:
    speedups = None
else:
    if getattr(speedups, "INTERFACE", None) == 6:
        speedups.bind_clock(clock_slot())  # they read the run's clock where SimPy keeps it
        speedups.bind_events(*event_slots(), NORMAL, StopSimulation)  # and step its events (engine.run_until)
    else:  # built from an older source: its loops take other arguments, or read the clock elsewhere
        import warnings

        warnings.warn("simsched's compiled loops are out of date (rebuild them: pip install -e .); "
                      "running the Python loops", RuntimeWarning, stacklevel=1)
        speedups = None


class Line:
    """A modeled cache line: one shared word, its holder, its valid copies, and the cores spinning on it."""

    __slots__ = ("name", "value", "holder", "free_at", "written_at", "sharers", "spinners")

    def __init__(self, name: str, value: Any, home: int):
        self.name = name
        self.value = value
        self.holder = home
        self.free_at = 0.0
        self.written_at = float("-inf")  # when the last write became visible
        self.sharers = {home}
        self.spinners: list[tuple[int, Callable[[Any], bool], Event]] = []

    def __repr__(self) -> str:
        return f"Line({self.name!r}, value={self.value!r}, holder={self.holder})"


class Rows:
    """``rows[a][b]``: the latency (times ``fraction``) from core a to core b, worked out when asked.

    It stands in for a run's table of every pair where that table would not fit (see ``Memory.TABLE_CORES``).
    """

    def __init__(self, latencies: Latencies, fraction: float):
        self.latencies, self.fraction = latencies, fraction
        self._rows: dict[int, Row] = {}

    def __getitem__(self, a: int) -> "Row":
        row = self._rows.get(a)
        if row is None:
            row = self._rows[a] = Row(self.latencies.value, a, self.fraction)
        return row

    def __len__(self) -> int:
        return len(self.latencies)


class Row:
    """One core's row of a ``Rows``: ``row[b]``."""

    __slots__ = ("value", "a", "fraction")

    def __init__(self, value, a: int, fraction: float):
        self.value, self.a, self.fraction = value, a, fraction

    def __getitem__(self, b: int) -> float:
        return self.value(self.a, b) * self.fraction


class Column:
    """One core's column of a ``Rows``: ``column[a]`` is ``rows[a][core]`` (what the compiled loops index)."""

    __slots__ = ("value", "b", "fraction", "size")

    def __init__(self, rows: Rows, b: int):
        self.value, self.b, self.fraction, self.size = rows.latencies.value, b, rows.fraction, len(rows)

    def __getitem__(self, a: int) -> float:
        if not 0 <= a < self.size:
            raise IndexError("line holder out of range")
        return self.value(a, self.b) * self.fraction

    def __len__(self) -> int:
        return self.size


class HoldWindows(dict):
    """Each core's hold window (see ``Memory._tables``), worked out the first time the core asks."""

    def __init__(self, latencies: Latencies, fraction: float):
        super().__init__()
        self.latencies, self.fraction = latencies, fraction

    def __missing__(self, core: int) -> float:
        window = self[core] = self.latencies.nearest(core) * self.fraction / 2
        return window


class Memory:
    """The modeled shared memory of one run: allocates lines and charges their operations."""

    # Runs of up to this many cores keep every pair's latency in a table (nested lists index fastest);
    # larger ones work each out from the topology when an operation asks, so memory grows with the cores.
    TABLE_CORES = 1024

    def __init__(self, env, latency, costs: dict[str, float], serve_ns: float,
                 transfer_fraction: float = 0.5, directory: bool = False, reservations: bool = False,
                 hold: bool = True):
        self.env = env
        latencies = latency if isinstance(latency, Latencies) else Latencies.from_matrix(latency)
        self.cores = len(latencies)
        if self.cores <= self.TABLE_CORES:
            self._tables(latencies.matrix(), transfer_fraction, hold)
        else:
            self.lat, self.transfer = Rows(latencies, 1.0), Rows(latencies, transfer_fraction)
            self._columns = (self.lat, self.transfer)
            self._to = {}
            self.hold_ns = HoldWindows(latencies, transfer_fraction) if hold else [-np.inf] * self.cores
        self.directory = directory
        self.reservations = reservations
        self.atomic_ns = costs["atomic"]
        self.store_ns = costs["store"]
        self.serve_ns = serve_ns
        self.lines: list[Line] = []
        # Plain attributes on the hot path; ``tally`` folds them into the run's counters.
        self.atomics = 0
        self.transfers = 0
        self.cas_failures = 0
        self.lost_reservations = 0

    def latencies_to(self, core: int) -> list[float]:
        """``[row[core] for row in self.lat]``: the latency from each core to ``core``, made once a run."""
        return self._column(0, core)

    def transfers_to(self, core: int) -> list[float]:
        """``[row[core] for row in self.transfer]``: a line's transfer from each core to ``core``, made once a run."""
        return self._column(1, core)

    def _column(self, which: int, core: int) -> list[float]:
        column = self._to.get((which, core))
        if column is None:
            if isinstance(self.lat, Rows):
                rows = self._columns[which]
                column = self._to[which, core] = (
                    Column(rows, core) if speedups is None
                    else speedups.Column(rows.latencies.compiled(), core, rows.fraction))
            else:
                index, *values = self._columns
                column = self._to[which, core] = list(map(values[which].__getitem__, index[:, core].tolist()))
        return column

    def mean_transfer(self) -> float:
        """A line's transfer time averaged over the ordered pairs of distinct cores (0 on one core)."""
        if isinstance(self.transfer, Rows):
            total = sum(float(self.transfer.latencies.row(a).sum()) for a in range(self.cores))
            pairs = self.cores * (self.cores - 1)
            return total * self.transfer.fraction / pairs if pairs else 0.0
        hops = [self.transfer[a][b] for a in range(self.cores) for b in range(self.cores) if a != b]
        return sum(hops) / len(hops) if hops else 0.0

    def _tables(self, latency: np.ndarray, transfer_fraction: float, hold: bool) -> None:
        # Nested lists index faster than a NumPy matrix on this hot path. Equal latencies share one float
        # object, so that a 1,024-core table is a few hot floats behind its pointers, not a million cold ones.
        values, index = np.unique(latency, return_inverse=True)
        latencies = [float(v) for v in values]
        transfers = [x * transfer_fraction for x in latencies]
        index = index.reshape(np.shape(latency))
        rows = index.tolist()
        self.lat = [list(map(latencies.__getitem__, row)) for row in rows]
        self.transfer = [list(map(transfers.__getitem__, row)) for row in rows]
        # Each core's column of both (what a line costs from every core to it), made when first asked for.
        self._columns = (index, latencies, transfers)
        self._to: dict[tuple[int, int], list[float]] = {}
        # Each core's hold window: how long a line stays with it after its own exclusive operation on it
        # when other cores want it. A transfer is a request reaching the holder, then the line reaching
        # the requester; the model splits it evenly, so no request can take the line sooner than half
        # the shortest transfer from this core to another core of the run (never, on a lone core).
        # Without ``hold`` the line leaves as the operation ends: no operation is ever within a window.
        away = latency * transfer_fraction
        np.fill_diagonal(away, np.inf)
        self.hold_ns = (away.min(axis=1) / 2).tolist() if hold else [-np.inf] * len(away)

    # The counters the memory model adds to a run's (the schedulers' own come on top).
    COUNTERS = ("atomics", "transfers", "cas_failures", "lost_reservations")

    def tally(self, counters) -> None:
        """Add this memory's operation counts to ``counters``."""
        for name in self.COUNTERS:
            if getattr(self, name):
                counters[name] += getattr(self, name)

    def line(self, name: str, value: Any = 0, home: int = 0) -> Line:
        """Allocate a line initially held by core ``home`` (where it was first written)."""
        line = Line(name, value, home)
        self.lines.append(line)
        return line

    # -- plain accesses ---------------------------------------------------------------
    def read(self, line: Line, core: int, at: float | None = None) -> tuple[Any, float]:
        """Read the line from ``core``: (value, completion time).

        ``at`` (here and below) issues the operation later than now, for a worker that
        chains several operations without waking up in between.
        """
        now = self.env.now if at is None else at
        start = line.free_at if line.free_at > now else now
        if core in line.sharers:
            return line.value, start
        line.sharers.add(core)
        self.transfers += 1
        # A fresh write is seen no sooner than a spinner would see it.
        done = start + self.transfer[line.holder][core]
        seen = line.written_at + self.lat[line.holder][core]
        return line.value, done if done > seen else seen

    def read_all(self, lines, core: int, at: float, overlap: int = 1) -> tuple[list, float]:
        """Read each of ``lines`` from ``core`` as independent loads: (their values, when the last is done).

        A core keeps at most ``overlap`` misses in flight (its line fill buffers): each read is
        issued at ``at`` or, with ``overlap`` in flight, when the earliest of them is done.
        ``overlap=1`` issues each read when the one before it is done.
        """
        values, flight, done = [], [], at
        for line in lines:
            value, t = self.read(line, core, at if len(flight) < overlap else flight[0])
            if len(flight) < overlap:
                heappush(flight, t)
            else:
                heapreplace(flight, t)
            values.append(value)
            if t > done:
                done = t
        return values, done

    def peek(self, line: Line, core: int, at: float | None = None) -> tuple[Any, float]:
        """Read the line without keeping a copy (a DMA get into a local store): (value, completion time)."""
        now = self.env.now if at is None else at
        start = line.free_at if line.free_at > now else now
        if core == line.holder:
            return line.value, start
        self.transfers += 1
        done = start + self.transfer[line.holder][core]
        seen = line.written_at + self.lat[line.holder][core]
        return line.value, done if done > seen else seen

    def store(self, line: Line, core: int, value: Any, at: float | None = None) -> float:
        """Write ``value`` from ``core`` (through the store buffer): the writer's completion time."""
        now = self.env.now if at is None else at
        start = line.free_at if line.free_at > now else now
        line.value = value
        if line.holder != core or len(line.sharers) > 1:
            line.holder = core
            line.sharers = {core}
        line.free_at = line.written_at = start
        if line.spinners:
            self._notify(line, core, start)
        return start + self.store_ns

    # -- atomic read-modify-writes ----------------------------------------------------
    def exchange(self, line: Line, core: int, value: Any, at: float | None = None) -> tuple[Any, float]:
        """Atomic exchange: (old value, completion time). Every read-modify-write below is one of these."""
        now = self.env.now if at is None else at
        start = line.free_at if line.free_at > now else now
        self.atomics += 1
        holder = line.holder
        if holder != core:
            self.transfers += 1
            if self.reservations and start > now:
                # Another core's write was pending when this one reserved the line: the store-conditional
                # fails, and the retry reserves the line again once the write is seen (as a spinner sees it).
                self.lost_reservations += 1
                self.transfers += 1   # the failed attempt's fetch, besides the retry's
                start += self.lat[holder][core]
            else:
                start += self.transfer[holder][core]
            line.holder = core
            line.sharers = {core}
        elif len(line.sharers) > 1:
            line.sharers = {core}
        done = start + self.atomic_ns
        old = line.value
        line.value = value
        line.free_at = line.written_at = done
        if line.spinners:
            self._notify(line, core, done)
        return old, done

    def rmw(self, line: Line, core: int, update: Callable[[Any], Any],
            at: float | None = None) -> tuple[Any, float]:
        """Atomically replace the value v by ``update(v)``: (old value, completion time)."""
        # Nothing else runs between reading the value and the exchange: the two are one atomic.
        return self.exchange(line, core, update(line.value), at)

    def fetch_add(self, line: Line, core: int, amount: int = 1, at: float | None = None) -> tuple[Any, float]:
        """Atomic fetch-and-add: (old value, completion time)."""
        return self.exchange(line, core, line.value + amount, at)

    def fetch_or(self, line: Line, core: int, bits: int, at: float | None = None) -> tuple[Any, float]:
        """Atomic fetch-and-or: (old value, completion time)."""
        return self.exchange(line, core, line.value | bits, at)

    def holds(self, line: Line, core: int, at: float) -> bool:
        """Whether ``core`` still has the line at ``at``: the line's last exclusive operation is the
        core's own and ended at most the core's hold window before ``at``.

        An operation the core issues then runs on the line it has, before the request of any other
        core issued meanwhile can take the line away: chain it with ``at``.
        """
        return line.holder == core and at - line.free_at <= self.hold_ns[core]

    def cas(self, line: Line, core: int, expected: Any, new: Any,
            at: float | None = None) -> tuple[bool, Any, float]:
        """Compare-and-swap: (succeeded, value found, completion time).

        A failed CAS still takes the line (x86's locked CMPXCHG writes it back either way), so the
        core has the line when the CAS completes. A retry it issues within its hold window (see
        ``holds``), chained with ``at``, runs there one ``atomic`` later, ahead of the requests issued
        after the failed CAS, and finds the value the failure found: it cannot fail again.
        """
        found = line.value
        succeeded = found == expected
        old, done = self.exchange(line, core, new if succeeded else found, at)
        if not succeeded:
            self.cas_failures += 1
        return succeeded, old, done

    # -- spinning ---------------------------------------------------------------------
    def spin_until(self, line: Line, core: int, ready: Callable[[Any], bool]) -> Event:
        """An event that fires when ``core``, spinning on the line, sees a value for which ``ready`` holds."""
        env = self.env
        event = Wait(env)
        if ready(line.value):
            value, seen = self.read(line, core)
            fire_at(env, event, seen, value)
        else:
            line.spinners.append((core, ready, event))
        return event

    def _notify(self, line: Line, writer: int, visible: float) -> None:
        """Tell the spinners that a write became visible; those it satisfies re-read the line in turn.

        With snooping the invalidation reaches every spinner at once and the line's source
        hands out copies ``serve_ns`` apart; with a directory each re-read is a separate
        transfer from the writer, served one after another.
        """
        env, lat, serve = self.env, self.lat[writer], self.serve_ns
        transfer = self.transfer[writer]
        waiting = []
        served = 0
        queue = 0.0
        value = line.value
        for spinner in line.spinners:
            core, ready, event = spinner
            if ready(value):
                line.sharers.add(core)
                fire_at(env, event, visible + lat[core] + queue, value)
                queue += transfer[core] + serve if self.directory else serve
                served += 1
            else:
                waiting.append(spinner)
        line.spinners = waiting
        self.transfers += served


class Wait(Event):
    """An event that one worker alone waits on: its own timed wait, spin, sleep, task run or ``drive``'s end.

    So when one fires, the worker's resumption is its only callback, and a next timed wait of
    the worker that ends before every queued event can be passed without the queue
    (``Simulation.until``): popping it would run nothing in between.
    """
