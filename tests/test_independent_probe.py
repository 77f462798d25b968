"""The independent-loads memory probe: its loads, not its own loop, set what it measures.

Over a buffer the first cache level holds, independent loads overlap, so each must cost less
than a dependent load (the pointer chase's latency over the same buffer); a probe whose
addresses come through one chain of arithmetic, or whose loads all go to one sum, measures that
chain instead and costs more. Both probes run short and interleaved, the best of several tries
each, so that another process sharing the CPU slows one no more than the other.
"""

from __future__ import annotations

import math

import pytest

from simsched import native
from simsched.native import memprobe

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")

FIRST_LEVEL_BYTES = 8 << 10  # held by the first cache level of any core this runs on
LOADS = 200_000              # a fraction of a millisecond per try
TRIES = 9


def best_ns(kind: str, line: int) -> float:
    from simsched.native.extension import _native

    cpu = native.cores()[0]
    return min(_native.memory(kind, [cpu], FIRST_LEVEL_BYTES, line, LOADS, memprobe.SEED, memprobe.PROBE_TIMEOUT_S)
               for _ in range(TRIES))


@needs_native
@pytest.mark.parametrize("line", [64, 96], ids=["line-of-a-power-of-two", "any-other-line"])
def test_independent_loads_from_the_first_level_cost_less_than_its_latency(line):
    pairs = [(best_ns("independent", line), best_ns("chase", line)) for _ in range(3)]
    independent, chase = min(p[0] for p in pairs), min(p[1] for p in pairs)
    assert math.isfinite(independent) and independent > 0
    assert independent < chase, f"independent loads {independent:.2f} ns, dependent {chase:.2f} ns"


@needs_native
def test_the_probe_does_at_least_the_loads_asked_for_and_divides_by_those_it_did():
    from simsched.native.extension import _native

    # One load asked for: the probe does a round of its streams and reports ns per load it did, a finite figure.
    ns = _native.memory("independent", [native.cores()[0]], 4096, 64, 1, memprobe.SEED, memprobe.PROBE_TIMEOUT_S)
    assert math.isfinite(ns) and ns > 0
