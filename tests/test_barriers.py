"""Barriers: exact two-thread timelines worked out by hand, and how their cost scales with P."""

import math

import pytest

from simsched.engine import Simulation
from simsched.schedulers.barriers import Tree, make_barrier
from tests.conftest import toy_machine


def barrier_exits(kind, threads, phase="full", **machine):
    """Run one barrier episode with every worker arriving at t=0; return each worker's exit time."""
    machine.setdefault("cores", max(threads, 2))
    sim = Simulation(toy_machine(**machine), threads, [])
    barrier = make_barrier(kind, sim)
    exits = {}

    def worker(w):
        yield from getattr(barrier, phase)(w)
        exits[w] = sim.env.now

    for w in range(threads):
        sim.env.process(worker(w))
    sim.env.run()
    return exits, sim


def test_two_thread_central_barrier_timeline():
    # One-way latency 100 ns, a transfer 50 ns, atomics 10 ns, stores 1 ns.
    # w0 increments the counter it already holds: done at 10, then spins on the flag.
    # w1's increment waits for w0's, pulls the line (50) and runs (10): done at 70; it is last,
    # so it flips the flag (visible at 70, its store retires at 71). w0 sees it 100 ns later.
    exits, sim = barrier_exits("central", 2)
    assert exits == {0: 170.0, 1: 71.0}
    assert list(sim.time["sync"]) == [170.0, 71.0]


def test_two_thread_tree_barrier_timeline():
    # Join: w1 stores its arrival flag at t=0 (retires at 1); w0, spinning on it, sees it at 100.
    # Release: w0 stores w1's go flag at 100 (retires at 101); w1, spinning since 1, sees it at 200.
    exits, _ = barrier_exits("tree", 2)
    assert exits == {0: 101.0, 1: 200.0}


def test_half_barrier_phases_alone():
    join, _ = barrier_exits("tree", 2, phase="join")
    release, _ = barrier_exits("tree", 2, phase="release")
    assert join == {0: 100.0, 1: 1.0}
    # The root's store lands as w1 starts looking: w1 sees it one-way latency later, as a spinner would.
    assert release == {0: 1.0, 1: 100.0}


@pytest.mark.parametrize("k, expected_children", [
    (2, [1, 2, 4, 8]),
    (4, [1, 2, 3, 4, 8, 12]),
])
def test_knomial_tree_shape(k, expected_children):
    tree = Tree.knomial(list(range(16)), k)
    assert tree.children[0] == expected_children
    assert all(tree.parent[c] == 0 for c in expected_children)
    assert tree.depth == math.ceil(math.log(16, k))


def test_numa_tree_has_one_child_per_remote_socket():
    tree = Tree.numa(48, lambda w: w // 12)
    assert tree.children[0] == [1, 2, 12, 24, 36]
    assert tree.children[12] == [13, 14]
    # Inside a socket the tree is binary.
    assert all(len(c) <= 2 for w, c in enumerate(tree.children) if w != 0)


def cost(kind, threads):
    exits, _ = barrier_exits(kind, threads, cores=64, same_socket=100.0)
    return max(exits.values())


def test_central_barrier_cost_grows_linearly_with_threads():
    sizes = [4, 8, 16, 32, 64]
    costs = [cost("central", p) for p in sizes]
    per_thread = [c / p for c, p in zip(costs, sizes)]
    # Every arrival waits its turn on the one counter line: cost ~ P x (transfer + atomic).
    assert max(per_thread) / min(per_thread) < 1.35
    assert costs[-1] / costs[-2] == pytest.approx(2.0, rel=0.1)


def test_tree_barrier_cost_grows_logarithmically_with_threads():
    sizes = [4, 8, 16, 32, 64]
    costs = [cost("tree", p) for p in sizes]
    steps = [b - a for a, b in zip(costs, costs[1:])]
    # Each doubling of P adds one level up and one level down: a constant increment.
    assert max(steps) / min(steps) < 1.3
    assert costs[-1] < cost("central", 64) / 3


def test_dissemination_barrier_uses_log2_rounds():
    exits, sim = barrier_exits("dissemination", 8)
    assert sim.memory.lines and len(sim.memory.lines) == 8 * 3
    # Three rounds; in each every worker stores its partner's flag and sees its own flag one
    # one-way latency (100 ns) after its signaller stored it, whether it was spinning already or not.
    assert exits == {w: 300.0 for w in range(8)}
