"""The command line's arguments: the parser of every command and its options."""

from __future__ import annotations

import argparse

DESCRIPTION = 'The ``simsched`` command line: run, machines, sweep, fit, rank, breakdown, plot, advise and native.'


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _set_argument(parser) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="change a machine value for this command, e.g. --set latency_ns.socket_hop=150 "
                             "(repeatable; the machine becomes NAME[SECTION.KEY=VALUE,...])")


def build_parser() -> argparse.ArgumentParser:
    from ..host import HOST_MACHINE_FILE

    parser = _Parser(prog="simsched", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="simulate one parallel loop")
    run.add_argument("--machine", required=True, help="built-in machine name or machine TOML file")
    _set_argument(run)
    _loop_arguments(run, "run the loop this many times back to back (EPCC style)")
    run.add_argument("--no-chunk-table", action="store_true",
                     help="keep only counters and per-worker states, not every chunk (for runs of very many chunks)")

    machines = sub.add_parser("machines", help="list built-in machines, or describe one")
    machines.add_argument("name", nargs="?", help="machine name or TOML file")
    machines.add_argument("--json", action="store_true", help="machine-readable output")
    machines.add_argument("--latency-against", metavar="FILE.csv",
                          help="compare the machine's core-to-core latencies with a measured matrix (one row per "
                               "CPU, full or lower-triangular, as ping-pong tools write it): errors per class of pair")

    sweep = sub.add_parser("sweep", help="run an experiment grid from a TOML config")
    sweep.add_argument("config", help="experiment TOML file")
    sweep.add_argument("--out", help="output folder (default: results/<experiment name>)")
    sweep.add_argument("--jobs", type=_integer,
                       help="local worker processes (default: all cores; at most 4 per CPU)")
    sweep.add_argument("--dask", metavar="ADDRESS",
                       help="run the points on a Dask cluster: a scheduler's tcp://HOST:PORT, or local:N workers")
    sweep.add_argument("--format", choices=("csv", "parquet"), default="csv", help="results table format")
    sweep.add_argument("--force", action="store_true",
                       help="replace the sweep files of another experiment in --out instead of refusing")
    sweep.add_argument("--retry-failed", action="store_true", help="when resuming, run failed points again")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    _set_argument(sweep)

    fit = sub.add_parser("fit", help="fit the scheduling burden d per (machine, scheduler, threads)")
    fit.add_argument("results", help="results table (CSV/Parquet) or a sweep's output folder")
    fit.add_argument("--json", action="store_true", help="print a JSON list")

    rank = sub.add_parser("rank", help="rank methods by best speedup over a baseline (the experiment's "
                                       "[rank]), per machine, workload and thread count")
    rank.add_argument("results", help="a sweep's output folder (or results table beside its experiment.toml)")
    rank.add_argument("--baseline", help="baseline scheduler spec (default: the experiment's rank.baseline; "
                                         "without either, speedups are over the sequential loop)")
    rank.add_argument("--baseline-threads", type=_integer, metavar="P",
                      help="the baseline's thread count (default: the experiment's rank.baseline_threads, "
                           "else 1)")
    rank.add_argument("--threads", type=_integer, help="thread count to rank at (default: every one)")
    rank.add_argument("--json", action="store_true", help="print a JSON list")

    breakdown = sub.add_parser("breakdown", help="normalized time by computing/searching/splitting/creating, "
                                                 "with task and steal counters (the experiment's [breakdown])")
    breakdown.add_argument("results", help="results table (CSV/Parquet) or a sweep's output folder")
    breakdown.add_argument("--baseline", help="scheduler whose one-worker run is T1 (default: the experiment's, "
                                              "else lbs)")
    breakdown.add_argument("--json", action="store_true", help="print a JSON list")

    plot = sub.add_parser("plot", help="plot speedup against loop duration (or, for a [rank] experiment, "
                                       "against threads per method; for a [breakdown] one, stacked time "
                                       "bars; for an [affinity] one, scalability per working set and affinity; for an [apps] one, "
                                       "gains per application; for a [peers] one, makespan over sum/P per "
                                       "technique) from sweep results")
    plot.add_argument("results", nargs="?", help="results table (CSV/Parquet) or a sweep's output folder")
    plot.add_argument("--timeline", nargs="+", metavar="TRACE", help="instead, a Gantt chart of trace JSON "
                                                                     "file(s) written by --trace")
    plot.add_argument("--out", help="image file (default: speedup.png beside the results; for --timeline, "
                                    "the first trace's name with .png)")
    report = sub.add_parser("report", help="every published figure next to the model's, with a verdict, as "
                                           "Markdown (docs/fidelity.md) from the experiments' results")
    report.add_argument("--results", default="results",
                        help="folder holding one sweep folder per experiment, named as the experiment "
                             "(default: results)")
    report.add_argument("--sensitivity", metavar="DIR",
                        help="also summarize the sensitivity runs in DIR/<experiment> (simsched sensitivity)")
    report.add_argument("--out", default="docs/fidelity.md", help="Markdown file (default docs/fidelity.md)")
    report.add_argument("--json", action="store_true",
                        help="also print every check as a JSON list (experiment, figure, published, ours, rule, "
                             "verdict, value, error, kind)")

    sens = sub.add_parser("sensitivity", help="run an experiment again with each machine parameter scaled, one "
                                              "at a time, and show how each published figure moves")
    sens.add_argument("config", help="experiment TOML file (one with published figures, e.g. experiments/e1-*.toml)")
    sens.add_argument("--vary", action="append", metavar="SECTION.KEY=F1,F2",
                      help="a machine parameter and the factors to scale it by (repeatable; default: every number "
                           "of the machine's cost sections, by 0.8 and 1.25)")
    sens.add_argument("--out", help="output folder (default: results/sensitivity/<experiment name>)")
    sens.add_argument("--jobs", type=_integer,
                      help="local worker processes (default: all cores; at most 4 per CPU)")
    sens.add_argument("--seeds", type=_integer, help="run only the grid's first N seeds")
    sens.add_argument("--quiet", action="store_true", help="no progress bars")

    advise = sub.add_parser("advise", help="the best scheduler for each loop of a program, each loop simulated "
                                           "alone, and the program's time with per-loop selection")
    advise.add_argument("program", help="workload spec, or several separated by ';': their loops are the program; "
                                        "or a trace file (.parquet, .csv, .npz), e.g. one simsched record wrote")
    advise.add_argument("--machine", required=True, help="built-in machine name or machine TOML file")
    advise.add_argument("--threads", required=True, type=_integer, help="number of workers")
    advise.add_argument("--schedulers", metavar="LIST",
                        help="candidate scheduler specs, comma-separated (an item key=value continues the spec "
                             "before it; default: omp-static, omp-dynamic:chunk=1, omp-guided:chunk=1, taskloop, "
                             "binlpt, stealing, ich, hybrid)")
    advise.add_argument("--baseline", help="scheduler of the whole program to compare with (default omp-static; "
                                           "for a trace simsched record wrote, omp-static:runtime=llvm; always a "
                                           "candidate)")
    advise.add_argument("--seed", type=_integer, default=0, help="the first seed of the runs' random generators")
    advise.add_argument("--seeds", type=_integer, metavar="N",
                        help="simulate with N seeds from --seed on and report mean times, their spread and the "
                             "runner-ups (default 5)")
    advise.add_argument("--json", action="store_true", help="print one JSON object")

    record = sub.add_parser("record", help="record a real OpenMP program's loops through the OMPT tool into a "
                                           "program trace, or check a trace against the program's runs",
                            usage="simsched record [options] -- PROGRAM [ARGS ...]")
    record.add_argument("--out", metavar="FILE", help="the trace: .parquet, .csv or .npz (its chunk table goes "
                                                      "beside it, NAME.chunks.csv); required unless --validate")
    record.add_argument("--threads", type=_integer, default=2, help="OpenMP threads, bound (default 2)")
    record.add_argument("--repeat", type=_integer, default=3,
                        help="recording runs; each iteration's cost is its median over them (default 3)")
    record.add_argument("--block", type=_integer, metavar="K",
                        help="record under OMP_SCHEDULE=static,K (default: K chosen from the runtime's "
                             "chunk cost after a first run)")
    record.add_argument("--runtime", metavar="PATH", help="the OMPT runtime (libiomp5.so or libomp.so.5; "
                                                          "default: $SIMSCHED_OMP_RUNTIME, else the first found)")
    record.add_argument("--timeout", type=float, default=600.0, help="stop a run of the program after this many s")
    record.add_argument("--validate", action="store_true",
                        help="run the program under each of --schedules, and print each loop's measured time "
                             "next to the trace's simulated time (the trace: --trace, else recorded first)")
    record.add_argument("--trace", metavar="FILE", help="--validate: an existing recording of the program")
    record.add_argument("--schedules", metavar="LIST", help="--validate: OMP_SCHEDULE values separated by "
                                                            "spaces or ';' (default 'static dynamic,1 "
                                                            "dynamic,64 guided')")
    record.add_argument("--rounds", type=_integer, default=5,
                        help="--validate: runs per schedule; measured times are medians (default 5)")
    record.add_argument("--machine", default=HOST_MACHINE_FILE,
                        help=f"--validate: the machine to simulate on (default {HOST_MACHINE_FILE}, from "
                             "simsched native calibrate)")
    record.add_argument("--json", action="store_true", help="--validate: print one JSON object")
    record.add_argument("program_args", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                        help="the program and its arguments, after --")

    native = sub.add_parser("native", help="run schedulers on this machine's threads, or measure this machine")
    native_sub = native.add_subparsers(dest="native_command", metavar="NATIVE_COMMAND", parser_class=_Parser)
    native_run = native_sub.add_parser("run", help="run one loop on pinned threads of this machine")
    _loop_arguments(native_run, "run the loop this many times; report the median and its spread")
    native_run.add_argument("--timeout", type=float, default=60.0, help="stop the threads after this many s")
    native_run.add_argument("--late-us", type=float, default=0.0, metavar="US",
                            help="the last worker arrives this late at every loop (what a machine's "
                                 "[noise] late_us with late_workers = 1 simulates)")
    native_run.add_argument("--array-bytes", type=_integer, default=0,
                            help="memory kernel: each iteration strides (13) over its own array of this size")
    native_replay = native_sub.add_parser("replay", help="run exactly the chunks of a simulated schedule on "
                                                         "this machine's threads, and compare their times")
    native_replay.add_argument("result", help="the chunk table a simulation wrote with simsched run --chunks")
    native_replay.add_argument("--workload", required=True, help="the workload spec the simulation ran")
    native_replay.add_argument("--seed", type=_integer, help="the simulation's seed (default: the one the table "
                                                              "records, else 0)")
    native_replay.add_argument("--timeout", type=float, default=60.0, help="stop the threads after this many s")
    native_replay.add_argument("--out", metavar="FILE.csv", help="write every chunk's simulated and measured ns")
    native_replay.add_argument("--json", action="store_true", help="print one JSON object")
    native_val = native_sub.add_parser("validate", help="E1's uforall sweep natively and simulated on the "
                                                        "calibrated host model: burden d and loop-time error")
    native_val.add_argument("--machine", default=HOST_MACHINE_FILE,
                            help=f"calibrated machine file (default {HOST_MACHINE_FILE})")
    native_val.add_argument("--threads", type=_integer, help="threads (default: the machine file's cores)")
    native_val.add_argument("--points", type=_integer, help="loop durations from 1 us to 1 ms (default 10)")
    native_val.add_argument("--repeat", type=_integer, default=21, help="loops per point (median)")
    native_val.add_argument("--no-openmp", action="store_true", help="skip the host OpenMP reference")
    native_val.add_argument("--json", action="store_true", help="print a JSON list (--locality: an object)")
    native_val.add_argument("--locality", action="store_true",
                            help="instead, E3's locality benchmark: arrays over working sets sized by the "
                                 "machine file's caches, omp-static, omp-dynamic and hybrid")
    native_val.add_argument("--n", type=_integer, help="--locality: iterations per loop (default 4096)")
    native_val.add_argument("--sweeps", type=_integer,
                            help="--locality: native sweeps over the working sets, each figure its best sweep "
                                 "(default 5)")
    native_val.add_argument("--schedulers", metavar="LIST",
                            help="scheduler specs to validate, comma-separated as for advise (default: every one "
                                 "native mode runs; not with --locality)")
    native_val.add_argument("--workload", metavar="trace:path=FILE",
                            help="instead, a trace recorded by native record: its kernel natively under each "
                                 "scheduler against its recorded costs simulated")
    native_ovh = native_sub.add_parser("overhead", help="per-loop scheduling overhead by EPCC schedbench's "
                                                        "protocol: natively, simulated and on the host OpenMP runtime")
    native_ovh.add_argument("--machine", default=HOST_MACHINE_FILE,
                            help=f"calibrated machine file (default {HOST_MACHINE_FILE})")
    native_ovh.add_argument("--threads", type=_integer, help="threads (default: the machine file's cores)")
    native_ovh.add_argument("--iters-per-thread", type=_integer, default=128,
                            help="iterations per thread (default 128)")
    native_ovh.add_argument("--delay-ns", type=float, default=100.0, help="each iteration's cost (default 100 ns)")
    native_ovh.add_argument("--outer", type=_integer, default=20, help="timed blocks (default 20)")
    native_ovh.add_argument("--test-time-us", type=float, default=1000.0,
                            help="each block lasts at least this long (default 1000 us)")
    native_ovh.add_argument("--schedulers", metavar="LIST",
                            help="scheduler specs, comma-separated as for advise (default: omp-static, then "
                                 "omp-dynamic and omp-guided at chunk 1, 2, 4, ... up to --iters-per-thread)")
    native_ovh.add_argument("--no-openmp", action="store_true", help="skip the host OpenMP runtime")
    native_ovh.add_argument("--json", action="store_true", help="print a JSON list")
    native_ovh.add_argument("--plot", metavar="FILE.png", help="also draw overhead against chunk size")
    native_rec = native_sub.add_parser("record", help="time a real kernel on one thread of this machine, "
                                                      "iteration by iteration, into a program trace")
    native_rec.add_argument("kernel", help="spmv (--matrix), bfs (--graph) or memory (--array-bytes)")
    native_rec.add_argument("--out", required=True, metavar="FILE", help="the trace: .parquet, .csv or .npz")
    native_rec.add_argument("--matrix", help="spmv: a Matrix Market file, or a shipped matrix's name")
    native_rec.add_argument("--iters", type=_integer, help="spmv: multiplications, one loop each (default 1)")
    native_rec.add_argument("--graph", help="bfs: an edge list or Matrix Market file")
    native_rec.add_argument("--source", type=_integer, help="bfs: the source vertex (default 0)")
    native_rec.add_argument("--n", type=_integer, help="memory: iterations (default 4096)")
    native_rec.add_argument("--array-bytes", type=_integer, help="memory: bytes of each iteration's array")
    native_rec.add_argument("--pattern", help="memory: stride (default), stream or random")
    native_rec.add_argument("--repeat", type=_integer, help="memory: loops over the same arrays (default 1)")
    native_rec.add_argument("--seed", type=_integer, help="memory: seed of the random pattern's cycles (default 0)")
    native_rec.add_argument("--block", type=_integer, help="time blocks of this many iterations (default: "
                                                           "chosen from the timer's cost)")
    native_rec.add_argument("--samples", type=_integer, default=5,
                            help="timed passes; each block's cost is its median (default 5)")
    native_rec.add_argument("--timeout", type=float, default=60.0, help="stop the thread after this many s")
    native_rec.add_argument("--data", action="store_true",
                            help="time each block right after it ran, its data in cache: the costs are the "
                                 "work alone, and simulations of the trace in native validate add the kernel's "
                                 "data footprints")
    native_cal = native_sub.add_parser("calibrate", help="measure this machine into a machine file")
    native_cal.add_argument("--out", default=HOST_MACHINE_FILE, help=f"machine file (default {HOST_MACHINE_FILE})")
    native_cal.add_argument("--threads", type=_integer, help="CPUs to measure (default: all available)")
    native_cal.add_argument("--rounds", type=_integer, default=20000, help="ping-pong round trips per core pair")
    native_cal.add_argument("--openmp", nargs="?", const="", metavar="RUNTIME",
                            help="take loop_setup and chunk from an OpenMP runtime's own costs: RUNTIME is its "
                                 "library (libiomp5.so, libomp.so.5) or gnu for the compiler's libgomp "
                                 "(default: the runtime simsched record uses, else libgomp)")
    native_cal.add_argument("--force", action="store_true",
                            help="measure and write even when the host is too busy or the figures are "
                                 "doubtful (the file then says so)")
    schedulers = sub.add_parser("schedulers", help="list every scheduler (built-in and plugins') with its "
                                                   "summary and parameters")
    workloads = sub.add_parser("workloads", help="list every workload (built-in and plugins') with its summary "
                                                 "and parameters")
    for listing in (schedulers, workloads):
        listing.add_argument("names", nargs="*", metavar="NAME", help="only these")
        listing.add_argument("--json", action="store_true", help="print a JSON list")
    _add_plugin_option(parser)
    return parser


def _add_plugin_option(parser) -> None:
    """``--plugin`` on every command (and every ``native`` command): load a module that defines components."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                                     help="import a Python file or module first: the schedulers, workloads "
                                          "and machines it defines are then known (repeatable; also "
                                          "$SIMSCHED_PLUGINS)")
                _add_plugin_option(command)


def _loop_arguments(parser, repeat_help: str) -> None:
    """The arguments ``run`` and ``native run`` share: what loop to run, how, and what to print."""
    parser.add_argument("--scheduler", required=True, help="scheduler spec, e.g. omp-guided:chunk=2")
    parser.add_argument("--threads", required=True, type=_integer, help="number of workers")
    parser.add_argument("--workload", required=True, help="workload spec, e.g. exp-dec:n=1000000")
    parser.add_argument("--seed", type=_integer, default=0, help="seed of the run's random generator")
    parser.add_argument("--repeat", type=_integer, default=1, help=repeat_help)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--chunks", metavar="FILE.csv", help="write the chunk table (a '# simsched: {...}' line, "
                                                             "then worker, loop, lo, hi, start_ns, end_ns)")
    parser.add_argument("--trace", metavar="FILE.json", help="write the timeline as Chrome/Perfetto trace events")


def _version() -> str:
    from .. import __version__
    return f"simsched {__version__}"
