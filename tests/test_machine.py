"""Machine models: loading, validation, topology graph and latency matrix."""

import copy
import re
import tomllib

import numpy as np
import pytest

import simsched
from simsched import SimschedError, builtin_machines, load_machine
from simsched.machine import Machine

BUILTIN = ["cell-qs22", "haswell-e5-2695v3", "uniform", "xeon-e5-4620", "xeon-e7-4860v2"]
# Machines of today for what-ifs: latencies fitted to published matrices, no memory hierarchy yet.
TODAY = ["epyc-7742-2s", "graviton3", "xeon-8375c-2s"]


def test_builtin_machines_are_listed_and_load():
    assert simsched.builtin_machines() == sorted(BUILTIN + TODAY)
    for name in BUILTIN + TODAY:
        m = load_machine(name)
        assert m.name == name
        assert m.latency.shape == (m.cores, m.cores)
        assert np.allclose(m.latency, m.latency.T)
        assert np.all(np.diag(m.latency) == 0)


def test_uniform_machine_has_equidistant_cores_and_one_clock():
    m = load_machine("uniform:cores=48,latency_ns=80")
    assert m.name == "uniform:cores=48,latency_ns=80"
    assert (m.sockets, m.cores, m.hierarchy) == (1, 48, None)
    off_diagonal = m.latency[~np.eye(48, dtype=bool)]
    assert np.all(off_diagonal == 80.0)
    # No turbo and no throughput loss: a core runs as fast with 47 busy neighbours as alone.
    assert np.all(m.speed_factors(48) == m.speed_factors(1)[0])
    assert load_machine("uniform").cores == 16


@pytest.mark.parametrize("spec, needle", [
    ("uniform:cores=0", "cores=0 must be in [1, 16384]"),
    ("uniform:cores=16385", "cores=16385 must be in [1, 16384]"),
    ("uniform:latency_ns=-1", "latency_ns=-1.0 must be >= 0"),
    ("uniform:core=4", "unknown parameter 'core'"),
])
def test_uniform_machine_refuses_bad_parameters(spec, needle):
    with pytest.raises(SimschedError, match=re.escape(needle)):
        load_machine(spec)


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
    (lambda d: d["topology"].__setitem__("cores_per_socket", 20000), "at most 16384 are supported"),
    (lambda d: d["coherence"].__setitem__("protocol", "magic"), "coherence.protocol"),
    (lambda d: d["coherence"].__setitem__("atomics", "llsc"),
     "coherence.atomics must be locked or reservation, got 'llsc'"),
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
    if "core_groups" in machine.topology:  # a group's latency x is a path of x/2 + x/2, which may round
        np.testing.assert_allclose(machine.latency, expected, rtol=1e-12)
    else:
        assert np.array_equal(machine.latency, expected)
    assert expected.max() > 0


# -- the memory hierarchy ---------------------------------------------------------------------------------------

# The published machines; uniform models no memory on purpose (it compares schedulers without locality).
PUBLISHED = [name for name in BUILTIN if name != "uniform"]


def test_every_builtin_machine_has_a_memory_hierarchy_innermost_first():
    for name in PUBLISHED:
        m = load_machine(name)
        h = m.hierarchy
        assert h is not None, name
        sizes = [level.size_bytes for level in h.levels] + [h.dram.size_bytes]
        assert sizes == sorted(set(sizes)), f"{name}: sizes do not strictly increase: {sizes}"
        latencies = [level.latency_ns for level in h.levels] + [h.dram.latency_ns]
        assert latencies == sorted(latencies), f"{name}: latencies decrease: {latencies}"
        sharing = [level.shared_by for level in h.levels]
        assert sharing == sorted(sharing, key=("core", "socket").index), f"{name}: a private level outside a shared one"
        hops = int(h.socket_hops.max())
        assert hops >= 1 and len(h.dram.remote_latency_ns) >= hops, name
        assert all(remote > h.dram.latency_ns for remote in h.dram.remote_latency_ns), name
        if name == "cell-qs22":  # SPEs have no caches: every line is a DMA from main memory
            assert h.levels == () and h.line_bytes == 128 and h.outstanding_misses == 1
            assert h.dram.latency_ns == m.memory_ns["dma_memory"]
        else:
            assert [level.name for level in h.levels] == ["l1", "l2", "l3"], name
            assert [level.shared_by for level in h.levels] == ["core", "core", "socket"], name
            assert h.line_bytes == 64 and h.outstanding_misses == 10, name
            assert h.levels[2].remote_latency_ns, f"{name}: no remote L3 latency"


def test_published_cache_sizes():
    l3 = {name: load_machine(name).hierarchy.levels[2].size_bytes / 2**20
          for name in ("xeon-e5-4620", "xeon-e7-4860v2", "haswell-e5-2695v3")}
    assert l3 == {"xeon-e5-4620": 16, "xeon-e7-4860v2": 30, "haswell-e5-2695v3": 35}
    # BL: 128 GB over the two sockets.
    assert load_machine("haswell-e5-2695v3").hierarchy.dram.size_bytes == 64 * 2**30


def e5_hierarchy() -> dict:
    """The 4-socket ring machine (sockets up to 2 hops apart), whose hierarchy every bad case below changes once."""
    return copy.deepcopy(raw("xeon-e5-4620"))


def _set(path: str, value):
    def change(d):
        *tables, key = path.split(".")
        for name in tables:
            d = d[name]
        d[key] = value
    return change


def _drop(path: str):
    def change(d):
        *tables, key = path.split(".")
        for name in tables:
            d = d[name]
        del d[key]
    return change


def _private_l3_outside_a_shared_l2(d):
    d["cache"]["l2"]["shared_by"] = "socket"
    d["cache"]["l3"]["shared_by"] = "core"
    del d["cache"]["l3"]["remote_latency_ns"]


@pytest.mark.parametrize("mutate, message", [
    (_set("cache.l2.size_kib", 16), r"cache\.l2\.size_kib \(16\) must exceed cache\.l1\.size_kib \(32\)"),
    (_set("cache.l3.size_kib", 256), r"cache\.l3\.size_kib \(256\) must exceed cache\.l2\.size_kib"),
    (_set("cache.l3.latency_ns", 2), r"cache\.l3\.latency_ns \(2\) is below cache\.l2's \(5\.5\)"),
    (_set("dram.latency_ns", 10), r"dram\.latency_ns \(10\) is below the last cache level's \(18\.8\)"),
    (_set("cache.l2.assoc", 8), r"cache\.l2: unknown key 'assoc'"),
    (_set("dram.channels", 4), r"dram: unknown key 'channels'"),
    (_set("cache.l10", {}), r"\[cache\]: unknown key 'l10'"),
    (_set("cache.l2.shared_by", "chip"), r"cache\.l2\.shared_by must be core or socket, got 'chip'"),
    (_drop("cache.l2.shared_by"), r"cache\.l2: missing key shared_by"),
    (_private_l3_outside_a_shared_l2, r"cache\.l3 is private to a core inside the socket-shared cache\.l2"),
    (_drop("cache.l2"), r"cache levels must be l1, l2, \.\.\. without gaps; found l1, l3"),
    (_drop("dram"), r"\[cache\.\*\] levels need a \[dram\] section"),
    (_set("cache.l2.line_bytes", 128), r"cache\.l2\.line_bytes is 128, but the levels inside it use 64"),
    (_set("cache.l1.line_bytes", 48), r"cache\.l1\.line_bytes must be a power of two"),
    (_drop("cache.l3.line_bytes"), r"cache\.l3: missing key line_bytes"),
    (_set("dram.line_bytes", 128), r"dram\.line_bytes is 128, but the cache levels use 64"),
    (_set("cache.l1.size_kib", -32), r"cache\.l1\.size_kib must be a number > 0"),
    (_set("dram.size_gib", 0), r"dram\.size_gib must be a number > 0"),
    (_set("cache.l1.bandwidth_gbs", 0), r"cache\.l1\.bandwidth_gbs must be a number > 0"),
    (_drop("cache.l1.latency_ns"), r"cache\.l1: missing key latency_ns"),
    (_set("dram.size_gib", 1e300), r"dram\.size_gib must be a number > 0 and up to 1e\+12"),
    (_set("cache.l3.size_kib", 1e306), r"cache\.l3\.size_kib must be a number > 0 and up to 1e\+12"),
    (_set("cache.l3.remote_latency_ns", [173.4]),
     r"cache\.l3\.remote_latency_ns lists 1 hop count\(s\); the sockets are up to 2 hops apart"),
    (_set("dram.remote_latency_ns", [292.4]),
     r"dram\.remote_latency_ns lists 1 hop count\(s\); the sockets are up to 2 hops apart"),
    (_set("dram.remote_latency_ns", []), r"dram\.remote_latency_ns must be a number > 0"),
    (_set("dram.remote_latency_ns", [292.4, -1]), r"dram\.remote_latency_ns must be a number > 0"),
    (_drop("dram.remote_latency_ns"), r"dram: missing key remote_latency_ns \(the machine has 4 sockets\)"),
    (_set("cache.l1.remote_latency_ns", 50), r"cache\.l1\.remote_latency_ns is for socket-shared levels only"),
    (_set("cache.l2.outstanding_misses", 4), r"cache\.l2\.outstanding_misses belongs in cache\.l1"),
    (_set("cache.l1.outstanding_misses", 0), r"cache\.l1\.outstanding_misses must be an integer >= 1, got 0"),
    (_set("cache.l1.outstanding_misses", 2.5), r"cache\.l1\.outstanding_misses must be an integer >= 1"),
    (_set("cache.l2.stride_misses", [[16, 4]]), r"cache\.l2\.stride_misses belongs in cache\.l1"),
    (_set("cache.l1.stride_misses", []), r"cache\.l1\.stride_misses must be a list of \[array KiB, misses"),
    (_set("cache.l1.stride_misses", 8), r"cache\.l1\.stride_misses must be a list"),
    (_set("cache.l1.stride_misses", [[16, 4], [4, 8]]), r"the sizes ascending.*got \[\[16, 4\], \[4, 8\]\]"),
    (_set("cache.l1.stride_misses", [[4, 0]]), r"cache\.l1\.stride_misses must be a list"),
    (_set("cache.l1.stride_misses", [[4, 2.5]]), r"cache\.l1\.stride_misses must be a list"),
    (_set("cache.l1.stride_misses", [[-4, 2]]), r"cache\.l1\.stride_misses must be a list"),
    (_set("cache.l1.stride_misses", [[4, 2, 1]]), r"cache\.l1\.stride_misses must be a list"),
    (_set("dram.node", "core"), r"dram\.node must be socket"),
])
def test_bad_hierarchy_is_one_error_naming_the_key(mutate, message):
    data = e5_hierarchy()
    mutate(data)
    with pytest.raises(SimschedError, match=message) as raised:
        Machine.from_dict(data, "bad.toml")
    assert str(raised.value).startswith("bad.toml: ") and "\n" not in str(raised.value)


def test_stride_misses_are_read_by_array_size():
    data = e5_hierarchy()
    data["cache"]["l1"]["stride_misses"] = [[1, 40], [16, 12], [64, 20]]
    h = Machine.from_dict(data, "stride.toml").hierarchy
    assert h.stride_misses == ((1024, 40), (16384, 12), (65536, 20)) and h.outstanding_misses == 10
    assert h.stride_overlap(np.array([512, 4096, 16384, 32768, 1 << 20])).tolist() == [40, 26, 12, 16, 20]
    assert load_machine("xeon-e5-4620").hierarchy.stride_overlap(np.array([4096])) == 10   # without: fill buffers


def test_dram_alone_is_a_hierarchy_without_caches():
    data = e5_hierarchy()
    del data["cache"]
    h = Machine.from_dict(data, "dram-only.toml").hierarchy
    assert h.levels == () and h.line_bytes == 64 and h.outstanding_misses == 1
    data["dram"]["line_bytes"] = 256
    assert Machine.from_dict(data, "dram-only.toml").hierarchy.line_bytes == 256


def test_no_hierarchy_sections_no_hierarchy():
    data = e5_hierarchy()
    del data["cache"], data["dram"]
    assert Machine.from_dict(data, "flat.toml").hierarchy is None


def test_replace_reaches_into_the_hierarchy():
    m = load_machine("xeon-e5-4620")
    smaller = m.replace(**{"cache.l3.size_kib": 8192})
    assert smaller.hierarchy.levels[2].size_bytes == 8 * 2**20
    assert m.hierarchy.levels[2].size_bytes == 16 * 2**20  # the original is untouched
    assert smaller.hierarchy.levels[:2] == m.hierarchy.levels[:2] and smaller.hierarchy.dram == m.hierarchy.dram
    assert smaller.name == "xeon-e5-4620[cache.l3.size_kib=8192]"
    with pytest.raises(SimschedError, match=r"cache\.l3\.size_kib \(128\) must exceed cache\.l2\.size_kib"):
        m.replace(**{"cache.l3.size_kib": 128})


def test_machines_command_prints_the_hierarchy():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "machines", "xeon-e5-4620"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("  memory hierarchy:")
    assert [line.strip() for line in lines[at + 1:at + 5]] == [
        "l1: 32 KiB per core, 64 B lines, 1.9 ns, 70 GB/s per core",
        "l2: 256 KiB per core, 64 B lines, 5.5 ns, 35 GB/s per core",
        "l3: 16 MiB per socket, 64 B lines, 18.8 ns, other socket 173.4/294.9 ns, 22 GB/s per core, 140 GB/s shared",
        "dram: 128 GiB per socket, 112.1 ns, remote 292.4/295.9 ns, 8 GB/s per core, 31 GB/s per node",
    ]
    cell = subprocess.run([sys.executable, "-m", "simsched.cli", "machines", "cell-qs22"],
                          capture_output=True, text=True, timeout=300).stdout.splitlines()
    at = cell.index("  memory hierarchy:")
    assert cell[at + 1].strip() == "dram: 8 GiB per socket, 128 B lines, 200 ns, remote 350 ns, 20 GB/s per core, " \
                                   "21 GB/s per node"


def test_a_machine_spec_with_settings_is_that_machine_changed():
    base = load_machine("xeon-e7-4860v2")
    variant = load_machine("xeon-e7-4860v2[latency_ns.socket_hop=75.0,coherence.protocol='directory']")
    assert variant.data["latency_ns"]["socket_hop"] == 75.0 and variant.coherence == "directory"
    # Only the cross-socket pairs move, by the 15 ns added to one hop.
    assert variant.latency[0, 1] == base.latency[0, 1]
    assert variant.latency[0, 12] == base.latency[0, 12] + 15
    # Its name is a spec that loads the same variant again, so result tables can be re-run.
    assert variant.name == 'xeon-e7-4860v2[latency_ns.socket_hop=75.0,coherence.protocol="directory"]'
    assert np.array_equal(load_machine(variant.name).latency, variant.latency)
    # An optional key the file leaves out may be set.
    assert load_machine("cell-qs22[coherence.serve_ns=7]").serve_ns == 7


@pytest.mark.parametrize("spec, message", [
    ("xeon-e7-4860v2[latency_ns.sockethop=1]", "machine xeon-e7-4860v2 has no latency_ns.sockethop"),
    ("xeon-e7-4860v2[cache.l9.size_kib=1]", "machine xeon-e7-4860v2 has no cache.l9.size_kib"),
    ("xeon-e7-4860v2[socket_hop=1]", "'socket_hop' names no section"),
    ("xeon-e7-4860v2[latency_ns.socket_hop=fast]", "latency_ns.socket_hop=fast is not a TOML value"),
    ("xeon-e7-4860v2[latency_ns.socket_hop=1,latency_ns.socket_hop=2]", "latency_ns.socket_hop is set twice"),
    ("xeon-e7-4860v2[latency_ns.socket_hop=-1]", "latency_ns.socket_hop must be >= 0, got -1"),
    ("xeon-e7-4860v2[]", "expected section.key=value, got ''"),
    ("no-such-machine[latency_ns.socket_hop=1]", "unknown machine 'no-such-machine'"),
])
def test_a_bad_machine_setting_is_one_line(spec, message, capsys):
    from simsched.cli import main

    assert main(["run", "--machine", spec, "--scheduler", "omp-static", "--workload", "uniform:n=8",
                 "--threads", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err
