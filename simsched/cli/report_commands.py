"""The commands that draw and report: plot, report and sensitivity."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import SimschedError
from .simulation_commands import saved_experiment


def cmd_plot(args) -> int:
    from ..analysis.plots import plot_ranking, plot_sweep
    from ..output import check_output, image_path
    from ..resultstable import read_table

    if args.timeline:
        return _plot_timeline(args)
    if args.results is None:
        raise SimschedError("plot needs a results table or folder, or --timeline TRACE")
    path = Path(args.results)
    frame = read_table(path)
    folder = path if path.is_dir() else path.parent
    experiment = saved_experiment(path)
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
        from ..analysis.peers import peers_table, plot_peers

        plot_peers(peers_table(frame), out)
    elif apps is not None:
        from ..analysis.app_study import apps_comparison, apps_table, plot_apps

        plot_apps(apps_comparison(apps_table(frame)), out)
    elif affinity is not None:
        from ..analysis.affinity_study import affinity_table, plot_affinity

        plot_affinity(affinity_table(frame), out)
    elif breakdown is not None:
        from ..analysis.breakdown import breakdown_table, plot_breakdown

        plot_breakdown(breakdown_table(frame, breakdown["baseline"]), out)
    elif rank:
        # A method comparison (E4 style): speedup against threads per method.
        from ..analysis.ranking import rank_methods, ranking_basis

        plot_ranking(rank_methods(frame, rank["baseline"], rank["baseline_threads"]), out,
                     ranking_basis(rank["baseline"], rank["baseline_threads"]))
    else:
        published = experiment.published_d_us if experiment else None
        plot_sweep(frame, out, published or None, experiment.fit_machine if published else None,
                   experiment.source if published else "")
    print(out)
    return 0


def _plot_timeline(args) -> int:
    from ..analysis.gantt import plot_timeline

    if args.results is not None:
        raise SimschedError("plot takes either a results table or --timeline TRACE, not both")
    from ..output import check_output, image_path

    out = image_path(check_output(Path(args.out) if args.out else Path(args.timeline[0]).with_suffix(".png"),
                                  "--out"))
    if any(Path(trace).resolve() == out.resolve() for trace in args.timeline):
        raise SimschedError(f"--out: {out} is one of the traces; name another image file")
    print(plot_timeline(args.timeline, out))
    return 0


def cmd_report(args) -> int:
    import dataclasses

    from ..analysis.fidelity import write_report
    from ..analysis.verdicts import AGREES, DISAGREES, NO_RESULTS, verdict_counts
    from ..output import check_output

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
    from ..analysis.sensitivity import (default_varies, format_sensitivity, parse_vary, plot_tornado,
                                       run_sensitivity)
    from ..errors import Interrupted
    from ..machine import load_machine
    from ..experiment import load_experiment

    if args.jobs is not None:
        from ..pool import check_jobs

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
