"""Native mode on a shared host: robust calibration, busy-host refusal, progress, memory and signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simsched.native as native
from simsched import load_machine
from simsched.cli import main
from simsched.errors import SimschedError
from simsched.native import calibrate, hostload, memprobe, probe_figure

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")
THREADS = min(2, len(native.cores()))
ROOT = Path(__file__).resolve().parent.parent
BATCHES = Path(__file__).resolve().parent / "data" / "native_pingpong_batches.csv"


def _tries(host: str, kind: str) -> list[np.ndarray]:
    table = pd.read_csv(BATCHES, comment="#")
    rows = table[(table["host"] == host) & (table["kind"] == kind)]
    return [group["one_way_ns"].to_numpy() for _, group in rows.groupby("try")]


@pytest.mark.parametrize("kind", ["store", "cas"])
def test_the_robust_figure_of_recorded_busy_ping_pongs_is_the_shared_hosts(kind):
    shared, busy = _tries("shared", kind), _tries("busy", kind)
    # A try's mean, as the calibration once took it, counts every batch that waited for a descheduled thread.
    old = float(np.median([t.mean() for t in busy]))
    robust, reference = probe_figure.Figure.of_tries(busy), probe_figure.Figure.of_tries(shared)
    assert old > 100 * reference.value
    assert reference.value / 1.1 < robust.value < reference.value * 1.1
    # The busy host moved the threads between tries (one try's batches are 6x faster, another's 2x slower than
    # the rest): the tries disagree, which makes a calibration doubtful; the shared host's tries agree.
    assert robust.apart > calibrate.TRIES_APART >= reference.apart
    assert reference.samples == 200 and reference.value <= reference.median <= reference.high


def test_a_figure_is_a_low_percentile_and_says_its_spread():
    samples = np.concatenate([np.full(90, 100.0), np.full(10, 50_000.0)])  # a tenth of them preempted
    figure = probe_figure.Figure.of(samples)
    assert figure.value == 100.0 and figure.median == 100.0 and figure.high > 100.0
    assert figure.spread().startswith("100.0 ns (median 100.0, 90th percentile")
    assert "of 100" in figure.spread()
    with pytest.raises(SimschedError, match="non-finite"):
        probe_figure.Figure.of([1.0, float("nan")])


def _stat(path: Path, user: int, idle: int, steal: int, running: int = 1) -> None:
    path.write_text(f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\n"
                    f"cpu0 {user} 0 0 {idle} 0 0 0 {steal} 0 0\n"
                    f"cpu1 999999 0 0 0 0 0 0 0 0 0\n"
                    f"procs_running {running}\n")


def test_the_load_meter_counts_others_time_less_this_processs(tmp_path, monkeypatch):
    stat, loadavg = tmp_path / "stat", tmp_path / "loadavg"
    loadavg.write_text("2.50 1.00 0.50 3/100 123\n")
    monkeypatch.setattr(hostload, "PROC_STAT", stat)
    monkeypatch.setattr(hostload, "PROC_LOADAVG", loadavg)
    own = iter([0.0, 100.0, 0.0])
    monkeypatch.setattr(hostload, "_own_ticks", lambda: next(own))
    _stat(stat, user=1000, idle=1000, steal=0)
    meter = hostload.Meter([0])
    # CPU 0 then ran 300 ticks busy (100 of them this process's), 100 idle and 100 stolen: others had 40%.
    _stat(stat, user=1300, idle=1100, steal=100, running=3)
    meter.sample()
    load = meter.read()
    assert load.others == pytest.approx(0.4) and load.steal == pytest.approx(0.2)
    assert load.loadavg == 2.5 and load.runnable == 2.0
    assert load.busy().startswith("other work used 40% of CPU(s) [0] over ")
    assert "load average 2.50, 2.0 other task(s) runnable" in load.busy()
    quiet = hostload.Load((0,), 1.0, 0.1, 0.0, 0.2, 0.0)
    assert quiet.busy() is None
    assert "hypervisor took 10%" in hostload.Load((0,), 1.0, 0.1, 0.1, 0.2, 0.0).busy()
    stat.unlink()   # no /proc/stat: nothing to judge by
    assert hostload.Meter([0]).read() is None


BUSY = hostload.Load((0,), 0.5, 0.93, 0.0, 2.31, 2.0)
QUIET = hostload.Load((0,), 0.5, 0.02, 0.0, 0.05, 0.0)


@pytest.fixture
def quick_calibration(monkeypatch):
    """A real calibration of one CPU, less its memory hierarchy and most of its noise quanta (seconds, not a
    minute); the host's load is what each test says, not this host's of the moment."""
    profile = calibrate.noise_profile
    monkeypatch.setattr(memprobe, "measure_hierarchy", lambda cpus, progress: None)
    monkeypatch.setattr(calibrate, "hierarchy_text", lambda memory: "")
    monkeypatch.setattr(calibrate, "noise_profile", lambda cpus: profile(cpus, samples=2000))

    def loads(before, during):
        monkeypatch.setattr(hostload, "look", lambda cpus: before)
        monkeypatch.setattr(hostload.Meter, "read", lambda self: during)

    return loads


@needs_native
def test_calibrate_refuses_a_busy_host_in_one_line_before_measuring(tmp_path, capsys, quick_calibration,
                                                                    monkeypatch):
    quick_calibration(BUSY, QUIET)

    def measure(*args, **kwargs):
        raise AssertionError("a busy host was measured")

    monkeypatch.setattr(calibrate, "measure", measure)
    out = tmp_path / "host.toml"
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and not out.exists()
    assert captured.err.startswith("simsched: error: this host is too busy to calibrate: other work used "
                                   "93% of CPU(s) [0] over 0.5 s (load average 2.31, 2.0 other task(s) "
                                   "runnable); ")
    assert "--force" in captured.err


@needs_native
def test_calibrate_writes_nothing_when_the_host_got_busy_while_measuring(tmp_path, capsys, quick_calibration):
    quick_calibration(QUIET, hostload.Load((0,), 3.0, 0.6, 0.0, 1.9, 1.0))
    out = tmp_path / "host.toml"
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1", "--rounds", "100"]) == 2
    err = capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.iterdir())
    assert err.splitlines()[-1].startswith("simsched: error: the measured figures are doubtful: other work "
                                           "used 60% of CPU(s) [0] over 3.0 s")
    assert "Traceback" not in err and err.count("simsched: error") == 1
    # What was measured was said on the way, each figure with its spread.
    assert "1 thread(s): " in err and "(median " in err and "90th percentile" in err


@needs_native
def test_calibrate_with_force_writes_doubtful_figures_marked_and_warns(tmp_path, capsys, quick_calibration):
    quick_calibration(BUSY, hostload.Load((0,), 3.0, 0.6, 0.0, 1.9, 1.0))
    out = tmp_path / "host.toml"
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1", "--rounds", "100",
                 "--force"]) == 0
    err = capsys.readouterr().err
    assert "simsched: warning: writing doubtful figures (--force): before measuring, other work used 93%" \
        in err
    text = out.read_text()
    assert "# DOUBTFUL (written with --force): before measuring, other work used 93% of CPU(s) [0]" in text
    assert "# DOUBTFUL (written with --force): other work used 60% of CPU(s) [0] over 3.0 s" in text
    assert load_machine(out).cores == 1


@needs_native
def test_calibrate_refuses_a_figure_no_host_shows_however_quiet_it_looked(tmp_path, capsys, quick_calibration,
                                                                          monkeypatch):
    quick_calibration(QUIET, QUIET)
    # A bound below any real chunk claim stands in for a chunk cost measured at microseconds.
    monkeypatch.setitem(calibrate.IMPLAUSIBLE, "chunk_ns", 0.001)
    out = tmp_path / "host.toml"
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1", "--rounds", "100"]) == 2
    err = capsys.readouterr().err
    assert not out.exists()
    last = err.splitlines()[-1]
    assert last.startswith("simsched: error: the measured figures are doubtful: the chunk cost, ") and \
        "ns, is past the 0.001 ns no shared-memory host shows" in last, last


@needs_native
def test_calibrate_on_a_quiet_host_writes_its_load_and_no_doubt(tmp_path, capsys, quick_calibration):
    quick_calibration(QUIET, QUIET)
    out = tmp_path / "host.toml"
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1", "--rounds", "100"]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "before measuring: others used 2%" in err
    text = out.read_text()
    assert "# While measuring: others used 2% and steal took 0% of CPU(s) [0]" in text
    assert "DOUBTFUL" not in text
    assert "the median of 200" in text and f"the {probe_figure.LOW_PERCENTILE}th percentile" in text


def _cli(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@needs_native
def test_validate_says_what_it_runs_on_stderr_when_not_on_a_terminal(tmp_path):
    # A machine file written with --force from doubtful figures: the validation warns first.
    machine = tmp_path / "host.toml"
    text = (ROOT / "machines" / "haswell-e5-2695v3.toml").read_text()
    machine.write_text(f"{calibrate.DOUBTFUL} other work used 60% of CPU(s) [0] over 3.0 s.\n{text}")
    proc = _cli("native", "validate", "--machine", machine, "--threads", 1, "--points", 2, "--repeat", 1,
                "--no-openmp", "--schedulers", "omp-static,omp-dynamic:chunk=2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"simsched: warning: machine file {machine} was calibrated on a busy host and written with --force (see "
        "its header): its figures, and every comparison with them, may be far off",
        "omp-static (1/2): 2 loop durations, 2 loops each, natively and simulated",
        "omp-dynamic:chunk=2 (2/2): 2 loop durations, 2 loops each, natively and simulated"]
    assert proc.stdout.splitlines()[0].split()[:2] == ["scheduler", "P"]


@needs_native
def test_a_native_run_too_big_for_any_memory_is_one_line_and_writes_nothing(tmp_path):
    # 2^31 - 1 one-iteration chunks a loop, a million loops: no machine holds their records.
    chunks = tmp_path / "chunks.csv"
    start = time.monotonic()
    proc = _cli("native", "run", "--scheduler", "omp-dynamic:chunk=1", "--threads", 1, "--workload",
                "uforall:n=2147483647", "--repeat", 1000000, "--chunks", chunks)
    assert proc.returncode == 2 and proc.stdout == "" and not chunks.exists()
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("simsched: error: native mode: 1000000 loop(s) of 2147483647 iterations "
                                  "(2147483647000000 chunk records) would need about ")
    assert "GiB of memory available here" in proc.stderr
    assert time.monotonic() - start < 60


@needs_native
def test_a_native_run_is_refused_before_its_costs_are_drawn(monkeypatch, capsys):
    from simsched import chunklog

    from simsched.workloads import Workload

    monkeypatch.setattr(chunklog, "memory_bytes", lambda: 1 << 30)

    def draw(self, rng):
        raise AssertionError("the costs were drawn before the memory was checked")

    monkeypatch.setattr(Workload, "costs", draw)
    # 10^8 iterations' costs take about 3 GiB to draw: more than the 1 GiB said to be available.
    assert main(["native", "run", "--scheduler", "omp-static", "--threads", "1", "--workload",
                 "uforall:n=100000000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 loop(s) of 100000000 iterations" in err
    assert f"more than {chunklog.MEMORY_SHARE:.0%} of the 1.0 GiB of memory available here" in err


@needs_native
@pytest.mark.parametrize("scheduler", ["omp-static", "omp-static:chunk=7", "omp-dynamic:chunk=3",
                                       "omp-guided", "omp-guided:chunk=4"])
def test_the_expected_chunks_are_the_runs_own(scheduler):
    from simsched.schedulers import get_scheduler

    n, repeat = 1000, 3
    result = native.run(scheduler, f"uforall:n={n},cost_ns=0", THREADS, repeat=repeat)
    share, _, _, _, chunk = native.native_config(get_scheduler(scheduler), n, THREADS)
    assert native.expected_chunks(share, chunk, [n], repeat, THREADS) == len(result.chunks)


def _started(proc: subprocess.Popen, deadline_s: float = 60.0) -> None:
    """Wait until the run's threads (named simsched-W by the runtime) are up."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its threads started: {proc.communicate()[1]}")
        names = []
        for comm in Path(f"/proc/{proc.pid}/task").glob("*/comm"):
            try:
                names.append(comm.read_text().strip())
            except OSError:  # a thread that just ended
                pass
        if any(name.startswith("simsched-") for name in names):
            return
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    pytest.fail("the run's threads did not start within a minute")


@needs_native
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc to see the run's threads")
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_native_run_at_once_with_one_line(sig, code):
    # Eight iterations of 20 s each: a run of 80 s or more, unless the signal stops it.
    command = [sys.executable, "-m", "simsched.cli", "native", "run", "--scheduler", "omp-static",
               "--threads", str(THREADS), "--workload", "uforall:n=8,cost_ns=2e10", "--timeout", "600"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _started(proc)
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code and out == "" and err == "simsched: interrupted\n"
    # The threads stop within milliseconds; the rest is the interpreter's exit, slower on a busy host.
    assert took < 5
