"""What a native run holds in memory: the memory kernel's arrays, and the budget a run must fit in."""

from __future__ import annotations

import numpy as np

from ..errors import SimschedError
from ..footprint import ELEMENT_BYTES, Footprint

MAX_ARRAYS_BYTES = 2**31
# What a native run holds for each iteration (its costs as drawn, their prefix sums and their differences,
# at once) and for each chunk it records (the runtime's record, its copy for Python and the chunk table built
# from it): peaks measured on runs of 10^6 to 10^7 iterations and chunks (25 and 190 bytes), rounded up.
ITERATION_BYTES = 32
CHUNK_BYTES = 200


def check_memory(need: int, what: str) -> None:
    """Refuse, in one line, a run that would need more of the memory available here than a simulated run may
    take (the simulator's budget, ``chunklog.memory_room``)."""
    from ..chunklog import memory_room

    limit, room = memory_room()
    if need > limit:
        raise SimschedError(f"native mode: {what} would need about {need / 2**30:.1f} GiB of memory, {room}: "
                            "run fewer iterations or loops, or larger chunks")


def _footprint(spec, footprint, n: int, array_bytes):
    """What each iteration's memory kernel touches: the workload's footprint, or ``--array-bytes`` for all alike."""
    if isinstance(array_bytes, bool) or not isinstance(array_bytes, (int, np.integer)) or array_bytes < 0:
        raise SimschedError(f"array bytes must be an integer >= 0, got {array_bytes!r}")
    if not array_bytes:
        return footprint
    if footprint is not None or "bytes" in spec.given:
        raise SimschedError(f"--array-bytes gives every iteration an array; workload {spec.spec} already says "
                            "what its iterations touch (bytes=): give one or the other")
    if array_bytes < ELEMENT_BYTES:
        raise SimschedError("array bytes must be 0 (no memory kernel) or at least 8 (one double)")
    return Footprint(bytes=np.full(n, int(array_bytes), dtype=np.int64))


def _numa_nodes() -> list[int]:
    """This host's NUMA nodes with memory (node 0 where sysfs does not say)."""
    from .hostinfo import _cpu_list

    for name in ("has_memory", "online"):
        try:
            with open(f"/sys/devices/system/node/{name}") as file:
                return sorted(_cpu_list(file.read()))
        except (OSError, ValueError):
            pass
    return [0]


def kernel(footprint, rng) -> tuple:
    """The extension's memory-kernel arguments for ``footprint``: doubles per iteration, pattern, doubles per
    line, the random cycles' seed and the interleave node mask; () without a footprint.

    Each iteration's array is its bytes rounded up to whole doubles, and starts on a line of its
    own (so iterations run by different workers never share a line). The whole must fit within
    2 GiB and the memory free here.
    """
    if footprint is None or not footprint.bytes.any():
        return ()
    from .hostinfo import caches, memory_available

    levels = caches()
    line = levels[0].line_bytes if levels else 64
    elems = -(-footprint.bytes // ELEMENT_BYTES)
    mapped = int((-(-elems // (line // ELEMENT_BYTES))).sum()) * line
    n = footprint.bytes.size
    what = (f"{n} iterations x {int(footprint.bytes[0])} bytes" if (footprint.bytes == footprint.bytes[0]).all()
            else f"{n} iterations, {footprint.total} bytes in all")
    if mapped > MAX_ARRAYS_BYTES:
        raise SimschedError(f"the memory kernel would need {mapped / 2**30:.1f} GiB ({what}, each iteration's "
                            "array on lines of its own); at most 2 GiB")
    free = memory_available()
    if mapped > free:
        raise SimschedError(f"the memory kernel would need {mapped / 2**30:.2f} GiB ({what}); only "
                            f"{free / 2**30:.2f} GiB of memory is free here")
    if footprint.gather is not None:
        raise SimschedError("native mode's memory kernel runs each iteration's own data; these iterations "
                            "also read an array they share: give the workload data=0 to run its compute alone")
    if footprint.placement == "master" and len(_numa_nodes()) > 1:
        raise SimschedError("placement=master: native mode places pages by first touch or interleave")
    mask = 0
    if footprint.placement == "interleave":  # on a one-node host this changes nothing
        nodes = _numa_nodes()
        if max(nodes) >= 64:
            raise SimschedError("placement=interleave: native mode deals pages over NUMA nodes 0..63 only")
        mask = sum(1 << node for node in nodes)
    seed = int(rng.integers(2**63)) if footprint.pattern == "random" else 0
    return (np.ascontiguousarray(elems, dtype=np.int64).tobytes(), footprint.pattern, line // ELEMENT_BYTES,
            seed, mask)
