"""A run's memory, estimated from its loop sizes and its scheduler's rules, refused up front if too large."""

from __future__ import annotations

from typing import Iterable

from .chunklog import BYTES_PER_CHUNK, memory_room, too_many_chunks
from .errors import SimschedError

# Peak memory a loop's iteration costs when it is drawn (the costs and their prefix sums, and the
# temporaries in between), measured as the growth of maxrss per iteration of 10^7-iteration loops: about 25.
BYTES_PER_ITERATION = 24
# What an iteration adds when its loop touches data (its footprint, the blocks' holder, stamps and home, the
# gathered reads), measured the same way on spmv:rows=N,iters=1 with data=1 against data=0 (10^6 and 3 x 10^6
# rows, omp-static, 28 threads on haswell-e5-2695v3): about 250 in all, 220 more.
BYTES_PER_DATA_ITERATION = 220
# What each loop of a run costs besides its iterations (its shared lines, loop times, result lists), measured
# as the growth of maxrss per loop between 2 x 10^4 and 2 x 10^5 repeats of a one-iteration loop: about 700.
BYTES_PER_LOOP = 700
# What a chunk adds with a timeline: its segments, and the slices a trace is written from, measured as the
# growth of maxrss per chunk of simsched run --trace from 10^5 to 3 x 10^5 one-iteration chunks: about 1 KB.
BYTES_PER_TIMELINE_CHUNK = 1000


def _gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"


def check_memory(scheduler, sizes: Iterable[tuple[int, int]], threads: int, keep_chunks: bool = True,
                 timeline: bool = False, repeat: int = 1, drawn: bool = False, data: bool = False) -> None:
    """Refuse a run whose memory, estimated low, would pass MEMORY_SHARE of what this machine has available.

    ``sizes`` are (iterations, how many such loops) pairs of one pass over the program, which
    runs ``repeat`` times. The chunks are each loop's ``scheduler.min_chunks`` (a lower bound
    from the scheduler's rules), so what is refused would surely not fit. ``drawn``: the loops
    are in memory already, so only what the run adds counts. ``data``: the loops touch data, whose
    model holds per-iteration state besides the costs.
    """
    sizes = [(int(n), int(count)) for n, count in sizes]
    loops = repeat * sum(count for _, count in sizes)
    chunks = repeat * sum(count * scheduler.min_chunks(n, threads) for n, count in sizes if count)
    per_iteration = (0 if drawn else BYTES_PER_ITERATION) + (BYTES_PER_DATA_ITERATION if data else 0)
    drawing = per_iteration * max((n for n, count in sizes if count), default=0)
    fixed = drawing + BYTES_PER_LOOP * loops
    table = BYTES_PER_CHUNK * chunks if keep_chunks else 0
    trace = BYTES_PER_TIMELINE_CHUNK * chunks if timeline else 0
    limit, room = memory_room()
    if fixed + table + trace <= limit:
        return
    if fixed > limit:
        largest = max(n for n, count in sizes if count)
        raise SimschedError(f"a run of {loops} loop(s), the largest of {largest} iteration(s) or more, "
                            f"needs at least {_gib(fixed)} for its loops alone, {room}")
    if trace:
        raise SimschedError(f"{scheduler.spec} runs at least {chunks} chunks; their table and timeline need "
                            f"about {_gib(table + trace)}, {room}: run without the timeline (--trace)")
    raise too_many_chunks(chunks, f"{scheduler.spec} runs at least")
