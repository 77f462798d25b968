"""The commands that simulate and analyse: run, machines, sweep, fit, rank, advise, breakdown, listings."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..errors import SimschedError


def cmd_run(args) -> int:
    from ..engine import simulate
    from ..machine import load_machine, with_settings
    from ..schedulers import get_scheduler
    from ..workloads import get_workload

    machine = load_machine(with_settings(args.machine, args.set))
    scheduler = get_scheduler(args.scheduler)
    workload = get_workload(args.workload)
    machine.check_threads(args.threads)  # before --chunks is checked: the likelier mistake first
    if args.chunks and args.no_chunk_table:
        raise SimschedError("--chunks writes the chunk table, which --no-chunk-table does not keep: give one of them")
    chunks = output_path(args.chunks)
    trace = output_path(args.trace, "--trace")
    if trace is not None and args.no_chunk_table:
        raise SimschedError("--trace draws the chunk table, which --no-chunk-table does not keep: give one of them")
    result = simulate(machine, scheduler, workload, args.threads, seed=args.seed, repeat=args.repeat,
                      keep_chunks=not args.no_chunk_table, timeline=trace is not None)
    write_chunks(result, chunks)
    if trace is not None:
        from ..timeline import write_trace

        write_trace(trace, result)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(result.summary())
    return 0


LISTED_MATRIX_CORES = 1024


def cmd_machines(args) -> int:
    from ..machine import builtin_machines, load_machine

    if args.latency_against and not args.name:
        raise SimschedError("--latency-against compares one machine: name it, e.g. simsched machines NAME "
                            "--latency-against FILE.csv")
    if args.name:
        machine = load_machine(args.name)
        if args.latency_against:
            from ..analysis.latency import compare_latency, format_comparison, read_latency_csv

            rows = compare_latency(machine, read_latency_csv(args.latency_against))
            print(json.dumps(rows) if args.json else format_comparison(machine, rows))
            return 0
        if args.json:
            print(json.dumps({"name": machine.name, "description": machine.description,
                              "cores": machine.cores, **{k: v for k, v in machine.data.items()
                                                         if not k.startswith("_")},
                              # Every pair's latency up to a thousand cores (a 16,384-core table is 268M numbers).
                              "latency_matrix_ns": (machine.latency.tolist()
                                                    if machine.cores <= LISTED_MATRIX_CORES else None),
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
    from ..errors import Interrupted
    from ..experiment import load_experiment, with_machine_settings
    from ..sweep import run_sweep

    if args.jobs is not None:
        from ..pool import check_jobs

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
        from ..analysis import burden_table

        from ..output import write_whole

        table = burden_table(frame, experiment.published_d_us, experiment.fit_machine or None)
        write_whole(out / "burden.csv", lambda partial: table.to_csv(partial, index=False))
        print()
        _print_burden(table, experiment)
    return 1 if failed or lost else 0


def _print_section_tables(experiment, frame, out: Path) -> None:
    """Each analysis section of the experiment ([rank], [breakdown], [affinity], [apps], [peers]): its table
    saved beside the results and printed, then the published finding it states."""

    from ..output import write_whole

    def section(spec, filename, table, text):
        write_whole(out / filename, lambda partial: table.to_csv(partial, index=False))
        print()
        print(text)
        if spec.get("published"):
            print(f"published: {spec['published']}")

    if experiment.rank:
        from ..analysis.ranking import format_ranking, rank_methods

        spec = experiment.rank
        table = rank_methods(frame, spec["baseline"], spec["baseline_threads"], spec.get("threads"))
        section(spec, "ranking.csv", table, format_ranking(table, spec.get("highlight")))
    if experiment.breakdown:
        from ..analysis.breakdown import breakdown_table, format_breakdown

        table = breakdown_table(frame, experiment.breakdown["baseline"])
        section(experiment.breakdown, "breakdown.csv", table, format_breakdown(table))
    if experiment.affinity is not None:
        from ..analysis.affinity_study import affinity_table, format_affinity_table

        table = affinity_table(frame)
        section(experiment.affinity, "affinity.csv", table, format_affinity_table(table))
    if experiment.apps is not None:
        from ..analysis.app_study import apps_comparison, apps_table, format_apps_table

        table = apps_table(frame)
        section(experiment.apps, "apps.csv", table, format_apps_table(apps_comparison(table)))
    if experiment.peers is not None:
        from ..analysis.peers import format_peers, peers_table

        table = peers_table(frame)
        section(experiment.peers, "peers.csv", table, format_peers(table))


def saved_experiment(results_path: Path):
    """The experiment.toml a sweep saved beside its results, parsed, or None."""
    from ..experiment import load_experiment

    folder = results_path if results_path.is_dir() else results_path.parent
    config = folder / "experiment.toml"
    return load_experiment(config) if config.is_file() else None


def _print_burden(table, experiment) -> None:
    """A burden table, then where its published d come from and whose runs they were compared with."""
    from ..analysis import format_burden_table

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
    from ..analysis import burden_table
    from ..resultstable import read_table

    path = Path(args.results)
    frame = read_table(path)
    experiment = saved_experiment(path)
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
    from ..analysis.ranking import format_ranking, geometric_means, rank_methods, ranking_basis
    from ..resultstable import read_table

    path = Path(args.results)
    frame = read_table(path)
    experiment = saved_experiment(path)
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


def output_path(path: str | None, option: str = "--chunks") -> Path | None:
    """Check an output file argument (--chunks, --trace, --out) before any work is done."""
    from ..output import check_output

    return check_output(path, option) if path else None


def write_chunks(result, chunks: Path | None, source: str = "simulated") -> None:
    if chunks is not None:
        from ..chunkfile import write_chunks

        write_chunks(result, chunks, source)


def _cmd_listing(registry_name: str, kind: str):
    def command(args) -> int:
        from .. import plugins, registry, schedulers, workloads  # noqa: F401  (the built-ins register)

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
    from ..analysis.advice import (DEFAULT_BASELINE, RECORDED_BASELINE, RECORDED_SCHEDULERS, advise, format_advice,
                                  split_schedulers, trace_program)

    schedulers = split_schedulers(args.schedulers) if args.schedulers is not None else None
    program, baseline = args.program, args.baseline
    trace = trace_program(program)
    if trace is not None:  # a trace file: its loops are the program
        from ..workloads.trace import trace_metadata

        program = f"trace:path={trace}"
        if "runtime" in trace_metadata(trace):  # recorded on LLVM's or Intel's runtime by simsched record
            schedulers = schedulers if schedulers is not None else list(RECORDED_SCHEDULERS)
            baseline = RECORDED_BASELINE if baseline is None else baseline
    advice = advise(args.machine, program, args.threads, schedulers, baseline or DEFAULT_BASELINE, args.seed,
                    args.seeds)
    print(json.dumps(advice.to_dict()) if args.json else format_advice(advice))
    return 0


def cmd_breakdown(args) -> int:
    from ..analysis.breakdown import breakdown_table, format_breakdown
    from ..resultstable import read_table

    path = Path(args.results)
    frame = read_table(path)
    experiment = saved_experiment(path)
    spec = (experiment.breakdown if experiment else None) or {}
    table = breakdown_table(frame, args.baseline or spec.get("baseline", "lbs"))
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(format_breakdown(table))
    return 0
