"""The calibration's ``random_read_ns``: independent loads at random lines of each cache level and of DRAM.

The measurements are built by hand (no probe runs), as ``measure_hierarchy`` returns them for a
host with three cache levels, so that every written figure and comment can be checked exactly.
"""

from __future__ import annotations

import re

import pytest

from simsched import load_machine, native
from simsched.cli import main
from simsched.native import calibrate, hostload, memprobe
from simsched.native.hostinfo import Cache
from tests.test_loaded_latency import HEADER as LOADED_TOY_HEADER

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")

# The loaded-latency tests' toy machine (one socket of two cores, round numbers) without its caches and DRAM.
HEADER = LOADED_TOY_HEADER.format(sockets=1, cores=2)

KIB, MIB = 1 << 10, 1 << 20
CACHES = [Cache(1, 32 * KIB, 64, "core", "0"), Cache(2, 1 * MIB, 64, "core", "0"),
          Cache(3, 8 * MIB, 64, "socket", "0-1")]


def measured(random_read: list[float], dram_independent: float = 35.8) -> dict:
    """What ``measure_hierarchy`` returns for ``CACHES``, its levels' independent loads taking ``random_read`` ns."""
    latencies, bandwidths = [1.5, 5.0, 20.0], [60.0, 40.0, 25.0]
    levels = [{"cache": cache, "probe_bytes": cache.size_bytes // 2, "latency_ns": latency,
               "bandwidth_gbs": gbs, "random_read_ns": ns}
              for cache, latency, gbs, ns in zip(CACHES, latencies, bandwidths, random_read)]
    stride = [{"array_bytes": kib * KIB, "cold_ns": 9.0, "hot_ns": 3.0, "miss_ns": 8.6, "misses": 23}
              for kib in memprobe.STRIDE_ARRAYS_KIB]
    return {"line_bytes": 64, "levels": levels, "knee": [], "listed_bytes": 8 * MIB, "dram_bytes": 32 * MIB,
            "dram_latency_ns": 194.8, "independent_ns": dram_independent, "stride": stride,
            "hot_bytes": 512 * KIB, "hot_line_ns": 2.6, "dram_bandwidth_gbs": 12.0,
            "shared_gbs": [12.0, 16.0], "jitter_cv": 0.01, "memory_bytes": 4 << 30, "cpu": 0, "loaded": [],
            "loaded_stream_bytes": 0}


def sections(text: str) -> dict[str, str]:
    """Each ``[section]`` of a machine file's text, by name, with its lines."""
    parts = re.split(r"^\[([^\]]+)\]$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def random_read_line(section: str) -> str:
    (line,) = [line for line in section.splitlines() if line.startswith("random_read_ns")]
    return line


def written(line: str) -> float:
    return float(re.match(r"random_read_ns = ([0-9.]+) ", line).group(1))


def test_every_level_and_dram_get_the_measured_independent_loads():
    text = memprobe.hierarchy_text(measured([0.83, 2.47, 3.5]))
    parts = sections(text)
    lines = {name: random_read_line(parts[name]) for name in ("cache.l1", "cache.l2", "cache.l3", "dram")}
    assert {name: written(line) for name, line in lines.items()} == \
        {"cache.l1": 0.83, "cache.l2": 2.47, "cache.l3": 3.5, "dram": 35.8}
    for name, size, which in [("cache.l1", "16 KiB", "(half the level)"), ("cache.l2", "512 KiB", "(half the level)"),
                              ("cache.l3", "4 MiB", "(half the level)"),
                              ("dram", "32 MiB", "(4 x the last level's size in sysfs)")]:
        assert f"independent loads: ns per load at random lines of {size} {which}, addresses not depending on " \
               f"each other, one thread; the best of {memprobe.TRIES} tries" in lines[name]
        assert "raised" not in lines[name]
    # In each level after its bandwidth; in [dram] beside its latency.
    for name in ("cache.l1", "cache.l2", "cache.l3"):
        keys = [line.split(" ")[0] for line in parts[name].splitlines() if line]
        assert keys[keys.index("bandwidth_gbs") + 1] == "random_read_ns"
    keys = [line.split(" ")[0] for line in parts["dram"].splitlines() if line]
    assert keys[keys.index("latency_ns") + 1] == "random_read_ns"
    # The misses in flight keep their own note of the DRAM probe.
    assert "Independent random loads, which no prefetcher follows: 35.80 ns, 5 in flight" in text


def test_an_outer_level_measured_faster_than_an_inner_one_is_raised_and_says_so():
    text = memprobe.hierarchy_text(measured([0.83, 0.61, 3.5], dram_independent=2.9))
    parts = sections(text)
    l1, l2, l3, dram = (random_read_line(parts[name]) for name in ("cache.l1", "cache.l2", "cache.l3", "dram"))
    assert [written(line) for line in (l1, l2, l3, dram)] == [0.83, 0.83, 3.5, 3.5]
    assert "raised" not in l1 and "raised" not in l3
    assert l2.endswith("; measured 0.61, raised to the level inside's")
    assert dram.endswith("; measured 2.90, raised to the last level's")
    # Compared as written: a figure that rounds to the inner one's is not called raised.
    text = memprobe.hierarchy_text(measured([0.834, 0.831, 3.5]))
    assert "raised" not in random_read_line(sections(text)["cache.l2"])


def test_the_written_figures_load_as_the_machines(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text(HEADER + memprobe.hierarchy_text(measured([0.83, 0.61, 3.5], dram_independent=35.8)),
                    encoding="utf-8")
    hierarchy = load_machine(str(path)).hierarchy
    assert [level.random_read_ns for level in hierarchy.levels] == [0.83, 0.83, 3.5]
    assert hierarchy.dram.random_read_ns == 35.8


def test_the_run_command_takes_a_file_with_the_written_figures(tmp_path, capsys):
    path = tmp_path / "host.toml"
    path.write_text(HEADER + memprobe.hierarchy_text(measured([0.83, 2.47, 3.5])), encoding="utf-8")
    assert main(["run", "--machine", str(path), "--threads", "2", "--scheduler", "omp-static",
                 "--workload", "uforall:n=64,cost_ns=100"]) == 0
    assert capsys.readouterr().err == ""


@needs_native
def test_calibrate_writes_the_random_reads_of_its_measurements(tmp_path, capsys, monkeypatch):
    profile = calibrate.noise_profile
    monkeypatch.setattr(memprobe, "measure_hierarchy", lambda cpus, progress: measured([0.83, 2.47, 3.5]))
    monkeypatch.setattr(calibrate, "noise_profile", lambda cpus: profile(cpus, samples=2000))
    monkeypatch.setattr(hostload, "look", lambda cpus: None)
    monkeypatch.setattr(hostload.Meter, "read", lambda self: None)
    out = tmp_path / "host.toml"
    # --force: on a busy host the real probes beside the stand-in may come out doubtful, which is not this
    # test's business; the file is written either way.
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1", "--rounds", "100", "--force"]) == 0
    capsys.readouterr()
    hierarchy = load_machine(str(out)).hierarchy
    assert [level.random_read_ns for level in hierarchy.levels] == [0.83, 2.47, 3.5]
    assert hierarchy.dram.random_read_ns == 35.8
    assert out.read_text(encoding="utf-8").count("independent loads: ns per load at random lines of") == 4
