"""Benchmark instrumentation: measurement code in a loop's iterations, costing more the more cores are busy.

A benchmark that times itself runs code besides its work: clock reads as the body runs and
records of what each thread did, written to per-thread buffers. On one core these cost
little and are part of the measured sequential time. With other cores of the socket busy,
every core's records go through the socket's shared L3, ring and memory controllers at the
same time, so the same measurement takes longer. A loop that says it is instrumented at
``rate`` costs each worker, per ns of work, ``1 + rate x share`` times what it costs
uninstrumented, ``share`` being the worker's socket's other busy cores as a share of its
other cores (``Machine.busy_share``: 0 alone, 1 with the socket full). The cost grows with
the work, not with the chunks or loops, so it lowers the plateau long loops reach and
leaves the short-loop overhead of a scheduler as it is. Only workloads that ask for it pay
it (uforall's ``instrumentation``); every other loop runs at the machine's speed alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def instrumented(slowdown: Sequence[float], share: np.ndarray, rate: float) -> list[float]:
    """Each worker's time per ns of work in a loop instrumented at ``rate``: slowdown x (1 + rate x share)."""
    return [float(s) * (1.0 + rate * float(b)) for s, b in zip(slowdown, share)]


def loop_slowdowns(machine, threads: int, slowdown: list[float], loops) -> list[list[float]]:
    """Per loop, each worker's time per ns of work: ``slowdown`` itself for uninstrumented loops."""
    rates = {loop.instrumentation for loop in loops if loop.instrumentation}
    if not rates:
        return [slowdown] * len(loops)
    share = machine.busy_share(threads)
    by_rate = {rate: instrumented(slowdown, share, rate) for rate in rates}
    return [by_rate[loop.instrumentation] if loop.instrumentation else slowdown for loop in loops]


__all__ = ["instrumented", "loop_slowdowns"]
