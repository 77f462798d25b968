"""Latencies worked out from the topology: the same floats as a table of every pair, and machines of 16,384 cores."""

import numpy as np
import pytest

from simsched.machine import MAX_CORES, load_machine
from simsched.machine.latencies import Latencies
from simsched.memory import Column, Memory, Rows

# A ring of SPEs, CCX groups, a ring of sockets (hops 1 and 2), a ring of ring sockets, one socket.
MACHINES = ["cell-qs22", "epyc-7742-2s", "xeon-e5-4620", "scaled:base=cell-qs22,sockets=5,socket_links=ring",
            "scaled:base=xeon-8375c-2s,sockets=3", "uniform:cores=8", "uniform:cores=1"]


def shortest_paths(machine) -> np.ndarray:
    """The latency table as the topology graph's shortest paths (Dijkstra, summed as networkx sums), the definition."""
    rows = [machine.links.distances(("core", a)) for a in range(machine.cores)]
    return np.array([[rows[a][("core", b)] for b in range(machine.cores)] for a in range(machine.cores)])


@pytest.mark.parametrize("spec", MACHINES)
def test_each_latency_is_the_topologys_shortest_path(spec):
    # Exactly where no core groups nest (test_whatif checks that for every crossbar and ring); a group's
    # latency is given, where the path sums its halves.
    machine = load_machine(spec)
    latencies, table = machine.latencies, shortest_paths(machine)
    every = [(a, b) for a in range(machine.cores) for b in range(machine.cores)]
    assert [latencies.value(a, b) for a, b in every] == [float(x) for x in latencies.matrix().ravel()]
    np.testing.assert_allclose(latencies.matrix(), table, rtol=1e-12)
    if "core_groups" not in machine.topology:
        assert np.array_equal(machine.latency, table)


@pytest.mark.parametrize("spec", MACHINES)
def test_a_runs_cores_keep_their_latencies_and_nearest_neighbours(spec):
    machine = load_machine(spec)
    cores = np.random.default_rng(4).permutation(machine.cores)[: max(1, machine.cores * 2 // 3)]
    run = machine.latencies.of(cores)
    table = machine.latency[np.ix_(cores, cores)]
    assert np.array_equal(run.matrix(), table)
    away = table.copy()
    np.fill_diagonal(away, np.inf)
    assert [run.nearest(a) for a in range(len(cores))] == away.min(axis=1).tolist()
    assert [run.row(a).tolist() for a in range(len(cores))] == table.tolist()


@pytest.mark.parametrize("spec", MACHINES)
def test_the_spread_within_and_across_sockets_is_the_tables(spec):
    machine = load_machine(spec)
    socket = np.arange(machine.cores) // machine.cores_per_socket
    together = socket[:, None] == socket[None, :]
    apart = ~np.eye(machine.cores, dtype=bool)
    within, across = machine.latencies.spread()
    assert within == np.unique(machine.latency[together & apart]).tolist()
    assert across == np.unique(machine.latency[~together]).tolist()


def test_a_measured_matrix_is_kept_as_given():
    table = np.array([[1.0, 20.0, 30.0], [20.0, 2.0, 40.0], [30.0, 40.0, 3.0]])
    latencies = Latencies.from_matrix(table)
    assert latencies.value(0, 0) == 1.0 and latencies.value(2, 1) == 40.0
    assert np.array_equal(latencies.of([2, 0]).matrix(), [[3.0, 30.0], [30.0, 1.0]])
    assert latencies.nearest(1) == 20.0


@pytest.mark.parametrize("spec", MACHINES[:5])
def test_compiled_columns_are_the_python_columns(spec):
    from simsched import memory

    if memory.speedups is None:
        pytest.skip("simsched._speedups is not built here")
    rng = np.random.default_rng(3)
    latencies = load_machine(spec).latencies
    for run in (latencies, latencies.of(rng.permutation(len(latencies))[: len(latencies) // 2 + 1]),
                Latencies.from_matrix(rng.random((7, 7)))):
        for fraction in (1.0, 0.37):
            rows = Rows(run, fraction)
            for w in range(len(run)):
                compiled, python = memory.speedups.Column(run.compiled(), w, fraction), Column(rows, w)
                assert len(compiled) == len(python) == len(run)
                assert [compiled[a] for a in range(len(run))] == [python[a] for a in range(len(run))] \
                    == [run.value(a, w) * fraction for a in range(len(run))]
            with pytest.raises(IndexError):
                memory.speedups.Column(run.compiled(), 0, fraction)[len(run)]


@pytest.mark.parametrize("spec", MACHINES[:5])
def test_a_memory_without_a_table_charges_what_the_table_charges(monkeypatch, spec):
    latencies = load_machine(spec).latencies
    table = Memory(None, latencies, {"atomic": 1.0, "store": 1.0}, 0.0, 0.3)
    monkeypatch.setattr(Memory, "TABLE_CORES", 0)
    rows = Memory(None, latencies, {"atomic": 1.0, "store": 1.0}, 0.0, 0.3)
    assert isinstance(table.lat, list) and isinstance(rows.lat, Rows)
    n = len(latencies)
    for a in range(n):
        assert [rows.lat[a][b] for b in range(n)] == table.lat[a]
        assert [rows.transfer[a][b] for b in range(n)] == table.transfer[a]
        assert [rows.transfers_to(a)[b] for b in range(n)] == table.transfers_to(a)
        assert [rows.latencies_to(a)[b] for b in range(n)] == table.latencies_to(a)
        assert rows.hold_ns[a] == table.hold_ns[a]
    assert rows.mean_transfer() == pytest.approx(table.mean_transfer(), rel=1e-12)


def test_machines_reach_16384_cores_with_memory_linear_in_the_cores():
    assert MAX_CORES == 16384
    for spec in ("uniform:cores=16384", "scaled:base=epyc-7742-2s,sockets=256"):
        machine = load_machine(spec)
        assert machine.cores == 16384
        latencies = machine.latencies
        kept = latencies.hops.size + latencies.cores.size + len(latencies.across)
        assert kept <= 256 * 256 + 16384 + 2   # hops between sockets, a number per core, one latency per hop count
        assert machine._latency is None          # no table of every pair was made
        within, across = latencies.spread()
        assert within and (across or machine.sockets == 1)


def test_a_run_beyond_the_table_is_the_run_with_the_table(monkeypatch):
    # 2,048 threads work their latencies out from the topology; the same run with a table of every pair.
    from simsched.engine import simulate

    machine = load_machine("scaled:base=epyc-7742-2s,sockets=32")

    def run():
        r = simulate(machine, "omp-dynamic:chunk=4", "exp-inc:n=20000", 2048, seed=1)
        return r.makespan_ns, r.events, sorted(r.counters.items()), r.chunks.values.tolist()

    computed = run()
    monkeypatch.setattr(Memory, "TABLE_CORES", 4096)
    assert run() == computed
