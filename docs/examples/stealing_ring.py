"""A stealing variant in one module: chunked work stealing whose thieves try the next workers in turn.

The built-in ``stealing`` scheduler's thieves draw their first P - 1 victims at random, then try
the others in order. Here every attempt goes to the next worker in order: worker w tries w + 1,
w + 2, ... (mod P), and starts again from w + 1 after each successful steal. Workers sit on
cores in order, socket by socket, so the first victims a thief tries share its socket. The
variant draws nothing from the run's generator: on a loop whose costs draw nothing either, a
run gives the same result for every seed.
It changes one hook, ``attempt``; the queues, the locks, the halving and when a thief gives
up (after 2(P - 1) failures in a row, having tried every other worker twice) are the base's.

    simsched run --plugin docs/examples/stealing_ring.py --machine haswell-e5-2695v3 --threads 28 \\
        --scheduler stealing-ring --workload exp-dec:n=100000
"""

from __future__ import annotations

from simsched.schedulers.stealing import Stealing


class RingStealing(Stealing):
    """Chunked work stealing whose thieves try w + 1, w + 2, ... (mod P) instead of random victims."""

    name = "stealing-ring"
    summary = "chunked work stealing: thieves try the next workers in turn, not random victims"

    def attempt(self, sim, w, failures, at):
        # The (failures)-th worker after w, skipping w itself: offsets 1 .. P - 1, then again.
        victim = (w + 1 + failures % (sim.threads - 1)) % sim.threads
        return self.steal(sim, w, victim, at)
