"""Barriers and half-barriers on modeled cache lines, shared by every fork-join scheduler.

A full barrier is a *join* phase (everyone checks in with the root, worker 0) followed
by a *release* phase (the root lets everyone go). Half-barriers use one phase alone.
Each worker counts its own episodes, so flags never need resetting: a flag holds the
number of the last episode it signalled.
"""

from __future__ import annotations

from typing import Callable

from ..errors import SimschedError

BARRIERS = ("central", "tree", "hyper", "dissemination", "numa")


class Tree:
    """A barrier tree over workers 0..P-1 rooted at worker 0: children in the order they are checked."""

    def __init__(self, parent: list[int], children: list[list[int]]):
        self.parent = parent
        self.children = children

    @property
    def depth(self) -> int:
        def height(w):
            return 1 + max((height(c) for c in self.children[w]), default=0)
        return height(0) - 1

    @classmethod
    def knomial(cls, workers: list[int], k: int) -> "Tree":
        """A k-nomial tree (k=2: tournament tree, k=4: Intel's hyper barrier) over ``workers``."""
        n = len(workers)
        parent_local = [-1] * n
        children_local: list[list[int]] = [[] for _ in range(n)]
        stride = 1
        while stride < n:
            for i in range(0, n, stride * k):
                for j in range(1, k):
                    child = i + j * stride
                    if child < n:
                        children_local[i].append(child)
                        parent_local[child] = i
            stride *= k
        return cls._from_local(workers, parent_local, children_local)

    @classmethod
    def binary(cls, workers: list[int]) -> "Tree":
        """A heap-shaped binary tree over ``workers``: node i's children are 2i+1 and 2i+2."""
        n = len(workers)
        parent_local = [(i - 1) // 2 if i else -1 for i in range(n)]
        children_local = [[c for c in (2 * i + 1, 2 * i + 2) if c < n] for i in range(n)]
        return cls._from_local(workers, parent_local, children_local)

    @classmethod
    def numa(cls, threads: int, socket_of: Callable[[int], int]) -> "Tree":
        """Branching factor = sockets at the top (one child per socket's first worker), binary inside sockets."""
        groups: dict[int, list[int]] = {}
        for w in range(threads):
            groups.setdefault(socket_of(w), []).append(w)
        parent = [-1] * threads
        children: list[list[int]] = [[] for _ in range(threads)]
        for members in groups.values():
            sub = cls.binary(members)
            for w in members:
                if sub.parent[w] != -1:
                    parent[w] = sub.parent[w]
                children[w] = list(sub.children[w])
        roots = [members[0] for members in groups.values()]
        for r in roots:
            if r != 0:
                parent[r] = 0
        # The root checks its own socket's subtree first, then the remote sockets.
        children[0] = children[0] + [r for r in roots if r != 0]
        return cls(parent, children)

    @classmethod
    def _from_local(cls, workers, parent_local, children_local) -> "Tree":
        size = max(workers) + 1
        parent = [-1] * size
        children: list[list[int]] = [[] for _ in range(size)]
        for i, w in enumerate(workers):
            parent[w] = workers[parent_local[i]] if parent_local[i] >= 0 else -1
            children[w] = [workers[c] for c in children_local[i]]
        return cls(parent, children)


class Views:
    """Reduction views, one per worker on its own cache line (no false sharing); partials are combined pairwise."""

    def __init__(self, sim):
        self.sim = sim
        self.lines = [sim.memory.line(f"view[{w}]", 0, home=w) for w in range(sim.threads)]

    def publish(self, w: int) -> float:
        """Worker ``w`` stores its partial result; returns when the store retires."""
        return self.sim.memory.store(self.lines[w], w, 1)

    def combine(self, w: int, child: int) -> float:
        """Worker ``w`` reads ``child``'s view and folds it into its own; returns the completion time."""
        sim = self.sim
        _, seen = sim.memory.read(self.lines[child], w)
        sim.counters["combines"] += 1
        return seen + sim.costs["combine"]

    def combine_all(self, w: int):
        """The master folds every other worker's view into its own, one after another."""
        sim = self.sim
        sim.begin(w, "sync")
        for child in range(1, sim.threads):
            yield sim.until(self.combine(w, child))
        sim.end(w)


class Barrier:
    """A barrier algorithm on modeled lines; ``join``, ``release`` and ``full`` are worker generators.

    Given reduction ``views``, the join phase combines the partials as it goes.
    """

    def __init__(self, sim, views: Views | None = None):
        self.sim = sim
        self.threads = sim.threads
        self.views = views

    def full(self, w: int):
        """Join then release: nobody leaves until everybody has arrived."""
        yield from self.join(w)
        yield from self.release(w)

    def join(self, w: int):
        raise NotImplementedError

    def release(self, w: int):
        raise NotImplementedError


class TreeBarrier(Barrier):
    """Tournament up a tree (children's arrival flags), then release flags down it."""

    def __init__(self, sim, tree: Tree, views: Views | None = None):
        super().__init__(sim, views)
        self.tree = tree
        mem = sim.memory
        # Each flag is written by one worker and spun on by another; it starts in the spinner's cache.
        self.arrived = [mem.line(f"arrived[{w}]", 0, home=max(tree.parent[w], 0)) for w in range(self.threads)]
        self.go = [mem.line(f"go[{w}]", 0, home=w) for w in range(self.threads)]
        self.join_episode = [0] * self.threads
        self.release_episode = [0] * self.threads

    def join(self, w: int):
        sim, mem = self.sim, self.sim.memory
        sim.begin(w, "sync")
        self.join_episode[w] += 1
        episode = self.join_episode[w]
        for child in self.tree.children[w]:
            line = self.arrived[child]
            yield mem.spin_until(line, w, lambda v, e=episode: v >= e)
            if self.views is not None:
                yield sim.until(self.views.combine(w, child))
        if w != 0:
            yield sim.until(mem.store(self.arrived[w], w, episode))
        sim.end(w)
        sim.counters["barrier_phases"] += w == 0

    def release(self, w: int):
        sim = self.sim
        sim.begin(w, "sync")
        self.release_episode[w] += 1
        episode = self.release_episode[w]
        if w != 0:
            yield sim.memory.spin_until(self.go[w], w, lambda v, e=episode: v >= e)
        yield from self._forward(w, episode)

    def forward(self, w: int):
        """Pass on a release that ``w`` already noticed (by polling its flag rather than spinning)."""
        self.release_episode[w] += 1
        self.sim.begin(w, "sync")
        yield from self._forward(w, self.release_episode[w])

    def _forward(self, w: int, episode: int):
        sim, mem = self.sim, self.sim.memory
        t = sim.env.now
        # Far subtrees first: they have the longest way to go.
        for child in reversed(self.tree.children[w]):
            t = mem.store(self.go[child], w, episode, at=t)
        yield sim.until(t)
        sim.end(w)
        sim.counters["barrier_phases"] += w == 0


class CentralBarrier(Barrier):
    """One shared arrival counter and one release flag that every worker polls."""

    def __init__(self, sim, views: Views | None = None):
        super().__init__(sim, views)
        mem = sim.memory
        self.count = mem.line("barrier.count", 0, home=0)
        self.flag = mem.line("barrier.flag", 0, home=0)
        self.join_episode = [0] * self.threads
        self.release_episode = [0] * self.threads
        self.full_episode = [0] * self.threads

    def join(self, w: int):
        """Half-barrier join: workers increment the counter; the root spins until it reaches P-1."""
        sim, mem = self.sim, self.sim.memory
        sim.begin(w, "sync")
        self.join_episode[w] += 1
        episode = self.join_episode[w]
        others = self.threads - 1
        if w != 0:
            _, t = mem.fetch_add(self.count, w, 1)
            yield sim.until(t)
        else:
            if others:
                yield mem.spin_until(self.count, w, lambda v, target=episode * others: v >= target)
            sim.counters["barrier_phases"] += 1
        sim.end(w)
        if w == 0 and self.views is not None:
            yield from self.views.combine_all(w)

    def release(self, w: int):
        """Half-barrier release: the root sets the flag that everyone polls."""
        sim, mem = self.sim, self.sim.memory
        sim.begin(w, "sync")
        self.release_episode[w] += 1
        episode = self.release_episode[w]
        if w == 0:
            yield sim.until(mem.store(self.flag, w, episode))
            sim.counters["barrier_phases"] += 1
        else:
            yield mem.spin_until(self.flag, w, lambda v, e=episode: v >= e)
        sim.end(w)

    def full(self, w: int):
        """Sense-reversing central barrier: every arrival increments; the last one flips the flag."""
        sim, mem = self.sim, self.sim.memory
        sim.begin(w, "sync")
        self.full_episode[w] += 1
        episode = self.full_episode[w]
        old, t = mem.fetch_add(self.count, w, 1)
        yield sim.until(t)
        if old == episode * self.threads - 1:
            yield sim.until(mem.store(self.flag, w, episode))
            sim.counters["barrier_phases"] += 2
        else:
            yield mem.spin_until(self.flag, w, lambda v, e=episode: v >= e)
        sim.end(w)
        if w == 0 and self.views is not None:
            yield from self.views.combine_all(w)


class DisseminationBarrier(Barrier):
    """ceil(log2 P) rounds; in round r worker i signals worker (i + 2^r) mod P and waits for its own signal."""

    def __init__(self, sim, views: Views | None = None):
        super().__init__(sim, views)
        mem = sim.memory
        self.episode = [0] * self.threads
        self.rounds = max((self.threads - 1).bit_length(), 0)
        self.flags = [[mem.line(f"dissem[{w}][{r}]", 0, home=w) for r in range(self.rounds)]
                      for w in range(self.threads)]

    def full(self, w: int):
        sim, mem = self.sim, self.sim.memory
        sim.begin(w, "sync")
        self.episode[w] += 1
        episode = self.episode[w]
        for r in range(self.rounds):
            partner = (w + (1 << r)) % self.threads
            t = mem.store(self.flags[partner][r], w, episode)
            yield sim.until(t)
            yield mem.spin_until(self.flags[w][r], w, lambda v, e=episode: v >= e)
        sim.counters["barrier_phases"] += 2 * (w == 0)
        sim.end(w)
        if w == 0 and self.views is not None:
            yield from self.views.combine_all(w)

    def join(self, w: int):
        raise SimschedError("the dissemination barrier has no separate join phase (use it as a full barrier)")

    release = join


def make_barrier(kind: str, sim, views: Views | None = None) -> Barrier:
    """Build the barrier named ``kind`` for ``sim``'s workers, combining ``views`` in its join if given."""
    threads = sim.threads
    if kind == "central":
        return CentralBarrier(sim, views)
    if kind == "tree":
        return TreeBarrier(sim, Tree.knomial(list(range(threads)), 2), views)
    if kind == "hyper":
        return TreeBarrier(sim, Tree.knomial(list(range(threads)), 4), views)
    if kind == "numa":
        cores = sim.cores
        return TreeBarrier(sim, Tree.numa(threads, lambda w: sim.machine.socket_of(cores[w])), views)
    if kind == "dissemination":
        return DisseminationBarrier(sim, views)
    raise SimschedError(f"unknown barrier {kind!r} (known: {', '.join(BARRIERS)})")
