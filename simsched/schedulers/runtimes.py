"""OpenMP runtime profiles: what GNU libgomp and LLVM libomp do differently under the same schedule clause.

A profile is machine-independent: it names the runtime's guided chunk rule and the barrier
of its fork and join (``barrier=`` still picks another). ``mixed``, the default, is libgomp's
guided rule with libomp's hyper barrier, so that a spec without ``runtime=`` keeps its meaning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..spec import Param


@dataclass(frozen=True)
class Runtime:
    """One OpenMP runtime as the model distinguishes it: its guided chunk rule and its default barrier."""

    name: str
    guided: str    # "gnu": max(k, ceil(R/P)) by CAS; "llvm": floor(R/2P) by CAS, then k by fetch-and-add
    barrier: str   # the full barrier of the fork and the join


RUNTIMES = {
    # libgomp's guided (gomp_iter_guided_next) with libomp's hyper barrier: neither runtime exactly.
    "mixed": Runtime("mixed", guided="gnu", barrier="hyper"),
    # GNU libgomp: gomp_iter_guided_next; centralized team barriers (one counter, one generation word).
    "gnu": Runtime("gnu", guided="gnu", barrier="central"),
    # LLVM libomp (also Intel's runtime): kmp_sch_guided_iterative_chunked; hyper barrier, 2 branch bits.
    "llvm": Runtime("llvm", guided="llvm", barrier="hyper"),
}

RUNTIME_PARAM = Param("runtime", str, "mixed", choices=tuple(RUNTIMES),
                      help="OpenMP runtime profile: gnu (libgomp), llvm (libomp, also Intel's), "
                           "mixed (libgomp's guided rule, libomp's barrier)")
# Schedules only libomp has: it is their one runtime.
LIBOMP_RUNTIME_PARAM = Param("runtime", str, "llvm", choices=("llvm", "gnu"),
                             help="OpenMP runtime profile: llvm (libomp) only; libgomp has no such schedule")


def llvm_guided_mode(n: int, threads: int, k: int) -> str:
    """How libomp runs a guided loop of ``n`` iterations on ``threads`` threads with chunk ``k``.

    "whole": one thread runs it as one chunk (static_greedy); "dynamic": with (2k + 1) P >= n the
    chunk is too large for guided, and the loop is plain dynamic; else "guided".
    """
    if threads == 1:
        return "whole"
    return "dynamic" if (2 * k + 1) * threads >= n else "guided"


def llvm_switch(threads: int, k: int) -> int:
    """The remainder below which libomp's guided claims plain chunks of ``k``: 2 P (k + 1)."""
    return 2 * threads * (k + 1)


def gnu_guided_size(left: int, threads: int, k: int) -> int:
    """libgomp's guided chunk for ``left`` iterations left: max(k, ceil(R/P)), before the cut to ``left``."""
    return max(k, math.ceil(left / threads))


def llvm_guided_size(left: int, threads: int) -> int:
    """libomp's guided chunk for ``left`` iterations left: left * (0.5 / P) in double precision, truncated."""
    return int(left * (0.5 / threads))


def guided_sizes(runtime: str, n: int, threads: int, k: int) -> list[int]:
    """The chunk sizes, in iteration order, of a guided loop of ``n`` iterations on ``threads`` threads with
    chunk ``k`` under ``runtime``'s rule; each claim sizes its chunk from what is left when it succeeds, so
    the order does not depend on which thread wins which claim."""
    sizes, left = [], n
    if RUNTIMES[runtime].guided == "gnu":
        while left > 0:
            size = min(gnu_guided_size(left, threads, k), left)
            sizes.append(size)
            left -= size
        return sizes
    mode = llvm_guided_mode(n, threads, k)
    if mode == "whole":
        return [n] if n else []
    switch = llvm_switch(threads, k) if mode == "guided" else n + 1
    while left > 0:
        size = min(k, left) if left < switch else llvm_guided_size(left, threads)
        sizes.append(size)
        left -= size
    return sizes
