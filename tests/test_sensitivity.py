"""simsched sensitivity: each machine parameter scaled alone, the experiment re-run, each figure's change."""

import json

import pandas as pd
import pytest

from simsched.analysis.sensitivity import Vary, format_sensitivity_markdown, parse_vary, source_kind
from simsched.machine import value_sources
from simsched.cli import main
from simsched.errors import SimschedError

# E1's figures on a small grid: two of its six schedulers at four loop durations.
SMALL_E1 = """
[experiment]
name = "e1-burden-xeon-e7"

[grid]
machine = "xeon-e7-4860v2"
scheduler = ["fg-tree", "omp-static"]
threads = 48
workload = "uforall:n=96"
"workload.total_us" = { logspace = [1, 1000], num = 4 }
seed = 0
"""


@pytest.fixture
def small_e1(tmp_path):
    path = tmp_path / "e1.toml"
    path.write_text(SMALL_E1)
    return path


def test_parse_vary():
    assert parse_vary("latency_ns.socket_hop=0.8,1.25") == Vary("latency_ns.socket_hop", (0.8, 1.25))
    for text, message in [("latency_ns.socket_hop", "expected section.key=FACTOR"),
                          ("socket_hop=2", "names no section"),
                          ("latency_ns.socket_hop=0", "finite and > 0"),
                          ("latency_ns.socket_hop=2,x", "'x' is not a number"),
                          ("latency_ns.socket_hop=2,2", "given twice")]:
        with pytest.raises(SimschedError, match=message):
            parse_vary(text)


def test_sensitivity_runs_each_variant_and_reports_each_figure(small_e1, tmp_path, capsys):
    out = tmp_path / "sens"
    argv = ["sensitivity", str(small_e1), "--vary", "latency_ns.socket_hop=0.5,2", "--out", str(out),
            "--jobs", "1", "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "[1/3] baseline: 8 runs (0 failed)" in printed
    assert "[3/3] latency_ns.socket_hop=2: 8 runs (0 failed)" in printed
    table = pd.read_csv(out / "sensitivity.csv")
    assert sorted(table["run"].unique()) == ["baseline", "latency_ns.socket_hop=0.5", "latency_ns.socket_hop=2"]
    # Each variant's sweep ran on the machine with only that value changed.
    rows = [json.loads(line) for line in (out / "latency_ns.socket_hop=2" / "runs.jsonl").read_text().splitlines()]
    assert {r["machine"] for r in rows} == {"xeon-e7-4860v2[latency_ns.socket_hop=120.0]"}
    d = table[table["figure"] == "burden d of fg-tree (us)"].set_index("run")["value"]
    # Cross-socket latency is in every fg-tree barrier: the burden grows with it.
    assert d["latency_ns.socket_hop=0.5"] < d["baseline"] < d["latency_ns.socket_hop=2"]
    missing = table[table["figure"] == "burden d of cilk (us)"]
    assert set(missing["verdict"]) == {"no results"} and missing["change"].isna().all()
    assert (out / "tornado.png").stat().st_size > 0
    assert "burden d of fg-tree (us): " in printed and "latency_ns.socket_hop" in printed
    # The report's summary says what the machine file says of each varied value.
    markdown = "\n".join(format_sensitivity_markdown(table, "e1-burden-xeon-e7", "sens"))
    assert "| latency_ns.socket_hop | 60 | fitted | " in markdown
    assert "--vary latency_ns.socket_hop=0.5,2 --out sens`" in markdown
    # A second run finds every variant saved and computes nothing again.
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/runs.jsonl")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/runs.jsonl")} == before
    assert pd.read_csv(out / "sensitivity.csv").equals(table)


@pytest.mark.parametrize("vary, message", [
    ("latency_ns.sockethop=0.8", "--vary latency_ns.sockethop: machine xeon-e7-4860v2 has no latency_ns.sockethop"),
    ("latency_ns.socket_hop=-1", "--vary latency_ns.socket_hop: factors must be finite and > 0, got -1"),
    ("latency_ns.transfer_fraction=10",
     "--vary latency_ns.transfer_fraction: factor 10 gives 2, which the machine refuses: xeon-e7-4860v2 "
     "(modified): latency_ns.transfer_fraction must be in (0, 1], got 2.0"),
    ("topology.sockets=0.3", "--vary topology.sockets: topology.sockets is a whole number (4); factor 0.3 makes it "
                             "1.2"),
    ("coherence.protocol=2", "--vary coherence.protocol: coherence.protocol of machine xeon-e7-4860v2 is not a "
                             "number ('snoop')"),
])
def test_bad_vary_is_one_line_and_writes_nothing(small_e1, tmp_path, capsys, vary, message):
    out = tmp_path / "sens"
    assert main(["sensitivity", str(small_e1), "--vary", vary, "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"simsched: error: {message}"
    assert not out.exists()


def test_an_experiment_without_published_figures_is_refused(tmp_path, capsys):
    config = tmp_path / "mine.toml"
    config.write_text(SMALL_E1.replace('name = "e1-burden-xeon-e7"', 'name = "mine"'))
    assert main(["sensitivity", str(config), "--vary", "latency_ns.socket_hop=2", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simsched: error: experiment 'mine' has no published figures to check (those with some: ")
    assert "\n" not in err


def test_value_sources_read_each_values_comment():
    sources = value_sources("xeon-e7-4860v2")
    # A source comment continued on indented lines is joined.
    assert sources["latency_ns.socket_hop"].startswith("added per QPI hop, so cross-socket = 120 ns;")
    assert "fitted to E1 within 100-150 ns" in sources["latency_ns.socket_hop"]
    assert source_kind(sources["latency_ns.socket_hop"]) == "fitted"
    assert source_kind(sources["costs_ns.loop_setup"]) == "fitted"
    assert source_kind(sources["costs_ns.chunk"]) == "assumed"
    assert source_kind(sources["clock.base_ghz"]) == "sourced"
    assert sources["cache.l3.size_kib"].startswith("Intel ARK E7-4860 v2: 30 MB L3")
    assert value_sources("no-such-machine") == {}
