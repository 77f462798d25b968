"""The Gantt chart of a run's trace: one panel a run, a row a worker, drawn to a PNG."""

from __future__ import annotations

from simsched import simulate
from simsched.analysis.gantt import plot_timeline
from simsched.timeline import write_trace


def test_a_gantt_chart_of_a_small_run_is_a_png(tmp_path):
    run = simulate("haswell-e5-2695v3", "omp-dynamic:chunk=4", "uniform:n=64", 3, timeline=True)
    trace = write_trace(tmp_path / "run.json", run)
    out = plot_timeline([trace], tmp_path / "gantt.png")
    assert out == tmp_path / "gantt.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
