"""Loop affinity: the share of iterations j of loop i that ran on the same worker as iteration j of loop i - 1.

It is computed from the chunks, as intervals [lo, hi) with their worker, never per
iteration: two loops' intervals are cut at every boundary of either, and the pieces whose
two workers agree are added up.
"""

from __future__ import annotations

import numpy as np


def same_owner(first, second, n: int) -> int:
    """How many of iterations [0, n) have the same worker in two loops' chunks (each a (lo, hi, worker) triple)."""
    cuts = np.unique(np.concatenate([first[0], first[1], second[0], second[1], [0, n]]))
    cuts = cuts[(cuts >= 0) & (cuts <= n)]
    starts, lengths = cuts[:-1], np.diff(cuts)
    owners = []
    for lo, hi, worker in (first, second):
        ran = hi > lo
        lo, worker = lo[ran], worker[ran]
        order = np.argsort(lo, kind="stable")
        lo, worker = lo[order], worker[order]
        index = np.searchsorted(lo, starts, side="right") - 1
        owners.append(np.where(index >= 0, worker[np.maximum(index, 0)], -1))
    return int(lengths[(owners[0] == owners[1]) & (owners[0] >= 0)].sum())


def summarize(per_loop: list[float | None], sizes) -> dict | None:
    """The ``affinity`` a Result reports: per loop (None for the first) and overall, weighted by iterations."""
    if len(per_loop) < 2:
        return None
    weights = np.asarray([min(a, b) for a, b in zip(sizes[:-1], sizes[1:])], dtype=float)
    values = np.asarray(per_loop[1:], dtype=float)
    overall = float((values * weights).sum() / weights.sum()) if weights.sum() else None
    return {"per_loop": per_loop, "overall": overall}


class AffinityTracker:
    """Affinity between consecutive loops of a program, worked out as chunks arrive, holding a few loops at a time.

    The chunks of loop i - 2 are all in once loop i + 1 has begun (a loop starts only after
    the one before the previous has ended), so pairs are settled two loops behind and their
    chunks dropped: memory stays bounded by the chunks of a few loops.
    """

    def __init__(self, sizes):
        self.sizes = [int(n) for n in sizes]
        self.pending: dict[int, list[np.ndarray]] = {}
        self.per_loop: list[float | None] = [None] * len(self.sizes)
        self.settled = 0  # loops whose affinity with the one before is known (loop 0 has none)
        self.newest = -1

    def add(self, block: np.ndarray) -> None:
        """Take a block of int64 chunk rows (worker, loop, lo, hi) and settle the pairs it makes safe."""
        loops = block[:, 1]
        program = loops < len(self.sizes)
        for index in np.unique(loops[program]).tolist():
            self.pending.setdefault(index, []).append(block[loops == index])
            self.newest = max(self.newest, index)
        self.settle(self.newest - 2)

    def settle(self, upto: int) -> None:
        """Work out the affinity of every loop up to ``upto`` with the loop before it."""
        while self.settled < min(upto, len(self.sizes) - 1):
            i = self.settled + 1
            before, now = self.intervals(i - 1), self.intervals(i)
            n = min(self.sizes[i - 1], self.sizes[i])
            self.per_loop[i] = same_owner(before, now, n) / n if n else None
            self.pending.pop(i - 1, None)
            self.settled = i

    def intervals(self, index: int):
        rows = np.concatenate(self.pending.get(index, [np.zeros((0, 4), np.int64)]))
        self.pending[index] = [rows]
        return rows[:, 2], rows[:, 3], rows[:, 0]

    def result(self) -> dict | None:
        """Every pair settled: the summary for the Result."""
        self.settle(len(self.sizes) - 1)
        return summarize(self.per_loop, self.sizes)


def from_chunks(chunks, sizes) -> dict | None:
    """The affinity summary from a chunk table (worker, loop, lo, hi, ...) of a program of loops of ``sizes``."""
    tracker = AffinityTracker(sizes)
    table = chunks[["worker", "loop", "lo", "hi"]].to_numpy(dtype=np.int64)
    if len(table):
        tracker.add(table)
    return tracker.result()
