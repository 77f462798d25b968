"""Plugins through the real command line: the modules of docs/extending.md run, sweep, list and refuse.

The tutorial's modules (docs/examples/) are the files these tests load, so the tutorial cannot
drift from what works. Every plugin loads in a process of its own: the registries of this process
hold the built-ins alone, as the other tests expect.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from cli_runs import refused

from simsched import native
from simsched.plugins import ENTRY_POINT_GROUPS
from simsched.schedulers import REGISTRY as SCHEDULERS
from simsched.workloads import REGISTRY as WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
GUIDED_CAPPED = EXAMPLES / "guided_capped.py"
STEALING_RING = EXAMPLES / "stealing_ring.py"
RING_LAB = EXAMPLES / "ring_lab.py"
EXPERIMENT = EXAMPLES / "guided_capped.toml"
TUTORIAL = ROOT / "docs" / "extending.md"


def cli(*args, cwd=None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The command line in a process of its own, with no plugin or start method from this process's
    environment unless ``env`` names them."""
    base = {k: v for k, v in os.environ.items() if k not in ("SIMSCHED_PLUGINS", "SIMSCHED_START_METHOD")}
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**base, **(env or {})}, timeout=300, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr
    return proc


def chunk_sizes(path: Path) -> list[int]:
    """The sizes of a chunk table's chunks in iteration order."""
    table = pd.read_csv(path, comment="#").sort_values("lo")
    return (table["hi"] - table["lo"]).tolist()


# guided-capped, n = 100 on P = 4, min = 4, cap = 16: ceil(R/4) for R = 100, 84, 68 is 25, 21, 17, capped at
# 16; then 13 (R = 52), 10 (39), 8 (29), 6 (21), 4 (15); ceil(11/4) = 3, ceil(7/4) = 2 are raised to 4; the
# last chunk is what is left, 3.
GUIDED_CAPPED_P4 = [16, 16, 16, 13, 10, 8, 6, 4, 4, 4, 3]
# The same on P = 2: ceil(R/2) is capped at 16 down to R = 36; then 10 (R = 20), 5 (10), ceil(5/2) = 3 raised
# to 4, and the 1 left.
GUIDED_CAPPED_P2 = [16, 16, 16, 16, 16, 10, 5, 4, 1]


# -- a chunk rule --------------------------------------------------------------------------------------------

def test_the_guided_capped_plugin_takes_the_chunks_worked_out_by_hand(tmp_path):
    chunks = tmp_path / "chunks.csv"
    proc = ok(cli("run", "--plugin", GUIDED_CAPPED, "--machine", "haswell-e5-2695v3", "--threads", 4,
                  "--scheduler", "guided-capped:min=4,cap=16", "--workload", "uforall:n=100", "--json",
                  "--chunks", chunks))
    result = json.loads(proc.stdout)
    assert result["scheduler"] == "guided-capped:cap=16"  # min=4 is the default
    assert result["chunks"] == len(GUIDED_CAPPED_P4) == result["counters"]["chunks"]
    assert chunk_sizes(chunks) == GUIDED_CAPPED_P4
    # One claim per chunk, and each worker's last claim finds the table empty.
    assert result["counters"]["claims"] == len(GUIDED_CAPPED_P4) + 4


def test_the_tutorials_worked_example_is_what_the_plugin_does():
    text = TUTORIAL.read_text(encoding="utf-8")
    found = re.search(r"n = 100 iterations on P = 4 workers with min = 4 and cap = 16 the chunks are"
                      r"\s+([\d,\s]+)\.", text)
    assert found, "docs/extending.md lost its worked example"
    assert [int(x) for x in found.group(1).replace("\n", " ").split(",")] == GUIDED_CAPPED_P4


def in_order(lines: list[str], within: list[str]) -> bool:
    """Whether ``lines`` occur in ``within`` in the same order (others may come between)."""
    rest = iter(within)
    return all(any(line == other for other in rest) for line in lines)


def test_the_code_the_tutorial_shows_is_the_code_of_its_modules():
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), re.DOTALL)
    modules = [[line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
               for path in (GUIDED_CAPPED, STEALING_RING, RING_LAB)]
    assert len(blocks) == 3
    for block in blocks:
        lines = [line for line in block.splitlines() if line.strip()]
        assert any(in_order(lines, module) for module in modules), block.splitlines()[0]


@pytest.mark.parametrize("spec, message", [
    ("guided-capped:min=8,cap=4", "scheduler guided-capped: min (8) must not exceed cap (4)"),
    ("guided-capped:cap=0", "scheduler guided-capped: parameter cap=0 must be >= 1"),
    ("guided-capped:chunk=4",
     "scheduler guided-capped: unknown parameter 'chunk' (known: min, cap, barrier)"),
])
def test_the_guided_capped_plugin_refuses_bad_parameters_in_one_line(spec, message):
    refused(cli("run", "--plugin", GUIDED_CAPPED, "--machine", "haswell-e5-2695v3", "--threads", 4,
                "--scheduler", spec, "--workload", "uforall:n=100"), message)


def test_a_plugin_chunk_table_that_is_not_one_is_refused_in_one_line(tmp_path):
    (tmp_path / "short.py").write_text(
        "from simsched.schedulers.dls import ChunkRule\n\n\n"
        "class Short(ChunkRule):\n"
        "    name = 'short'\n\n"
        "    def bounds(self, n, threads, loop, rng):\n"
        "        return [0, n // 2, n // 4, n]\n")
    refused(cli("run", "--plugin", tmp_path / "short.py", "--machine", "haswell-e5-2695v3", "--threads", 2,
                "--scheduler", "short", "--workload", "uforall:n=100"),
            "scheduler short: bounds() must return integers 0 = b0 < b1 < ... = n (100 here); "
            "b1 = 50 is followed by b2 = 25")


# -- a stealing variant, a workload and a machine ------------------------------------------------------------

def test_the_ring_stealing_plugin_steals_from_the_next_worker_first(tmp_path):
    # A linear loop, costs falling from 4 us to 0: worker 3's block is the cheapest, so it runs out first and
    # steals; its first victim is the next worker round the ring, worker 0.
    makespans = []
    for seed in (0, 1):
        chunks = tmp_path / f"chunks{seed}.csv"
        proc = ok(cli("run", "--plugin", STEALING_RING, "--machine", "haswell-e5-2695v3", "--threads", 4,
                      "--scheduler", "stealing-ring", "--workload", "linear:n=400,first_ns=4000,last_ns=0",
                      "--seed", seed, "--json", "--chunks", chunks))
        result = json.loads(proc.stdout)
        assert result["scheduler"] == "stealing-ring" and result["counters"]["steals"] > 0
        makespans.append(result["makespan_ns"])
        table = pd.read_csv(chunks, comment="#").sort_values("start_ns")
        mine = table[table["worker"] == 3]
        stolen = mine[mine["lo"] < 300]
        assert len(stolen) and 0 <= stolen["lo"].iloc[0] < 100
    # Nothing of the run is drawn from its generator (the loop is a ramp, the victims go in order): every seed
    # gives the same run.
    assert makespans[0] == makespans[1]


def test_the_lab_plugin_registers_its_machine_and_its_workload(tmp_path):
    # p = 0: every iteration is a light one, so the sequential time is known exactly.
    proc = ok(cli("run", "--plugin", RING_LAB, "--machine", "ring-16", "--threads", 16, "--scheduler",
                  "omp-dynamic:chunk=8", "--workload", "spikes:n=1000,p=0,light_ns=300", "--json"))
    result = json.loads(proc.stdout)
    assert result["machine"] == "ring-16" and result["workload"] == "spikes:n=1000,p=0,light_ns=300"
    assert result["sequential_ns"] == pytest.approx(1000 * 300)
    heavy = json.loads(ok(cli("run", "--plugin", RING_LAB, "--machine", "ring-16", "--threads", 16,
                              "--scheduler", "omp-static", "--workload", "spikes:n=1000,p=1",
                              "--json")).stdout)
    assert heavy["sequential_ns"] == pytest.approx(1000 * 50_000)  # heavy_ns's default
    described = json.loads(ok(cli("machines", "ring-16", "--json", "--plugin", RING_LAB)).stdout)
    assert described["cores"] == 16
    latency = described["latency_matrix_ns"]
    assert latency[0][1] == 40 and latency[0][4] == 240 and latency[0][8] == 440  # a ring of four sockets
    assert "ring-16" in ok(cli("machines", "--plugin", RING_LAB)).stdout
    listed = json.loads(ok(cli("workloads", "spikes", "--json", "--plugin", RING_LAB)).stdout)
    assert [row["name"] for row in listed] == ["spikes"]
    refused(cli("run", "--plugin", RING_LAB, "--machine", "ring-16", "--threads", 4, "--scheduler",
                "omp-static", "--workload", "spikes:light_ns=10,heavy_ns=5"),
            "workload spikes: heavy_ns (5.0) must be >= light_ns (10.0)")


# -- sweeps: workers of every start method, a Dask cluster, $SIMSCHED_PLUGINS ------------------------------

def check_tutorial_sweep(folder: Path) -> None:
    """The tutorial's sweep ran every point, the plugin's among them, and compared them in its [peers]."""
    table = pd.read_csv(folder / "results.csv", keep_default_na=False)
    assert len(table) == 12 and (table["error"] == "").all(), table["error"].tolist()
    capped = table[table["scheduler"].str.startswith("guided-capped")]
    assert sorted(set(capped["scheduler"])) == ["guided-capped:min=4,cap=1024", "guided-capped:min=4,cap=256",
                                                "guided-capped:min=4,cap=64"]
    assert len(capped) == 6 and (capped["chunks"] > 0).all()
    peers = pd.read_csv(folder / "peers.csv")
    assert set(capped["scheduler"]) <= set(peers["scheduler"])


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_tutorials_sweep_runs_on_workers_started_afresh(tmp_path, method):
    # Run from elsewhere: the experiment file names its plugin relative to itself.
    proc = ok(cli("sweep", EXPERIMENT, "--jobs", 2, "--out", tmp_path / "out", "--quiet", cwd=tmp_path,
                  env={"SIMSCHED_START_METHOD": method}))
    assert "12 runs (0 failed)" in proc.stdout
    check_tutorial_sweep(tmp_path / "out")


def test_the_tutorials_sweep_runs_on_a_local_dask_cluster(tmp_path):
    pytest.importorskip("dask.distributed")
    ok(cli("sweep", EXPERIMENT, "--dask", "local:2", "--out", tmp_path / "out", "--quiet", cwd=tmp_path))
    check_tutorial_sweep(tmp_path / "out")


def test_plugins_named_in_the_environment_reach_spawned_workers(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text('[experiment]\nname = "env"\n\n[grid]\nmachine = "ring-16"\n'
                      'scheduler = ["guided-capped:min=2,cap=32", "stealing-ring"]\nthreads = 4\n'
                      'workload = "spikes:n=2000"\nseed = [0, 1]\n')
    plugins = os.pathsep.join(map(str, (GUIDED_CAPPED, STEALING_RING, RING_LAB)))
    ok(cli("sweep", config, "--jobs", 2, "--quiet", cwd=tmp_path,
           env={"SIMSCHED_PLUGINS": plugins, "SIMSCHED_START_METHOD": "spawn"}))
    table = pd.read_csv(tmp_path / "results" / "env" / "results.csv", keep_default_na=False)
    assert len(table) == 4 and (table["error"] == "").all()
    assert set(table["scheduler"]) == {"guided-capped:min=2,cap=32", "stealing-ring"}
    assert set(table["machine"]) == {"ring-16"}


# -- an installed package's entry points ---------------------------------------------------------------------

def test_an_installed_packages_entry_point_is_found(tmp_path):
    dist = tmp_path / "fakeplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[simsched.schedulers]\nmine = fakeplug_mod\n")
    (tmp_path / "fakeplug_mod.py").write_text(
        '"""Fixed chunks of ten iterations."""\n\n'
        "from simsched.schedulers.dls import ChunkRule\n\n\n"
        "class Tens(ChunkRule):\n"
        "    name = 'mine'\n"
        "    summary = 'chunks of ten iterations'\n\n"
        "    def bounds(self, n, threads, loop, rng):\n"
        "        return list(range(0, n, 10)) + [n]\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    result = json.loads(ok(cli("run", "--machine", "haswell-e5-2695v3", "--threads", 4, "--scheduler", "mine",
                               "--workload", "uforall:n=95", "--json", cwd=tmp_path, env=env)).stdout)
    assert result["scheduler"] == "mine" and result["chunks"] == 10
    listed = json.loads(ok(cli("schedulers", "mine", "--json", cwd=tmp_path, env=env)).stdout)
    assert listed[0]["defined_in"] == "fakeplug_mod" and listed[0]["summary"] == "chunks of ten iterations"


def test_an_entry_point_that_fails_to_load_is_refused_in_one_line(tmp_path):
    dist = tmp_path / "fakeplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[simsched.workloads]\nbroken = fakeplug_broken\n")
    (tmp_path / "fakeplug_broken.py").write_text("import no_such_dependency_of_fakeplug\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    refused(cli("run", "--machine", "haswell-e5-2695v3", "--threads", 2, "--scheduler", "omp-static",
                "--workload", "not-a-workload", cwd=tmp_path, env=env),
            "plugin broken (fakeplug_broken, entry point of simsched.workloads) failed to load: "
            "ModuleNotFoundError")


def test_the_tutorials_package_snippet_names_the_entry_point_groups():
    snippet = re.search(r"```toml\n(\[project\].*?)```", TUTORIAL.read_text(encoding="utf-8"), re.DOTALL)
    assert snippet, "docs/extending.md lost its pyproject.toml snippet"
    points = tomllib.loads(snippet.group(1))["project"]["entry-points"]
    assert set(points) == set(ENTRY_POINT_GROUPS)


# -- refusals ----------------------------------------------------------------------------------------------

def test_a_missing_plugin_file_is_refused(tmp_path):
    missing = tmp_path / "nowhere.py"
    refused(cli("schedulers", "--plugin", missing), f"plugin {missing}: no such file")


def test_a_plugin_module_that_does_not_exist_is_refused():
    refused(cli("schedulers", "--plugin", "no_such_simsched_plugin"),
            "plugin no_such_simsched_plugin: no such module")


def test_a_plugin_that_raises_on_import_is_refused_in_one_line(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('the lab server is down\\nsecond line')\n")
    refused(cli("run", "--plugin", tmp_path / "broken.py", "--machine", "haswell-e5-2695v3", "--threads", 2,
                "--scheduler", "omp-static", "--workload", "uforall:n=10"),
            "broken.py failed to load: RuntimeError: the lab server is down")


def test_a_plugin_scheduler_with_a_built_in_name_is_refused(tmp_path):
    (tmp_path / "again.py").write_text(
        "from simsched.schedulers.dls import ChunkRule\n\n\n"
        "class MyTss(ChunkRule):\n"
        "    name = 'tss'\n\n"
        "    def bounds(self, n, threads, loop, rng):\n"
        "        return [0, n]\n")
    refused(cli("schedulers", "--plugin", tmp_path / "again.py"),
            "scheduler 'tss' is defined twice: by simsched.schedulers.selfsched.Trapezoid and by")


def test_plugins_in_an_experiment_file_must_be_a_list(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text(EXPERIMENT.read_text(encoding="utf-8").replace('plugins = ["guided_capped.py"]',
                                                                     'plugins = "guided_capped.py"'))
    refused(cli("sweep", config, "--out", tmp_path / "out", cwd=tmp_path),
            "experiment.plugins must be a list of Python files or module names")
    assert not (tmp_path / "out").exists()


def test_an_unknown_start_method_is_refused_before_anything_runs(tmp_path):
    refused(cli("sweep", EXPERIMENT, "--jobs", 2, "--out", tmp_path / "out", cwd=tmp_path,
                env={"SIMSCHED_START_METHOD": "bogus"}), "SIMSCHED_START_METHOD='bogus'")
    assert not (tmp_path / "out").exists()


# -- listings ------------------------------------------------------------------------------------------------

def test_the_listings_name_every_registered_component_and_the_plugins():
    rows = json.loads(ok(cli("schedulers", "--json", "--plugin", GUIDED_CAPPED, "--plugin",
                             STEALING_RING)).stdout)
    assert [row["name"] for row in rows] == [*SCHEDULERS, "guided-capped", "stealing-ring"]
    for row in rows:
        assert set(row) >= {"name", "summary", "params"} and row["summary"], row["name"]
        for param in row["params"]:
            assert set(param) >= {"name", "type", "default", "help"}
    capped = rows[-2]
    assert [p["name"] for p in capped["params"]] == ["min", "cap", "barrier"]
    assert capped["params"][1] == {"name": "cap", "type": "int", "default": 64, "rule": ">= 1",
                                   "choices": None, "help": "the largest chunk"}
    text = ok(cli("schedulers", "--plugin", GUIDED_CAPPED)).stdout
    assert text.rstrip().endswith(f"{len(SCHEDULERS) + 1} schedulers")
    assert "guided-capped: guided self-scheduling, ceil(R/P), with a smallest and a largest chunk" in text
    workloads = json.loads(ok(cli("workloads", "--json", "--plugin", RING_LAB)).stdout)
    assert [row["name"] for row in workloads] == [*WORKLOADS, "spikes"]


def test_an_unknown_name_in_a_listing_is_refused():
    refused(cli("schedulers", "guided-capped"), "unknown scheduler 'guided-capped'")


# -- native mode ---------------------------------------------------------------------------------------------

needs_native = pytest.mark.skipif(not native.available(), reason="native mode is not built")


@needs_native
def test_a_chunk_rule_plugin_runs_natively_on_its_own_table(tmp_path):
    threads = min(2, len(os.sched_getaffinity(0)))
    expected = GUIDED_CAPPED_P2 if threads == 2 else [16] * 6 + [4]  # one worker: 16s, then the 4 left
    chunks = tmp_path / "chunks.csv"
    proc = ok(cli("native", "run", "--plugin", GUIDED_CAPPED, "--scheduler", "guided-capped:min=4,cap=16",
                  "--threads", threads, "--workload", "uforall:n=100,cost_ns=200", "--json",
                  "--chunks", chunks))
    result = json.loads(proc.stdout)
    assert result["scheduler"] == "guided-capped:cap=16" and result["chunks"] == len(expected)
    assert chunk_sizes(chunks) == expected


@needs_native
def test_a_plugin_that_is_no_chunk_rule_is_refused_natively():
    refused(cli("native", "run", "--plugin", STEALING_RING, "--scheduler", "stealing-ring", "--threads", 1,
                "--workload", "uforall:n=100"),
            "native mode runs only chunk-rule schedulers (IndexedChunks/ChunkRule subclasses)",
            "stealing-ring")


@needs_native
def test_a_chunk_rule_plugin_that_claims_its_own_way_is_refused_natively(tmp_path):
    (tmp_path / "own.py").write_text(
        "from simsched.schedulers.dls import ChunkRule\n\n\n"
        "class Own(ChunkRule):\n"
        "    name = 'own-claims'\n\n"
        "    def bounds(self, n, threads, loop, rng):\n"
        "        return [0, n]\n\n"
        "    def share(self, sim, w, index):\n"
        "        yield from self.claim(sim, w, index)\n")
    refused(cli("native", "run", "--plugin", tmp_path / "own.py", "--scheduler", "own-claims", "--threads", 1,
                "--workload", "uforall:n=100"), "scheduler own-claims overrides share of ChunkRule")
