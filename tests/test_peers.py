"""The techniques-side-by-side table ([peers]): makespan over sum/P and chunk counts."""

from pathlib import Path

import pandas as pd
import pytest

from simsched.analysis.peers import format_peers, peers_table, workload_labels
from simsched.engine import simulate

from test_cli import simsched_cli

PEERS_EXPERIMENT = """
[experiment]
name = "peers-small"

[grid]
machine = "uniform:cores=4,latency_ns=50"
scheduler = ["omp-static", "omp-dynamic:chunk=10"]
threads = [2, 4]
workload = ["linear:n=400,first_ns=0,last_ns=2000", "uforall:n=400"]
seed = 0

[peers]
"""


def test_ratio_is_makespan_over_an_even_split_of_the_sequential_time():
    results = pd.DataFrame({
        "scheduler": ["a", "a"], "workload": ["uforall:n=8", "uforall:n=8"], "threads": [4, 4],
        "seed": [0, 1], "makespan_ns": [300.0, 500.0], "sequential_ns": [1000.0, 1000.0], "chunks": [8, 10],
        "error": ["", ""],
    })
    table = peers_table(results)
    # Two seeds of one point: ratios 300/(1000/4) = 1.2 and 500/250 = 2.0, averaged; chunks' median 9.
    assert table.to_dict(orient="records") == [
        {"scheduler": "a", "workload": "uforall:n=8", "threads": 4, "ratio": pytest.approx(1.6), "chunks": 9}]


def test_a_balanced_static_loop_on_the_uniform_machine_is_near_ideal():
    result = simulate("uniform:cores=4", "omp-static", "uforall:n=400,total_us=1000", 4)
    row = pd.DataFrame([{"scheduler": "omp-static", "workload": "uforall", "threads": 4, "seed": 0,
                         "makespan_ns": result.makespan_ns, "sequential_ns": result.sequential_ns,
                         "chunks": len(result.chunks), "error": ""}])
    ratio = peers_table(row)["ratio"].item()
    # 1 ms of equal iterations in four blocks of 250 us: only the fork and join barriers (a few 100 ns line
    # transfers each) above ideal, well under 1%.
    assert 1.0 < ratio < 1.005


def test_workload_labels_shorten_unless_two_share_a_name():
    assert workload_labels(["linear:n=4", "uforall:n=4"]) == {"linear:n=4": "linear", "uforall:n=4": "uforall"}
    assert workload_labels(["uforall:n=4", "uforall:n=8"]) == {"uforall:n=4": "uforall:n=4",
                                                              "uforall:n=8": "uforall:n=8"}


def test_a_peers_sweep_prints_the_table_saves_it_and_plots_a_heat_map(tmp_path: Path):
    config = tmp_path / "peers.toml"
    config.write_text(PEERS_EXPERIMENT)
    out = tmp_path / "out"
    proc = simsched_cli("sweep", config, "--out", out, "--jobs", "1", "--quiet")
    assert "makespan / (sum/P), 1 is ideal" in proc.stdout
    header = next(line for line in proc.stdout.splitlines() if line.startswith("scheduler"))
    assert header.split()[1:] == ["linear", "P=2", "uforall", "P=2", "linear", "P=4", "uforall", "P=4"]
    table = pd.read_csv(out / "peers.csv")
    assert len(table) == 8 and (table["ratio"] >= 1).all()
    dynamic = table[table["scheduler"] == "omp-dynamic:chunk=10"]
    assert (dynamic["chunks"] == 40).all()  # 400 iterations in chunks of 10
    static = table[(table["scheduler"] == "omp-static")]
    assert (static["chunks"] == static["threads"]).all()
    # The ramp's last block carries most of the work: static is far from ideal there, dynamic is not.
    ramp = table[table["workload"].str.startswith("linear") & (table["threads"] == 4)].set_index("scheduler")
    assert ramp.loc["omp-static", "ratio"] > 1.5 > 1.1 > ramp.loc["omp-dynamic:chunk=10", "ratio"]
    plot = simsched_cli("plot", out)
    assert Path(plot.stdout.strip()) == out / "peers.png"
    assert (out / "peers.png").stat().st_size > 10_000
    text = format_peers(table)
    assert text.splitlines()[-1].split()[0] == "omp-dynamic:chunk=10"
