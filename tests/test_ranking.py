"""Method rankings (E4 style): best parameter per method against a one-thread baseline."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from simsched import SimschedError
from simsched.analysis.ranking import method_of, rank_methods


def frame(rows):
    return pd.DataFrame(rows, columns=["scheduler", "workload", "threads", "makespan_ns", "error"])


RESULTS = frame([
    ("omp-guided:chunk=1", "w", 1, 1000.0, ""),
    ("omp-guided:chunk=1", "w", 4, 400.0, ""),
    ("omp-guided:chunk=2", "w", 4, 500.0, ""),
    ("omp-dynamic:chunk=1", "w", 4, 250.0, ""),
    ("omp-dynamic:chunk=2", "w", 4, 300.0, ""),
    ("ich:eps=0.25", "w", 4, 320.0, ""),
    ("ich:eps=0.5", "w", 4, 256.0, ""),
    ("stealing:chunk=1", "w", 4, 1.0, "SimschedError: failed point"),  # failed runs do not count
])


def test_each_method_is_ranked_by_its_best_parameter():
    table = rank_methods(RESULTS, "omp-guided:chunk=1", 1, 4).set_index("method")
    assert table.loc["omp-dynamic", "best"] == "omp-dynamic:chunk=1"
    assert table.loc["omp-dynamic", "speedup"] == pytest.approx(4.0)
    assert table.loc["ich", "speedup"] == pytest.approx(1000 / 256)
    assert table.loc["omp-guided", "speedup"] == pytest.approx(2.5)
    assert table["rank"].to_dict() == {"omp-dynamic": 1, "ich": 2, "omp-guided": 3}
    assert table.loc["ich", "sensitivity"] == pytest.approx(320 / 256)
    assert table.loc["ich", "behind_best"] == pytest.approx(1 - (1000 / 256) / 4)
    assert "stealing" not in table.index


def test_method_is_the_scheduler_name():
    assert method_of("binlpt:chunks=128") == "binlpt"
    assert method_of("taskloop") == "taskloop"


def test_missing_baseline_is_a_clear_error():
    with pytest.raises(SimschedError, match="no successful omp-static run on 1 thread"):
        rank_methods(RESULTS, "omp-static", 1)


def test_sweep_prints_and_saves_the_ranking(tmp_path):
    config = tmp_path / "e4-mini.toml"
    config.write_text("""
[experiment]
name = "e4-mini"
[grid]
machine = "haswell-e5-2695v3"
scheduler = ["omp-guided:chunk=1", "omp-dynamic:chunk=1", "omp-dynamic:chunk=4", "ich:eps=0.33", "stealing:chunk=8"]
threads = [1, 8]
workload = ["exp-dec:n=20000", "linear:n=20000,first_ns=0,last_ns=2000"]
[rank]
baseline = "omp-guided:chunk=1"
threads = 8
highlight = "ich"
""")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "simsched.cli", "sweep", str(config), "--out", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "exp-dec:n=20000, 8 threads" in run.stdout and "ich: rank" in run.stdout
    saved = pd.read_csv(out / "ranking.csv")
    assert set(saved["method"]) == {"omp-guided", "omp-dynamic", "ich", "stealing"}
    assert (saved.groupby("workload")["rank"].min() == 1).all()
    again = subprocess.run([sys.executable, "-m", "simsched.cli", "rank", str(out), "--json"],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert len(json.loads(again.stdout)) == len(saved)
    picture = subprocess.run([sys.executable, "-m", "simsched.cli", "plot", str(out)], capture_output=True, text=True)
    assert picture.returncode == 0, picture.stderr
    assert (out / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_matrices_are_pooled_by_the_geometric_mean_of_each_methods_best_speedup():
    from simsched.analysis.ranking import geometric_means

    rows = []
    # a: 4x and 1x (arithmetic mean 2.5, geometric 2); b: 2x and 2.1x (both means about 2.05): pooled by the
    # geometric mean b ranks first, where the arithmetic mean would put a first.
    for workload, a, b in (("spmv:matrix=banded", 250.0, 500.0), ("spmv:matrix=powerlaw", 1000.0, 1000 / 2.1)):
        rows += [("omp-guided:chunk=1", workload, 1, 1000.0, ""), ("omp-guided:chunk=1", workload, 4, 4000.0, ""),
                 ("a:x=1", workload, 4, a, ""), ("a:x=2", workload, 4, 2 * a, ""), ("b", workload, 4, b, "")]
    rows.append(("omp-guided:chunk=1", "bfs:n=10", 1, 1000.0, ""))
    rows.append(("a:x=1", "bfs:n=10", 4, 100.0, ""))  # another kind: never pooled with the matrices
    table = rank_methods(frame(rows), "omp-guided:chunk=1", 1, 4)
    means = geometric_means(table).set_index("method")
    assert set(means["workload"]) == {"spmv (geometric mean over 2 workloads)"}
    assert means.loc["a", "speedup"] == pytest.approx(2.0)
    assert means.loc["b", "speedup"] == pytest.approx(4.2 ** 0.5)
    assert means["rank"].to_dict() == {"b": 1, "a": 2, "omp-guided": 3}
    assert means.loc["a", "sensitivity"] == pytest.approx(2.0)
    assert means.loc["a", "behind_best"] == pytest.approx(1 - 2 / 4.2 ** 0.5)
    # One matrix alone is its own ranking: nothing to pool.
    assert geometric_means(table[table["workload"] != "spmv:matrix=banded"]).empty
