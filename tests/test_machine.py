"""Machine models: loading, validation, topology graph and latency matrix."""

import copy
import tomllib

import numpy as np
import pytest

import simsched
from simsched import SimschedError, builtin_machines, load_machine
from simsched.machine import Machine

BUILTIN = ["cell-qs22", "haswell-e5-2695v3", "xeon-e5-4620", "xeon-e7-4860v2"]


def test_builtin_machines_are_listed_and_load():
    assert simsched.builtin_machines() == BUILTIN
    for name in BUILTIN:
        m = load_machine(name)
        assert m.name == name
        assert m.latency.shape == (m.cores, m.cores)
        assert np.allclose(m.latency, m.latency.T)
        assert np.all(np.diag(m.latency) == 0)


def test_xeon_e7_topology_and_latencies():
    m = load_machine("xeon-e7-4860v2")
    assert (m.sockets, m.cores_per_socket, m.cores) == (4, 12, 48)
    data = m.data["latency_ns"]
    assert m.latency[0, 11] == data["same_socket"]
    assert m.latency[0, 12] == m.latency[0, 47] == data["same_socket"] + data["socket_hop"]
    cores = [n for n, kind in m.graph.nodes(data="kind") if kind == "core"]
    assert len(cores) == 48


def test_ring_of_sockets_counts_hops():
    m = load_machine("xeon-e5-4620")
    hop = m.data["latency_ns"]["socket_hop"]
    same = m.data["latency_ns"]["same_socket"]
    per = m.cores_per_socket
    assert m.latency[0, per] == pytest.approx(same + hop)          # neighbour socket
    assert m.latency[0, 2 * per] == pytest.approx(same + 2 * hop)  # opposite socket on a 4-ring


def test_every_number_in_a_machine_file_has_a_source_comment():
    from simsched.machine import _machine_files

    for path in _machine_files().iterdir():
        if not path.name.endswith(".toml"):
            continue
        for line in path.read_text().splitlines():
            code = line.split("#")[0].strip()
            if "=" in code and code.split("=", 1)[1].strip()[:1] in "0123456789-.":
                assert "#" in line, f"{path.name}: no source for {code!r}"


def test_placement_is_compact_and_bounded():
    m = load_machine("haswell-e5-2695v3")
    assert m.placement(3) == [0, 1, 2]
    with pytest.raises(SimschedError, match="exceeds the 28 cores"):
        m.placement(29)
    with pytest.raises(SimschedError, match=">= 1"):
        m.placement(0)


def raw(name="haswell-e5-2695v3"):
    from simsched.machine import _machine_files

    return tomllib.loads(_machine_files().joinpath(f"{name}.toml").read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["costs_ns"].pop("atomic"), "missing key costs_ns.atomic"),
    (lambda d: d["latency_ns"].__setitem__("same_socket", -1), "latency_ns.same_socket must be >= 0"),
    (lambda d: d["topology"].__setitem__("sockets", 0), "topology.sockets must be >= 1"),
    (lambda d: d["topology"].__setitem__("sockets", "two"), "topology.sockets must be an integer"),
    (lambda d: d["clock"].__setitem__("boost", 1), "unknown key clock.boost"),
    (lambda d: d.__setitem__("extras", {}), "unknown section or key 'extras'"),
    (lambda d: d.pop("costs_ns"), r"missing section \[costs_ns\]"),
    (lambda d: d["latency_ns"].__setitem__("same_socket", float("nan")), "must be a finite number"),
    (lambda d: d["latency_ns"].__setitem__("same_socket", 1e300), "must be a finite number up to 1e\\+12"),
    (lambda d: d["topology"].__setitem__("cores_per_socket", 5000), "at most 1024 are supported"),
    (lambda d: d["coherence"].__setitem__("protocol", "magic"), "coherence.protocol"),
    (lambda d: d["latency_ns"].__setitem__("matrix", [[0, 1], [1, 0]]), "latency_ns.matrix must be a 28x28"),
])
def test_bad_machine_files_name_the_bad_key(mutate, message):
    data = copy.deepcopy(raw())
    mutate(data)
    with pytest.raises(SimschedError, match=message):
        Machine.from_dict(data, "bad.toml")


def test_full_latency_matrix_overrides_the_topology():
    data = raw()
    data["topology"].update(sockets=1, cores_per_socket=3)
    data["latency_ns"] = {"matrix": [[0, 10, 20], [10, 0, 30], [20, 30, 0]]}
    m = Machine.from_dict(data, "host.toml")
    assert m.latency[1, 2] == 30


def test_replace_builds_a_modified_copy():
    m = load_machine("xeon-e7-4860v2")
    bigger = m.replace(**{"topology.sockets": 8, "latency_ns.socket_hop": 0})
    assert bigger.cores == 96 and bigger.latency[0, 95] == m.data["latency_ns"]["same_socket"]
    assert m.cores == 48


def test_unknown_machine_lists_the_builtin_ones():
    with pytest.raises(SimschedError, match="unknown machine 'nope'.*xeon-e7-4860v2"):
        load_machine("nope")


@pytest.mark.parametrize("name, changes", [(name, {}) for name in builtin_machines()] + [
    ("xeon-e5-4620", {"topology.socket_links": [[0, 1], [1, 2], [2, 3], [1, 3]]}),
    ("xeon-e7-4860v2", {"topology.core_layout": "ring", "latency_ns.ring_hop": 7.3, "topology.socket_links": "ring"}),
    ("cell-qs22", {"topology.sockets": 5, "topology.socket_links": "ring"}),
])
def test_latencies_are_networkx_shortest_paths_bit_for_bit(name, changes):
    """The latency matrix is computed without networkx, and must equal what networkx computes from the same graph."""
    import networkx as nx

    machine = load_machine(name).replace(**changes) if changes else load_machine(name)
    paths = dict(nx.all_pairs_dijkstra_path_length(machine.graph, weight="weight"))
    expected = np.array([[paths[("core", a)][("core", b)] if a != b else 0.0 for b in range(machine.cores)]
                         for a in range(machine.cores)])
    assert np.array_equal(machine.latency, expected)
    assert expected.max() > 0
