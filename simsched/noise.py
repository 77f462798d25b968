"""OS noise and late arrival: when each worker's core is taken from it, drawn per run from the machine's [noise]."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

import numpy as np

from .errors import SimschedError

US = 1000.0  # ns per microsecond
# The [noise] keys of a machine file (all optional; a machine without them has no noise).
NOISE_KEYS = {
    "tick_period_us": "period of the periodic timer interrupt on each core",
    "tick_us": "time each timer interrupt takes from the core",
    "rate_hz": "random interruptions per second on each core (a Poisson process)",
    "duration_us": "time each random interruption takes (its mean, with duration = \"exponential\")",
    "duration": "fixed or exponential: how random interruptions' durations are distributed",
    "late_us": "how late a late worker arrives at each loop (the mean of late)",
    "late": "fixed, exponential or uniform (on [0, 2 late_us]): how late arrivals are distributed",
    "late_workers": "how many workers arrive late, counted from the last (default: every worker but the master)",
}
DISTRIBUTIONS = {"duration": ("fixed", "exponential"), "late": ("fixed", "exponential", "uniform")}
# A core interrupted for more than this share of its time is not a noisy core but a busy one.
MAX_NOISE_SHARE = 0.5


def check_noise(table: dict[str, Any], cores: int, source: str) -> None:
    """Refuse a [noise] table that names unknown keys, gives out-of-range values or leaves out a partner key."""
    for key, value in table.items():
        where = f"{source}: noise.{key}"
        if key not in NOISE_KEYS:
            raise SimschedError(f"{source}: unknown key noise.{key} (known: {', '.join(NOISE_KEYS)})")
        if key in DISTRIBUTIONS:
            if value not in DISTRIBUTIONS[key]:
                raise SimschedError(f"{where} must be one of {', '.join(DISTRIBUTIONS[key])}, got {value!r}")
        elif key == "late_workers":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < cores:
                raise SimschedError(f"{where} must be an integer in [0, {cores - 1}] (the master is never late), "
                                    f"got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise SimschedError(f"{where} must be a number >= 0, got {value!r}")
    for partner, needs in (("tick_us", "tick_period_us"), ("tick_period_us", "tick_us"),
                           ("duration_us", "rate_hz"), ("rate_hz", "duration_us"), ("duration", "rate_hz"),
                           ("late", "late_us"), ("late_workers", "late_us")):
        if partner in table and needs not in table:
            raise SimschedError(f"{source}: noise.{partner} needs noise.{needs}")
    if "tick_period_us" in table and table["tick_period_us"] <= 0:
        raise SimschedError(f"{source}: noise.tick_period_us must be > 0, got {table['tick_period_us']!r}")
    if "rate_hz" in table and table["rate_hz"] > 1e7:
        raise SimschedError(f"{source}: noise.rate_hz must be at most 1e7 (one interruption per 100 ns), "
                            f"got {table['rate_hz']!r}")
    share = table.get("tick_us", 0) / table["tick_period_us"] if "tick_period_us" in table else 0.0
    share += table.get("rate_hz", 0) * table.get("duration_us", 0) / 1e6
    if share > MAX_NOISE_SHARE:
        raise SimschedError(f"{source}: [noise] takes {share:.0%} of each core's time (tick_us / tick_period_us + "
                            f"rate_hz x duration_us); at most {MAX_NOISE_SHARE:.0%} is noise rather than load")


class Interruptions:
    """One core's interruptions as sorted, non-overlapping [start, end) stretches, drawn ahead as far as asked.

    An interruption arriving while another runs waits for it (the kernel handles them one
    after another). Work in progress stops for each stretch and resumes after it.
    """

    BLOCK = 256  # interruptions drawn at a time, at least

    def __init__(self, rng: np.random.Generator, table: dict[str, Any]):
        self.rng = rng
        self.period = table.get("tick_period_us", 0.0) * US
        self.tick = table.get("tick_us", 0.0) * US if self.period else 0.0
        self.rate = table.get("rate_hz", 0.0) / 1e9  # per ns
        self.duration = table.get("duration_us", 0.0) * US
        self.exponential = table.get("duration", "fixed") == "exponential"
        self.next_tick = rng.uniform(0.0, self.period) if self.tick > 0 else np.inf
        self.next_random = rng.exponential(1 / self.rate) if self.rate > 0 and self.duration > 0 else np.inf
        self.horizon = 0.0
        # Python lists, since ``finish`` runs once per chunk and bisect on a list beats a NumPy call per search.
        self.start: list[float] = []
        self.end: list[float] = []
        self.before: list[float] = [0.0]     # before[i]: interruption time of the stretches before stretch i
        self.available: list[float] = []     # available[i]: the core's uninterrupted time when stretch i starts

    def draw(self, until: float) -> None:
        """Draw the interruptions that arrive before ``until`` (at least a block more)."""
        arrivals, durations = [], []
        while self.next_tick < until or self.next_random < until or len(arrivals) < self.BLOCK:
            if self.next_tick == np.inf and self.next_random == np.inf:
                break
            if self.next_tick <= self.next_random:
                arrivals.append(self.next_tick)
                durations.append(self.tick)
                self.next_tick += self.period
            else:
                arrivals.append(self.next_random)
                durations.append(self.rng.exponential(self.duration) if self.exponential else self.duration)
                self.next_random += self.rng.exponential(1 / self.rate)
        self.horizon = min(self.next_tick, self.next_random)
        if not arrivals:
            return
        a, d = np.asarray(arrivals), np.asarray(durations)
        total = np.cumsum(d)
        # end_i = max(a_i, end_{i-1}) + d_i, unrolled: total_i + the latest (a_j - total_{j-1}) so far.
        carry = self.end[-1] if self.end else -np.inf
        end = total + np.maximum(np.maximum.accumulate(a - (total - d)), carry)
        # A stretch starts when it arrives or when the one before it ends: never inside it, even by a rounding.
        start = np.maximum(a, np.concatenate(([carry], end[:-1])))
        before = self.before[-1] + np.concatenate(([0.0], np.cumsum(end - start)))
        self.available.extend((start - before[:-1]).tolist())
        self.start.extend(start.tolist())
        self.end.extend(end.tolist())
        self.before[-1:] = before.tolist()

    def finish(self, start: float, work: float) -> float:
        """When ``work`` ns of computing begun at ``start`` ends, the interruptions in between taken out."""
        if work <= 0:
            return start
        while True:
            j = bisect_right(self.start, start)
            if j and self.end[j - 1] > start:   # begun inside an interruption: it starts when that ends
                uninterrupted = self.end[j - 1] - self.before[j]
            else:
                uninterrupted = start - self.before[j]
            target = uninterrupted + work
            # The stretches up to j have begun by ``start``: only later ones can interrupt (k >= j, even when
            # a tiny ``work`` rounds away in ``target``).
            k = max(bisect_left(self.available, target), j)
            end = target + self.before[k]
            if end <= self.horizon or self.horizon == np.inf:
                return end
            self.draw(2 * end)


def interrupting(table: dict[str, Any]) -> bool:
    """Whether a [noise] table takes any time from the cores (ticks, or random interruptions that last)."""
    return table.get("tick_us", 0) > 0 or (table.get("rate_hz", 0) > 0 and table.get("duration_us", 0) > 0)


class Noise:
    """A run's noise: each worker's core's interruptions, and when each worker arrives at each loop."""

    def __init__(self, table: dict[str, Any], cores: list[int], rng: np.random.Generator):
        streams = rng.spawn(len(cores) + 1)
        # Each core has its own stream, so a core's interruptions are the same whichever scheduler runs.
        self.interruptions = [Interruptions(s, table) for s in streams[:-1]] if interrupting(table) else None
        self.late_rng = streams[-1]
        self.late_us = float(table.get("late_us", 0.0))
        self.late = table.get("late", "fixed")
        threads = len(cores)
        self.late_from = threads - table.get("late_workers", threads - 1)
        self.absent_until = [0.0] * threads
        self.interrupted_ns = 0.0
        self.late_ns = 0.0

    @classmethod
    def of(cls, machine, cores: list[int], rng: np.random.Generator) -> "Noise | None":
        """The run's noise on ``machine`` (None when its [noise] has none: runs stay exactly as before)."""
        table = machine.data.get("noise", {})
        return cls(table, cores, rng) if interrupting(table) or table.get("late_us", 0) > 0 else None

    def finish(self, worker: int, start: float, work: float) -> float:
        """When ``worker`` ends ``work`` ns of computing begun at ``start``."""
        return start + work if self.interruptions is None else self.interruptions[worker].finish(start, work)

    def charge(self, worker: int, start: float, work: float) -> float:
        """``finish``, for computing that happens: its interruptions count in the ``noise_ns`` counter."""
        end = self.finish(worker, start, work)
        self.interrupted_ns += end - start - work
        return end

    def loop_begins(self, t: float) -> None:
        """A loop is published at ``t``: draw when each late worker arrives at it."""
        if self.late_us <= 0:
            return
        count = len(self.absent_until) - self.late_from
        if count <= 0:
            return
        if self.late == "fixed":
            delays = np.full(count, self.late_us)
        elif self.late == "exponential":
            delays = self.late_rng.exponential(self.late_us, count)
        else:
            delays = self.late_rng.uniform(0.0, 2 * self.late_us, count)
        for offset, delay in enumerate(delays):
            self.absent_until[self.late_from + offset] = t + delay * US

    def arrival(self, worker: int, now: float) -> float:
        """When ``worker``, ready at ``now``, arrives at the current loop (now, unless it is late)."""
        until = self.absent_until[worker]
        if until > now:
            self.late_ns += until - now
            return until
        return now

    def tally(self, counters) -> None:
        counters["noise_ns"] += self.interrupted_ns
        counters["late_ns"] += self.late_ns
