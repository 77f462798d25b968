"""``simsched fit``, ``rank`` and ``plot``: the published machine only, plain sweeps, readable figures."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import simsched.analysis.plots as plots
from simsched import cli

E7 = "xeon-e7-4860v2"
SCALED = "scaled:base=xeon-e7-4860v2,sockets=8"
VARIANT = "xeon-e7-4860v2[latency_ns.socket_hop=60,costs_ns.steal=25]"
BURDEN = """\
[experiment]
name = "burden-machines"

[grid]
machine = MACHINES
scheduler = ["fg-tree", "omp-static", "fg-tree-full"]
threads = 8
workload = "uforall:n=80"
"workload.total_us" = { logspace = [0.5, 5000], num = 9 }

[fit]
source = "a publication, Table 1"
published_d_us = { "fg-tree" = 5.67, "omp-static" = 8.12, "fg-tree-full" = 12.0 }
"""
PLAIN = """\
[experiment]
name = "my-loop"

[grid]
machine = ["haswell-e5-2695v3", "VARIANT"]
scheduler = ["omp-static", "omp-dynamic:chunk=1", "omp-dynamic:chunk=16", "stealing"]
threads = THREADS
workload = "exp-dec:n=3000"
""".replace("VARIANT", VARIANT)


def write(folder, text: str):
    """``text`` as the experiment file of ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "experiment.toml"
    config.write_text(text, encoding="utf-8")
    return config


def sweep(folder, text: str, *extra):
    """Run the sweep of ``text`` into ``folder``/out, in this process (one job runs the points here)."""
    args = ["sweep", write(folder, text), "--out", folder / "out", "--jobs", "1", "--quiet", *extra]
    assert cli.main(list(map(str, args))) == 0
    return folder / "out"


def refused(capsys, *args) -> str:
    """Run the CLI, insisting on exit 2 with one line on stderr and nothing on stdout; the line."""
    capsys.readouterr()
    try:
        status = cli.main(list(map(str, args)))
    except SystemExit as exit:  # argparse's refusals exit
        status = exit.code
    out, err = capsys.readouterr()
    assert status == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and err.startswith("simsched") and "Traceback" not in err, err
    return err


def run_json(capsys, *args):
    """What the CLI prints with --json, parsed."""
    capsys.readouterr()  # what ran before (a sweep's summary) is not this command's output
    assert cli.main([*map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_text(capsys, *args) -> str:
    """What the CLI prints."""
    capsys.readouterr()
    assert cli.main(list(map(str, args))) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def burden_sweep(tmp_path_factory):
    """E1's kind of sweep on the published machine and on a what-if variant of it; fit.machine says which."""
    text = BURDEN.replace("MACHINES", json.dumps([E7, VARIANT])) + f'machine = "{E7}"\n'
    return sweep(tmp_path_factory.mktemp("burden"), text)


@pytest.fixture(scope="module")
def plain_sweep(tmp_path_factory):
    """One's own workload over schedulers, two machines (one with overrides) and two thread counts."""
    return sweep(tmp_path_factory.mktemp("plain"), PLAIN.replace("THREADS", "[4, 8]"))


@pytest.fixture
def drawn(monkeypatch):
    """The figures ``simsched plot`` saves, as it saves them."""
    figures = []
    save = plots.save_figure

    def keep(fig, path, *args):
        figures.append(fig)
        return save(fig, path, *args)

    monkeypatch.setattr(plots, "save_figure", keep)
    return figures


def assert_all_inside(fig) -> None:
    """Every title, label, tick label and legend of ``fig`` lies inside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure was closed once saved: draw it on a canvas of its own
    canvas.draw()
    renderer = canvas.get_renderer()
    box = fig.bbox
    tight = fig.get_tightbbox(renderer)  # in inches
    assert tight.x0 >= -0.01 and tight.y0 >= -0.01, tight
    assert tight.x1 <= fig.get_figwidth() + 0.01 and tight.y1 <= fig.get_figheight() + 0.01, tight
    artists = [fig._suptitle, *fig.legends]
    for ax in fig.axes:
        if ax.get_visible():
            lo, hi = sorted(ax.get_xlim())
            shown = [label for label in ax.get_xticklabels() if lo <= label.get_position()[0] <= hi]
            artists += [ax.title, ax.xaxis.label, ax.yaxis.label, ax.get_legend(), *shown]
    for artist in artists:
        if artist is None or (hasattr(artist, "get_text") and not artist.get_text()):
            continue
        extent = artist.get_window_extent(renderer)
        assert extent.x0 >= box.x0 - 1 and extent.x1 <= box.x1 + 1, (artist, extent, box)
        assert extent.y0 >= box.y0 - 1 and extent.y1 <= box.y1 + 1, (artist, extent, box)


def column_end(header: str, name: str) -> int:
    """Where the heading ``name`` of a text table ends (figures are right-aligned under it)."""
    return header.index(name) + len(name) - 1


# -- fit: the published d against the machine the publication measured --------------------------------------
def test_fit_compares_only_the_machine_the_publication_measured(burden_sweep, capsys):
    records = run_json(capsys, "fit", burden_sweep)
    assert {r["machine"] for r in records} == {E7, VARIANT} and len(records) == 6
    for record in records:
        if record["machine"] == E7:
            assert record["published_d_us"] == {"fg-tree": 5.67, "omp-static": 8.12,
                                                "fg-tree-full": 12.0}[record["scheduler"]]
            assert record["d_vs_published"] == pytest.approx(record["d_us"] / record["published_d_us"] - 1)
        else:
            assert record["published_d_us"] is None and record["d_vs_published"] is None
    # The sweep's own table, saved beside the results, says the same.
    saved = pd.read_csv(burden_sweep / "burden.csv")
    assert saved.loc[saved["machine"] == VARIANT, "published_d_us"].isna().all()
    assert saved.loc[saved["machine"] == E7, "published_d_us"].notna().all()


def test_fit_table_keeps_its_columns_aligned_with_long_machine_names(burden_sweep, capsys):
    lines = run_text(capsys, "fit", burden_sweep).splitlines()
    header, rows = lines[0], [line for line in lines[2:] if line.startswith(E7)]
    assert len(rows) == 6
    for row in rows:
        machine = VARIANT if row.startswith(VARIANT) else E7
        fields = row[len(machine):].split()
        assert fields[1] == "8"  # the thread count, then the figures
        # Each figure ends under the end of its heading, however long the machine's name.
        named = [("P", fields[1]), ("d (us)", fields[2]), ("S_max", fields[9])]
        if machine == E7:
            assert len(fields) == 12 and fields[11].endswith("%")
            named += [("published", fields[10]), ("error", fields[11])]
        else:
            assert len(fields) == 10  # empty published and error cells
        for name, value in named:
            end = column_end(header, name)
            assert row[end - len(value) + 1:end + 1] == value, (name, row)
    assert f"measured on {E7}, so only its runs are compared" in lines[-1]
    assert lines[-1].startswith("published: a publication, Table 1")


def test_a_machine_changed_by_set_is_not_compared_with_the_publication(tmp_path, capsys):
    one = BURDEN.replace("MACHINES", json.dumps(E7)).replace('num = 9', 'num = 3')
    one = one.replace('"fg-tree", "omp-static", "fg-tree-full"', '"fg-tree"')
    one = one.replace(', "omp-static" = 8.12, "fg-tree-full" = 12.0', "")
    plain = run_json(capsys, "fit", sweep(tmp_path / "plain", one))
    # The grid's only machine is the one its published figures were measured on ...
    assert [r["published_d_us"] for r in plain] == [5.67]
    changed = run_json(capsys, "fit", sweep(tmp_path / "set", one, "--set", "latency_ns.socket_hop=60"))
    # ... but not once --set has changed it.
    assert [r["machine"] for r in changed] == [f"{E7}[latency_ns.socket_hop=60]"]
    assert [r["published_d_us"] for r in changed] == [None]
    text = run_text(capsys, "fit", tmp_path / "set" / "out")
    assert text.splitlines()[-1] == (f"published: a publication, Table 1; measured on {E7}; no run here "
                                     "is on it, so none is compared")


@pytest.mark.parametrize("fit, needles", [
    ("", ["[fit]", "2 machines", "fit.machine", E7, SCALED]),
    ('machine = "xeon-e7"\n', ["fit.machine", "'xeon-e7' is not a machine of the grid"]),
    ("machine = 7\n", ["fit.machine must be a machine name"]),
], ids=["unnamed", "not-in-grid", "not-a-name"])
def test_several_machines_need_fit_machine_before_anything_runs(tmp_path, capsys, fit, needles):
    config = write(tmp_path, BURDEN.replace("MACHINES", json.dumps([E7, SCALED])) + fit)
    message = refused(capsys, "sweep", config, "--out", tmp_path / "out", "--jobs", "1", "--quiet")
    for needle in needles:
        assert needle in message, message
    assert not (tmp_path / "out").exists()


def test_fit_machine_needs_published_figures(tmp_path, capsys):
    text = BURDEN.replace("MACHINES", json.dumps(E7)).split("[fit]")[0] + f'[fit]\nmachine = "{E7}"\n'
    message = refused(capsys, "sweep", write(tmp_path, text), "--out", tmp_path / "out", "--quiet")
    assert "fit.machine" in message and "published_d_us" in message


# -- rank: any sweep, per machine, against any baseline thread count ----------------------------------------
def test_rank_compares_a_plain_sweep_per_machine_over_the_sequential_loop(plain_sweep, capsys):
    results = pd.read_csv(plain_sweep / "results.csv", keep_default_na=False)
    records = run_json(capsys, "rank", plain_sweep)
    assert len(records) == 2 * 2 * 3  # machines x thread counts x methods
    for r in records:
        runs = results[(results["machine"] == r["machine"]) & (results["threads"] == r["threads"])]
        mine = runs[runs["scheduler"].str.split(":").str[0] == r["method"]]
        best = mine.loc[mine["makespan_ns"].idxmin()]
        assert r["best"] == best["scheduler"] and r["makespan_ns"] == pytest.approx(best["makespan_ns"])
        assert r["speedup"] == pytest.approx(best["sequential_ns"] / best["makespan_ns"])
    for (_, _), group in pd.DataFrame(records).groupby(["machine", "threads"]):
        assert sorted(group["rank"]) == [1, 2, 3]
        assert group.loc[group["rank"] == 1, "speedup"].iloc[0] == group["speedup"].max()
    text = run_text(capsys, "rank", plain_sweep)
    assert text.startswith("speedup over the sequential loop")
    assert f"exp-dec:n=3000, 4 threads on {VARIANT}" in text
    assert "exp-dec:n=3000, 8 threads on haswell-e5-2695v3" in text


def test_rank_baseline_threads_picks_the_baseline_run_of_each_machine(plain_sweep, capsys):
    results = pd.read_csv(plain_sweep / "results.csv", keep_default_na=False)
    records = run_json(capsys, "rank", plain_sweep, "--baseline", "omp-static", "--baseline-threads", "4")
    assert len(records) == 12
    for r in records:
        base = results[(results["machine"] == r["machine"]) & (results["scheduler"] == "omp-static")
                       & (results["threads"] == 4)]["makespan_ns"].mean()
        assert r["speedup"] == pytest.approx(base / r["makespan_ns"])
    static = [r for r in records if r["method"] == "omp-static" and r["threads"] == 4]
    assert [r["speedup"] for r in static] == pytest.approx([1.0, 1.0])
    assert run_text(capsys, "rank", plain_sweep, "--baseline", "omp-static", "--baseline-threads", "4",
                    "--threads", "8").startswith("speedup over omp-static on 4 thread(s)")


@pytest.mark.parametrize("args, needles", [
    (["--baseline", "omp-static"],
     ["no successful omp-static run on 1 thread(s)", "ran on 4, 8 thread(s)", "--baseline-threads"]),
    (["--baseline-threads", "4"], ["--baseline-threads", "--baseline SPEC"]),
    (["--baseline", "omp-static", "--baseline-threads", "0"], ["--baseline-threads must be >= 1"]),
    (["--baseline", "omp-static", "--baseline-threads", "four"], ["--baseline-threads", "'four'"]),
], ids=["no-one-thread-run", "threads-without-baseline", "zero", "text"])
def test_rank_refuses_a_baseline_it_cannot_find(plain_sweep, capsys, args, needles):
    message = refused(capsys, "rank", plain_sweep, *args)
    for needle in needles:
        assert needle in message, message


# -- plot: every sweep gets a figure, and everything in it is readable --------------------------------------
def test_plot_of_a_plain_sweep_compares_methods_per_machine(plain_sweep, tmp_path, drawn):
    out = tmp_path / "plain.png"
    assert cli.main(["plot", str(plain_sweep), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.get_visible()]
    titles = [ax.get_title().replace("\n", "") for ax in panels]
    assert titles == [f"exp-dec:n=3000 on {m}" for m in sorted(["haswell-e5-2695v3", VARIANT])]
    assert fig._suptitle.get_text().startswith("speedup over the sequential loop")
    for ax in panels:  # speedup against threads, a line per method, markers on each thread count
        assert {tuple(line.get_xdata()) for line in ax.get_lines()} == {(4, 8)}
        assert len(ax.get_lines()) == 3
    (legend,) = fig.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == ["omp-dynamic", "omp-static", "stealing"]
    lines = panels[0].get_lines()
    assert len({(line.get_marker(), line.get_linestyle(), line.get_color()) for line in lines}) == 3
    assert_all_inside(fig)


def test_plot_of_one_thread_count_draws_bars_per_machine(tmp_path, drawn):
    out = sweep(tmp_path, PLAIN.replace("THREADS", "8"))
    assert cli.main(["plot", str(out), "--out", str(tmp_path / "bars.png")]) == 0
    (fig,) = drawn
    (ax,) = [ax for ax in fig.axes if ax.get_visible()]
    assert len(ax.patches) == 2 * 3  # a bar per machine and method
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert [t.replace("\n", "") for t in ticks] == sorted(["haswell-e5-2695v3", VARIANT])
    assert max(len(line) for t in ticks for line in t.split("\n")) < len(VARIANT)  # the long name wraps
    assert_all_inside(fig)


def test_plot_of_a_burden_sweep_shows_every_curve_its_machine_and_the_published_d(tmp_path, drawn):
    out = sweep(tmp_path, BURDEN.replace("MACHINES", json.dumps(E7)))
    assert cli.main(["plot", str(out), "--out", str(tmp_path / "e1.png")]) == 0
    (fig,) = drawn
    (ax,) = fig.axes
    title = fig._suptitle.get_text()
    assert E7 in title and "8 threads" in title and "published d: a publication, Table 1" in title
    data = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert [line.get_label().split(":")[0] for line in data] == ["fg-tree", "omp-static", "fg-tree-full"]
    # Curves that coincide still show each its own markers: other shapes, on other points.
    assert len({line.get_marker() for line in data}) == 3
    marked = []
    for line in data:
        start, step = line.get_markevery()
        marked.append(set(line.get_xdata()[start::step]))
    assert all(marked) and not (marked[0] & marked[1] or marked[0] & marked[2] or marked[1] & marked[2])
    labels = {line.get_label().split(":")[0]: line.get_label() for line in data}
    assert "(published 8.12)" in labels["omp-static"] and "(published 12.00)" in labels["fg-tree-full"]
    assert_all_inside(fig)


def test_plot_with_long_machine_names_keeps_everything_inside(burden_sweep, tmp_path, drawn):
    assert cli.main(["plot", str(burden_sweep), "--out", str(tmp_path / "long.png")]) == 0
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title().replace("\n", "") for ax in panels] == [E7, VARIANT]
    # Only the published machine's curves name the published d.
    for ax in panels:
        data = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
        assert ["published" in line.get_label() for line in data] == [ax.get_title() == E7] * 3
    assert f"measured on {E7}" in fig._suptitle.get_text()
    assert_all_inside(fig)
