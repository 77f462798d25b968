"""The fidelity report: verdict rules, each experiment's checks on known tables, and the generated report."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simsched.analysis import fidelity, publications, verdicts
from simsched.analysis.publications import e1_checks, e2_checks, e4_checks
from simsched.analysis.verdicts import AGREES, DISAGREES, NO_RESULTS, bounded, claim, close_to, within_factor
from simsched.cli import main

DATA = Path(__file__).parent / "data" / "fidelity"


def by_figure(checks):
    return {c.figure: c for c in checks}


def test_value_rule_is_relative_error_within_a_quarter():
    assert close_to("E", "f", 10.0, 12.5).verdict == AGREES
    check = close_to("E", "f", 10.0, 12.6)
    assert (check.verdict, round(check.error, 6), check.ours) == (DISAGREES, 0.26, "12.6")
    assert close_to("E", "f", 10.0, 7.5).verdict == AGREES
    assert close_to("E", "f", 10.0, None).verdict == NO_RESULTS
    assert close_to("E", "f", 10.0, float("nan")).verdict == NO_RESULTS


def test_factor_bound_and_claim_rules():
    assert within_factor("E", "f", 16, 8, 2).verdict == AGREES
    assert within_factor("E", "f", 16, 7.9, 2).verdict == DISAGREES
    assert within_factor("E", "f", 16, 32, 2).verdict == AGREES
    assert within_factor("E", "f", 16, 33, 2).verdict == DISAGREES
    assert bounded("E", "f", "over 200", 200, low=200).verdict == AGREES
    assert bounded("E", "f", "over 200", 199, low=200).verdict == DISAGREES
    assert bounded("E", "f", "at most 3%", 0.031, high=0.03).verdict == DISAGREES
    assert bounded("E", "f", "x", None, high=1).verdict == NO_RESULTS
    assert claim("E", "f", "a < b", "a < b", True).verdict == AGREES
    assert claim("E", "f", "a < b", "b < a", False).verdict == DISAGREES
    assert claim("E", "f", "a < b", None, None).verdict == NO_RESULTS


def amdahl_results(burdens_us: dict[str, float], threads: int = 48) -> pd.DataFrame:
    """Speedup curves that are exactly Amdahl's with the given burdens, on a fine log grid of loop durations."""
    t_us = np.logspace(-1, 5, 400)
    rows = [{"machine": "m", "scheduler": s, "threads": threads, "workload": f"uforall:n=480,total_us={t}",
             "seed": 0, "repeat": 1, "sequential_ns": t * 1e3, "speedup": t / (d + t / threads), "error": ""}
            for s, d in burdens_us.items() for t in t_us]
    return pd.DataFrame(rows)


def test_e1_checks_on_pure_amdahl_curves_with_the_published_burdens():
    checks = by_figure(e1_checks(amdahl_results(publications.E1_PUBLISHED_D_US)))
    for scheduler, d in publications.E1_PUBLISHED_D_US.items():
        check = checks[f"burden d of {scheduler} (us)"]
        assert check.verdict == AGREES and abs(check.error) < 1e-6
    assert checks["order of the six burdens"].verdict == AGREES
    assert checks["cilk's d over fg-tree's"].value == pytest.approx(68.80 / 5.67)
    # A constant burden of 5.67 us reaches S = 24 (half of 48) only at T = 48 d = 272 us, not at 22 us:
    # the published curve's shape is not a pure Amdahl curve, and the check says so.
    s24 = checks["fg-tree: loop with S = 24"]
    assert s24.value == pytest.approx(48 * 5.67, rel=0.01) and s24.verdict == DISAGREES
    # S = 1 needs T = d / (1 - 1/48): 5.79 us for fg-tree, more than twice the published 1.5 us.
    first = checks["fg-tree: shortest loop with a speedup (S >= 1)"]
    assert first.value == pytest.approx(5.67 / (1 - 1 / 48), rel=0.01) and first.verdict == DISAGREES
    assert checks["highest speedup of any scheduler"].verdict == AGREES


def test_e1_checks_name_the_schedulers_without_results():
    checks = by_figure(e1_checks(amdahl_results({"fg-tree": 5.0, "cilk": 70.0})))
    assert checks["burden d of fg-tree (us)"].verdict == AGREES
    assert checks["burden d of omp-static (us)"].verdict == NO_RESULTS
    assert checks["order of the six burdens"].verdict == NO_RESULTS
    assert checks["cilk's d over fg-tree's"].value == pytest.approx(14.0)
    assert checks["fg-tree's d below omp-static's"].verdict == NO_RESULTS


def test_every_check_says_no_results_without_results():
    for pub in publications.PUBLICATIONS:
        checks = pub.checks(None)
        assert checks and {c.verdict for c in checks} == {NO_RESULTS}, pub.key


def test_e2_checks_read_the_breakdown(monkeypatch):
    from simsched.analysis import breakdown

    normalized = {
        "fine": {"lbs": 1.0013, "lbs:split=guided": 1.0017, "adapt-g": 1.0019, "adapt-l": 1.0016,
                 "distrib": 1.0002, "offload": 2.30, "cellss": 5.33},
        "coarse": {"lbs": 1.325, "lbs:split=guided": 1.0005, "adapt-g": 1.0007, "adapt-l": 1.0006,
                   "distrib": 1.0001, "offload": 2.0, "cellss": 1.0002},
        "nested": {"lbs": 1.0218, "lbs:split=guided": 1.0014, "adapt-g": 1.0004, "adapt-l": 1.0011,
                   "distrib": 1.0008, "offload": 2.03, "cellss": 1.012},
    }
    table = pd.DataFrame([{"workload": publications.E2_LOOPS[loop], "scheduler": s, "normalized": v}
                          for loop, times in normalized.items() for s, v in times.items()])
    monkeypatch.setattr(breakdown, "breakdown_table", lambda results, baseline: table)
    checks = by_figure(e2_checks(pd.DataFrame()))
    spread = checks["fine loop: slowest over fastest work-splitting strategy"]
    assert spread.value == pytest.approx(1.0019 / 1.0002 - 1) and spread.verdict == AGREES
    assert checks["fine loop: offload over the fastest work-splitting strategy"].value == pytest.approx(2.30 / 1.0002)
    assert checks["coarse loop: every other work-splitting strategy beats plain lbs"].verdict == AGREES
    gain = checks["coarse loop: plain lbs over the best strategy, minus 1"]
    assert gain.value == pytest.approx(1.325 / 1.0001 - 1) and gain.verdict == AGREES  # 32.5% against 39%
    assert checks["fine loop: the best strategy"].verdict == AGREES
    nested = checks["nested loop: the best strategy"]
    assert (nested.ours, nested.verdict) == ("adapt-g", DISAGREES)


def test_e4_checks_read_the_ranking(monkeypatch):
    from simsched.analysis import ranking

    loops = publications.E4_LOOPS
    ranks = {"ich": [4, 2, 3], "stealing": [1, 1, 1], "binlpt": [2, 5, 2], "omp-dynamic": [3, 3, 4]}
    rows = [{"workload": w, "threads": 28, "method": m, "rank": r[i], "behind_best": 0.02 * (r[i] - 1),
             "sensitivity": 1.1 if m == "ich" else 1.5} for m, r in ranks.items() for i, w in enumerate(loops)]
    monkeypatch.setattr(ranking, "rank_methods", lambda *args: pd.DataFrame(rows))
    checks = e4_checks(pd.DataFrame())
    assert [c.verdict for c in checks[:3]] == [DISAGREES, AGREES, AGREES]
    named = by_figure(checks)
    shortfall = named["iCh's mean shortfall from the best method at 28 threads"]
    assert shortfall.value == pytest.approx(0.02 * (3 + 1 + 2) / 3)
    assert named["iCh's sensitivity to eps at 28 threads (slowest / fastest)"].verdict == AGREES
    always = named["methods always among the top three"]
    assert (always.ours, always.verdict) == ("stealing", DISAGREES)


def test_e4_apps_pool_the_matrices_and_list_their_statistics_as_inputs(monkeypatch):
    from simsched.analysis import ranking

    # iCh 2nd on one matrix and 4th on the other; one figure for SpMV, by the geometric means: a 5, b 3,
    # iCh 2, c 1.41.
    speedups = {"spmv:like=patents,rows=100000": {"ich": 4.0, "a": 5.0, "b": 3.0, "c": 1.0},
                "spmv:like=AS365,rows=100000": {"ich": 1.0, "a": 5.0, "b": 3.0, "c": 2.0},
                "lavamd:boxes=27": {"ich": 2.0, "a": 1.0}}
    rows = [{"workload": w, "threads": 28, "method": m, "best": m, "speedup": v, "makespan_ns": 1.0 / v,
             "sensitivity": 1.0} for w, methods in speedups.items() for m, v in methods.items()]
    table = pd.DataFrame(rows)
    table["rank"] = table.groupby("workload")["speedup"].rank(ascending=False, method="min").astype(int)
    table["behind_best"] = 1 - table["speedup"] / table.groupby("workload")["speedup"].transform("max")
    monkeypatch.setattr(ranking, "rank_methods", lambda *args: table)
    checks = publications.e4_apps_checks(pd.DataFrame())
    outcomes = by_figure([c for c in checks if c.kind != verdicts.INPUT])
    assert set(outcomes) == {"lavamd:boxes=27: iCh's rank at 28 threads",
                             "spmv (geometric mean over 2 workloads): iCh's rank at 28 threads"}
    assert outcomes["spmv (geometric mean over 2 workloads): iCh's rank at 28 threads"].value == 3
    inputs = by_figure([c for c in checks if c.kind == verdicts.INPUT])
    assert inputs["patents matrix (100000 rows): variance of nonzeros per row"].verdict == AGREES
    assert inputs["AS365 matrix (100000 rows): longest row over shortest"].published == "4.6"
    assert len(inputs) == 2 * 3


def test_report_from_stored_results(tmp_path, capsys):
    out = tmp_path / "fidelity.md"
    assert main(["report", "--results", str(DATA), "--out", str(out)]) == 0
    summary = capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("# Fidelity: the model against the published figures")
    # Every published figure is listed, those without stored results as such.
    for pub in publications.PUBLICATIONS:
        assert f"## {pub.key}: " in text
    assert f"No results in `{DATA}/e2-lbs-cell`" in text
    assert "| burden d of fg-tree (us) | 5.67 | 5.65 | -0% | within 25% | agrees |" in text
    assert ("| fg-tree: loop with S = 24 | about 22 us | 124.6 us | +466% | within a factor 1.5 | "
            "**disagrees** |") in text
    assert ("| unbalanced 11.9 MB: hybrid's time over omp-static's | below 1 (hybrid balances load better) "
            "| 1.557 |") in text
    assert "| LB3D: speedup under fg-tree | 39.3 | 11.6 | -70% | within 25% | **disagrees** |" in text
    # The summary counts outcomes; the generated programs' statistics are inputs, listed apart.
    rows = [line for line in text.splitlines() if line.startswith("| ") and "program: " not in line]
    counts = {v: sum(line.endswith((f"| {v} |", f"| **{v}** |")) for line in rows)
              for v in (AGREES, DISAGREES, NO_RESULTS)}
    assert f"{counts[AGREES]} figures agree, {counts[DISAGREES]} disagree, {counts[NO_RESULTS]} have no results" \
        in summary
    assert f"| all | {sum(counts.values())} | {counts[AGREES]} | {counts[DISAGREES]} | {counts[NO_RESULTS]} | " \
           "24 of 52 |" in text
    assert "| lb3d program: shortest loop | 45.1 us | 45.1 us | +0% | within 25% | agrees |" in text
    # Regenerating from the same results gives the same file, byte for byte.
    assert main(["report", "--results", str(DATA), "--out", str(out)]) == 0
    assert out.read_text() == text


def test_report_json_lists_every_check(tmp_path, capsys):
    import json

    assert main(["report", "--results", str(DATA), "--out", str(tmp_path / "r.md"), "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)
    fg = next(c for c in checks if c["figure"] == "burden d of fg-tree (us)")
    assert (fg["experiment"], fg["published"], fg["ours"], fg["verdict"], fg["kind"]) == \
        ("E1", "5.67", "5.65", AGREES, "outcome")
    assert fg["value"] == pytest.approx(5.6508, abs=1e-4)
    assert {c["verdict"] for c in checks if c["experiment"] == "E2"} == {NO_RESULTS}
    assert {c["kind"] for c in checks if "program: " in c["figure"]} == {"input"}
    assert (tmp_path / "r.md").is_file()


@pytest.mark.parametrize("args, message", [
    (["--results", "no/such/folder"], "--results: no such folder: no/such/folder"),
    (["--sensitivity", "no/such/folder"], "--sensitivity: no such folder: no/such/folder"),
    (["--sensitivity", str(DATA)], f"--sensitivity: no sensitivity.csv in any of {DATA}/<experiment>/ "
                                   "(simsched sensitivity writes them)"),
    (["--out", "no/such/folder/report.md"], "--out: folder no/such/folder does not exist"),
])
def test_report_bad_input_is_one_line(tmp_path, capsys, args, message):
    argv = ["report", "--results", str(DATA), "--out", str(tmp_path / "r.md")]
    for key, value in zip(args[::2], args[1::2]):
        if key in argv:
            argv[argv.index(key) + 1] = value
        else:
            argv += [key, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"simsched: error: {message}"
    assert not (tmp_path / "r.md").exists()


def test_committed_report_is_generated_from_the_current_experiments_and_machines():
    root = Path(__file__).parent.parent
    text = (root / "docs" / "fidelity.md").read_text()
    assert "Generated by `simsched report`" in text
    for pub in publications.PUBLICATIONS:
        assert f"## {pub.key}: " in text
        assert f"simsched sweep experiments/{pub.experiment}.toml" in text
    recorded = re.search(re.escape(fidelity.FINGERPRINT_LABEL) + r" `([0-9a-f]{16})`", text).group(1)
    current = fidelity.inputs_fingerprint({pub.experiment: (root / "experiments" / f"{pub.experiment}.toml").read_bytes()
                                           for pub in publications.PUBLICATIONS})
    assert recorded == current, ("an experiment or machine file changed since docs/fidelity.md was made: run the "
                                 "sweeps it lists and simsched report again")


def test_the_fingerprint_follows_experiment_and_machine_files(tmp_path, monkeypatch):
    import shutil

    from simsched.machine import files

    root = Path(__file__).parent.parent
    config = (root / "experiments" / "e1-burden-xeon-e7.toml").read_bytes()
    base = fidelity.inputs_fingerprint({"e1": config})
    assert fidelity.inputs_fingerprint({"e1": config}) == base
    assert fidelity.inputs_fingerprint({"e1": config + b"\n# a comment\n"}) != base
    # The machine file the grid names counts; another machine file does not.
    shutil.copytree(root / "machines", tmp_path / "machines")
    monkeypatch.setattr(files, "_machine_files", lambda: tmp_path / "machines")
    with open(tmp_path / "machines" / "cell-qs22.toml", "a") as other:
        other.write("# edited\n")
    assert fidelity.inputs_fingerprint({"e1": config}) == base
    with open(tmp_path / "machines" / "xeon-e7-4860v2.toml", "a") as named:
        named.write("# edited\n")
    assert fidelity.inputs_fingerprint({"e1": config}) != base


def test_the_published_burdens_are_the_experiments():
    from simsched.sweep import load_experiment

    experiment = load_experiment(Path(__file__).parent.parent / "experiments" / "e1-burden-xeon-e7.toml")
    assert experiment.published_d_us == publications.E1_PUBLISHED_D_US


def test_every_publication_names_an_experiment_file():
    root = Path(__file__).parent.parent / "experiments"
    for pub in publications.PUBLICATIONS:
        assert (root / f"{pub.experiment}.toml").is_file(), pub.experiment
