"""The outcome of a simulated (or natively measured) run: makespan, time per state, chunk table, counters."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any

import numpy as np

from .chunklog import CHUNK_COLUMNS, ChunkLog

__all__ = ["CHUNK_COLUMNS", "SEGMENT_COLUMNS", "Result"]

# A timeline's segments outside compute: the worker, its state, and when it entered and left it (ns).
SEGMENT_COLUMNS = ["worker", "state", "start", "end"]


@dataclass
class Result:
    """What a run produced: times in ns, per-worker state times, the chunk table and counters."""

    machine: str
    scheduler: str
    workload: str
    threads: int
    seed: int
    makespan_ns: float
    sequential_ns: float
    state_ns: dict[str, np.ndarray]
    # A DataFrame, or a simulation's ChunkLog whose DataFrame is built on first use of ``chunks``.
    chunks: InitVar[Any]
    counters: dict[str, int]
    loop_ns: list[float] = field(default_factory=list)
    # The program's sequential code outside its loops (each loop's serial_ns), run by the master.
    serial_ns: float = 0.0
    # The program loops' names, beside ``loop_ns`` (a name ``CLASS/...`` puts the loop in a class).
    loop_names: list[str] = field(default_factory=list)
    events: int = 0
    repeat: int = 1
    # Every worker's states over time (SEGMENT_COLUMNS), recorded only when a timeline was asked for;
    # compute is in ``chunks`` and idle is what neither covers.
    segments: Any = None  # a pandas DataFrame
    # For a program of several loops: {"per_loop": [None, a1, a2, ...], "overall": a}, a_i the share of
    # iterations j of loop i run by the worker that ran iteration j of loop i - 1 (affinity.py); else None.
    affinity: dict | None = None
    # Whether the run drew nothing from its generator: every seed then gives this same result.
    seed_independent: bool = False

    def __post_init__(self, chunks):
        self._chunks = chunks

    @property
    def chunk_count(self) -> int:
        """How many chunks ran (known also when the run kept no chunk table)."""
        return len(self._chunks)

    @property
    def speedup(self) -> float:
        """Sequential time (no parallel construct) over the parallel makespan."""
        return self.sequential_ns / self.makespan_ns if self.makespan_ns > 0 else float("inf")

    @property
    def state_totals(self) -> dict[str, float]:
        """Total ns over all workers in each state."""
        return {state: float(times.sum()) for state, times in self.state_ns.items()}

    def loop_ns_by_class(self) -> dict[str, float]:
        """Total ``loop_ns`` of the program loops of each class (loops named ``CLASS/...``; unnamed ones left out)."""
        totals: dict[str, float] = {}
        for name, ns in zip(self.loop_names, self.loop_ns):
            cls, slash, _ = name.partition("/")
            if slash and cls:
                totals[cls] = totals.get(cls, 0.0) + float(ns)
        return totals

    def states(self):
        """Per-worker time in each state as a DataFrame (rows are workers)."""
        import pandas as pd

        frame = pd.DataFrame({s: t for s, t in self.state_ns.items()})
        frame.index.name = "worker"
        return frame

    def iteration_owner(self, loop: int = 0) -> np.ndarray:
        """The worker that ran each iteration of ``loop``."""
        rows = self.chunks[self.chunks["loop"] == loop]
        n = int(rows["hi"].max()) if len(rows) else 0
        owner = np.full(n, -1, dtype=np.int64)
        for worker, lo, hi in zip(rows["worker"], rows["lo"], rows["hi"]):
            owner[lo:hi] = worker
        return owner

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (the chunk table is left out; write it with ``chunks.to_csv``)."""
        return {
            "machine": self.machine,
            "scheduler": self.scheduler,
            "workload": self.workload,
            "threads": self.threads,
            "seed": self.seed,
            "makespan_ns": self.makespan_ns,
            "sequential_ns": self.sequential_ns,
            "speedup": self.speedup,
            "state_ns": self.state_totals,
            "counters": dict(self.counters),
            "chunks": self.chunk_count,
            "repeat": self.repeat,
            "loop_ns": [float(x) for x in self.loop_ns],
            "loop_names": list(self.loop_names),
            "serial_ns": float(self.serial_ns),
            "loop_class_ns": self.loop_ns_by_class(),
            "events": self.events,
            "affinity": self.affinity,
        }

    def summary(self) -> str:
        """A short human-readable report."""
        lines = [
            f"{self.scheduler} on {self.machine}, {self.threads} thread(s), workload {self.workload}, seed {self.seed}",
            f"  makespan     {self.makespan_ns / 1e3:14.3f} us",
            f"  sequential   {self.sequential_ns / 1e3:14.3f} us",
            f"  speedup      {self.speedup:14.3f}",
            f"  chunks       {self.chunk_count:14d}",
        ]
        if self.affinity is not None and self.affinity["overall"] is not None:
            lines.append(f"  affinity     {self.affinity['overall']:14.3f}  (same worker as in the loop before)")
        return "\n".join(lines + self.detail_lines())

    def detail_lines(self) -> list[str]:
        """The report's time per state (shares of all workers' makespan) and counters."""
        lines = []
        total = self.makespan_ns * self.threads
        lines.append("  time per state (all workers):")
        for state, ns in self.state_totals.items():
            share = 100 * ns / total if total else 0.0
            lines.append(f"    {state:<10} {ns / 1e3:14.3f} us  {share:5.1f}%")
        if self.counters:
            lines.append("  counters: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counters.items())))
        return lines


def _chunk_table(self):
    """The chunk table (worker, loop, lo, hi, start, end) as a pandas DataFrame."""
    if isinstance(self._chunks, ChunkLog):
        return self._chunks.table()
    return self._chunks


# A property beside the dataclass's ``chunks`` argument (a property inside the class body
# would be taken for the argument's default).
Result.chunks = property(_chunk_table)
