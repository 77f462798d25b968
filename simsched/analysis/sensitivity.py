"""One-at-a-time sensitivity of an experiment's published figures to its machine's parameters.

Each varied parameter is scaled by each of its factors, alone, on the experiment's machine,
and the whole experiment runs again on that variant (a sweep of its own, saved and resumable
like any other). The figures are the experiment's fidelity checks, so the table says which of
the model's conclusions move with which machine number, and which verdicts flip.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SimschedError
from ..output import save_figure, write_whole
from .publications import publication_of
from .verdicts import DISAGREES

DEFAULT_FACTORS = (0.8, 1.25)
# The sections whose numbers --vary takes by default: what each operation costs, not what the machine is.
DEFAULT_SECTIONS = ("clock", "latency_ns", "coherence", "costs_ns", "os", "memory_ns")
TABLE = "sensitivity.csv"
BASELINE = "baseline"


@dataclass(frozen=True)
class Vary:
    """A machine parameter (``section.key``) and the factors it is scaled by, one at a time."""

    key: str
    factors: tuple[float, ...]


def parse_vary(text: str) -> Vary:
    """``section.key=F1,F2,...`` (factors > 0) as a Vary, or one line naming what is wrong."""
    key, sep, factors = (part.strip() for part in text.partition("="))
    if not sep or not key or not factors:
        raise SimschedError(f"--vary: expected section.key=FACTOR,FACTOR (e.g. latency_ns.socket_hop=0.8,1.25), "
                            f"got {text!r}")
    if "." not in key:
        raise SimschedError(f"--vary: {key!r} names no section: write section.key, e.g. latency_ns.{key}")
    values = []
    for item in factors.split(","):
        try:
            value = float(item)
        except ValueError:
            raise SimschedError(f"--vary {key}: factor {item.strip()!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise SimschedError(f"--vary {key}: factors must be finite and > 0, got {item.strip()}")
        if value in values:
            raise SimschedError(f"--vary {key}: factor {item.strip()} is given twice")
        values.append(value)
    return Vary(key, tuple(values))


def parameter_value(machine, key: str) -> float:
    """The number at ``section.key`` (or ``cache.l3.key``) of a machine, or one line saying why it cannot vary."""
    from ..machine import setting_at

    value = setting_at(machine.data, key)
    if value is None:
        raise SimschedError(f"--vary {key}: machine {machine.name} has no {key}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SimschedError(f"--vary {key}: {key} of machine {machine.name} is not a number ({value!r})")
    return value


def scaled(value: float, factor: float, key: str):
    """``value`` x ``factor``, an integer where the machine schema wants one (a count must stay whole)."""
    from ..machine import SCHEMA

    product = value * factor
    section, _, name = key.partition(".")
    if SCHEMA.get(section, {}).get(name, (float,))[0] is int:
        if not float(product).is_integer():
            raise SimschedError(f"--vary {key}: {key} is a whole number ({value}); factor {factor:g} makes it "
                                f"{product:g}")
        return int(product)
    return product


def default_varies(machine) -> list[Vary]:
    """Every number of the machine's cost sections, each scaled by the default factors."""
    return [Vary(f"{section}.{key}", DEFAULT_FACTORS)
            for section in DEFAULT_SECTIONS for key, value in machine.data.get(section, {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)]


def _variants(experiment, varies: list[Vary], default_set: bool = False, log=None):
    """(label, key, factor, parameter value, machine spec) per run, the baseline first; all checked first.

    A variant the machine refuses (a value out of its range) is an error, or, when ``varies`` is the
    default set (``default_set``), a line in ``log`` saying it is left out.
    """
    from ..machine import format_setting, load_machine

    machines = {str(p["machine"]) for p in experiment.points}
    if len(machines) != 1:
        raise SimschedError(f"sensitivity varies one machine; experiment {experiment.name} has "
                            f"{len(machines)}: {', '.join(sorted(machines))}")
    name = machines.pop()
    if name.endswith("]"):
        raise SimschedError(f"sensitivity varies a machine as its file has it; {name} is already a variant")
    machine = load_machine(name)
    out = [(BASELINE, "", 1.0, np.nan, name)]
    keys = [v.key for v in varies]
    for key in keys:
        if keys.count(key) > 1:
            raise SimschedError(f"--vary {key} is given twice; give its factors once, comma-separated")
    for vary in varies:
        base = parameter_value(machine, vary.key)
        for factor in vary.factors:
            value = scaled(base, factor, vary.key)
            spec = f"{name}[{vary.key}={format_setting(value)}]"
            try:
                load_machine(spec)
            except SimschedError as exc:
                message = f"--vary {vary.key}: factor {factor:g} gives {value:g}, which the machine refuses: {exc}"
                if not default_set:
                    raise SimschedError(message) from None
                print(f"left out: {message}", file=log or sys.stdout)
                continue
            out.append((f"{vary.key}={factor:g}", vary.key, factor, float(value), spec))
    return out


def select_seeds(experiment, seeds: int | None):
    """The experiment with only the grid's first ``seeds`` seeds (all of them with None)."""
    if seeds is None:
        return experiment
    if seeds < 1:
        raise SimschedError(f"--seeds must be >= 1, got {seeds}")
    grid_seeds = list(dict.fromkeys(p["seed"] for p in experiment.points))
    keep = set(grid_seeds[:seeds])
    return dataclasses.replace(experiment, points=[p for p in experiment.points if p["seed"] in keep])


def run_sensitivity(experiment, varies: list[Vary], out: str | Path, jobs: int | None = None,
                    progress: bool = False, log=None, default_set: bool = False,
                    seeds: int | None = None) -> pd.DataFrame:
    """Run the experiment on its machine and on each variant; one row per (run, figure).

    Only the grid points whose workloads the figures read are run, with the grid's first
    ``seeds`` seeds (all with None). Every variant's sweep is
    saved in its own folder under ``out``, so a stopped run resumes where it stopped; the
    table is written to ``out/sensitivity.csv`` when all have run.
    """
    from ..sweep import run_sweep

    publication = publication_of(experiment.name)
    experiment = select_seeds(experiment, seeds)
    if publication.workloads is not None:
        experiment = dataclasses.replace(experiment, points=[p for p in experiment.points
                                                             if p["workload"] in publication.workloads])
    runs = _variants(experiment, varies, default_set, log)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, (label, key, factor, value, spec) in enumerate(runs, 1):
        variant = dataclasses.replace(experiment, points=[{**p, "machine": spec} for p in experiment.points])
        frame = run_sweep(variant, jobs=jobs, progress=progress, out=out / label)
        failed = int((frame["error"] != "").sum())
        print(f"[{k}/{len(runs)}] {label}: {len(frame)} runs ({failed} failed)", file=log or sys.stdout, flush=True)
        for check in publication.evaluate(frame):
            rows.append({"experiment": experiment.name, "machine": runs[0][4], "run": label, "parameter": key,
                         "factor": factor,
                         "parameter_value": value, "figure": check.figure, "value": check.value,
                         "verdict": check.verdict, "points": len(variant.points),
                         "seeds": len({p["seed"] for p in variant.points}), "seeds_option": seeds,
                         "default_set": default_set})
    table = _relative(pd.DataFrame(rows))
    write_whole(out / TABLE, lambda path: table.to_csv(path, index=False))
    return table


def _relative(table: pd.DataFrame) -> pd.DataFrame:
    """Each row's figure against the baseline's: its value, verdict, and the relative change."""
    base = table[table["run"] == BASELINE].set_index("figure")
    table = table.assign(baseline=table["figure"].map(base["value"]),
                         baseline_verdict=table["figure"].map(base["verdict"]))
    with np.errstate(divide="ignore", invalid="ignore"):
        table["change"] = table["value"] / table["baseline"] - 1.0
    return table


def load_sensitivity(folder: str | Path) -> pd.DataFrame | None:
    """A sensitivity run's table, or None where the folder holds none."""
    path = Path(folder) / TABLE
    return pd.read_csv(path, keep_default_na=False, na_values=[""]) if path.is_file() else None


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per figure with a number: its baseline and, per parameter, the change at its lowest and highest factor."""
    varied = table[(table["run"] != BASELINE) & table["baseline"].notna()]
    rows = []
    for (figure, parameter), group in varied.groupby(["figure", "parameter"], sort=False):
        # The lowest factor below 1 and the highest above it; a side with none (a variant the machine
        # refused) stays empty rather than repeating the other side.
        below, above = group[group["factor"] < 1], group[group["factor"] > 1]
        low = below.loc[below["factor"].idxmin()] if not below.empty else None
        high = above.loc[above["factor"].idxmax()] if not above.empty else None
        flips = group[group["verdict"] != group["baseline_verdict"]]
        rows.append({"figure": figure, "parameter": parameter, "baseline": group["baseline"].iloc[0],
                     "baseline_verdict": group["baseline_verdict"].iloc[0],
                     "low_factor": np.nan if low is None else low["factor"],
                     "low_change": np.nan if low is None else low["change"],
                     "high_factor": np.nan if high is None else high["factor"],
                     "high_change": np.nan if high is None else high["change"],
                     "swing": float(np.nanmax(np.abs(group["change"].to_numpy(dtype=float))))
                     if group["change"].notna().any() else np.nan,
                     "flips": "; ".join(f"x{r.factor:g}: {r.verdict}" for r in flips.itertuples())})
    return pd.DataFrame(rows)


def _change(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:+.1%}"


def _changes(row) -> str:
    """A parameter's changes of a figure at its lowest and highest factor (those it has)."""
    return ", ".join(f"x{row[f'{side}_factor']:g} {_change(row[f'{side}_change'])}" for side in ("low", "high")
                     if pd.notna(row[f"{side}_factor"]))


def format_sensitivity(table: pd.DataFrame, top: int = 3) -> str:
    """Text: per figure, its baseline and the parameters it moves with most, with the verdicts that flip."""
    lines = []
    for figure, group in summary(table).groupby("figure", sort=False):
        group = group.sort_values("swing", ascending=False, na_position="last")
        first = group.iloc[0]
        lines.append(f"{figure}: {first['baseline']:.4g} ({first['baseline_verdict']})")
        for r in group.head(top).itertuples():
            flips = f"  verdict flips at {r.flips}" if r.flips else ""
            lines.append(f"  {r.parameter:<28} {_changes(r._asdict())}{flips}")
        rest = group.iloc[top:]
        flipped = rest[rest["flips"] != ""]
        for r in flipped.itertuples():
            lines.append(f"  {r.parameter:<28} verdict flips at {r.flips}")
    return "\n".join(lines)


def sensitivity_command(table: pd.DataFrame, folder: str) -> str:
    """The command line that makes a sensitivity table like ``table`` in ``folder``."""
    experiment = table["experiment"].iloc[0]
    varied = table[table["run"] != BASELINE]
    factors = {p: ",".join(f"{f:g}" for f in sorted(g["factor"].unique()))
               for p, g in varied.groupby("parameter", sort=False)}
    command = f"simsched sensitivity experiments/{experiment}.toml"
    if not bool(table["default_set"].iloc[0]):
        command += "".join(f" --vary {p}={f}" for p, f in factors.items())
    if pd.notna(table["seeds_option"].iloc[0]):
        command += f" --seeds {int(table['seeds_option'].iloc[0])}"
    return f"{command} --out {folder}"


def source_kind(comment: str) -> str:
    """What a machine file's comment says a value is: fitted, assumed, or (neither word) taken from a source."""
    text = comment.lower()
    return "fitted" if "fitted" in text else "assumed" if "assum" in text else "sourced"


def parameter_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per varied parameter: its value, what its machine file says of it, the figure it moves most, its flips."""
    from ..machine import value_sources

    sources = value_sources(str(table["machine"].iloc[0]))
    frame = summary(table)
    rows = []
    for parameter, group in frame.groupby("parameter", sort=False):
        group = group.sort_values("swing", ascending=False, na_position="last")
        top = group.iloc[0]
        values = table[(table["parameter"] == parameter)]
        base = values["parameter_value"] / values["factor"]
        rows.append({"parameter": parameter, "value": float(base.iloc[0]),
                     "kind": source_kind(sources.get(parameter, "")),
                     "figure": top["figure"] if pd.notna(top["swing"]) else "", "swing": top["swing"],
                     "flips": sum(bool(f) for f in group["flips"])})
    return pd.DataFrame(rows).sort_values("swing", ascending=False, na_position="last")


def format_sensitivity_markdown(table: pd.DataFrame, experiment: str, folder: str) -> list[str]:
    """Markdown lines for the fidelity report: per figure, the two parameters it moves with most, and any flip."""
    parameters = [p for p in dict.fromkeys(table["parameter"]) if isinstance(p, str) and p]
    factors = sorted({f for f in table["factor"] if f != 1.0})
    seeds = int(table["seeds"].iloc[0])
    lines = [f"### Sensitivity of {experiment}'s figures", "",
             f"Each of {len(parameters)} machine parameters scaled by {' and '.join(f'{f:g}' for f in factors)}, "
             f"one at a time, each variant a run of the {int(table['points'].iloc[0])} grid points the figures "
             f"read ({seeds} seed{'s' if seeds > 1 else ''}): `{sensitivity_command(table, folder)}`. "
             f"Ours is the baseline run's figure; a change is the variant's figure over it, minus 1 "
             f"(n/a: the variant gives the figure no value, e.g. a speedup it never reaches). "
             f"The tornado plot is `{folder}/tornado.png`.", "",
             "| figure | ours | most sensitive to | its change | next | its change "
             "| parameters that flip the verdict |",
             "|---|---|---|---|---|---|---|"]
    for figure, group in summary(table).groupby("figure", sort=False):
        group = group.sort_values("swing", ascending=False, na_position="last")
        first = group.iloc[0]
        second = group.iloc[1] if len(group) > 1 else None
        flips = ", ".join(r.parameter for r in group.itertuples() if r.flips) or "none"
        lines.append(
            f"| {figure} | {first['baseline']:.4g} | {first['parameter']} | {_changes(first)} | "
            f"{second['parameter'] if second is not None else ''} | "
            f"{_changes(second) if second is not None else ''} | {flips} |")
    claims = table[table["baseline"].isna() & (table["run"] != BASELINE)]
    for figure, group in claims.groupby("figure", sort=False):
        flips = group[group["verdict"] != group["baseline_verdict"]]
        verdict = group["baseline_verdict"].iloc[0]
        where = ", ".join(f"{r.parameter} x{r.factor:g} ({r.verdict})" for r in flips.itertuples())
        lines += ["", f"Claim \"{figure}\" ({verdict}): " + (f"flips with {where}." if where else
                                                                "the same in every variant.")]
    flipped = table[(table["run"] != BASELINE) & (table["verdict"] != table["baseline_verdict"])]
    if not flipped.empty:
        gained = flipped[flipped["baseline_verdict"] == DISAGREES]
        lines += ["", f"{len(flipped)} verdicts flip across the variants ({len(gained)} from disagrees to agrees)."]
    lines += ["", f"The parameters by the largest change they make to any figure; \"what\" is what the machine file "
              f"`{table['machine'].iloc[0]}` says of the value (fitted, assumed, or from a cited source):", "",
              "| parameter | value | what | largest change | of | figures with a flipped verdict |",
              "|---|---|---|---|---|---|"]
    for r in parameter_summary(table).itertuples():
        lines.append(f"| {r.parameter} | {r.value:g} | {r.kind} | {_change(r.swing).lstrip('+')} | {r.figure} | "
                     f"{r.flips} |")
    return lines


def plot_tornado(table: pd.DataFrame, out, top: int = 8, columns: int = 3) -> Path:
    """A tornado per figure: the change at each parameter's low and high factor, largest swing on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = summary(table)
    figures = [f for f, g in frame.groupby("figure", sort=False) if g["swing"].notna().any()]
    if not figures:
        raise SimschedError("no figure with a number to plot")
    rows = math.ceil(len(figures) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 0.35 * top * rows + 1.2 * rows),
                             squeeze=False)
    for ax in axes.flat[len(figures):]:
        ax.axis("off")
    for ax, figure in zip(axes.flat, figures):
        group = frame[frame["figure"] == figure].sort_values("swing", ascending=True).tail(top)
        y = np.arange(len(group))
        low = 100 * group["low_change"].fillna(0).to_numpy(dtype=float)
        high = 100 * group["high_change"].fillna(0).to_numpy(dtype=float)
        ax.barh(y - 0.2, low, height=0.4, color="tab:blue", label="factor below 1")
        ax.barh(y + 0.2, high, height=0.4, color="tab:orange", label="factor above 1")
        ax.axvline(0, color="black", linewidth=0.8)
        # Symmetric, and at least +-1%, so that a change of a few thousandths of a percent looks like one.
        reach = max(1.0, 1.1 * float(np.max(np.abs(np.concatenate([low, high])))))
        ax.set_xlim(-reach, reach)
        ax.set_yticks(y, group["parameter"], fontsize=7)
        ax.set_title(f"{figure}\n(ours: {group['baseline'].iloc[0]:.4g})", fontsize=8)
        ax.set_xlabel("change of the figure (%)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper right")
    fig.suptitle(f"{table['experiment'].iloc[0]}: each figure's change with each machine parameter, one at a time",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    try:
        return save_figure(fig, out, "--plot")
    finally:
        plt.close(fig)
