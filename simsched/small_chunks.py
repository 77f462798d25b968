"""The locality model's per-iteration path: a chunk of a few iterations in plain floats, as NumPy's."""

from __future__ import annotations

import math

from .footprint import ELEMENT_BYTES, Footprint


def _sum(values: list) -> float:
    """The sum of floats in the order NumPy's pairwise summation adds them (blocks of up to 128 elements,
    each with 8 running sums), so that plain lists sum to the bit what NumPy arrays of them sum to."""
    n = len(values)
    if n < 8:
        total = 0.0
        for value in values:
            total += value
        return total
    if n <= 128:
        sums = values[:8]
        whole = n - n % 8
        for i in range(8, whole, 8):
            for k in range(8):
                sums[k] += values[i + k]
        total = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))
        for value in values[whole:]:
            total += value
        return total
    half = n // 2
    half -= half % 8
    return _sum(values[:half]) + _sum(values[half:])


def _access(latency: float, bandwidth_gbs: float, pattern: str, nbytes: int, overlap) -> float:
    """``DataState.access`` for one line (or element) in plain floats."""
    transfer = nbytes / bandwidth_gbs
    if pattern == "stream":
        return transfer
    return max(latency / (overlap if pattern == "stride" else 1), transfer)


class SmallChunks:
    """``DataState.chunk`` for a chunk of a few iterations, one at a time (mixed into ``DataState``)."""

    def _few(self, worker: int, fp: Footprint, lo: int, hi: int, start: float, work: float = 0.0) -> float:
        """``chunk`` for a few iterations, one at a time in plain floats, in NumPy's order of operations.

        Each iteration's time takes the NumPy path's steps in its order, and the counters and
        readers get the same additions in the same order (sums as NumPy's pairwise summation
        adds them: ``_sum``), so times and counters are the same to the bit; what it saves is
        NumPy's fixed cost per call, which is most of a small chunk's cost there.
        """
        h, line, pattern, dram = self.h, self.line, fp.pattern, self.h.dram
        levels, instances, through, kinds = h.levels, self.instance_list, self.through, self.kinds
        blocks = self.blocks[fp.data]
        socket = self.socket_list[worker]
        hops_from = self.hops_list[socket]
        mine = [instance[worker] for instance in instances]
        n = hi - lo
        sizes = [float(nbytes) for nbytes in fp.bytes[lo:hi].tolist()]
        points = self._offsets(fp)[lo:hi + 1].tolist()  # as _lines: the lines reached by each block's end
        first = points[0]
        reached = first // line
        last = blocks.holder[lo:hi].tolist()
        stamps = blocks.stamp[:, lo:hi].tolist()
        home = blocks.home[lo:hi].tolist()
        if home and min(home) < 0:  # first touch: a page lands on the node of the core that writes it first
            home = [socket if node < 0 else node for node in home]
            blocks.home[lo:hi] = home
        shares = {}  # each (resource, instance)'s bandwidth share: its readers do not change during the chunk
        # What each level serves, split as the NumPy path's counter sums split it, and the instances of a
        # shared level whose bandwidth it takes (its own, or for a private level the one it reads through).
        served = [([], [], []) for _ in levels]
        used = [[] for _ in levels]
        time, lines_of, overlap_of, before_of, latency, from_dram = [], [], [], [], [], []
        ahead = 0.0
        for j in range(n):
            size = sizes[j]
            end = points[j + 1]
            upto = -(-end // line) if end > first else reached
            lines = float(upto - reached)
            reached = upto
            overlap = self._overlap(size) if h.stride_misses else h.outstanding_misses
            ahead += size
            before = ahead - size  # this chunk's bytes ahead of the iteration
            seen = last[j] >= 0 and size > 0
            holder = last[j] if seen else worker
            holder_socket = self.socket_list[holder]
            same_socket = holder_socket == socket
            hops = hops_from[holder_socket]
            t = inner = 0.0
            for i, level in enumerate(levels):
                theirs = instances[i][holder]
                local = theirs == mine[i]
                held = 0.0
                if seen:
                    distance = through[i][theirs] - stamps[i][j] + (before if local else 0.0)
                    held = min(max((level.size_bytes - distance) / size, 0.0), 1.0)
                held = max(held, inner)
                part = (held - inner) * lines
                inner = held
                here, there, far_away = served[i]
                if kinds[i] == "shared":
                    (here if local else there).append(part)
                    if not part:
                        continue
                    level_latency = level.latency_ns if local else self.far[i][hops]
                    bandwidth = self._share(i, level, start, holder_socket, shares)
                    if part > 0:
                        used[i].append(holder_socket)
                elif kinds[i] == "private":
                    if local:
                        here.append(part)
                    (there if same_socket else far_away).append(0.0 if local else part)
                    if not part:
                        continue
                    if local:
                        level_latency, bandwidth = level.latency_ns, level.bandwidth_gbs
                    else:
                        source = levels[self.shared]
                        level_latency = source.latency_ns if same_socket else self.far[self.shared][hops]
                        bandwidth = self._share(self.shared, source, start, holder_socket, shares)
                        if part > 0:
                            used[i].append(holder_socket)
                else:
                    (here if local else there).append(part)
                    if not part:
                        continue
                    level_latency = level.latency_ns if local else dram.latency_ns
                    bandwidth = level.bandwidth_gbs if local else dram.bandwidth_gbs
                t += part * _access(level_latency, bandwidth, pattern, line, overlap)
            time.append(t)
            lines_of.append(lines)
            overlap_of.append(overlap)
            before_of.append(before)
            far = hops_from[home[j]]
            latency.append(dram.latency_ns if far == 0 else dram.remote_latency_ns[far - 1]
                           if dram.remote_latency_ns else 0.0)
            from_dram.append((1.0 - inner) * lines)
        reading = []
        counters = self.counters
        for i, (here, there, far_away) in enumerate(served):
            named_here, named_there, named_far = self.tallies[i]
            if here:  # (an empty list sums to 0.0, which leaves a counter as it is)
                counters[named_here] += _sum(here)
            if there:
                counters[named_there] += _sum(there)
            if far_away:
                counters[named_far] += _sum(far_away)
            if used[i]:
                resource = i if kinds[i] == "shared" else self.shared
                self._note(resource, levels[resource], used[i], reading)
        lines_by_node = [0.0] * self.sockets   # as the NumPy path sums them
        for j in range(n):
            if from_dram[j] > 0:
                lines_by_node[home[j]] += from_dram[j]
        if self.calendars:
            by_node = self._conserved_shares(start, lines_by_node)
            bandwidth = [by_node[node] for node in home]
        else:
            bandwidth = [self._share("dram", dram, start, node, shares) for node in home]
        self._note("dram", dram, [node for node, lines in zip(home, from_dram) if lines > 0], reading)
        if self.queueing is not None:
            by_node, own = [0.0] * self.sockets, [0.0] * self.sockets
            for j in range(n):
                in_flight = latency[j] / _access(latency[j], dram.bandwidth_gbs, pattern, line, overlap_of[j])
                by_node[home[j]] += from_dram[j]
                own[home[j]] += from_dram[j] * in_flight
            wait = self._waits(start, socket, by_node, own)
            latency = [latency[j] + wait[home[j]] for j in range(n)]
        local_dram, remote_dram = [], []
        for j in range(n):
            time[j] += from_dram[j] * _access(latency[j], bandwidth[j], pattern, line, overlap_of[j])
            (local_dram if hops_from[home[j]] == 0 else remote_dram).append(from_dram[j])
        counters["local_dram"] += _sum(local_dram)
        counters["remote_dram"] += _sum(remote_dram)
        if pattern != "stream":  # as _reuse: the accesses beyond one per line, at the level the block fits in
            for j in range(n):
                extra = max(math.ceil(sizes[j] / ELEMENT_BYTES) - lines_of[j], 0.0)
                if extra:
                    fits = next((level for level in levels if level.size_bytes >= sizes[j]), None)
                    if fits is None:  # no cache holds the block: DRAM's cost, as the block's lines got it
                        cost = _access(latency[j], bandwidth[j], pattern, ELEMENT_BYTES, overlap_of[j])
                    else:
                        cost = _access(fits.latency_ns, fits.bandwidth_gbs, pattern, ELEMENT_BYTES, overlap_of[j])
                    time[j] += extra * cost
        gathered = None
        if fp.gather is not None:
            reads = fp.gather.reads[lo:hi].tolist()
            count = float(sum(reads))
            if count:
                per_read = self._gather(worker, fp, count, start, reading, shares)
                if h.dram.gathers == "added":
                    for j in range(n):
                        time[j] += reads[j] * per_read
                else:
                    gathered = count * per_read
        total = self._jitter(self.with_gathers(_sum(time), gathered, work))
        # The chunk's blocks now live in this core's caches, stamped in the order it touched them.
        blocks.holder[lo:hi] = worker
        moved = _sum(sizes)
        for i, stamp in enumerate(blocks.stamp):
            base = through[i][mine[i]]
            for j in range(n):  # one at a time: NumPy takes a list into a slice at several times the cost
                stamp[lo + j] = base + before_of[j] + sizes[j]
            through[i][mine[i]] += moved
        demand = {}
        if self.queueing is not None:
            waiting = [0.0] * self.sockets
            for j in range(n):
                if from_dram[j] > 0:
                    waiting[home[j]] += from_dram[j] * latency[j]
            demand = self._demand(total, socket, lines_by_node, waiting)
        self._hold(reading, demand, start, start + total)
        return total
