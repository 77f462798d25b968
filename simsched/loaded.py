"""Loaded latency: how much longer a miss takes while other cores load the controller or link it crosses.

A miss to DRAM queues at its home node's memory controller behind the other cores' requests,
and a miss to another socket's node also at the socket link between them. The locality model
(``locality.py``) asks, when a chunk starts, what the chunks already reading a resource demand
of it: their GB/s and their misses in flight (each chunk's, by Little's law, its lines x their
latency over its memory time, which is its GB/s x the latency / the line). From that, with
the machine's own numbers only:

* ``queueing = "closed"``: the resource is a queue that serves a line every
  S = line_bytes / its bandwidth (the node's ``shared_bandwidth_gbs``, the link's
  ``link_bandwidth_gbs``), fed by a fixed number N of misses in flight, each back the idle
  latency after it was served: a closed M/D/1 queue. Mean-value analysis (Schweitzer's
  approximation, with the half service a deterministic server has left when a miss arrives)
  gives its latency in closed form,

      L(N) = (N S + latency - S + sqrt((N S - latency)^2 + 2 S latency - S^2)) / 2,

  the idle latency at N = 1 and N x S, the time to serve everyone's misses, once the resource
  is saturated (where the share of its bandwidth already prices a line the same). A chunk
  waits L(others' + its own misses in flight) - L(its own).
* A measured curve (``loaded_latency_ns``: the latency of a pointer chase while other cores
  read the node at so many GB/s) takes precedence for the controller: the wait is the curve at
  the others' GB/s, linearly interpolated, less its first (idle) point; beyond its last point
  it stays at the last.
* ``queueing = "none"``: no wait; a miss costs the idle latency however loaded its node is.

A chunk's own misses add nothing to its wait: a core alone is what the latency and misses in
flight of the machine file were measured (or published) for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def closed_latency(in_flight: float, latency_ns: float, service_ns: float) -> float:
    """ns a miss takes at a closed M/D/1 queue of ``in_flight`` misses, each served in ``service_ns``, idle
    ``latency_ns`` (Schweitzer's mean-value approximation; ``latency_ns`` at one miss)."""
    load = in_flight * service_ns
    root = math.sqrt((load - latency_ns) ** 2 + 2.0 * service_ns * latency_ns - service_ns ** 2)
    return (load + latency_ns - service_ns + root) / 2.0


def queue_wait(others_in_flight: float, own_in_flight: float, latency_ns: float, line_bytes: int,
               bandwidth_gbs: float) -> float:
    """ns a miss of idle ``latency_ns`` waits at a resource of ``bandwidth_gbs`` behind the others' misses in
    flight: the closed queue's latency with everyone's misses less with the chunk's own."""
    service = min(line_bytes / bandwidth_gbs, latency_ns)   # no line is served slower than it comes back
    return max(closed_latency(others_in_flight + own_in_flight, latency_ns, service)
               - closed_latency(own_in_flight, latency_ns, service), 0.0)


def curve_wait(others_gbs: float, curve: tuple[tuple[float, float], ...]) -> float:
    """ns a miss waits by a measured curve of (GB/s others read, ns): the latency there less the idle one."""
    gbs, ns = zip(*curve)
    return float(np.interp(others_gbs, gbs, ns)) - ns[0]


@dataclass(frozen=True)
class Queueing:
    """The loaded-latency model of a machine's hierarchy: what waits at its controllers and socket links."""

    line_bytes: int
    controller_gbs: float | None
    curve: tuple[tuple[float, float], ...]
    link_gbs: float | None

    @classmethod
    def of(cls, hierarchy) -> Queueing | None:
        """The machine's queueing; None where nothing waits (``queueing = "none"``, nothing to queue at)."""
        dram = hierarchy.dram
        if dram.queueing == "none" or not (dram.shared_bandwidth_gbs or dram.loaded_latency_ns
                                           or dram.link_bandwidth_gbs):
            return None
        return cls(hierarchy.line_bytes, dram.shared_bandwidth_gbs, dram.loaded_latency_ns,
                   dram.link_bandwidth_gbs)

    @property
    def controller(self) -> bool:
        """Whether a node's controller makes misses wait (a measured curve, or a bandwidth to queue at)."""
        return bool(self.curve or self.controller_gbs)

    def controller_wait(self, others_gbs: float, others_in_flight: float, own_in_flight: float,
                        latency_ns: float) -> float:
        """ns a DRAM miss of idle ``latency_ns`` waits at its node's controller while the other readers demand
        ``others_gbs`` of it with ``others_in_flight`` misses, the chunk itself ``own_in_flight``."""
        if others_gbs <= 0.0:
            return 0.0
        if self.curve:
            return curve_wait(others_gbs, self.curve)
        if self.controller_gbs:
            return queue_wait(others_in_flight, own_in_flight, latency_ns, self.line_bytes,
                              self.controller_gbs)
        return 0.0

    def link_wait(self, others_gbs: float, others_in_flight: float, own_in_flight: float,
                  latency_ns: float) -> float:
        """ns a remote DRAM miss of idle ``latency_ns`` waits at the socket link while the other remote
        readers over it demand this of it (as for the controller, without a measured curve)."""
        if not self.link_gbs or others_gbs <= 0.0:
            return 0.0
        return queue_wait(others_in_flight, own_in_flight, latency_ns, self.line_bytes, self.link_gbs)
