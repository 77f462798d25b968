"""Input hygiene at the command line: output targets that are devices, FIFOs or links, integer parameters
out of range, input files too large to parse, runs too large for memory and costs of other than real numbers.

Each case runs the real command (``python -m simsched.cli ...``) and ends in one line on stderr and exit 2,
with nothing half-written and any device, FIFO or link left as it was; where only the order of the checks
matters (nothing drawn before a run is refused), ``simsched.cli.main`` runs in-process.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simsched.budget as budget
import simsched.chunklog as chunklog
from simsched.cli import main
from simsched.errors import SimschedError
from simsched.engine import simulate
from simsched.schedulers import REGISTRY, get_scheduler
from simsched.spec import MAX_INT
from simsched.workloads import UForall

RUN = ["run", "--machine", "uniform", "--threads", "2", "--scheduler", "omp-dynamic:chunk=4",
       "--workload", "uforall:n=100"]


def simsched(*args, stdout=subprocess.PIPE, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=300)


def error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Assert exit 2 with exactly one stderr line, no traceback, naming every needle; return the line."""
    assert proc.returncode == 2, f"exit {proc.returncode}; stderr: {proc.stderr!r}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got {len(lines)}:\n{proc.stderr}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not named in {lines[0]!r}"
    return lines[0]


def device(folder: Path, name: str, minor: int) -> Path:
    """A character device node of the memory driver (major 1): minor 3 is /dev/null, 7 is /dev/full."""
    path = folder / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc.strerror}")
    return path


def assert_device(path: Path, minor: int) -> None:
    """``path`` is still the device node it was made as (not replaced by a regular file)."""
    mode = os.lstat(path)
    assert stat.S_ISCHR(mode.st_mode), f"{path} is no longer a character device"
    assert os.major(mode.st_rdev) == 1 and os.minor(mode.st_rdev) == minor


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


# -- output targets ------------------------------------------------------------------------------------------


def test_chunks_and_trace_onto_a_null_device_write_through_it(tmp_path):
    null = device(tmp_path, "null", 3)
    proc = simsched(*RUN, "--chunks", null, "--trace", null)
    assert proc.returncode == 0, proc.stderr
    assert_device(null, 3)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("option", ["--chunks", "--trace"])
def test_a_full_device_is_one_line_and_stays_a_device(tmp_path, option):
    full = device(tmp_path, "full", 7)
    error_line(simsched(*RUN, option, full), option, "No space left on device")
    assert_device(full, 7)
    assert leftovers(tmp_path) == []


def test_plot_onto_devices_keeps_their_names(tmp_path):
    trace = tmp_path / "t.json"
    assert simsched(*RUN, "--trace", trace).returncode == 0
    null, full = device(tmp_path, "null", 3), device(tmp_path, "full", 7)
    # No suffix: a device is written in place in the default format, not beside it as null.png.
    proc = simsched("plot", "--timeline", trace, "--out", null)
    assert proc.returncode == 0, proc.stderr
    assert_device(null, 3)
    assert not (tmp_path / "null.png").exists()
    error_line(simsched("plot", "--timeline", trace, "--out", full), "--out", "No space left on device")
    assert_device(full, 7)
    assert leftovers(tmp_path) == []


def test_native_record_onto_a_full_device_is_one_line(tmp_path):
    import simsched.native as native

    if not native.available():
        pytest.skip("native runtime not built")
    full = device(tmp_path, "full.csv", 7)
    error_line(simsched("native", "record", "memory", "--n", "64", "--array-bytes", "64", "--out", full),
               "full.csv", "No space left on device")
    assert_device(full, 7)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_printing_to_a_full_device_is_one_line():
    with open("/dev/full", "w") as full:
        error_line(simsched(*RUN, stdout=full), "cannot write", "No space left on device")


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old\n", encoding="utf-8")
    link.symlink_to(real.name)
    assert simsched(*RUN, "--chunks", link).returncode == 0
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_text(encoding="utf-8").startswith("# simsched: ")
    # A link to a file not there yet creates that file.
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to("made.csv")
    assert simsched(*RUN, "--chunks", dangling).returncode == 0
    assert dangling.is_symlink()
    assert (tmp_path / "made.csv").read_text(encoding="utf-8").startswith("# simsched: ")
    assert leftovers(tmp_path) == []


def test_a_loop_of_links_is_one_line(tmp_path):
    (tmp_path / "a.csv").symlink_to("b.csv")
    (tmp_path / "b.csv").symlink_to("a.csv")
    error_line(simsched(*RUN, "--chunks", tmp_path / "a.csv"), "--chunks", "a.csv")
    assert (tmp_path / "a.csv").is_symlink() and (tmp_path / "b.csv").is_symlink()


def test_a_fifo_is_written_to_its_reader_or_refused_without_one(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    error_line(simsched(*RUN, "--chunks", fifo), "--chunks", "nothing reads the FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # With a reader the table goes through it (a few KiB: the pipe's buffer holds it until read here).
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        proc = simsched(*RUN, "--chunks", fifo)
        assert proc.returncode == 0, proc.stderr
        received = os.read(reader, 1 << 20).decode()
    finally:
        os.close(reader)
    assert received.startswith("# simsched: ") and received.count("\n") == 2 + 25
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert leftovers(tmp_path) == []


def test_a_socket_is_refused_before_the_run(tmp_path):
    path = tmp_path / "s.csv"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
    except OSError as exc:  # e.g. a path too long for a socket address
        pytest.skip(f"cannot bind a socket here: {errno.errorcode.get(exc.errno, exc)}")
    try:
        error_line(simsched(*RUN, "--chunks", path), "--chunks", "is a socket, not a file")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        server.close()


# -- integer parameters --------------------------------------------------------------------------------------


@pytest.mark.parametrize("option, spec, name", [
    ("--scheduler", "omp-dynamic:chunk=99999999999999999999999", "chunk"),
    ("--scheduler", f"cilk:grain={MAX_INT + 1}", "grain"),
    ("--workload", "uforall:n=99999999999999999999", "n"),
    ("--workload", f"nested:inner_end={-MAX_INT - 1}", "inner_end"),
])
def test_an_integer_parameter_out_of_range_is_one_line(option, spec, name):
    args = {"--scheduler": "omp-static", "--workload": "uforall:n=100", option: spec}
    proc = simsched("run", "--machine", "uniform", "--threads", "2", *[x for kv in args.items() for x in kv])
    error_line(proc, f"parameter {name}=", "out of range", "2**53")


def test_the_largest_integer_parameter_runs():
    # Compiled claim loops take 64-bit integers: the bound leaves them room.
    proc = simsched("run", "--machine", "uniform", "--threads", "2", "--scheduler",
                    f"omp-dynamic:chunk={MAX_INT}", "--workload", "uforall:n=100", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"chunks": 1' in proc.stdout


# -- input files too large to parse --------------------------------------------------------------------------


def sparse_file(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (a hole): only its size is wrong."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_a_machine_file_over_the_limit_is_refused_unread(tmp_path):
    big = sparse_file(tmp_path / "big.toml", 50 * 2**20)
    error_line(simsched("machines", big), "big.toml", "50.0 MiB", "16.0 MiB limit on machine files")
    error_line(simsched(*RUN[:2], big, *RUN[3:]), "big.toml", "limit on machine files")


def test_a_latency_file_over_the_limit_is_refused_unread(tmp_path):
    big = sparse_file(tmp_path / "big.csv", 50 * 2**20)
    error_line(simsched("machines", "uniform", "--latency-against", big), "big.csv",
               "16.0 MiB limit on latency files")


def test_an_experiment_file_over_the_limit_is_refused_unread(tmp_path):
    big = sparse_file(tmp_path / "big.toml", 2 * 2**20)
    error_line(simsched("sweep", big, "--out", tmp_path / "out"), "big.toml",
               "1.0 MiB limit on experiment files")
    assert not (tmp_path / "out").exists()


# -- runs too large for memory -------------------------------------------------------------------------------


def test_a_run_far_too_large_is_refused_before_drawing(tmp_path):
    # 10^10 iterations: hundreds of GiB of loop and a TiB of chunk table, refused before either is made.
    proc = simsched("run", "--machine", "uniform", "--threads", "2", "--scheduler", "omp-dynamic:chunk=1",
                    "--workload", "uforall:n=10000000000", "--chunks", tmp_path / "c.csv")
    error_line(proc, "10000000000 iteration(s)", "for its loops alone", "GiB")
    assert list(tmp_path.iterdir()) == []
    error_line(simsched(*RUN, "--repeat", "10" + "0" * 20), "loop(s)", "GiB")


@pytest.fixture
def memory_of_8_gib(monkeypatch):
    """This machine, as the memory check sees it, has 8 GiB available; drawing any loop fails the test."""
    monkeypatch.setattr(chunklog, "memory_bytes", lambda: 8 * 2**30)

    def drawn(self, rng):
        raise AssertionError("a loop was drawn before the run was refused")

    monkeypatch.setattr(UForall, "generate", drawn)


@pytest.mark.parametrize("scheduler", ["omp-dynamic:chunk=1", "cilk:grain=1", "tbb-simple", "static-steal",
                                       "stealing"])
def test_a_chunk_table_too_large_is_refused_before_drawing(memory_of_8_gib, capsys, scheduler):
    # 10^8 one-iteration chunks: 10 GiB of table by each scheduler's own rule, more than half of 8 GiB.
    args = ["run", "--machine", "uniform", "--threads", "4", "--scheduler", scheduler,
            "--workload", "uforall:n=100000000"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "runs at least 100000000 chunks" in err and "--no-chunk-table" in err, err


def test_a_timeline_too_large_is_refused_before_drawing(memory_of_8_gib, capsys, tmp_path):
    args = ["run", "--machine", "uniform", "--threads", "4", "--scheduler", "omp-dynamic:chunk=1",
            "--workload", "uforall:n=10000000", "--trace", str(tmp_path / "t.json")]
    assert main(args) == 2
    assert "run without the timeline (--trace)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_without_the_table_the_same_run_fits(monkeypatch):
    # The estimate of the run refused above, less its table: what --no-chunk-table needs fits 8 GiB.
    monkeypatch.setattr(chunklog, "memory_bytes", lambda: 8 * 2**30)
    dynamic = get_scheduler("omp-dynamic:chunk=1")
    budget.check_memory(dynamic, [(10**8, 1)], 4, keep_chunks=False)
    with pytest.raises(SimschedError, match="runs at least 100000000 chunks"):
        budget.check_memory(dynamic, [(10**8, 1)], 4, keep_chunks=True)


def test_an_ordinary_run_is_not_refused():
    proc = simsched(*RUN, "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"chunks": 25' in proc.stdout


# -- .npy and CSV costs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("values, needles", [
    (np.array([True, False, True]), ("true/false", "real numbers")),
    (np.array([1 + 2j, 3 + 0j]), ("complex", "real numbers")),
    (np.array(["1", "2"]), ("text", "real numbers")),
    (np.ones((2, 3)), ("2-D array", "1-D")),
])
def test_npy_costs_other_than_a_row_of_real_numbers_are_refused(tmp_path, values, needles):
    path = tmp_path / "costs.npy"
    np.save(path, values)
    proc = simsched("run", "--machine", "uniform", "--threads", "2", "--scheduler", "omp-static",
                    "--workload", f"file:path={path}")
    error_line(proc, "costs.npy", *needles)


def test_csv_costs_or_bytes_of_true_and_false_are_refused(tmp_path):
    costs = tmp_path / "costs.csv"
    costs.write_text("cost_ns\nTrue\nFalse\n", encoding="utf-8")
    run = ["run", "--machine", "uniform", "--threads", "2", "--scheduler", "omp-static", "--workload"]
    error_line(simsched(*run, f"file:path={costs}"), "costs.csv", "true/false")
    costs.write_text("cost_ns,bytes\n10,True\n20,False\n", encoding="utf-8")
    error_line(simsched(*run, f"file:path={costs}"), "bytes column", "true/false")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_min_chunks_is_a_lower_bound_of_every_scheduler(name):
    # The memory check refuses by min_chunks: it must never exceed the chunks a run really takes.
    scheduler = get_scheduler(name)
    for n, threads in ((1, 3), (7, 2), (300, 4)):
        result = simulate("uniform", scheduler, f"exp-dec:n={n}", threads)
        assert result.chunk_count >= scheduler.min_chunks(n, threads), (n, threads)
    # Above the weakest bound where the rules give one.
    if name in ("omp-dynamic", "static-steal", "stealing", "cilk", "hybrid", "tbb-simple"):
        assert scheduler.min_chunks(10**6, 4) >= 10**6 // 2048
