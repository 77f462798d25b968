"""The ``simsched`` command line: run, machines, sweep, fit, rank, breakdown, plot, advise and native."""

from __future__ import annotations

import argparse
import errno
import json
import math
import sys
from pathlib import Path

from .errors import ExecutionError, SimschedError


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
    from .host import HOST_MACHINE_FILE

    parser = _Parser(prog="simsched", description=__doc__.splitlines()[0] if __doc__ else None)
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
    from . import __version__
    return f"simsched {__version__}"


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"simsched: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.showwarning = _one_line_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "plugin", None):
            from . import plugins

            plugins.activate(args.plugin)
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # output a full device refuses fails here, as one line, rather than at exit
        return status
    except ExecutionError as exc:
        print(f"simsched: internal error (please report it): {exc}", file=sys.stderr)
        return 3
    except SimschedError as exc:
        print(f"simsched: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("simsched: error: out of memory (is the loop or a parameter far too large?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("simsched: interrupted", file=sys.stderr)
        return 128 + getattr(exc, "signum", 2)
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        _drop_stdout()
        what = exc.filename or "the output"
        print(f"simsched: error: cannot write {what}: {exc.strerror}", file=sys.stderr)
        return 2


# A device or disk that takes no more data: what was printed is lost, so it ends the command as an error.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _drop_stdout() -> None:
    """Point the standard output at /dev/null, so that what it still buffers fails no second time at exit."""
    import os

    try:
        sys.stdout.flush()
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # a captured stdout, as in tests, has no descriptor
        pass


def cmd_run(args) -> int:
    from .engine import simulate
    from .machine import load_machine, with_settings
    from .schedulers import get_scheduler
    from .workloads import get_workload

    machine = load_machine(with_settings(args.machine, args.set))
    scheduler = get_scheduler(args.scheduler)
    workload = get_workload(args.workload)
    machine.check_threads(args.threads)  # before --chunks is checked: the likelier mistake first
    if args.chunks and args.no_chunk_table:
        raise SimschedError("--chunks writes the chunk table, which --no-chunk-table does not keep: give one of them")
    chunks = _output_path(args.chunks)
    trace = _output_path(args.trace, "--trace")
    if trace is not None and args.no_chunk_table:
        raise SimschedError("--trace draws the chunk table, which --no-chunk-table does not keep: give one of them")
    result = simulate(machine, scheduler, workload, args.threads, seed=args.seed, repeat=args.repeat,
                      keep_chunks=not args.no_chunk_table, timeline=trace is not None)
    _write_chunks(result, chunks)
    if trace is not None:
        from .timeline import write_trace

        write_trace(trace, result)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(result.summary())
    return 0


def cmd_machines(args) -> int:
    from .machine import builtin_machines, load_machine

    if args.latency_against and not args.name:
        raise SimschedError("--latency-against compares one machine: name it, e.g. simsched machines NAME "
                            "--latency-against FILE.csv")
    if args.name:
        machine = load_machine(args.name)
        if args.latency_against:
            from .analysis.latency import compare_latency, format_comparison, read_latency_csv

            rows = compare_latency(machine, read_latency_csv(args.latency_against))
            print(json.dumps(rows) if args.json else format_comparison(machine, rows))
            return 0
        if args.json:
            print(json.dumps({"name": machine.name, "description": machine.description,
                              "cores": machine.cores, **{k: v for k, v in machine.data.items()
                                                         if not k.startswith("_")},
                              "latency_matrix_ns": machine.latency.tolist(),
                              "defaults": {d: machine.setting(*d.split(".")) for d in machine.defaulted()}}))
        else:
            print(machine.describe())
        return 0
    names = builtin_machines()
    if args.json:
        print(json.dumps([{"name": n, "description": load_machine(n).description,
                           "cores": load_machine(n).cores} for n in names]))
    else:
        for name in names:
            machine = load_machine(name)
            print(f"{name:<20} {machine.cores:>3} cores  {machine.description}")
    return 0


def cmd_sweep(args) -> int:
    from .errors import Interrupted
    from .sweep import load_experiment, run_sweep, with_machine_settings

    if args.jobs is not None:
        from .pool import check_jobs

        check_jobs(args.jobs)
    if args.jobs is not None and args.dask:
        raise SimschedError("--jobs and --dask exclude each other: a Dask cluster has its own workers")
    experiment = load_experiment(args.config)
    if args.set:
        experiment = with_machine_settings(experiment, args.set)
    out = Path(args.out) if args.out else Path("results") / experiment.name
    try:
        frame = run_sweep(experiment, jobs=args.jobs, progress=not args.quiet and sys.stderr.isatty(), out=out,
                          fmt=args.format, dask=args.dask, force=args.force, retry_failed=args.retry_failed)
    except Interrupted as stop:
        print(f"simsched: interrupted: {len(stop.frame)} of {len(experiment.points)} points saved in {out}; "
              "run the same command again to compute the rest", file=sys.stderr)
        return 128 + stop.signum
    table_path = frame.attrs["table"]
    failed = int((frame["error"] != "").sum())
    lost = frame.attrs["lost"]
    wall = frame["wall_s"].sum()
    before = frame.attrs["saved_before"]
    print(f"{experiment.name}: {len(frame)} runs ({failed} failed), {wall:.1f} s of simulation -> {table_path}")
    reused = frame.attrs["reused"]
    print(f"  {before} already saved, {len(experiment.points) - before - lost - reused} run now"
          + (f", {reused} copied from another seed's run, which drew nothing from its generator" if reused else ""))
    recomputed = frame.attrs["recomputed"]
    if recomputed:
        print(f"  {recomputed} saved {'point' if recomputed == 1 else 'points'} recomputed because input "
              f"files changed since they were saved: {', '.join(frame.attrs['changed_inputs'])}")
    if failed:
        first = frame[frame["error"] != ""].iloc[0]
        kept = frame.attrs["kept_failed"]
        print(f"simsched: {failed} of {len(frame)} points failed"
              + (f" ({kept} kept from an earlier run)" if kept else "")
              + f"; their errors are in the 'error' column of {table_path} (first: {first['scheduler']} on "
              f"{first['machine']} with {first['threads']} threads: {first['error']}); "
              "add --retry-failed to run them again", file=sys.stderr)
    if lost:
        print(f"simsched: {lost} points were lost with their workers; run the same command again to compute them",
              file=sys.stderr)
    if failed < len(frame):
        _print_section_tables(experiment, frame, out)
    if experiment.published_d_us and failed < len(frame):
        from .analysis import burden_table

        from .output import write_whole

        table = burden_table(frame, experiment.published_d_us, experiment.fit_machine or None)
        write_whole(out / "burden.csv", lambda partial: table.to_csv(partial, index=False))
        print()
        _print_burden(table, experiment)
    return 1 if failed or lost else 0


def _print_section_tables(experiment, frame, out: Path) -> None:
    """Each analysis section of the experiment ([rank], [breakdown], [affinity], [apps], [peers]): its table
    saved beside the results and printed, then the published finding it states."""

    from .output import write_whole

    def section(spec, filename, table, text):
        write_whole(out / filename, lambda partial: table.to_csv(partial, index=False))
        print()
        print(text)
        if spec.get("published"):
            print(f"published: {spec['published']}")

    if experiment.rank:
        from .analysis.ranking import format_ranking, rank_methods

        spec = experiment.rank
        table = rank_methods(frame, spec["baseline"], spec["baseline_threads"], spec.get("threads"))
        section(spec, "ranking.csv", table, format_ranking(table, spec.get("highlight")))
    if experiment.breakdown:
        from .analysis.breakdown import breakdown_table, format_breakdown

        table = breakdown_table(frame, experiment.breakdown["baseline"])
        section(experiment.breakdown, "breakdown.csv", table, format_breakdown(table))
    if experiment.affinity is not None:
        from .analysis.locality import affinity_table, format_affinity_table

        table = affinity_table(frame)
        section(experiment.affinity, "affinity.csv", table, format_affinity_table(table))
    if experiment.apps is not None:
        from .analysis.apps import apps_comparison, apps_table, format_apps_table

        table = apps_table(frame)
        section(experiment.apps, "apps.csv", table, format_apps_table(apps_comparison(table)))
    if experiment.peers is not None:
        from .analysis.peers import format_peers, peers_table

        table = peers_table(frame)
        section(experiment.peers, "peers.csv", table, format_peers(table))


def _saved_experiment(results_path: Path):
    """The experiment.toml a sweep saved beside its results, parsed, or None."""
    from .sweep import load_experiment

    folder = results_path if results_path.is_dir() else results_path.parent
    config = folder / "experiment.toml"
    return load_experiment(config) if config.is_file() else None


def _print_burden(table, experiment) -> None:
    """A burden table, then where its published d come from and whose runs they were compared with."""
    from .analysis import format_burden_table

    machine = experiment.fit_machine if experiment is not None and experiment.published_d_us else None
    print(format_burden_table(table, machine))
    notes = [experiment.source] if experiment is not None and experiment.source else []
    machines = set(map(str, table["machine"]))
    if machine is not None and machine not in machines:
        notes.append(f"measured on {machine}; no run here is on it, so none is compared")
    elif machine is not None and machines != {machine}:
        notes.append(f"measured on {machine}, so only its runs are compared")
    if notes:
        print(f"published: {'; '.join(notes)}")


def cmd_fit(args) -> int:
    from .analysis import burden_table
    from .sweep import read_table

    path = Path(args.results)
    frame = read_table(path)
    experiment = _saved_experiment(path)
    published = (experiment.published_d_us or None) if experiment is not None else None
    table = burden_table(frame, published, (experiment.fit_machine or None) if published else None)
    if args.json:
        records = table.to_dict(orient="records")
        print(json.dumps([{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                           for k, v in r.items()} for r in records]))
    else:
        _print_burden(table, experiment)
    return 0


def cmd_rank(args) -> int:
    from .analysis.ranking import format_ranking, geometric_means, rank_methods, ranking_basis
    from .sweep import read_table

    path = Path(args.results)
    frame = read_table(path)
    experiment = _saved_experiment(path)
    spec = (experiment.rank if experiment else None) or {}
    baseline = args.baseline or spec.get("baseline")
    if args.baseline_threads is not None:
        if args.baseline_threads < 1:
            raise SimschedError(f"--baseline-threads must be >= 1, got {args.baseline_threads}")
        if not baseline:
            raise SimschedError("--baseline-threads is the baseline's thread count: give --baseline SPEC too")
    baseline_threads = args.baseline_threads
    if baseline_threads is None:
        baseline_threads = spec.get("baseline_threads", 1)
    if args.threads is not None and args.threads < 1:
        raise SimschedError(f"--threads must be >= 1, got {args.threads}")
    table = rank_methods(frame, baseline, baseline_threads,
                         args.threads if args.threads is not None else spec.get("threads"))
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(format_ranking(table, spec.get("highlight"), ranking_basis(baseline, baseline_threads)))
        means = geometric_means(table)
        if not means.empty:
            # Over several matrices a method is judged by its geometric mean speedup, as SpMV studies report it.
            print("\n" + format_ranking(means, spec.get("highlight"),
                                         "geometric mean of each method's best speedups over the workloads of a kind"))
    return 0


def _output_path(path: str | None, option: str = "--chunks") -> Path | None:
    """Check an output file argument (--chunks, --trace, --out) before any work is done."""
    from .output import check_output

    return check_output(path, option) if path else None


def _write_chunks(result, chunks: Path | None, source: str = "simulated") -> None:
    if chunks is not None:
        from .chunkfile import write_chunks

        write_chunks(result, chunks, source)


def cmd_native(args) -> int:
    from .signals import signals_interrupt

    # SIGINT and SIGTERM stop the threads within milliseconds (the runtime watches for them) and exit 128 +
    # the signal with one line; without a handler SIGTERM would kill the process silently.
    with signals_interrupt():
        return _native(args)


def _progress_line(line: str) -> None:
    """One line of progress on stderr, at once, on a terminal or not: stdout holds the command's result."""
    print(line, file=sys.stderr, flush=True)


def _native(args) -> int:
    from . import native

    if args.native_command is None:
        raise SimschedError("native needs a command: run, replay, validate, overhead, calibrate or record")
    native.require()
    if args.native_command == "calibrate":
        from .native.calibrate import calibrate

        command = "simsched native calibrate " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else \
            "simsched native calibrate"
        out = calibrate(args.out, args.threads, args.rounds, command=command.strip(), progress=_progress_line,
                        force=args.force, openmp=args.openmp)
        print(out.resolve())
        return 0
    if args.native_command == "replay":
        return _native_replay(args)
    if args.native_command == "record":
        return _native_record(args)
    if args.native_command == "overhead":
        from .native.overhead import format_overhead, overhead
        from .native.validate import check_machine_file

        from .output import check_output, image_path

        # A plot that cannot be written is refused before anything is measured.
        plot = image_path(check_output(Path(args.plot), "--plot"), "--plot") if args.plot is not None else None
        table = overhead(check_machine_file(args.machine), args.threads, args.iters_per_thread, args.delay_ns,
                         args.outer, args.test_time_us, _native_schedulers(args.schedulers),
                         openmp=not args.no_openmp)
        print(table.to_json(orient="records") if args.json else format_overhead(table))
        if plot is not None:
            from .native.overhead import plot_overhead
            from .output import save_figure

            save_figure(plot_overhead(table), plot, "--plot")
        return 0
    if args.native_command == "validate":
        from .native.validate import check_machine_file, format_validation, validate

        if args.workload is not None:
            return _native_validate_trace(args)
        if args.locality:
            if args.schedulers is not None:
                raise SimschedError("--locality validates its own three schedulers; --schedulers belongs to the others")
            return _native_validate_locality(args)
        if args.n is not None or args.sweeps is not None:
            raise SimschedError("--n and --sweeps belong to the --locality validation; give --locality too")
        args.points = 10 if args.points is None else args.points
        if args.points < 2 or args.repeat < 1:
            raise SimschedError("--points must be >= 2 and --repeat >= 1")
        table = validate(check_machine_file(args.machine), args.threads, args.points, args.repeat,
                         _native_schedulers(args.schedulers), openmp=not args.no_openmp,
                         progress=_progress_line)
        if args.json:
            print(table.to_json(orient="records"))
        else:
            print(format_validation(table))
        return 0
    from .schedulers import get_scheduler
    from .workloads import get_workload

    native.native_config(get_scheduler(args.scheduler))
    get_workload(args.workload)
    native.check_threads(args.threads)
    chunks = _output_path(args.chunks)
    trace = _output_path(args.trace, "--trace")
    result = native.run(args.scheduler, args.workload, args.threads, seed=args.seed, repeat=args.repeat,
                        timeout_s=args.timeout, array_bytes=args.array_bytes, timeline=trace is not None,
                        late_us=args.late_us)
    _write_chunks(result, chunks, "native")
    if trace is not None:
        from .timeline import write_trace

        write_trace(trace, result, kind="native")
    if args.json:
        print(json.dumps({**result.to_dict(), **native.summary(result)}))
    else:
        print(native.report(result))
    return 0


def _native_record(args) -> int:
    from .native import kernels, record

    out = record.check_out(args.out)
    record.check_counts(args.block, args.samples)
    options = {key: getattr(args, key) for key in ("matrix", "iters", "graph", "source", "n", "array_bytes",
                                                   "pattern", "repeat", "seed")}
    kernel = kernels.from_options(args.kernel, options)
    loops, meta = record.record(kernel, args.block, args.samples, args.timeout)
    record.write(out, loops, meta)
    total = sum(float(loop.sum()) for loop in loops)
    print(f"{kernel.spec}: {len(loops)} loop(s), {sum(kernel.loop_sizes)} iterations in blocks of {meta['block']}, "
          f"{total / 1e6:.3f} ms recorded -> {out}")
    return 0


def _native_schedulers(text: str | None) -> list[str] | None:
    """The schedulers of --schedulers, each one native mode runs (checked before anything is measured)."""
    from .analysis.advice import split_schedulers
    from .native import native_config
    from .schedulers import get_scheduler

    if text is None:
        return None
    names = split_schedulers(text)
    for name in names:
        native_config(get_scheduler(name))
    return names


def _native_validate_trace(args) -> int:
    from .native.validate import check_machine_file, format_trace_validation, validate_trace

    if args.locality or args.points is not None or args.no_openmp or args.n is not None or args.sweeps is not None:
        raise SimschedError("--workload validates a recorded trace; --locality, --points, --no-openmp, --n and "
                            "--sweeps belong to the other validations")
    table = validate_trace(args.workload, check_machine_file(args.machine), args.threads, args.repeat,
                           _native_schedulers(args.schedulers), progress=_progress_line)
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(format_trace_validation(table))
    return 0


def _native_validate_locality(args) -> int:
    from .native.validate import (LOCALITY_N, LOCALITY_SWEEPS, check_machine_file, format_locality,
                                  locality_errors, validate_locality)

    if args.points is not None or args.no_openmp:
        raise SimschedError("--points and --no-openmp belong to the uforall validation, not --locality")
    table = validate_locality(check_machine_file(args.machine), args.threads,
                              LOCALITY_N if args.n is None else args.n, args.repeat,
                              LOCALITY_SWEEPS if args.sweeps is None else args.sweeps,
                              progress=_progress_line)
    if args.json:
        print(json.dumps({"rows": json.loads(table.to_json(orient="records")),
                          "median_abs_error": locality_errors(table)}))
    else:
        print(format_locality(table))
    return 0


def _native_replay(args) -> int:
    import numpy as np

    from . import native
    from .chunkfile import read_chunks, replay_seed
    from .workloads import get_workload

    out = _output_path(args.out, "--out")
    chunks, meta = read_chunks(args.result)
    seed = replay_seed(meta, args.result, get_workload(args.workload), args.seed)
    if meta is None:
        print(f"simsched: {args.result} records no workload or seed (an older chunk table): replaying it "
              f"with seed {seed} unchecked", file=sys.stderr)
    measured, table = native.replay(chunks, args.workload, seed=seed, timeout_s=args.timeout)
    if out is not None:
        from .output import write_whole

        write_whole(out, lambda partial: table.to_csv(partial, index=False), "--out")
    error = (table["measured_ns"] - table["simulated_ns"]).abs() / table["simulated_ns"].where(
        table["simulated_ns"] > 0)
    figures = {"chunks": int(len(table)), "threads": measured.threads,
               "simulated_ns": float(table["simulated_ns"].sum()), "measured_ns": float(table["measured_ns"].sum()),
               "simulated_makespan_ns": float(chunks["end"].max()),
               "measured_makespan_ns": measured.makespan_ns,
               "median_abs_chunk_error": float(np.nanmedian(error)) if error.notna().any() else None}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"replayed {figures['chunks']} chunks on {figures['threads']} thread(s)")
        print(f"  chunk time   simulated {figures['simulated_ns'] / 1e3:12.3f} us   "
              f"measured {figures['measured_ns'] / 1e3:12.3f} us")
        print(f"  makespan     simulated {figures['simulated_makespan_ns'] / 1e3:12.3f} us   "
              f"measured {figures['measured_makespan_ns'] / 1e3:12.3f} us")
        if figures["median_abs_chunk_error"] is not None:
            print(f"  median |measured - simulated| / simulated per chunk: {figures['median_abs_chunk_error']:.3f}")
    return 0


def cmd_record(args) -> int:
    import tempfile

    from .host import HOST_MACHINE_FILE
    from .native.record import check_out
    from .native.user_program import (DEFAULT_SCHEDULES, check_validation, format_validation, record_program,
                                      split_schedules, validate_program, write_recording)

    command = args.program_args[1:] if args.program_args[:1] == ["--"] else args.program_args
    progress = _progress_line if sys.stderr.isatty() else None  # runs take seconds each: say which one is on
    if not args.validate and (args.trace or args.schedules or args.json):
        raise SimschedError("--trace, --schedules and --json go with --validate")
    if not args.validate and not args.out:
        raise SimschedError("record needs --out FILE (the trace to write), or --validate")
    if args.trace and args.out:
        raise SimschedError("--out and --trace: with --trace nothing is recorded, so there is nothing to write")
    out = check_out(args.out) if args.out else None
    schedules = split_schedules(args.schedules) if args.schedules is not None else list(DEFAULT_SCHEDULES)
    if args.validate and args.machine == HOST_MACHINE_FILE and not Path(args.machine).exists():
        raise SimschedError(f"--validate simulates on {HOST_MACHINE_FILE}, which is not here: measure this "
                            "machine first (simsched native calibrate), or name one with --machine")
    if args.validate:
        from .machine import load_machine

        load_machine(args.machine)  # a bad machine is refused before the program runs
        check_validation(Path(args.trace) if args.trace else None, args.rounds)
    from .signals import signals_interrupt

    # SIGTERM as SIGINT: the program's process group is killed and the scratch folders removed on the way out.
    with signals_interrupt(), tempfile.TemporaryDirectory(prefix="simsched-trace-") as folder:
        trace = Path(args.trace) if args.trace else None
        if trace is None:
            recording = record_program(command, args.threads, args.repeat, args.block, args.runtime,
                                       args.timeout, progress=progress)
            trace = out or Path(folder) / "recording.npz"  # .npz: no optional reader needed
            write_recording(trace, recording)
            meta = recording.meta
            print(f"recorded {len(recording.loops)} loop instance(s) of {meta['command_line']} on {meta['threads']} "
                  f"threads under OMP_SCHEDULE={meta['schedule']} ({meta['runtime']}); an empty chunk spans "
                  f"{meta['empty_chunk_ns']:.0f} ns in the recording (taken off every chunk), the tool adds "
                  f"{meta['tool_ns_per_chunk']:.0f} ns a chunk to the runtime's {meta['runtime_ns_per_chunk']:.0f}"
                  + (f"; wrote {trace}" if out else ""), file=sys.stderr if args.json else sys.stdout)
        if not args.validate:
            return 0
        report = validate_program(command, trace, args.machine, schedules, args.rounds, args.threads,
                                  args.runtime, args.timeout, progress=progress)
    print(json.dumps(report) if args.json else format_validation(report))
    return 0


def _cmd_listing(registry_name: str, kind: str):
    def command(args) -> int:
        from . import plugins, registry, schedulers, workloads  # noqa: F401  (the built-ins register)

        plugins.load_automatic()
        table = getattr(registry, registry_name)
        unknown = [name for name in args.names if name not in table]
        if unknown:
            raise SimschedError(f"unknown {kind} {unknown[0]!r} (known: {', '.join(table)})")
        rows = [row for row in registry.describe(table) if not args.names or row["name"] in args.names]
        print(json.dumps(rows) if args.json else registry.format_description(rows, kind))
        return 0
    return command


cmd_schedulers = _cmd_listing("SCHEDULERS", "scheduler")
cmd_workloads = _cmd_listing("WORKLOADS", "workload")


def cmd_advise(args) -> int:
    from .analysis.advice import (DEFAULT_BASELINE, RECORDED_BASELINE, RECORDED_SCHEDULERS, advise, format_advice,
                                  split_schedulers, trace_program)

    schedulers = split_schedulers(args.schedulers) if args.schedulers is not None else None
    program, baseline = args.program, args.baseline
    trace = trace_program(program)
    if trace is not None:  # a trace file: its loops are the program
        from .workloads.trace import trace_metadata

        program = f"trace:path={trace}"
        if "runtime" in trace_metadata(trace):  # recorded on LLVM's or Intel's runtime by simsched record
            schedulers = schedulers if schedulers is not None else list(RECORDED_SCHEDULERS)
            baseline = RECORDED_BASELINE if baseline is None else baseline
    advice = advise(args.machine, program, args.threads, schedulers, baseline or DEFAULT_BASELINE, args.seed,
                    args.seeds)
    print(json.dumps(advice.to_dict()) if args.json else format_advice(advice))
    return 0


def cmd_breakdown(args) -> int:
    from .analysis.breakdown import breakdown_table, format_breakdown
    from .sweep import read_table

    path = Path(args.results)
    frame = read_table(path)
    experiment = _saved_experiment(path)
    spec = (experiment.breakdown if experiment else None) or {}
    table = breakdown_table(frame, args.baseline or spec.get("baseline", "lbs"))
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(format_breakdown(table))
    return 0


def cmd_plot(args) -> int:
    from .analysis.plots import plot_ranking, plot_sweep
    from .output import check_output, image_path
    from .sweep import read_table

    if args.timeline:
        return _plot_timeline(args)
    if args.results is None:
        raise SimschedError("plot needs a results table or folder, or --timeline TRACE")
    path = Path(args.results)
    frame = read_table(path)
    folder = path if path.is_dir() else path.parent
    experiment = _saved_experiment(path)
    rank = experiment.rank if experiment else None
    breakdown = experiment.breakdown if experiment else None
    affinity = experiment.affinity if experiment else None
    apps = experiment.apps if experiment else None
    peers = experiment.peers is not None if experiment else False
    # The plot of the first section the experiment has, in this order, and its default file name.
    default = next((name for name, present in (("peers.png", peers), ("apps.png", apps is not None),
                                                ("affinity.png", affinity is not None),
                                                ("breakdown.png", breakdown is not None))
                    if present), "speedup.png")
    out = image_path(check_output(Path(args.out) if args.out else folder / default, "--out"))
    if peers:
        from .analysis.peers import peers_table, plot_peers

        plot_peers(peers_table(frame), out)
    elif apps is not None:
        from .analysis.apps import apps_comparison, apps_table, plot_apps

        plot_apps(apps_comparison(apps_table(frame)), out)
    elif affinity is not None:
        from .analysis.locality import affinity_table, plot_affinity

        plot_affinity(affinity_table(frame), out)
    elif breakdown is not None:
        from .analysis.breakdown import breakdown_table, plot_breakdown

        plot_breakdown(breakdown_table(frame, breakdown["baseline"]), out)
    elif rank:
        # A method comparison (E4 style): speedup against threads per method.
        from .analysis.ranking import rank_methods, ranking_basis

        plot_ranking(rank_methods(frame, rank["baseline"], rank["baseline_threads"]), out,
                     ranking_basis(rank["baseline"], rank["baseline_threads"]))
    else:
        published = experiment.published_d_us if experiment else None
        plot_sweep(frame, out, published or None, experiment.fit_machine if published else None,
                   experiment.source if published else "")
    print(out)
    return 0


def _plot_timeline(args) -> int:
    from .analysis.gantt import plot_timeline

    if args.results is not None:
        raise SimschedError("plot takes either a results table or --timeline TRACE, not both")
    from .output import check_output, image_path

    out = image_path(check_output(Path(args.out) if args.out else Path(args.timeline[0]).with_suffix(".png"),
                                  "--out"))
    if any(Path(trace).resolve() == out.resolve() for trace in args.timeline):
        raise SimschedError(f"--out: {out} is one of the traces; name another image file")
    print(plot_timeline(args.timeline, out))
    return 0


def cmd_report(args) -> int:
    import dataclasses

    from .analysis.fidelity import AGREES, DISAGREES, NO_RESULTS, verdict_counts, write_report
    from .output import check_output

    if not Path(args.results).is_dir():
        raise SimschedError(f"--results: no such folder: {args.results}")
    out = check_output(args.out, "--out")
    path, checks = write_report(args.results, out, args.sensitivity)
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in checks]))
        return 0
    counts = verdict_counts(checks)
    print(f"{path}: {counts[AGREES]} figures agree, {counts[DISAGREES]} disagree, {counts[NO_RESULTS]} "
          "have no results")
    return 0


def cmd_sensitivity(args) -> int:
    from .analysis.sensitivity import (default_varies, format_sensitivity, parse_vary, plot_tornado,
                                       run_sensitivity)
    from .errors import Interrupted
    from .machine import load_machine
    from .sweep import load_experiment

    if args.jobs is not None:
        from .pool import check_jobs

        check_jobs(args.jobs)
    experiment = load_experiment(args.config)
    if args.vary:
        varies = [parse_vary(text) for text in args.vary]
    else:
        varies = default_varies(load_machine(str(experiment.points[0]["machine"])))
    out = Path(args.out) if args.out else Path("results") / "sensitivity" / experiment.name
    try:
        table = run_sensitivity(experiment, varies, out, jobs=args.jobs,
                                progress=not args.quiet and sys.stderr.isatty(), default_set=not args.vary,
                                seeds=args.seeds)
    except Interrupted as stop:
        print(f"simsched: interrupted: the finished runs are saved in {out}; run the same command again to "
              "compute the rest", file=sys.stderr)
        return 128 + stop.signum
    print()
    print(format_sensitivity(table))
    print(f"\n{out / 'sensitivity.csv'}")
    print(plot_tornado(table, out / "tornado.png"))
    return 0


COMMANDS = {"run": cmd_run, "machines": cmd_machines, "sweep": cmd_sweep, "fit": cmd_fit, "rank": cmd_rank,
            "breakdown": cmd_breakdown, "plot": cmd_plot, "advise": cmd_advise, "native": cmd_native,
            "report": cmd_report, "sensitivity": cmd_sensitivity, "record": cmd_record,
            "schedulers": cmd_schedulers, "workloads": cmd_workloads}


if __name__ == "__main__":
    sys.exit(main())
