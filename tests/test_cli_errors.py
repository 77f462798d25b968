"""Bad input to the ``simsched`` command: one clear line on stderr, a non-zero exit, no traceback.

Every case runs the console entry (``python -m simsched.cli ...``) in a process of its own,
so what is checked is exactly what a user sees. Starting an interpreter that imports
numpy, pandas and SimPy costs most of a second, so the cases are declared as data and a
module fixture runs them all concurrently up front, forked from one warm interpreter
(tests/cli_runner.py), one of them as a genuine subprocess; each test then judges its own
case's outcome.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_batch

ROOT = Path(__file__).resolve().parents[1]
HASWELL = (ROOT / "machines" / "haswell-e5-2695v3.toml").read_text(encoding="utf-8")


def mutate(text: str, old: str, new: str) -> str:
    """Replace ``old`` by ``new`` once, insisting that ``old`` is there (so the mutation really happens)."""
    assert text.count(old) == 1, f"{old!r} not found exactly once in the template"
    return text.replace(old, new)


@dataclass
class Case:
    """One command line (``{dir}`` stands for the case's own folder, also its working directory)."""

    args: list[str]
    needles: tuple[str, ...] = ()
    files: dict[str, object] = field(default_factory=dict)  # name -> text, or an array saved as .npy


def run_args(**changes) -> list[str]:
    """``simsched run`` on a good command line with some options changed."""
    args = {"machine": "xeon-e7-4860v2", "scheduler": "omp-static", "threads": "4", "workload": "uniform:n=100"}
    args.update({k: str(v) for k, v in changes.items()})
    return ["run", *[x for key, value in args.items() for x in (f"--{key}", value)]]


def advise_args(program: str = "uforall:n=40 ; linear:n=8", **changes) -> list[str]:
    """``simsched advise`` on a good command line with some options changed."""
    args = {"machine": "haswell-e5-2695v3", "threads": "2", "schedulers": "omp-static,omp-dynamic"}
    args.update({k: str(v) for k, v in changes.items()})
    return ["advise", program, *[x for key, value in args.items() for x in (f"--{key}", value)]]


GOOD_EXPERIMENT = """\
[experiment]
name = "bad-input"

[grid]
machine = "haswell-e5-2695v3"
scheduler = ["omp-static", "fg-tree"]
threads = 4
workload = "uforall:n=32"
"workload.total_us" = { logspace = [1, 100], num = 3 }
"""

RESULTS = ("machine,scheduler,threads,workload,sequential_ns,speedup,error\n"
           'haswell-e5-2695v3,fg-tree,4,"uforall:n=4,total_us=1",1000,1.5,\n'
           'haswell-e5-2695v3,fg-tree,4,"uforall:n=4,total_us=100",100000,3.8,\n')

SWEEP = ["sweep", "{dir}/experiment.toml", "--out", "{dir}/out", "--jobs", "1", "--quiet"]


def sweep_case(text: str, *needles: str) -> Case:
    return Case(SWEEP, needles, {"experiment.toml": text})


def machine_case(text: str, *needles: str) -> Case:
    return Case(run_args(machine="{dir}/machine.toml"), needles, {"machine.toml": text})


def describe_case(text: str, *needles: str) -> Case:
    return Case(["machines", "{dir}/machine.toml"], needles, {"machine.toml": text})


# Haswell's memory hierarchy, each broken in one way; every one is tried by `machines FILE`, a few by `run`.
BAD_HIERARCHIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sizes-out-of-order": (mutate(HASWELL, "size_kib = 256 ", "size_kib = 16 "), ("cache.l2.size_kib", "must exceed")),
    "latencies-out-of-order": (mutate(HASWELL, "latency_ns = 21 ", "latency_ns = 2 "),
                               ("cache.l3.latency_ns", "below")),
    "unknown-key": (mutate(HASWELL, "[cache.l2]\n", "[cache.l2]\nassoc = 8\n"), ("cache.l2", "unknown key 'assoc'")),
    "shared-by-chip": (mutate(HASWELL, 'shared_by = "socket"', 'shared_by = "chip"'), ("cache.l3.shared_by", "chip")),
    "private-outside-shared": (mutate(mutate(mutate(
        HASWELL, 'shared_by = "core"         # Intel optimization manual: L2', 'shared_by = "socket"  # L2'),
        'shared_by = "socket"       # Intel ARK', 'shared_by = "core"  #'), "remote_latency_ns = 118 ", "# "),
        ("cache.l3", "private to a core", "cache.l2")),
    "gap": (mutate(HASWELL, "[cache.l3]", "[cache.l4]"), ("l1, l2, l4", "without gaps")),
    "cache-without-dram": (HASWELL.split("\n[dram]")[0] + "\n", ("[dram]",)),
    "line-size-mismatch": (mutate(HASWELL, "line_bytes = 64            # Intel", "line_bytes = 128           # Intel"),
                           ("cache.l2.line_bytes", "128")),
    "zero-size": (mutate(HASWELL, "size_gib = 64 ", "size_gib = 0 "), ("dram.size_gib", "> 0")),
    "negative-size": (mutate(HASWELL, "size_kib = 32 ", "size_kib = -32 "), ("cache.l1.size_kib", "> 0")),
    "huge-size": (mutate(HASWELL, "size_gib = 64 ", "size_gib = 1e300 "), ("dram.size_gib", "1e+12")),
    "remote-shorter-than-hops": (mutate(mutate(mutate(
        HASWELL, "sockets = 2 ", "sockets = 4 "), 'socket_links = "full"', 'socket_links = "ring"'),
        "remote_latency_ns = 146 ", "remote_latency_ns = [146] "), ("dram.remote_latency_ns", "2 hops")),
    "outstanding-misses-in-l2": (mutate(HASWELL, "[cache.l2]\n", "[cache.l2]\noutstanding_misses = 4\n"),
                                 ("cache.l2.outstanding_misses", "cache.l1")),
}
RUN_HIERARCHIES = ("sizes-out-of-order", "cache-without-dram", "remote-shorter-than-hops", "huge-size")


def csv_case(content: str, *needles: str) -> Case:
    return Case(run_args(workload="file:path={dir}/costs.csv"), needles, {"costs.csv": content})


def npy_case(values, *needles: str) -> Case:
    return Case(run_args(workload="file:path={dir}/costs.npy"), needles, {"costs.npy": np.array(values)})


CASES: dict[str, Case] = {
    # The unmodified inputs work, so each failure below comes from its one change.
    "ok/run": Case(run_args()),
    "ok/machine-copy": machine_case(HASWELL),
    "ok/cost-file": csv_case("1\n5\n3\n"),
    "ok/below-2**53-ns": Case(run_args(workload="uforall:n=10,cost_ns=1e14", repeat=2)),
    "ok/experiment": sweep_case(GOOD_EXPERIMENT),

    "machine/uniform-bad-cores": Case(run_args(machine="uniform:cores=many"), ("machine uniform", "cores='many'")),
    "whatif/unknown-base": Case(run_args(machine="scaled:base=xeon-bogus,sockets=16"), ("unknown machine", "xeon-bogus")),
    "whatif/scaled-without-base": Case(run_args(machine="scaled:sockets=16"), ("scaled", "base=")),
    "whatif/scaled-too-many-cores": Case(run_args(machine="scaled:base=epyc-7742-2s,sockets=257"), ("16448 cores", "16384")),
    "whatif/speed-zero": Case(run_args() + ["--set", "clock.core_speed=[[1, 0.0], [47, 1.0]]"],
                              ("clock.core_speed", "> 0", "got 0.0")),
    "whatif/speed-negative": machine_case(mutate(HASWELL, "[latency_ns]", "core_speed = [[27, 1.0], [1, -2]]\n\n"
                                                 "[latency_ns]"), "clock.core_speed", "> 0", "-2"),
    "whatif/speed-short": Case(run_args() + ["--set", "clock.core_speed=[1.0, 0.5]"], ("2 speeds", "48 cores")),
    "whatif/noise-rate-too-high": Case(run_args() + ["--set", "noise.rate_hz=1e9", "--set", "noise.duration_us=0.001"],
                                       ("noise.rate_hz", "1e7")),
    "whatif/noise-too-much": Case(run_args() + ["--set", "noise.rate_hz=100000", "--set", "noise.duration_us=10"],
                                  ("[noise]", "100%", "at most 50%")),
    "whatif/noise-negative": Case(run_args() + ["--set", "noise.late_us=-5"], ("noise.late_us", ">= 0")),
    "whatif/noise-unknown-key": machine_case(HASWELL + "\n[noise]\nrate = 5\n", "noise.rate", "known:"),
    "whatif/noise-half-given": Case(run_args() + ["--set", "noise.rate_hz=100"], ("noise.rate_hz needs noise.duration_us",)),
    "whatif/late-distribution": Case(run_args() + ["--set", "noise.late_us=5", "--set", 'noise.late="normal"'],
                                     ("noise.late", "fixed, exponential, uniform")),
    "whatif/set-misspelt": Case(run_args() + ["--set", "latency_ns.socket_hp=1"], ("no latency_ns.socket_hp",)),
    "sweep/set-misspelt": Case(SWEEP + ["--set", "noise.lat_us=5"], ("no noise.lat_us",),
                               {"experiment.toml": GOOD_EXPERIMENT}),
    "whatif/set-malformed": Case(run_args() + ["--set", "socket_hop"], ("--set", "section.key=value")),
    "whatif/group-not-dividing": machine_case(mutate(HASWELL, 'socket_links = "full"', 'socket_links = "full"\n'
                                                     "core_groups = { ccx = 4 }"), "core_groups.ccx", "divide"),
    "whatif/group-without-latency": machine_case(mutate(HASWELL, 'socket_links = "full"', 'socket_links = "full"\n'
                                                        "core_groups = { ccx = 7 }"), "latency_ns.ccx"),
    "whatif/latency-csv-missing": Case(["machines", "graviton3", "--latency-against", "{dir}/none.csv"],
                                       ("latency file not found",)),
    "whatif/latency-csv-bad": Case(["machines", "graviton3", "--latency-against", "{dir}/m.csv"],
                                   ("row 2, column 1", "'fast'"), {"m.csv": ",\nfast,\n"}),
    "unknown/machine": Case(run_args(machine="xeon-nonexistent"), ("unknown machine", "xeon-nonexistent")),
    "unknown/scheduler": Case(run_args(scheduler="omp-bogus"), ("unknown scheduler", "omp-bogus")),
    "unknown/workload": Case(run_args(workload="zipf:n=10"), ("unknown workload", "zipf")),
    "unknown/scheduler-parameter": Case(run_args(scheduler="omp-dynamic:foo=1"), ("unknown parameter", "foo")),

    "value/tss-chunk-0": Case(run_args(scheduler="tss:chunk=0"), ("chunk", "0", ">= 1")),
    "value/dynamic-chunk-negative": Case(run_args(scheduler="omp-dynamic:chunk=-2"), ("chunk", "-2", ">= 0")),
    "value/guided-chunk-negative": Case(run_args(scheduler="omp-guided:chunk=-1"), ("chunk", "-1")),
    "value/static-barrier-bogus": Case(run_args(scheduler="omp-static:barrier=bogus"), ("barrier", "bogus")),
    "value/dynamic-chunk-abc": Case(run_args(scheduler="omp-dynamic:chunk=abc"), ("chunk", "abc", "integer")),
    "value/no-equals": Case(run_args(scheduler="omp-static:chunk"), ("chunk", "key=value")),
    "value/workload-n-0": Case(run_args(workload="uniform:n=0"), ("n=0",)),
    "value/workload-nan": Case(run_args(workload="normal:mean_ns=nan"), ("mean_ns", "nan")),
    "value/repeat-0": Case(run_args(repeat=0), ("repeat", "0")),

    "threads/0": Case(run_args(threads=0), ("threads", "0")),
    "threads/-3": Case(run_args(threads=-3), ("threads", "-3")),
    "threads/49-on-48-cores": Case(run_args(machine="xeon-e7-4860v2", threads=49), ("threads", "49", "48")),
    "threads/not-a-number": Case(run_args(threads="four"), ("threads", "four")),

    "costs/csv-negative": csv_case("1\n-5\n3\n", ">= 0"),
    "costs/csv-nan": csv_case("1\nnan\n3\n", "finite"),
    "costs/csv-inf": csv_case("1\ninf\n3\n", "finite"),
    "costs/csv-not-a-number": csv_case("x\nabc\n", "abc"),
    "costs/csv-two-columns": csv_case("a,b\n1,2\n", "cost_ns"),
    "costs/npy-negative": npy_case([1.0, -2.0, 3.0], ">= 0", "costs.npy"),
    "costs/npy-nan": npy_case([1.0, np.nan], "finite", "costs.npy"),
    "costs/missing-file": Case(run_args(workload="file:path={dir}/nowhere.csv"), ("nowhere.csv",)),
    "costs/npy-2d": npy_case(np.ones((3, 4)), "costs.npy", "2-D", "(3, 4)", "1-D"),
    "costs/npy-column": npy_case(np.ones((5, 1)), "costs.npy", "2-D", "(5, 1)"),
    # Scheduling overheads of a few ns vanish in float64 times beyond 2**53 ns.
    "costs/beyond-2**53-ns": Case(run_args(workload="uforall:n=10,cost_ns=1e300"),
                                  ("uforall", "1e+301 ns", "2**53 ns", "104 days")),
    "costs/beyond-2**53-ns-repeated": Case(run_args(workload="uforall:n=10,cost_ns=1e14", repeat=10),
                                           ("1e+16 ns", "repeats", "2**53 ns")),

    "machine/malformed": machine_case(mutate(HASWELL, "[clock]", "[clock"), "not valid TOML"),
    "machine/missing-atomic": machine_case(mutate(HASWELL, "\natomic = 7 ", "\n# atomic removed "),
                                           "costs_ns.atomic", "missing"),
    "machine/unknown-key": machine_case(mutate(HASWELL, "[os]\n", "[os]\nwake_up_typo = 3\n"), "wake_up_typo"),
    "machine/unknown-section": machine_case(HASWELL + "\n[gpu]\ncount = 2\n", "gpu"),
    "machine/negative-latency": machine_case(mutate(HASWELL, "same_socket = 44", "same_socket = -44"),
                                             "latency_ns.same_socket", ">= 0"),
    "machine/wrong-type-int": machine_case(mutate(HASWELL, "sockets = 2 ", 'sockets = "two" '),
                                           "topology.sockets", "integer"),
    "machine/wrong-type-float": machine_case(mutate(HASWELL, "socket_hop = 74", 'socket_hop = "far"'),
                                             "latency_ns.socket_hop"),
    "machine/zero-clock": machine_case(mutate(HASWELL, "base_ghz = 2.3", "base_ghz = 0"), "clock.base_ghz", "> 0"),
    "machine/missing-file": Case(run_args(machine="{dir}/absent.toml"), ("absent.toml",)),
    "machine/describe-bad-file": Case(["machines", "{dir}/machine.toml"], ("costs_ns.atomic",),
                                      {"machine.toml": mutate(HASWELL, "\natomic = 7 ", "\n")}),

    **{f"hierarchy/describe/{name}": describe_case(text, *needles)
       for name, (text, needles) in BAD_HIERARCHIES.items()},
    **{f"hierarchy/run/{name}": machine_case(BAD_HIERARCHIES[name][0], *BAD_HIERARCHIES[name][1])
       for name in RUN_HIERARCHIES},

    "sweep/malformed": sweep_case(mutate(GOOD_EXPERIMENT, "[grid]", "[grid"), "not valid TOML"),
    "sweep/unknown-grid-key": sweep_case(mutate(GOOD_EXPERIMENT, "threads = 4", "threads = 4\nthreds = 8"),
                                         "grid.threds"),
    "sweep/peers-unknown-key": sweep_case(GOOD_EXPERIMENT + "\n[peers]\nbaseline = 'omp-static'\n", "peers",
                                          "baseline"),
    "sweep/unknown-section": sweep_case(GOOD_EXPERIMENT + "\n[plots]\nkind = 'bar'\n", "plots"),
    "sweep/non-integer-threads": sweep_case(mutate(GOOD_EXPERIMENT, "threads = 4", "threads = 4.5"),
                                            "threads", "4.5"),
    "sweep/logspace-num-0": sweep_case(mutate(GOOD_EXPERIMENT, "num = 3", "num = 0"), "num"),
    "sweep/unknown-scheduler": sweep_case(mutate(GOOD_EXPERIMENT, '"fg-tree"', '"fg-bogus"'), "fg-bogus"),
    "sweep/unknown-scheduler-parameter": sweep_case(
        mutate(GOOD_EXPERIMENT, "threads = 4", 'threads = 4\n"scheduler.chunk" = 2'), "chunk"),
    "sweep/missing-grid-key": sweep_case(mutate(GOOD_EXPERIMENT, 'machine = "haswell-e5-2695v3"\n', ""),
                                         "grid.machine"),
    "sweep/bad-published-d": sweep_case(GOOD_EXPERIMENT + "\n[fit]\npublished_d_us = { omp-static = -1 }\n",
                                        "published_d_us.omp-static"),
    "sweep/bad-breakdown-key": sweep_case(GOOD_EXPERIMENT + "\n[breakdown]\nbaselin = 'lbs'\n", "breakdown.baselin"),
    "sweep/missing-config": Case(["sweep", "{dir}/absent.toml", "--out", "{dir}/out"], ("absent.toml",)),
    "sweep/out-is-a-file": Case(["sweep", "{dir}/experiment.toml", "--out", "{dir}/taken", "--jobs", "1"],
                                ("taken",), {"experiment.toml": GOOD_EXPERIMENT, "taken": "not a folder"}),

    "fit/missing-file": Case(["fit", "{dir}/absent.csv"], ("absent.csv",)),
    "fit/not-a-results-table": Case(["fit", "{dir}/other.csv"], ("results",), {"other.csv": "a,b\n1,2\n3,4\n"}),
    "fit/folder-without-results": Case(["fit", "{dir}"], ("results",)),
    "fit/only-failed-runs": Case(["fit", "{dir}/results.csv"], ("no successful runs",), {
        "results.csv": "machine,scheduler,threads,sequential_ns,speedup,error\n"
                       "m,s,4,,,SimschedError: boom\nm,s,4,,,SimschedError: boom\n"}),

    "value/ich-eps-zero": Case(run_args(scheduler="ich:eps=0"), ("eps=0.0 must be > 0",)),
    "value/ich-eps-negative": Case(run_args(scheduler="ich:eps=-0.5"), ("eps=-0.5 must be > 0",)),
    "value/stealing-chunk-zero": Case(run_args(scheduler="stealing:chunk=0"), ("chunk=0 must be >= 1",)),
    "value/cilk-grain-zero": Case(run_args(scheduler="cilk:grain=0"), ("grain=0 must be >= 1",)),
    "value/wf-weights-length": Case(run_args(scheduler="wf:weights=1:2"), ("weights", "2 entries", "P=4")),
    "value/wf-weights-negative": Case(run_args(scheduler="wf:weights=1:-1:1:1"), ("weights", "'-1'", "> 0")),
    "value/wf-weights-text": Case(run_args(scheduler="awf-b:weights=1:a:1:1"), ("weights", "'a'", "not a number")),
    "value/af-chunk-zero": Case(run_args(scheduler="af:chunk=0"), ("chunk=0 must be >= 1",)),
    "unknown/hybrid-parameter": Case(run_args(scheduler="hybrid:chunk=4"), ("unknown parameter 'chunk'",)),

    # Output files that cannot be written: under a regular file (root may write anywhere else), in /proc.
    "out/chunks-under-a-file": Case(run_args(chunks="{dir}/afile/c.csv"), ("--chunks", "afile", "not a folder"),
                                    {"afile": "x"}),
    "out/chunks-in-proc": Case(run_args(chunks="/proc/simsched-chunks.csv"), ("--chunks", "cannot write")),
    "out/plot-under-a-file": Case(["plot", "{dir}/results.csv", "--out", "{dir}/afile/x.png"],
                                  ("--out", "afile", "not a folder"), {"afile": "x", "results.csv": RESULTS}),
    "out/plot-in-proc": Case(["plot", "{dir}/results.csv", "--out", "/proc/simsched-plot.png"],
                             ("cannot write", "/proc/simsched-plot.png"), {"results.csv": RESULTS}),
    "out/plot-unknown-format": Case(["plot", "{dir}/results.csv", "--out", "{dir}/x.v2"], ("--out", ".v2", "png"),
                                    {"results.csv": RESULTS}),
    "out/native-calibrate-under-a-file": Case(["native", "calibrate", "--out", "{dir}/afile/host.toml"],
                                              ("--out", "afile", "not a folder"), {"afile": "x"}),
    "out/native-replay-under-a-file": Case(["native", "replay", "{dir}/c.csv", "--workload", "uforall:n=10",
                                            "--out", "{dir}/afile/r.csv"], ("--out", "afile", "not a folder"),
                                           {"afile": "x", "c.csv": "worker,loop,lo,hi,start,end\n0,0,0,10,0,100\n"}),

    # A chunk table that cannot fit any memory is refused before the run; --chunks needs the table.
    "value/chunk-table-too-big": Case(run_args(scheduler="omp-dynamic:chunk=1", workload="uforall:n=1000000",
                                               repeat=100000),
                                      ("omp-dynamic runs at least 100000000000 chunks", "GiB", "--no-chunk-table")),
    "value/chunks-without-a-table": Case(run_args(chunks="{dir}/c.csv") + ["--no-chunk-table"],
                                         ("--chunks", "--no-chunk-table")),

    # simsched advise: bad candidates, programs and thread counts.
    "ok/advise": Case(advise_args()),
    "advise/unknown-scheduler": Case(advise_args(schedulers="omp-static,omp-bogus"),
                                     ("unknown scheduler", "omp-bogus")),
    "advise/unknown-scheduler-parameter": Case(advise_args(schedulers="omp-static,ich:chunk=2"),
                                               ("unknown parameter", "chunk")),
    "advise/unknown-baseline": Case(advise_args(baseline="omp-bogus"), ("unknown scheduler", "omp-bogus")),
    "advise/scheduler-twice": Case(advise_args(schedulers="omp-static,ich,omp-static"),
                                   ("omp-static", "listed twice")),
    "advise/parameter-without-scheduler": Case(advise_args(schedulers="chunk=2,omp-static"),
                                               ("'chunk=2'", "without a scheduler")),
    "advise/unknown-workload": Case(advise_args(program="zipf:n=10"), ("unknown workload", "zipf")),
    "advise/bad-workload-value": Case(advise_args(program="lavamd:boxes=500"), ("boxes=500", "not a cube")),
    "advise/empty-program-item": Case(advise_args(program="uforall:n=8 ;"), ("empty workload spec",)),
    "advise/threads-0": Case(advise_args(threads=0), ("threads must be >= 1", "0")),
    "advise/threads-over-cores": Case(advise_args(threads=29), ("threads=29", "28 cores")),
    "advise/negative-seed": Case(advise_args(seed=-1), ("seed", "-1")),
    "advise/baseline-cannot-run": Case(advise_args(program="nested:n=2,inner_end=8"),
                                       ("baseline omp-static cannot run loop 0", "nested loops")),

    # Inputs that once ended in a traceback.
    "bug/negative-seed": Case(run_args(seed=-1), ("seed",)),
    "bug/chunks-is-a-folder": Case(run_args(chunks="{dir}"), ("chunks",)),
    "bug/round-not-a-number": sweep_case(mutate(GOOD_EXPERIMENT, "num = 3", 'num = 3, round = "x"'), "round"),
    "bug/overflowing-workload": Case(run_args(workload="exp-dec:n=10,beta=1e308,unit_ns=1e308"), ("finite",)),
}


@dataclass
class Outcome:
    proc: subprocess.CompletedProcess
    folder: Path


def prepare(base: Path, name: str, case: Case) -> tuple[list[str], Path]:
    """The case's own folder, made with its files: its command line (``{dir}`` filled in) and the folder."""
    folder = base / re.sub(r"[^\w.-]", "_", name)
    folder.mkdir(parents=True)
    for filename, content in case.files.items():
        if isinstance(content, np.ndarray):
            np.save(folder / filename, content)
        else:
            (folder / filename).write_text(str(content), encoding="utf-8")
    return [a.replace("{dir}", str(folder)) for a in case.args], folder


def run_cases(base: Path, cases: dict[str, Case], real=()) -> dict[str, Outcome]:
    """Every case through the command line, all at once, each in its folder; ``real`` ones as subprocesses."""
    prepared = {name: prepare(base, name, case) for name, case in cases.items()}
    procs = run_batch({name: (args, folder) for name, (args, folder) in prepared.items()}, real=real)
    return {name: Outcome(procs[name], folder) for name, (_, folder) in prepared.items()}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    # The unmodified run goes through a genuine ``python -m simsched.cli``, the others are forked.
    return run_cases(tmp_path_factory.mktemp("cli-errors"), CASES, real=["ok/run"])


def error_line(outcome: Outcome, *needles: str) -> str:
    """Assert the command failed with exactly one non-empty stderr line naming every needle; return the line."""
    proc = outcome.proc
    assert proc.returncode != 0, f"exit 0 on bad input; stdout: {proc.stdout!r}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got {len(lines)}:\n{proc.stderr}"
    line = lines[0]
    assert "error" in line.lower(), line
    for needle in needles:
        assert needle in line, f"{needle!r} not named in {line!r}"
    assert proc.stdout.strip() == "", f"an error also printed to stdout: {proc.stdout!r}"
    return line


def results_written(out: Path) -> list[Path]:
    """Results tables (finished or partial) a sweep left in ``out``."""
    return sorted(out.glob("results*")) if out.exists() else []


def ids(prefix: str) -> list[str]:
    found = [name for name in CASES if name.startswith(prefix)]
    assert found, prefix
    return found


# -- sanity -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ids("ok/"))
def test_unmodified_inputs_succeed(outcomes, name):
    outcome = outcomes[name]
    assert outcome.proc.returncode == 0, outcome.proc.stderr
    assert "Traceback" not in outcome.proc.stderr
    if name == "ok/experiment":
        assert results_written(outcome.folder / "out") == [outcome.folder / "out" / "results.csv"]


# -- the error cases ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for prefix in ("unknown/", "value/", "threads/", "costs/", "machine/", "fit/", "whatif/")
                                  for n in ids(prefix)])
def test_bad_input_is_one_named_line(outcomes, name):
    error_line(outcomes[name], *CASES[name].needles)


@pytest.mark.parametrize("name", ids("hierarchy/"))
def test_bad_hierarchy_is_one_named_line_and_status_2(outcomes, name):
    error_line(outcomes[name], *CASES[name].needles)
    assert outcomes[name].proc.returncode == 2


@pytest.mark.parametrize("name", ids("sweep/"))
def test_bad_experiments_write_nothing(outcomes, name):
    outcome = outcomes[name]
    error_line(outcome, *CASES[name].needles)
    assert results_written(outcome.folder / "out") == [], "a failed sweep left a results file behind"
    assert not (outcome.folder / "results").exists(), "a failed sweep wrote into the default results folder"
    if name == "sweep/out-is-a-file":
        assert (outcome.folder / "taken").read_text(encoding="utf-8") == "not a folder"


@pytest.mark.parametrize("name", ids("out/"))
def test_unwritable_output_is_one_line_and_leaves_nothing(outcomes, name):
    if name.startswith("out/native-"):
        from simsched import native
        if not native.available():
            pytest.skip("native runtime not built")
    if "proc" in name and not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    outcome = outcomes[name]
    error_line(outcome, *CASES[name].needles)
    assert outcome.proc.returncode == 2
    left = sorted(p.name for p in outcome.folder.iterdir())
    assert left == sorted(CASES[name].files), f"a failed write left {left}"


# -- inputs that once ended in a traceback ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ids("advise/"))
def test_bad_advise_input_is_one_named_line_and_status_2(outcomes, name):
    error_line(outcomes[name], *CASES[name].needles)
    assert outcomes[name].proc.returncode == 2


def test_negative_seed(outcomes):
    error_line(outcomes["bug/negative-seed"], *CASES["bug/negative-seed"].needles)


def test_chunks_path_is_a_directory(outcomes):
    error_line(outcomes["bug/chunks-is-a-folder"], *CASES["bug/chunks-is-a-folder"].needles)


def test_bad_round_in_grid_axis(outcomes):
    outcome = outcomes["bug/round-not-a-number"]
    error_line(outcome, *CASES["bug/round-not-a-number"].needles)
    assert results_written(outcome.folder / "out") == []


def test_overflowing_workload_is_one_line(outcomes):
    error_line(outcomes["bug/overflowing-workload"], *CASES["bug/overflowing-workload"].needles)
