"""The core-to-core latencies of crossbar and ring sockets, summed as the topology's paths sum them."""

from __future__ import annotations

import math

import numpy as np


def _added(start: np.ndarray, step: float, times: np.ndarray) -> np.ndarray:
    """``start`` plus ``step`` added ``times`` times, one addition after another (as a shortest path sums it)."""
    out = np.array(start, dtype=float)
    for k in range(int(times.max()) if times.size else 0):
        out = np.where(times > k, out + step, out)
    return out


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


class Latencies:
    """The one-way latency between any two cores, worked out from the topology when asked, never kept per pair.

    Two cores of one socket are apart by the innermost core group they share (a crossbar) or by their
    distance around the ring; cores of different sockets by the hops between their sockets and, on a
    ring, each core's distance to its socket's gateway. Those few classes of pairs are all it keeps,
    so its memory grows with the cores, not with their square. Each value is the float that the
    topology's shortest path sums (the additions in the same order), so ``matrix`` is the table that
    a machine of up to a thousand cores has always had. A measured matrix is kept as given.

    ``of(cores)`` is the same latencies between the given cores only (a run's), numbered 0, 1, ...
    """

    def __init__(self, kind: str, per: int, hops: np.ndarray, *, levels=(), inside=0.0, across=(), around=(),
                 cross=None, table=None, cores=None):
        self.kind, self.per, self.hops = kind, per, np.asarray(hops)
        self.levels = tuple(levels)       # (group size, latency) from the innermost group out (crossbar)
        self.inside = float(inside)       # two cores of a socket that share no group (crossbar)
        self.across = [float(x) for x in across]   # by socket hops (crossbar)
        self.around = [float(x) for x in around]   # by steps around the ring (ring)
        self.cross = cross                # [to gateway][socket hops][from gateway] (ring)
        self.table = table                # the measured matrix (matrix)
        self.cores = np.arange(hops.shape[0] * per if table is None else len(table)) if cores is None \
            else np.asarray(cores, dtype=np.int64)
        self._socket = (self.cores // per).tolist()
        self._position = (self.cores % per).tolist()
        self._hops = self.hops.tolist()
        self._core = self.cores.tolist()
        self._nearest: dict = {}
        self._compiled: tuple | None = None

    @classmethod
    def from_matrix(cls, matrix) -> "Latencies":
        """Latencies as a given table (a measured machine's, or a test's)."""
        table = np.asarray(matrix, dtype=float)
        return cls("matrix", max(len(table), 1), np.zeros((1, 1), dtype=np.int64), table=table)

    @classmethod
    def crossbar(cls, lat, sockets: int, per: int, groups, hops: np.ndarray) -> "Latencies":
        """Crossbar sockets of nested core groups, as the paths of the topology graph sum them.

        Two cores of one socket are the latency of the innermost group they share apart, else
        ``same_socket``; cores of different sockets are half of ``same_socket`` out, one
        ``socket_hop`` per hop, and half back in.
        """
        same = float(lat.get("same_socket", float(lat[groups[-1][0]]) if groups else 0.0))
        half = same / 2
        steps = np.arange(int(hops.max()) + 1 if hops.size else 1)
        across = _added(np.full(steps.shape, half), float(lat.get("socket_hop", 0.0)), steps) + half
        return cls("crossbar", per, hops, levels=[(size, float(lat[name])) for name, size in groups],
                   inside=half + half, across=across)

    @classmethod
    def ring(cls, lat, sockets: int, per: int, hops: np.ndarray) -> "Latencies":
        """Ring sockets whose first core is the gateway to the socket links.

        Core i reaches core j of another socket by ring hops to its gateway, the socket hops, then
        ring hops from that socket's gateway (whose edge to its socket node weighs 0).
        """
        hop = float(lat.get("ring_hop", 0.0))
        steps = np.arange(per // 2 + 1)
        around = _added(np.zeros(steps.shape), hop, steps)
        most = int(hops.max()) if hops.size else 0
        shape = (steps.size, most + 1, steps.size)
        out = _added(np.zeros(steps.size), hop, steps)[:, None, None]
        out = _added(np.broadcast_to(out, shape).copy(), float(lat.get("socket_hop", 0.0)),
                     np.broadcast_to(np.arange(most + 1)[None, :, None], shape))
        cross = _added(out, hop, np.broadcast_to(steps[None, None, :], shape))
        return cls("ring", per, hops, around=around, cross=cross.tolist())

    def of(self, cores) -> "Latencies":
        """These latencies between ``cores`` only (machine core numbers), which become cores 0, 1, ..."""
        picked = self.cores[np.asarray(cores, dtype=np.int64)]
        return Latencies(self.kind, self.per, self.hops, levels=self.levels, inside=self.inside,
                         across=self.across, around=self.around, cross=self.cross, table=self.table, cores=picked)

    def __len__(self) -> int:
        return len(self._core)

    def value(self, a: int, b: int) -> float:
        """The one-way latency from core ``a`` to core ``b`` in ns."""
        if self.kind == "matrix":
            return float(self.table[self._core[a], self._core[b]])
        if a == b:
            return 0.0
        sa, sb, pa, pb = self._socket[a], self._socket[b], self._position[a], self._position[b]
        if self.kind == "ring":
            if sa == sb:
                steps = abs(pa - pb)
                return self.around[min(steps, self.per - steps)]
            return self.cross[min(pa, self.per - pa)][self._hops[sa][sb]][min(pb, self.per - pb)]
        if sa != sb:
            return self.across[self._hops[sa][sb]]
        for size, latency in self.levels:
            if pa // size == pb // size:
                return latency
        return self.inside

    def row(self, a: int) -> np.ndarray:
        """The latency from core ``a`` to every core, as an array."""
        return self._block(np.array([a]), np.arange(len(self)))[0]

    def matrix(self) -> np.ndarray:
        """The whole table (as many entries as the square of the cores: for small machines)."""
        every = np.arange(len(self))
        return self._block(every, every)

    def _block(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        if self.kind == "matrix":
            return self.table[np.ix_(self.cores[rows], self.cores[columns])]
        sa, sb = (self.cores[rows] // self.per)[:, None], (self.cores[columns] // self.per)[None, :]
        pa, pb = (self.cores[rows] % self.per)[:, None], (self.cores[columns] % self.per)[None, :]
        together = sa == sb
        if self.kind == "ring":
            steps = np.abs(pa - pb)
            steps = np.minimum(steps, self.per - steps)
            gateway_a, gateway_b = np.minimum(pa, self.per - pa), np.minimum(pb, self.per - pb)
            far = np.asarray(self.cross)[gateway_a, self.hops[sa, sb], gateway_b]
            out = np.where(together, np.asarray(self.around)[steps], far)
        else:
            out = np.where(together, self.inside, np.asarray(self.across)[self.hops[sa, sb]])
            for size, latency in reversed(self.levels):   # inner groups overwrite outer ones
                out = np.where(together & (pa // size == pb // size), latency, out)
        out = np.array(out, dtype=float)
        out[self.cores[rows][:, None] == self.cores[columns][None, :]] = 0.0
        return out

    def spread(self) -> tuple[list[float], list[float]]:
        """The distinct latencies between two cores of one socket, and between cores of two sockets (all cores)."""
        if self.kind == "matrix":
            socket = np.arange(len(self.table)) // self.per
            together = socket[:, None] == socket[None, :]
            apart = ~np.eye(len(self.table), dtype=bool)
            return (np.unique(self.table[together & apart]).tolist(), np.unique(self.table[~together]).tolist())
        sockets = self.hops.shape[0]
        hops = np.unique(self.hops[~np.eye(sockets, dtype=bool)]).tolist()
        if self.kind == "ring":
            within = self.around[1:] if self.per > 1 else []
            gateways = range(self.per // 2 + 1)
            across = [self.cross[a][h][b] for a in gateways for h in hops for b in gateways]
            return sorted(set(within)), sorted(set(across))
        within, inner = [], 1
        for size, latency in self.levels:   # pairs that share this group and no smaller one
            if size > inner:
                within.append(latency)
            inner = max(inner, size)
        if self.per > inner:
            within.append(self.inside)
        return sorted(set(within)), sorted({self.across[h] for h in hops})

    def compiled(self) -> tuple:
        """These latencies as ``simsched._speedups.Column`` reads them: sizes, then the tables as bytes."""
        if self._compiled is None:
            kinds = {"crossbar": 0, "ring": 1, "matrix": 2}
            gateways = self.per // 2 + 1 if self.kind == "ring" else 0
            steps = self.hops.max() + 1 if self.hops.size else 1
            table = np.zeros((0, 0)) if self.table is None else np.ascontiguousarray(self.table, dtype=float)

            def words(values, dtype):
                return np.ascontiguousarray(values, dtype=dtype).tobytes()

            self._compiled = (kinds[self.kind], self.per, self.hops.shape[0], len(self.levels), gateways, int(steps),
                              table.shape[0], len(self), self.inside, words(self.cores, np.int64),
                              words(self.hops, np.int64), words([size for size, _ in self.levels], np.int64),
                              words([latency for _, latency in self.levels], float), words(self.across, float),
                              words(self.around, float),
                              words(self.cross if self.cross is not None else [], float), words(table, float))
        return self._compiled

    def nearest(self, a: int) -> float:
        """The latency from core ``a`` to the nearest other core (inf when it is alone)."""
        # On a crossbar, the cores of one innermost group (or one socket) are as far from every other
        # core as each other: one row answers for all of them.
        key = ((self._socket[a], self._position[a] // (self.levels[0][0] if self.levels else self.per))
               if self.kind == "crossbar" else a)
        found = self._nearest.get(key)
        if found is None:
            row = self.row(a)
            row[a] = np.inf
            found = self._nearest[key] = float(row.min()) if row.size else np.inf
        return found
