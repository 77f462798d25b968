"""The chunk log of a run: every chunk's record kept compactly, and the check that each iteration ran once."""

from __future__ import annotations

import math
import os
import resource
import struct
import time
from typing import Sequence

import numpy as np

from .affinity import AffinityTracker
from .errors import ExecutionError, SimschedError

CHUNK_COLUMNS = ["worker", "loop", "lo", "hi", "start", "end"]
# How a kept chunk is stored: 40 bytes (the DataFrame widens worker and loop to int64).
CHUNK_DTYPE = np.dtype([("worker", np.int32), ("loop", np.int32), ("lo", np.int64), ("hi", np.int64),
                        ("start", np.float64), ("end", np.float64)])
# Records wait packed in one bytearray, six doubles each (``pack_record``; the compiled loops write them
# there without a Python object each), until this many chunks are turned into one compact block.
BLOCK = 1 << 16
RECORD = struct.Struct(f"={len(CHUNK_COLUMNS)}d")
pack_record = RECORD.pack
# Peak memory a kept chunk costs once its DataFrame is built (the 40-byte records, the 48-byte
# DataFrame and pandas' copies while building it), measured as the growth of maxrss per chunk
# between 10^6 and 4 x 10^6 one-iteration chunks, less the loop's 16 bytes an iteration: about 112.
BYTES_PER_CHUNK = 112
# The share of the memory available when a run starts that the run may take: the rest stays for the
# machine's other work.
MEMORY_SHARE = 0.5
NO_TABLE_HINT = "run without it: simsched run --no-chunk-table, or simulate(..., keep_chunks=False)"


# The last reading of MemAvailable and when it was taken: reading /proc/meminfo costs a few hundred us, and a
# sweep starts many short runs a second.
_AVAILABLE: tuple[float, int | None] = (-math.inf, None)
AVAILABLE_FOR_S = 1.0


def available_bytes() -> int | None:
    """The memory the kernel says is available without swapping (MemAvailable, read at most once a second), or
    None if it does not say."""
    global _AVAILABLE
    now = time.monotonic()
    if now - _AVAILABLE[0] > AVAILABLE_FOR_S:
        _AVAILABLE = (now, _read_available())
    return _AVAILABLE[1]


def _read_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_bytes() -> int:
    """The memory this process may take: what is available now (else the physical memory), less under an
    address-space limit."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    available = available_bytes()
    memory = min(total, available) if available is not None else total
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    return min(memory, limit) if limit != resource.RLIM_INFINITY else memory


def chunk_limit() -> int:
    """How many chunks a kept table may hold before it would crowd this machine's memory."""
    return int(memory_bytes() * MEMORY_SHARE) // BYTES_PER_CHUNK


def memory_room() -> tuple[float, str]:
    """The bytes a run may take here (``MEMORY_SHARE`` of ``memory_bytes()``), and how a refusal words it."""
    available = memory_bytes()
    return (MEMORY_SHARE * available,
            f"more than {MEMORY_SHARE:.0%} of the {available / 2**30:.1f} GiB of memory available here")


def too_many_chunks(chunks: int, how: str) -> SimschedError:
    """The one-line error for a chunk table that would not fit memory."""
    return SimschedError(f"{how} {chunks} chunks; their table needs about "
                         f"{chunks * BYTES_PER_CHUNK / 2**30:.1f} GiB, {memory_room()[1]}; {NO_TABLE_HINT}")


class Coverage:
    """The iterations of each loop that have run, as sorted disjoint [lo, hi) intervals merged as chunks come.

    Memory grows with the intervals not yet merged (a few per worker), not with
    iterations or chunks, so a run need not keep its chunks to be checked.
    """

    def __init__(self, sizes: Sequence[int], what: str = ""):
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.what = what
        self.intervals: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, loop: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """Add chunks [lo, hi) of loops ``loop``; raise if one leaves its loop or repeats an iteration."""
        loop, lo, hi = (np.asarray(a).astype(np.int64) for a in (loop, lo, hi))
        if not loop.size:
            return
        unknown = (loop < 0) | (loop >= self.sizes.size)
        if unknown.any():
            raise ExecutionError(f"a chunk names loop {int(loop[unknown][0])}, which the program does not have")
        outside = (lo < 0) | (hi > self.sizes[loop]) | (hi < lo)
        if outside.any():
            index = int(loop[outside][0])
            raise ExecutionError(f"loop {index}: a chunk lies outside [0, {int(self.sizes[index])})")
        ran = hi > lo
        loop, lo, hi = loop[ran], lo[ran], hi[ran]
        if not lo.size:
            return
        if (loop == loop[0]).all():
            # One loop, the usual block, whose chunks often come in order already: then no sort is needed.
            self._merge(int(loop[0]), *by_start(lo, hi))
            return
        order = np.lexsort((lo, loop))
        loop, lo, hi = loop[order], lo[order], hi[order]
        cuts = np.flatnonzero(np.diff(loop)) + 1
        for first, stop in zip(np.r_[0, cuts], np.r_[cuts, loop.size]):
            self._merge(int(loop[first]), lo[first:stop], hi[first:stop])

    def _merge(self, index: int, lo: np.ndarray, hi: np.ndarray) -> None:
        if index in self.intervals:
            old_lo, old_hi = self.intervals[index]
            lo, hi = by_start(np.concatenate((old_lo, lo)), np.concatenate((old_hi, hi)))
        overlap = np.flatnonzero(lo[1:] < hi[:-1])
        if overlap.size:
            i = int(lo[overlap[0] + 1])
            times = int(((lo <= i) & (hi > i)).sum())
            raise ExecutionError(f"loop {index}: iteration {i} ran {times} times under {self.what}")
        # Touching intervals become one: [a, b) and [b, c) are [a, c).
        apart = lo[1:] != hi[:-1]
        self.intervals[index] = (lo[np.r_[True, apart]], hi[np.r_[apart, True]])

    def check(self) -> None:
        """Raise unless every iteration of every loop has run (repeats were refused as they came)."""
        for index, n in enumerate(self.sizes.tolist()):
            lo, hi = self.intervals.get(index, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            if lo.size == 1 and lo[0] == 0 and hi[0] == n:
                continue
            i = 0 if not lo.size or lo[0] > 0 else int(hi[0])
            missing = n - int((hi - lo).sum())
            raise ExecutionError(f"loop {index}: iteration {i} ran 0 times under {self.what}"
                                 f" ({missing} iteration(s) wrong)")


def by_start(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals [lo, hi) in a stable order of their starts (as given, when they are in order already)."""
    if (lo[1:] >= lo[:-1]).all():
        return lo, hi
    order = np.argsort(lo, kind="stable")
    return lo[order], hi[order]


def verify_exactly_once(chunks, sizes: Sequence[int], scheduler: str) -> None:
    """Raise unless every iteration of loop i (of ``sizes[i]`` iterations) ran exactly once in ``chunks``."""
    coverage = Coverage(sizes, scheduler)
    coverage.add(chunks["loop"].to_numpy(), chunks["lo"].to_numpy(), chunks["hi"].to_numpy())
    coverage.check()


class ChunkLog:
    """The chunks a simulation records: (worker, loop, lo, hi, start, end) rows, or with ``keep=False`` their count.

    Either way each chunk is checked against the loop's coverage as it is logged, so a
    run that keeps no table is checked just as well.
    """

    def __init__(self, sizes: Sequence[int], keep: bool = True, limit: int | None = None, program: int = 1):
        self.keep = keep
        self.coverage = Coverage(sizes)
        # The first ``program`` loops run one after another: their affinity is worked out as the chunks come.
        self.affinity = AffinityTracker(list(sizes)[:program]) if program > 1 else None
        self.pending = bytearray()
        self.blocks: list[np.ndarray] = []
        self.count = 0
        self.limit = limit
        self.frame = None

    # The pending bytes that make a block: flush when ``pending`` holds this many.
    FLUSH_AT = BLOCK * RECORD.size

    def append(self, record: tuple) -> None:
        """Log one chunk (worker, loop, lo, hi, start, end)."""
        pending = self.pending
        pending += pack_record(*record)
        if len(pending) >= self.FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Turn the waiting records into a compact block, checking their coverage."""
        pending = self.pending
        if not pending:
            return
        # Only the fields that are kept or checked: a run without a table converts loop, lo and hi (and
        # worker, for affinity). Whole numbers below 2**53 pass through a double exactly.
        needed = CHUNK_COLUMNS if self.keep or self.affinity is not None else ("loop", "lo", "hi")
        rows = np.frombuffer(pending, np.float64).reshape(-1, len(CHUNK_COLUMNS))
        fields = {name: rows[:, CHUNK_COLUMNS.index(name)].astype(CHUNK_DTYPE[name]) for name in needed}
        del rows   # the buffer's last view: it can be cleared
        pending.clear()
        self.coverage.add(fields["loop"], fields["lo"], fields["hi"])
        if self.affinity is not None:
            self.affinity.add(np.stack([fields[name].astype(np.int64) for name in CHUNK_COLUMNS[:4]], axis=1))
        self.count += len(fields["lo"])
        if self.keep:
            block = np.empty(len(fields["lo"]), CHUNK_DTYPE)
            for name in CHUNK_COLUMNS:
                block[name] = fields[name]
            self.blocks.append(block)
            if self.limit is not None and self.count > self.limit:
                raise too_many_chunks(self.count, "the chunk table passed")

    def finish(self) -> None:
        """Check that every iteration of every loop ran exactly once."""
        self.flush()
        self.coverage.check()

    def __len__(self) -> int:
        return self.count + len(self.pending) // RECORD.size

    def table(self):
        """The chunk table as a DataFrame, in the order the chunks were logged (the blocks are then freed)."""
        import pandas as pd

        if not self.keep:
            raise SimschedError("this run kept no chunk table (it ran with keep_chunks=False, "
                                "or simsched run --no-chunk-table)")
        if self.frame is None:
            self.flush()
            table = np.concatenate(self.blocks) if self.blocks else np.zeros(0, CHUNK_DTYPE)
            self.blocks = []
            self.frame = pd.DataFrame({name: table[name].astype(np.int64) if i < 4 else table[name]
                                       for i, name in enumerate(CHUNK_COLUMNS)})
        return self.frame
