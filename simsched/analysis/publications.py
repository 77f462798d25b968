"""The publications the experiments reproduce: the figures each states, and how ours are computed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import SimschedError
from .verdicts import INPUT, Check, bounded, claim, close_to, within_factor


# -- E1 ----------------------------------------------------------------------------------------------------
E1_PUBLISHED_D_US = {"fg-tree": 5.67, "fg-central": 7.55, "omp-static": 8.12, "fg-tree-full": 12.00,
                     "omp-dynamic": 31.94, "cilk": 68.80}


def e1_checks(results: pd.DataFrame | None) -> list[Check]:
    """E1: the six burdens, their order and ratios, and where the speedup curves rise and level off."""
    from .amdahl import duration_for, fit_burden
    from .burden import speedup_curves

    d: dict[str, float] = {}
    curves: dict[str, pd.Series] = {}
    if results is not None:
        for (_, scheduler, threads), curve in speedup_curves(results).items():
            curves[scheduler] = curve
            if len(curve) >= 2:
                d[scheduler] = fit_burden(curve.index.to_numpy(), curve.to_numpy(), int(threads)).d_us

    def at(scheduler, speedup=None, share=None):
        curve = curves.get(scheduler)
        if curve is None:
            return None
        target = speedup if speedup is not None else share * curve.max()
        return duration_for(curve.index.to_numpy(), curve.to_numpy(), target)

    def ratio(a, b, op):
        return op(d[a], d[b]) if a in d and b in d else None

    e = "E1"
    checks = [close_to(e, f"burden d of {s} (us)", pub, d.get(s), ".3g") for s, pub in E1_PUBLISHED_D_US.items()]
    published_order = sorted(E1_PUBLISHED_D_US, key=E1_PUBLISHED_D_US.get)
    ours_order = sorted(d, key=d.get) if set(d) == set(E1_PUBLISHED_D_US) else None
    checks.append(claim(e, "order of the six burdens", " < ".join(published_order),
                        " < ".join(ours_order) if ours_order else None,
                        ours_order == published_order if ours_order else None, "the same order"))
    checks += [
        close_to(e, "fg-tree's d below omp-static's", 0.43, ratio("fg-tree", "omp-static", lambda a, b: 1 - a / b),
                 ".0%"),
        close_to(e, "cilk's d over fg-tree's", 12.1, ratio("cilk", "fg-tree", lambda a, b: a / b), ".3g", unit="x"),
        close_to(e, "half-barrier tree's d over full-barrier tree's", 5.67 / 12.00,
                 ratio("fg-tree", "fg-tree-full", lambda a, b: a / b), ".2f"),
    ]
    for s in ("fg-tree", "omp-static"):
        checks.append(within_factor(e, f"{s}: shortest loop with a speedup (S >= 1)", 1.5, at(s, speedup=1.0), 2,
                                    fmt=".4g", unit=" us"))
    for s in ("fg-tree", "omp-static"):
        checks.append(within_factor(e, f"{s}: loop near peak (95% of its peak speedup)", 85, at(s, share=0.95), 2,
                                    fmt=".4g", unit=" us"))
    for s in ("omp-dynamic", "cilk"):
        checks.append(within_factor(e, f"{s}: shortest loop with a speedup (S >= 1)", 16, at(s, speedup=1.0), 2,
                                    fmt=".4g", unit=" us"))
    for s in ("omp-dynamic", "cilk"):
        checks.append(bounded(e, f"{s}: loop near peak (95% of its peak speedup)", "over 200 us",
                              at(s, share=0.95), low=200, fmt=".4g", unit=" us"))
    checks.append(within_factor(e, "fg-tree: loop with S = 24", 22, at("fg-tree", speedup=24.0), 1.5,
                                fmt=".4g", unit=" us"))
    peaks = [float(c.max()) for c in curves.values()]
    checks.append(bounded(e, "highest speedup of any scheduler", "below 48 (the curves saturate)",
                          max(peaks) if peaks else None, high=48 - 1e-9, fmt=".1f"))
    return checks


# -- E2 ----------------------------------------------------------------------------------------------------
E2_LOOPS = {"fine": "uforall:n=1000000,cost_ns=1000", "coarse": "uforall:n=64,cost_ns=10000000",
            "nested": "nested"}
E2_SPLITTING = ["lbs", "lbs:split=guided", "adapt-g", "adapt-l", "distrib"]


def e2_checks(results: pd.DataFrame | None) -> list[Check]:
    """E2: the work-splitting strategies against each other, offload, and plain LBS, per loop shape."""
    times: dict[str, pd.Series] = {}
    if results is not None:
        from .breakdown import breakdown_table

        table = breakdown_table(results, "lbs")
        for loop, workload in E2_LOOPS.items():
            rows = table[table["workload"] == workload]
            if not rows.empty:
                times[loop] = rows.set_index("scheduler")["normalized"]

    def has(loop, schedulers):
        return loop in times and all(s in times[loop].index for s in schedulers)

    e = "E2"
    fine, coarse = times.get("fine"), times.get("coarse")
    others = E2_SPLITTING[1:]
    checks = [
        bounded(e, "fine loop: slowest over fastest work-splitting strategy",
                "all within 1-3% of each other",
                fine[E2_SPLITTING].max() / fine[E2_SPLITTING].min() - 1 if has("fine", E2_SPLITTING) else None,
                high=0.03, fmt=".2%"),
        bounded(e, "fine loop: offload over the fastest work-splitting strategy", "several times slower",
                fine["offload"] / fine[E2_SPLITTING].min() if has("fine", E2_SPLITTING + ["offload"]) else None,
                low=2.0, fmt=".2f", unit="x"),
        claim(e, "coarse loop: every other work-splitting strategy beats plain lbs", "yes",
              ", ".join(f"{s} {coarse[s] / coarse['lbs']:.3f}" for s in others) + " of lbs"
              if has("coarse", E2_SPLITTING) else None,
              bool((coarse[others] < coarse["lbs"]).all()) if has("coarse", E2_SPLITTING) else None,
              "each faster than lbs"),
        close_to(e, "coarse loop: plain lbs over the best strategy, minus 1", 0.39,
                 coarse["lbs"] / coarse[others].min() - 1 if has("coarse", E2_SPLITTING) else None, ".0%"),
    ]
    for loop in E2_LOOPS:
        best = times[loop].idxmin() if loop in times else None
        checks.append(claim(e, f"{loop} loop: the best strategy", "distrib", best,
                            best == "distrib" if best is not None else None, "distrib fastest"))
    return checks


# -- E3 ----------------------------------------------------------------------------------------------------
E3_THREADS = 32


CENTRAL = ", central barrier"


def e3_label(spec: str) -> str:
    """A scheduler of E3 by its name, with the barrier when it is central (libgomp's, runtime=gnu): the OpenMP
    runtimes differ there."""
    from ..schedulers import get_scheduler

    name, _, params = spec.partition(":")
    try:
        central = getattr(get_scheduler(spec), "barrier_kind", None) == "central"
    except SimschedError:  # a spec this version no longer knows: read its barrier from the text
        central = "barrier=central" in params.split(",")
    return name + (CENTRAL if central else "")


def e3_checks(results: pd.DataFrame | None) -> list[Check]:
    """E3 at 32 threads: who keeps iterations in place, and whether hybrid balances better than static."""
    at = None
    if results is not None:
        from .affinity_study import affinity_table

        table = affinity_table(results)
        at = table[table["threads"] == E3_THREADS].assign(
            balance=lambda t: t["workload"].str.extract(r"balance=(\w+)", expand=False),
            scheduler=lambda t: t["scheduler"].map(e3_label))

    def affinity(scheduler, balance, how):
        if at is None:
            return None
        rows = at[at["scheduler"] == scheduler]
        if balance is not None:
            rows = rows[rows["balance"] == balance]
        return getattr(rows["affinity"], how)() if not rows.empty else None

    e = "E3"
    checks = [
        bounded(e, "omp-static: lowest affinity over the working sets", "1 (every iteration in place)",
                affinity("omp-static", None, "min"), low=1.0, fmt=".3f"),
        bounded(e, "hybrid: lowest affinity on balanced loops", "close to omp-static's",
                affinity("hybrid", "balanced", "min"), low=0.9, fmt=".3f"),
        bounded(e, "hybrid: lowest affinity on unbalanced loops", "a large share",
                affinity("hybrid", "unbalanced", "min"), low=0.5, fmt=".3f"),
    ]
    for scheduler in ("cilk", "omp-dynamic", "omp-guided", *(f"{s}{CENTRAL}" for s in ("omp-dynamic", "omp-guided"))):
        checks.append(bounded(e, f"{scheduler}: highest affinity over the working sets", "little",
                              affinity(scheduler, None, "max"), high=0.3, fmt=".3f"))
    from .affinity_study import working_set_mb

    sets = [] if at is None else sorted({round(working_set_mb(w), 1) for w in at["workload"]})
    for mb in sets or [11.9, 15.9, 79.0, 266.0]:
        figure = f"unbalanced {mb:.3g} MB: hybrid's time over omp-static's"
        ratio = None
        if at is not None:
            rows = at[(at["balance"] == "unbalanced") & (at["working_set_mb"].round(1) == mb)]
            times = rows.set_index("scheduler")["makespan_ns"]
            if {"hybrid", "omp-static"} <= set(times.index):
                ratio = times["hybrid"] / times["omp-static"]
        checks.append(bounded(e, figure, "below 1 (hybrid balances load better)", ratio, high=1.0 - 1e-12,
                              fmt=".3f"))
    return checks


# -- E4 ----------------------------------------------------------------------------------------------------
E4_THREADS = 28
# Every speedup is over guided with chunk 1 on one thread, on libgomp as the publication ran it.
E4_BASELINE = "omp-guided:chunk=1,runtime=gnu"


def _e4_ranking(results: pd.DataFrame | None) -> pd.DataFrame | None:
    if results is None:
        return None
    from .ranking import rank_methods

    return rank_methods(results, E4_BASELINE, 1, E4_THREADS)


def _ich_ranks(table: pd.DataFrame | None, experiment: str, workloads: list[str]) -> list[Check]:
    checks = []
    for workload in workloads:
        rank = None
        if table is not None:
            rows = table[(table["workload"] == workload) & (table["method"] == "ich")]
            rank = int(rows["rank"].iloc[0]) if not rows.empty else None
        checks.append(bounded(experiment, f"{workload}: iCh's rank at {E4_THREADS} threads", "among the top three",
                              rank, high=3, fmt=".0f"))
    return checks


E4_LOOPS = ["linear:n=1000000,first_ns=0,last_ns=2000", "exp-inc:n=1000000", "exp-dec:n=1000000"]


def e4_checks(results: pd.DataFrame | None) -> list[Check]:
    """E4 on the synthetic loops: iCh's rank, its distance from the best, and its sensitivity to eps."""
    table = _e4_ranking(results)
    e = "E4"
    checks = _ich_ranks(table, e, E4_LOOPS)
    ich = None if table is None else table[table["method"] == "ich"]
    behind = None if ich is None or ich.empty else float(ich["behind_best"].mean())
    checks.append(bounded(e, f"iCh's mean shortfall from the best method at {E4_THREADS} threads", "about 5%",
                          behind, high=0.05 * 1.25, fmt=".1%"))
    checks.append(bounded(e, f"iCh's sensitivity to eps at {E4_THREADS} threads (slowest / fastest)",
                          "at most about 1.26x",
                          None if ich is None or ich.empty else float(ich["sensitivity"].max()), high=1.26,
                          fmt=".3f", unit="x"))
    always = None
    if table is not None:
        top = table[table["rank"] <= 3].groupby("method")["workload"].nunique()
        always = sorted(top[top == table["workload"].nunique()].index)
    checks.append(claim(e, "methods always among the top three", "iCh only",
                        ", ".join(always) if always else ("none" if always is not None else None),
                        always == ["ich"] if always is not None else None, "iCh and no other"))
    return checks


def e4_apps_checks(results: pd.DataFrame | None) -> list[Check]:
    """E4 on the application loops: iCh among the top three on each; SpMV by the geometric mean over matrices."""
    from .ranking import geometric_means, workload_kind

    table = _e4_ranking(results)
    if table is None:
        return _ich_ranks(None, "E4 apps", ["(the application loops)"])
    # BL report SpMV as one figure, the geometric mean of each method's speedup over their matrices.
    means = geometric_means(table)
    pooled = table["workload"].map(workload_kind).isin(set(means["kind"]))
    workloads = list(dict.fromkeys(table["workload"]))
    table = pd.concat([table[~pooled], means], ignore_index=True)
    return _ich_ranks(table, "E4 apps", list(dict.fromkeys(table["workload"]))) + _matrix_inputs(workloads)


MATRIX_STATISTICS = (("mean", "mean nonzeros per row", 3), ("var", "variance of nonzeros per row", 4),
                     ("ratio", "longest row over shortest", 3))


def _matrix_inputs(workloads: list[str]) -> list[Check]:
    """The statistics of each matrix drawn like a published one (``spmv:like=``) against BL Table 1's."""
    from ..workloads import get_workload
    from ..workloads.published_matrices import FIGURES, known

    checks = []
    for spec in workloads:
        workload = get_workload(spec)
        if workload.name != "spmv" or "like" not in workload.given:
            continue
        name = known(workload.params["like"])
        _, _, mean, ratio, var = FIGURES[name]
        published = {"mean": float(mean), "var": float(var), "ratio": float(ratio)}
        ours = workload.matrix_statistics()
        ours = {**ours, "ratio": ours["max"] / ours["min"]}
        for key, label, digits in MATRIX_STATISTICS:
            # Table 1 prints each figure to its digits: hugebubbles-10's variance of 0 is 0.09 in whole rows.
            check = close_to("E4 apps", f"{name} matrix ({workload.params['rows'] or 'its'} rows): {label}",
                             published[key], ours[key], f".{digits}g") if published[key] else \
                bounded("E4 apps", f"{name} matrix ({workload.params['rows'] or 'its'} rows): {label}",
                        f"{var} (as printed)", ours[key], high=0.1, fmt=f".{digits}g")
            checks.append(dataclasses.replace(check, kind=INPUT))
    return checks


# -- E5 ----------------------------------------------------------------------------------------------------
def _apps(results: pd.DataFrame | None) -> pd.DataFrame | None:
    if results is None:
        return None
    from .app_study import apps_comparison, apps_table

    return apps_comparison(apps_table(results))


def _row(comparison: pd.DataFrame | None, app: str, scheduler: str) -> dict | None:
    if comparison is None:
        return None
    rows = comparison[(comparison["app"] == app) & (comparison["scheduler"] == scheduler)]
    return rows.iloc[0].to_dict() if not rows.empty else None


STATISTICS = {"loops": ("loops", ".0f", ""), "min_us": ("shortest loop", ".3g", " us"),
              "avg_us": ("mean loop", ".4g", " us"), "max_us": ("longest loop", ".4g", " us"),
              "fine": ("fine-grain loops", ".0f", ""), "t_seq_s": ("sequential time", ".4g", " s"),
              "in_loops_pct": ("time in loops", ".4g", "%"), "fine_s": ("time in loops under 1 ms", ".4g", " s"),
              "cilk_fine_s": ("Cilk time in fine-grain loops", ".3g", " s"),
              "cilk_total_s": ("Cilk total time", ".3g", " s")}


def _statistics_checks(experiment: str, results: pd.DataFrame | None, apps: tuple[str, ...]) -> list[Check]:
    """The published loop statistics of each application against those of the program the runs simulated."""
    from ..workloads import get_workload
    from ..workloads.apps import app_statistics, published_statistics

    ours: dict[str, dict[str, float]] = {}
    if results is not None:
        from .burden import succeeded

        for workload, seed in results[succeeded(results)][["workload", "seed"]].drop_duplicates().itertuples(
                index=False):
            spec = get_workload(workload)
            app = spec.params.get("name") if hasattr(spec, "params") else None
            if app in apps and app not in ours:
                ours[app] = app_statistics(spec.build(np.random.default_rng(int(seed))), full=True)
    checks = []
    for app in apps:
        for key, published in published_statistics(app).items():
            label, fmt, unit = STATISTICS[key]
            check = close_to(experiment, f"{app} program: {label}", published, ours.get(app, {}).get(key),
                             fmt, unit=unit)
            checks.append(dataclasses.replace(check, kind=INPUT))
    return checks


def e5_checks(results: pd.DataFrame | None) -> list[Check]:
    """E5 codes at 48 threads: LB3D's speedups and the fine-grain scheduler's gains over OpenMP."""
    comparison = _apps(results)
    lb3d, mpdata, clover = (_row(comparison, app, "fg-tree") for app in ("lb3d", "mpdata", "cloverleaf"))
    e = "E5"
    return _statistics_checks(e, results, ("cloverleaf", "mpdata", "lb3d")) + [
        close_to(e, "LB3D: speedup under omp-static", 34.1, lb3d and lb3d["base_speedup"], ".3g"),
        close_to(e, "LB3D: speedup under fg-tree", 39.3, lb3d and lb3d["speedup"], ".3g"),
        close_to(e, "MPDATA: fg-tree faster than omp-static by", 22.0, mpdata and mpdata["whole_gain_pct"], ".1f",
                 unit="%"),
        bounded(e, "CloverLeaf: fg-tree faster than omp-static by", "over 4%",
                clover and clover["whole_gain_pct"], low=4.0, fmt=".1f", unit="%"),
    ]


E5_KERNELS = ("bfs", "bc", "cc", "pr")


def e5_ligra_checks(results: pd.DataFrame | None) -> list[Check]:
    """E5 Ligra kernels at 48 threads: the hybrid Cilk scheduler's gains over Cilk, fine loops and whole programs."""
    from ..workloads.apps import PUBLISHED

    comparison = _apps(results)
    checks = _statistics_checks("E5 Ligra", results, E5_KERNELS)
    for kernel in E5_KERNELS:
        pub = PUBLISHED[kernel]
        row = _row(comparison, kernel, "cilk-fg")
        checks.append(close_to("E5 Ligra", f"{kernel.upper()}: fine-grain loops faster with cilk-fg by",
                               100 * (pub.cilk_fine_s / pub.hybrid_fine_s - 1), row and row["fine_gain_pct"],
                               ".1f", unit="%"))
        checks.append(close_to("E5 Ligra", f"{kernel.upper()}: whole program faster with cilk-fg by",
                               100 * (pub.cilk_total_s / pub.hybrid_total_s - 1), row and row["whole_gain_pct"],
                               ".1f", unit="%"))
    return checks


@dataclass(frozen=True)
class Publication:
    """An experiment whose figures are published: where, and how to compute its checks from its results."""

    experiment: str  # the experiment's name, which names its results folder
    key: str
    title: str
    source: str
    checks: Callable[[pd.DataFrame | None], list[Check]]
    analysis: str  # the command that prints the experiment's own table
    workloads: tuple[str, ...] | None = None  # the only workloads its checks read (None: all of them)

    def evaluate(self, results: pd.DataFrame | None) -> list[Check]:
        """The checks on ``results``; a table without a successful run counts as no results."""
        from .burden import succeeded

        if results is not None and (results.empty or not succeeded(results).any()):
            results = None
        return self.checks(results)


PUBLICATIONS = [
    Publication("e1-burden-xeon-e7", "E1", "scheduler burden on the 48-core Xeon E7",
                "Arif, Vandierendonck, CCPE 2021, section 5.1, Table 1, Figure 10", e1_checks, "fit"),
    Publication("e2-lbs-cell", "E2", "lazy binary splitting on the Cell QS22",
                "Hoffmann, Prell, Rauber, 2011, section 4", e2_checks, "breakdown", tuple(E2_LOOPS.values())),
    Publication("e3-affinity-xeon-e5", "E3", "loop affinity on the 32-core Xeon E5",
                "Handleman, Rattew, Lee, Schardl, section V", e3_checks, "plot"),
    Publication("e4-ich-haswell", "E4", "iCh against self-scheduling on the 28-core Haswell, synthetic loops",
                "Booth, Lane, sections 5-6", e4_checks, "rank"),
    Publication("e4-apps-haswell", "E4 apps", "iCh against self-scheduling on application loops",
                "Booth, Lane, section 6", e4_apps_checks, "rank"),
    Publication("e5-apps-xeon-e7", "E5", "fine-grain loops in CloverLeaf, MPDATA and LB3D",
                "Arif, Vandierendonck, CCPE 2021, sections 5.2-5.3", e5_checks, "plot"),
    Publication("e5-ligra-xeon-e7", "E5 Ligra", "the hybrid Cilk scheduler on Ligra kernels",
                "Arif, Vandierendonck, CCPE 2021, section 5.4", e5_ligra_checks, "plot"),
]
BY_EXPERIMENT = {p.experiment: p for p in PUBLICATIONS}


def publication_of(experiment: str) -> Publication:
    """The publication an experiment reproduces, or a one-line error naming those that have one."""
    if experiment not in BY_EXPERIMENT:
        raise SimschedError(f"experiment {experiment!r} has no published figures to check "
                            f"(those with some: {', '.join(BY_EXPERIMENT)})")
    return BY_EXPERIMENT[experiment]
