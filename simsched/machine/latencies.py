"""The core-to-core latency matrices of crossbar and ring sockets, summed as the topology's paths sum them."""

from __future__ import annotations

import math

import numpy as np


def _added(start: np.ndarray, step: float, times: np.ndarray) -> np.ndarray:
    """``start`` plus ``step`` added ``times`` times, one addition after another (as a shortest path sums it)."""
    out = np.array(start, dtype=float)
    for k in range(int(times.max()) if times.size else 0):
        out = np.where(times > k, out + step, out)
    return out


def _crossbar_latency(lat, sockets: int, per: int, groups, hops: np.ndarray) -> np.ndarray:
    """The latency matrix of crossbar sockets of nested core groups, as the paths of the topology graph sum it.

    Two cores of one socket are the latency of the innermost group they share apart, else
    ``same_socket``; cores of different sockets are half of ``same_socket`` out, one
    ``socket_hop`` per hop, and half back in.
    """
    same = float(lat.get("same_socket", float(lat[groups[-1][0]]) if groups else 0.0))
    half = same / 2
    inside = np.full((per, per), half + half)
    core = np.arange(per)
    for name, size in reversed(groups):  # inner groups overwrite outer ones
        inside[(core[:, None] // size) == (core[None, :] // size)] = float(lat[name])
    across = _added(np.full(hops.shape, half), float(lat.get("socket_hop", 0.0)), hops) + half
    matrix = np.repeat(np.repeat(across, per, axis=0), per, axis=1)
    for s in range(sockets):
        matrix[s * per:(s + 1) * per, s * per:(s + 1) * per] = inside
    return matrix


def _ring_latency(lat, sockets: int, per: int, hops: np.ndarray) -> np.ndarray:
    """The latency matrix of ring sockets whose first core is the gateway to the socket links."""
    hop = float(lat.get("ring_hop", 0.0))
    position = np.arange(per)
    around = np.abs(position[:, None] - position[None, :])
    around = np.minimum(around, per - around)
    inside = _added(np.zeros((per, per)), hop, around)
    to_gateway = around[:, 0]
    # core i -> its gateway (ring hops), the socket hops, the other gateway -> core j; the gateways' edges to
    # their socket nodes weigh 0, which adds nothing to a sum.
    out = _added(np.zeros(per), hop, to_gateway)[:, None, None]
    out = _added(np.broadcast_to(out, (per, *hops.shape)).copy(), float(lat.get("socket_hop", 0.0)),
                 np.broadcast_to(hops, (per, *hops.shape)))
    # out[i, a, b]: from core i of socket a to socket b's gateway; then ring hops to core j.
    full = _added(np.broadcast_to(out[:, :, :, None], (per, sockets, sockets, per)).copy(), hop,
                  np.broadcast_to(to_gateway[None, None, None, :], (per, sockets, sockets, per)))
    matrix = full.transpose(1, 0, 2, 3).reshape(sockets * per, sockets * per)
    for s in range(sockets):
        matrix[s * per:(s + 1) * per, s * per:(s + 1) * per] = inside
    return matrix


def _is_matrix(value, n):
    if not isinstance(value, list) or len(value) != n:
        return False
    for row in value:
        if not isinstance(row, list) or len(row) != n:
            return False
        for x in row:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                return False
    return True
