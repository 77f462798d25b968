"""Recorded traces: a real kernel run on one thread of this host, timed iteration by iteration or block by block.

The recording is a native run in which one worker runs every block of k iterations in order
(k = 1 where the timer is small beside an iteration), each block a chunk the runtime times as
it times any chunk, so recordings and native runs share one loop body. The worker runs alone:
a worker spinning at a barrier beside it can slow it (a shared physical core under a virtual
CPU), and the recording is meant to be what one thread does by itself. The span the runtime measures
around a block holds, besides its iterations, part of the two clock reads that bound it: the
span of an empty block, measured first, is taken off every block. A first, untimed pass of
the kernel warms caches and faults pages in; ``samples`` timed passes follow, and each block's
cost is its median over them: a block the OS preempted in one pass does not carry the pause.
"""

from __future__ import annotations

import datetime
import math
import platform
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..output import check_output
from ..schedulers import get_scheduler
from .extension import DEFAULT_TIMEOUT_S, _check_integer, require
from .kernels import Kernel
from .pinned_runs import execute

# A block lasts at least this many empty blocks: the timer's share of its span is at most 1/BLOCK_SPANS.
BLOCK_SPANS = 20
EMPTY_BLOCKS = 20000
PROBE_BLOCK = 256
SUFFIXES = (".parquet", ".csv", ".npz")


def run_alone(kernel: Kernel, k: int, repeat: int, timeout_s: float = DEFAULT_TIMEOUT_S, hot: bool = False):
    """The chunk table of ``repeat`` passes of ``kernel``'s program, worker 0 running every block of k in order.

    ``hot``: each block runs twice in a row and the table keeps the second run, the block's work with its data
    in the core's caches.
    """
    threads = 1  # alone: see the module docstring
    sizes = [int(n) for n in kernel.sizes]
    runs = 2 if hot else 1
    result, _ = execute(get_scheduler("omp-static"), kernel.spec, threads, np.zeros(sum(sizes)), kernel.sizes,
                        repeat, timeout_s=timeout_s, memory=kernel.memory, csr=kernel.csr,
                        plan=alone(sizes * repeat, k, threads, runs), runs_each=runs)
    chunks = result.chunks.sort_values(["loop", "lo"], kind="stable")  # a block's runs stay in the order they ran
    return chunks.iloc[runs - 1::runs]


def empty_block_ns(timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """The median span the runtime measures around a block of no work: the timer's own share."""
    chunks = run_alone(Kernel("empty", np.array([EMPTY_BLOCKS])), 1, 1, timeout_s)
    return float(np.median((chunks["end"] - chunks["start"]).to_numpy()))


def choose_block(timer_ns: float, iteration_ns: float, spans: int = BLOCK_SPANS) -> int:
    """The smallest k for which k iterations of ``iteration_ns`` last ``spans`` empty blocks (1 for long ones)."""
    if iteration_ns <= 0:
        return 1 << 20
    return max(1, math.ceil(spans * timer_ns / iteration_ns))


def iteration_ns(kernel: Kernel, empty_ns: float, timeout_s: float = DEFAULT_TIMEOUT_S, hot: bool = False) -> float:
    """The time of one iteration: over a warm pass of the program in blocks of PROBE_BLOCK, the median over
    blocks of a block's span less an empty one's, per iteration (a median, so a preempted block does not count);
    ``hot``: as a recording with its data times them."""
    chunks = run_alone(kernel, PROBE_BLOCK, 2, timeout_s, hot)
    timed = chunks[chunks["loop"] >= kernel.sizes.size]
    spans = (timed["end"] - timed["start"]).to_numpy() - empty_ns
    return max(float(np.median(spans / (timed["hi"] - timed["lo"]).to_numpy())), 0.0)


def check_counts(block: int | None, samples: int) -> tuple[int | None, int]:
    """``--block`` (None: chosen) and ``--samples``, checked."""
    if block is not None:
        block = _check_integer("--block", block, 1, 2**31 - 1)
    return block, _check_integer("--samples", samples, 1, 1000)


def record(kernel: Kernel, block: int | None = None, samples: int = 5,
           timeout_s: float = DEFAULT_TIMEOUT_S, data: bool = False) -> tuple[list, dict]:
    """Time ``kernel``'s loops on one thread after a warm pass: per loop, each block's median ns over ``samples``
    timed passes; and the metadata.

    ``data``: time each block right after the same block ran (its data in cache), so that the costs are the
    kernel's work alone, and say so in the metadata: a simulation then adds the kernel's data footprints,
    which the data model prices, instead of finding their memory time in the costs.
    """
    require()
    block, samples = check_counts(block, samples)
    timer = empty_block_ns(timeout_s)
    k = block or choose_block(timer, iteration_ns(kernel, timer, timeout_s, hot=data))
    if data:
        check_hot_blocks(kernel, k)
    chunks = run_alone(kernel, k, 1 + samples * kernel.passes, timeout_s, hot=data)
    chunks = chunks[chunks["loop"] >= kernel.sizes.size]  # the warm pass is not recorded
    blocks = [block_sizes(int(n), k).size for n in kernel.loop_sizes]
    # One row per timed pass of the whole recording, its blocks in program order.
    passes = (chunks["end"] - chunks["start"]).to_numpy().reshape(samples, sum(blocks))
    median = np.maximum(np.median(passes, axis=0) - timer, 0.0)
    loops = np.split(median, np.cumsum(blocks)[:-1])
    meta = {**kernel.meta, "block": int(k), "samples": samples, "data": bool(data),
            "host": platform.node() or "unknown",
            "empty_block_ns": round(timer, 2),
            "recorded": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    return loops, meta


def check_hot_blocks(kernel: Kernel, k: int, room: int | None = None, line: int = 64) -> None:
    """Refuse a recording with its data whose blocks of ``k`` iterations touch more than ``room`` bytes (default:
    half this core's last private cache level, which a block run twice keeps to itself): run again, a larger
    block would not surely find its data in cache, and its cost would hold memory time the simulation adds."""
    if room is None:
        from .hostinfo import caches
        from .memprobe import half_private

        levels = caches()
        room = half_private(levels)
        if not room:
            return  # sysfs lists no caches: nothing to check against
        line = levels[0].line_bytes
    largest = 0
    for fp in kernel.data:
        # The block's own bytes, and a line for each read of the shared array (at most the array).
        starts = np.arange(0, fp.bytes.size, k)
        own = np.add.reduceat(fp.bytes, starts)
        reads = np.add.reduceat(fp.gather.reads, starts) * line if fp.gather is not None else 0
        touched = own + (np.minimum(reads, fp.gather.size) if fp.gather is not None else 0)
        largest = max(largest, int(touched.max()))
    if largest > room:
        raise SimschedError(f"--data: a block of {k} iteration(s) touches {largest / 2**10:.4g} KiB, more than the "
                            f"{room / 2**10:.4g} KiB (half this core's last private cache) a block run again finds "
                            "in cache; give a smaller --block")


def check_out(path: str) -> Path:
    """The trace file to write, refused before any work unless its suffix names a trace format."""
    out = check_output(path, "--out")
    if out.suffix.lower() not in SUFFIXES:
        raise SimschedError(f"--out {path}: a trace is a {', '.join(SUFFIXES)} file (by its suffix)")
    if out.suffix.lower() == ".parquet":
        from ..errors import parquet

        parquet(f"--out {path}")  # an optional reader missing is said now, not after the work
    return out


def write(out: Path, loops: list, meta: dict) -> Path:
    """Write the recording as a program trace (the trace: workload's format, its metadata included)."""
    from ..workloads.trace import write_trace

    return write_trace(out, loops, metadata=meta)


def alone(sizes: list[int], k: int, threads: int, runs: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A plan giving worker 0 every block of k iterations of loops of ``sizes``, in order, each ``runs`` times in
    a row; the others none."""
    rows = np.concatenate([np.column_stack((np.full(-(-n // k), loop), np.arange(0, n, k),
                                            np.minimum(np.arange(0, n, k) + k, n)))
                           for loop, n in enumerate(sizes)])
    rows = np.repeat(rows, runs, axis=0)
    return rows, np.array([0] + [len(rows)] * threads, dtype=np.int64)


def block_sizes(n: int, k: int) -> np.ndarray:
    """How many iterations each block of a loop of ``n`` iterations holds, blocks of ``k``."""
    sizes = np.full(-(-n // k), k, dtype=np.int64)
    sizes[-1] = n - k * (sizes.size - 1)
    return sizes
