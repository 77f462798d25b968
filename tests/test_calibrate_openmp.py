"""`native calibrate --openmp`: an OpenMP runtime's own chunk, fork/join and contended claim costs."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from simsched import load_machine, native
from simsched.errors import SimschedError
from simsched.native import calibrate, hostload, memprobe, omp_calibrate, ompt, openmp
from simsched.native.omp_calibrate import ProbeOutput, figures, parse_output
from simsched.native.ompt import Runtime

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")
ROOT = Path(__file__).resolve().parent.parent
QUIET = hostload.Load((0,), 0.5, 0.02, 0.0, 0.05, 0.0)
BUSY = hostload.Load((0,), 0.5, 0.93, 0.0, 2.31, 2.0)

# A probe's printout as omp_runtime_probe.c writes it: the first sample of each figure is left out.
PRINTOUT = """threads 2
library /opt/rt/libiomp5.so
static1 999
static1 100
static1 300
static1 200
dynamic1 1
dynamic1 5200
dynamic1 5000
dynamic1 5100
forkjoin 10
forkjoin 5000
forkjoin 4000
forkjoin 6000
static 1
static 400
static 400
static 400
dynamic 1
dynamic 30400
dynamic 30000
dynamic 31000
dynamic64 1
dynamic64 9000
dynamic64 9000
dynamic64 9000
guided 1
guided 7000
guided 8000
guided 7500
"""


def _openmp_compiler() -> bool:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    return compiler is not None and subprocess.run(
        [compiler, "-fopenmp", "-x", "c", "-", "-o", os.devnull], input="int main(void){return 0;}",
        capture_output=True, text=True, check=False).returncode == 0


def _ompt_runtime() -> str | None:
    try:
        return str(ompt.find_runtime().path)
    except SimschedError:
        return None


HAS_COMPILER = _openmp_compiler()
OMPT_RUNTIME = _ompt_runtime()


def _cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env, check=False)


# The probe's printout and its figures


def test_the_printout_is_read_line_by_line():
    output = parse_output(PRINTOUT)
    assert output.threads == 2 and output.libraries == ["/opt/rt/libiomp5.so"]
    assert output.samples["static1"] == [999.0, 100.0, 300.0, 200.0]
    assert output.samples["guided"] == [1.0, 7000.0, 8000.0, 7500.0]
    assert set(output.samples) == set(omp_calibrate.FIGURES)


def test_each_figure_is_the_median_after_the_first_sample():
    got = figures(parse_output(PRINTOUT), chunks=1000)
    # static1: median(100, 300, 200) = 200 over 1000 iterations; dynamic1: median(5200, 5000, 5100) = 5100.
    assert got["iteration_ns"] == pytest.approx(0.2)
    assert got["chunk_ns"] == pytest.approx((5100 - 200) / 1000)
    assert got["loop_setup_ns"] == 5000.0
    # All threads claiming: median(30400, 30000, 31000) - median(static) = 30000, over 1000 chunks a thread.
    assert got["contended_chunk_ns"] == pytest.approx(30.0)
    assert (got["static_loop_ns"], got["dynamic64_loop_ns"], got["guided_loop_ns"]) == (400.0, 9000.0, 7500.0)
    assert got["loop_iterations"] == 2000 and got["threads"] == 2 and got["samples"] == 3


def test_one_thread_has_no_contended_claim_and_a_claim_is_never_negative():
    samples = parse_output(PRINTOUT).samples
    samples["dynamic1"] = [0.0, 100.0, 100.0, 100.0]  # faster than the static loop: a claim costs nothing
    got = figures(ProbeOutput(1, [], samples), chunks=1000)
    assert got["chunk_ns"] == 0.0 and got["contended_chunk_ns"] is None and got["loop_iterations"] == 1000


@pytest.mark.parametrize("text, message", [
    (PRINTOUT + "bogus 12\n", "unexpected line 31: 'bogus 12'"),
    (PRINTOUT.replace("forkjoin 4000", "forkjoin nan"), "unexpected line 13: 'forkjoin nan'"),
    (PRINTOUT.replace("static 400\n", "static -4\n", 1), "unexpected line 16: 'static -4'"),
    (PRINTOUT.replace("threads 2\n", ""), "did not say how many threads"),
    ("threads 1\nstatic1 3\n", "fewer than 2 samples of static1, dynamic1, forkjoin"),
])
def test_a_printout_that_is_none_is_refused(text, message):
    with pytest.raises(SimschedError, match="the OpenMP probe") as error:
        parse_output(text)
    assert message in str(error.value)


def test_the_version_is_the_librarys_what_string_else_the_displayed_openmp(tmp_path):
    library = tmp_path / "libiomp5.so"
    library.write_bytes(b"\x7fELF\0junk\0@(#) Intel(R) OMP API version: 5.2 (202111)\0"
                        b"@(#) Intel(R) OMP version: 5.0.20260828\0more")
    assert omp_calibrate.library_version(library) == "Intel(R) OMP version: 5.0.20260828"
    plain = tmp_path / "libgomp.so.1"
    plain.write_bytes(b"\x7fELF\0nothing to say")
    display = "OPENMP DISPLAY ENVIRONMENT BEGIN\n  _OPENMP = '201511'\n  OMP_DYNAMIC = 'FALSE'\n"
    assert omp_calibrate.library_version(plain, display) == "_OPENMP 201511"
    assert omp_calibrate.library_version(plain, "") == ""


# Which runtime --openmp names


def _fake_library(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_bytes(b"\x7fELF" + bytes(60))
    return path


def _text_file(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("not a library\n")
    return path


def test_runtime_names(tmp_path, monkeypatch):
    assert omp_calibrate.runtime_for("gnu") == Runtime("libgomp", None)
    assert omp_calibrate.runtime_for("libgomp") == Runtime("libgomp", None)
    intel = _fake_library(tmp_path, "libiomp5.so")
    assert omp_calibrate.runtime_for(str(intel)) == Runtime("libiomp5", intel)
    assert omp_calibrate.runtime_for(str(intel)).profile == "llvm"
    # A link is the library it points to: libgomp.so.1 standing for libiomp5 is libiomp5.
    link = tmp_path / "libgomp.so.1"
    link.symlink_to(intel)
    assert omp_calibrate.runtime_for(str(link)).name == "libiomp5"
    llvm = _fake_library(tmp_path, "libomp.so.5")
    assert omp_calibrate.runtime_for(str(llvm)) == Runtime("libomp", llvm)
    assert Runtime("libgomp", None).profile == "gnu"


def test_the_default_runtime_is_the_recorders_else_libgomp(tmp_path, monkeypatch):
    intel = _fake_library(tmp_path, "libiomp5.so")
    monkeypatch.setattr(ompt, "find_runtime", lambda: ompt.Runtime("libiomp5", intel))
    assert omp_calibrate.runtime_for("") == Runtime("libiomp5", intel)

    def none():
        raise ompt.NoRuntime("none here")

    monkeypatch.setattr(ompt, "find_runtime", none)
    assert omp_calibrate.runtime_for("") == Runtime("libgomp", None)


def test_the_probe_must_have_run_on_the_runtime_named(tmp_path):
    intel = _fake_library(tmp_path, "libiomp5.so")
    link = tmp_path / "runtime"
    link.mkdir()
    (link / "libgomp.so.1").symlink_to(intel)
    assert omp_calibrate.loaded_runtime(Runtime("libiomp5", intel), [str(intel)]) == intel.resolve()
    with pytest.raises(SimschedError, match=r"ran on /usr/lib/libgomp.so.1.0.0, not .*libiomp5.so"):
        omp_calibrate.loaded_runtime(Runtime("libiomp5", intel), ["/usr/lib/libgomp.so.1.0.0"])
    gnu = Runtime("libgomp", None)
    system = "/usr/lib/libgomp.so.1.0.0"
    assert omp_calibrate.loaded_runtime(gnu, [system]) == Path(system)
    with pytest.raises(SimschedError, match=r"--openmp gnu: the OpenMP probe ran on /x/libomp.so.5, not "):
        omp_calibrate.loaded_runtime(gnu, ["/x/libomp.so.5"])


def test_the_probe_runs_bound_spinning_and_without_a_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_TOOL_LIBRARIES", "/elsewhere/tool.so")
    monkeypatch.setenv("KMP_AFFINITY", "scatter")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/before")
    intel = _fake_library(tmp_path, "libiomp5.so")
    env = omp_calibrate.probe_environment(Runtime("libiomp5", intel), tmp_path, [0, 3])
    shim = tmp_path / "runtime"
    assert env["LD_LIBRARY_PATH"] == f"{shim}{os.pathsep}/before"
    assert (shim / "libgomp.so.1").resolve() == intel.resolve()
    assert (env["OMP_NUM_THREADS"], env["OMP_PLACES"], env["OMP_PROC_BIND"], env["OMP_WAIT_POLICY"]) == \
        ("2", "{0},{3}", "true", "active")
    assert env["OMP_TOOL"] == "disabled" and "OMP_TOOL_LIBRARIES" not in env and "KMP_AFFINITY" not in env
    gnu = omp_calibrate.probe_environment(Runtime("libgomp", None), tmp_path / "g", [1])
    assert (gnu["LD_LIBRARY_PATH"], gnu["OMP_PLACES"], gnu["OMP_NUM_THREADS"]) == ("/before", "{1}", "1")


def test_the_calibrations_own_probe_is_not_counted_as_other_work(monkeypatch):
    usage = {hostload.resource.RUSAGE_SELF: SimpleNamespace(ru_utime=1.5, ru_stime=0.5),
             hostload.resource.RUSAGE_CHILDREN: SimpleNamespace(ru_utime=3.0, ru_stime=1.0)}
    monkeypatch.setattr(hostload.resource, "getrusage", usage.__getitem__)
    assert hostload._own_ticks() == 6.0 * os.sysconf("SC_CLK_TCK")


# The costs the model charges, and the machine file


def test_the_costs_make_the_model_charge_what_was_measured(toy):
    machine = toy(cores=2, same_socket=100.0, atomic=10.0, chunk=15.0)
    modeled = omp_calibrate.empty_loop_ns(machine, "gnu", 2)
    assert modeled > 0
    omp = {"chunk_ns": 25.0, "loop_setup_ns": modeled + 500.0, "profile": "gnu", "threads": 2}

    def model(figures=omp):  # the machine file with the costs fitted so far
        return machine.replace(**{"costs_ns.loop_setup": figures["loop_setup"],
                                  "costs_ns.chunk": figures["chunk"]})

    omp_calibrate.fit_costs(omp, 10.0, model)
    assert omp["chunk"] == 15.0 and omp["modeled_loop_ns"] == modeled
    # With that loop_setup the model's empty loop takes what the runtime's took.
    assert omp_calibrate.empty_loop_ns(model(), "gnu", 2) == pytest.approx(omp["loop_setup_ns"],
                                                                          abs=omp_calibrate.FIT_NS)
    assert 0 < omp["loop_setup"] < omp["loop_setup_ns"]
    # A runtime faster than the model's own charge gets no loop_setup, not a negative one.
    fast = {"chunk_ns": 5.0, "loop_setup_ns": modeled / 2, "profile": "gnu", "threads": 2}
    omp_calibrate.fit_costs(fast, 10.0, lambda: model(fast))
    assert fast["loop_setup"] == 0.0 and fast["chunk"] == 0.0


def _measurements(openmp_figures: dict | None) -> dict:
    """What ``calibrate.measure`` returns for a 2-CPU host, by hand (no memory hierarchy)."""
    return {"cpus": [0, 1], "rounds": 100, "batch": 10, "matrix": np.array([[0.0, 40.0], [40.0, 0.0]]),
            "cas": np.array([[0.0, 35.0], [35.0, 0.0]]), "fetch_add": [2.5, 30.0], "wakeup": 9000.0,
            "clock_read": 30.0, "per_chunk": 90.0, "per_loop": 220.0, "ghz": 2.0, "clock_source": "test",
            "memory": None, "load": None, "doubts": [], "openmp": openmp_figures,
            "noise": {"samples": 10, "quantum_ns": 10_000, "share": 0.01, "max_us": 5.0, "rate_hz": 100.0,
                      "duration_us": 2.0}}


def test_the_machine_file_carries_the_runtimes_costs_and_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "hierarchy_text", lambda memory: "")
    omp = figures(parse_output(PRINTOUT), chunks=1000)
    omp.update(runtime="libiomp5", path="/opt/rt/libiomp5.so", version="Intel(R) OMP version: 5.0.1",
               profile="llvm")
    m = _measurements(omp)
    calibrate.fit_openmp(m, "simsched native calibrate --openmp")
    path = tmp_path / "host.toml"
    text = calibrate.machine_text(m, "simsched native calibrate --openmp")
    path.write_text(text)
    machine = load_machine(path)
    # chunk: (5100 - 200) / 1000 = 4.9 ns a claim, less the 2.5 ns atomic the model charges itself.
    assert machine.costs["chunk"] == 2.4
    assert machine.data["openmp"] == {
        "runtime": "libiomp5", "path": "/opt/rt/libiomp5.so", "version": "Intel(R) OMP version: 5.0.1",
        "profile": "llvm", "threads": 2, "chunk_ns": 4.9, "loop_setup_ns": 5000.0, "contended_chunk_ns": 30.0,
        "loop_iterations": 2000, "static_loop_ns": 400.0, "dynamic64_loop_ns": 9000.0,
        "guided_loop_ns": 7500.0}
    # loop_setup: what makes the file's model charge an empty loop the 5000 ns fork/join (to its 0.1 ns).
    assert 0 < machine.costs["loop_setup"] < 5000.0 and m["openmp"]["modeled_loop_ns"] > 0
    assert omp_calibrate.empty_loop_ns(machine, "llvm", 2) == pytest.approx(5000.0, abs=0.1)
    assert "loop and chunk costs of libiomp5" in machine.description
    for words in ("# loop_setup and chunk: the OpenMP runtime libiomp5's, measured by omp_runtime_probe.c",
                  "run on /opt/rt/libiomp5.so (Intel(R) OMP version: 5.0.1),",
                  "to join, took 5000.0 ns (timed in blocks of 200); loop_setup makes this file",
                  "the same empty loop (omp-static:runtime=llvm) as much, where with loop_setup = 0 it",
                  "chunk: a schedule(dynamic,1) loop of 1,000 empty iterations claimed by one thread",
                  "iteration: 4.9 ns; less an atomic",
                  "writes: loop_setup 130.0,\n# chunk 87.5)"):
        assert words in text, words


def test_without_openmp_the_file_is_the_native_runtimes(monkeypatch):
    monkeypatch.setattr(calibrate, "hierarchy_text", lambda memory: "")
    m = _measurements(None)
    calibrate.fit_openmp(m, "simsched native calibrate")
    data = tomllib.loads(calibrate.machine_text(m, "simsched native calibrate"))
    assert "openmp" not in data and "loop and chunk costs" not in data["description"]
    # The native runtime's: loop less a chunk, chunk less an atomic.
    assert data["costs_ns"]["loop_setup"] == 130.0 and data["costs_ns"]["chunk"] == 87.5


# Machine files: the [openmp] section is checked like every other


def _machine_with(tmp_path: Path, openmp_lines: str) -> Path:
    base = (ROOT / "machines" / "haswell-e5-2695v3.toml").read_text()
    path = tmp_path / "m.toml"
    path.write_text(base + "\n[openmp]\n" + openmp_lines)
    return path


GOOD = 'runtime = "libgomp"\nthreads = 2\nchunk_ns = 5.5\nloop_setup_ns = 943.1\n'


def test_a_machine_file_with_openmp_loads_and_says_so(tmp_path, main):
    path = _machine_with(tmp_path, GOOD + 'profile = "gnu"\ncontended_chunk_ns = 36.7\n')
    assert load_machine(path).data["openmp"]["contended_chunk_ns"] == 36.7
    proc = main("machines", path)
    assert proc.returncode == 0, proc.stderr
    assert ("OpenMP runtime of loop_setup and chunk: libgomp on 2 thread(s), chunk 5.5 ns, fork/join "
            "943.1 ns") in proc.stdout


@pytest.mark.parametrize("lines, message", [
    (GOOD.replace("5.5", "-1.0"), "openmp.chunk_ns must be >= 0, got -1.0"),
    (GOOD.replace("5.5", "nan"), "openmp.chunk_ns must be a finite number"),
    (GOOD.replace("libgomp", "libfoo"), "openmp.runtime must be libiomp5, libomp, libgomp, got 'libfoo'"),
    (GOOD + 'profile = "mixed"\n', "openmp.profile must be gnu or llvm, got 'mixed'"),
    (GOOD + "chunk = 3.0\n", "unknown key openmp.chunk"),
    (GOOD.replace("threads = 2\n", ""), "missing key openmp.threads"),
    (GOOD + "guided_loop_ns = 7.0\n", "openmp.guided_loop_ns needs openmp.loop_iterations"),
])
def test_a_bad_openmp_section_is_refused_in_one_line(tmp_path, main, lines, message):
    proc = main("machines", _machine_with(tmp_path, lines))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


# The command line


@pytest.fixture
def quick(monkeypatch):
    """A real calibration less its memory hierarchy and most noise quanta, on a host as busy as told."""
    profile = calibrate.noise_profile
    monkeypatch.setattr(memprobe, "measure_hierarchy", lambda cpus, progress: None)
    monkeypatch.setattr(calibrate, "hierarchy_text", lambda memory: "")
    monkeypatch.setattr(calibrate, "noise_profile", lambda cpus: profile(cpus, samples=2000))

    def loads(before, during=QUIET):
        monkeypatch.setattr(hostload, "look", lambda cpus: before)
        monkeypatch.setattr(hostload.Meter, "read", lambda self: during)

    return loads


RUNTIMES = [pytest.param("gnu", marks=pytest.mark.skipif(not HAS_COMPILER,
                                                         reason="no compiler builds OpenMP")),
            pytest.param(OMPT_RUNTIME, id="ompt-runtime",
                         marks=pytest.mark.skipif(not HAS_COMPILER or OMPT_RUNTIME is None,
                                                  reason="no compiler, or no OMPT runtime (pip install "
                                                         "intel-openmp)"))]


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_calibrate_openmp_writes_the_runtimes_costs(tmp_path, main, quick, runtime, threads):
    if threads > len(native.cores()):
        pytest.skip(f"{threads} CPUs needed")
    quick(QUIET)
    out = tmp_path / "host.toml"
    # --force: tries that disagree on a busy host are written, marked, rather than refused.
    proc = main("native", "calibrate", "--openmp", runtime, "--out", out, "--threads", threads,
                "--rounds", 100, "--force")
    assert proc.returncode == 0, proc.stderr
    name = omp_calibrate.runtime_for(runtime).name
    assert f"the OpenMP runtime {name}" in proc.stderr
    machine = load_machine(out)
    omp = machine.data["openmp"]
    assert omp["runtime"] == name
    assert omp["threads"] == threads and omp["loop_iterations"] == threads * omp_calibrate.PROBE_CHUNKS
    assert Path(omp["path"]).is_file() and omp["version"]
    if runtime != "gnu":
        assert Path(omp["path"]).resolve() == Path(runtime).resolve()
    assert ("contended_chunk_ns" in omp) == (threads > 1)
    for key in ("chunk_ns", "loop_setup_ns", "static_loop_ns", "dynamic64_loop_ns", "guided_loop_ns"):
        assert math.isfinite(omp[key]) and omp[key] >= 0, key
    # [costs_ns] is fitted to the figures: a claim less the atomic; the fork/join less the model's own charge.
    costs = machine.costs
    assert costs["chunk"] == pytest.approx(max(omp["chunk_ns"] - costs["atomic"], 0.0), abs=0.11)
    charged = omp_calibrate.empty_loop_ns(machine, omp["profile"], threads)
    if costs["loop_setup"] > 0:
        assert charged == pytest.approx(omp["loop_setup_ns"], abs=0.2)
    else:  # the model's own fork and join charge is already more than the runtime took
        assert charged >= omp["loop_setup_ns"] - 0.2
    text = out.read_text()
    assert f"# loop_setup and chunk: the OpenMP runtime {omp['runtime']}'s" in text
    assert f"run on {omp['path']} ({omp['version']})" in text
    # The file runs.
    proc = main("run", "--machine", out, "--scheduler", f"omp-dynamic:runtime={omp['profile']}", "--threads",
                threads, "--workload", "uforall:n=64")
    assert proc.returncode == 0, proc.stderr


@needs_native
@pytest.mark.skipif(not HAS_COMPILER, reason="no compiler builds OpenMP")
def test_a_busy_host_is_refused_before_the_runtime_is_measured(tmp_path, main, quick, monkeypatch):
    quick(BUSY)

    def measure(self, progress):
        raise AssertionError("a busy host was measured")

    monkeypatch.setattr(omp_calibrate.Probe, "measure", measure)
    out = tmp_path / "host.toml"
    proc = main("native", "calibrate", "--openmp", "gnu", "--out", out, "--threads", 1)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.count("\n") == 1 and "this host is too busy to calibrate" in proc.stderr


def test_a_missing_runtime_is_refused_before_anything_is_measured(tmp_path, main, monkeypatch):
    monkeypatch.setattr(hostload, "look", lambda cpus: pytest.fail("the host was looked at"))
    proc = main("native", "calibrate", "--openmp", tmp_path / "libiomp5.so", "--out", tmp_path / "m.toml")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"--openmp {tmp_path / 'libiomp5.so'}: no such file" in proc.stderr


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "nothere" / "libiomp5.so", "no such file"),
    (lambda d: d, "not a file"),
    (lambda d: _fake_library(d, "libfoo.so"),
     "not an OpenMP runtime (expected libiomp5.so, libomp.so.5 or libgomp.so.1, or the word gnu)"),
    (lambda d: _text_file(d, "libomp.so.5"), "not a shared library (no ELF header)"),
])
def test_bad_runtimes_are_one_line_through_the_cli(tmp_path, make, message):
    if not native.available():
        pytest.skip("native runtime not built")
    runtime, out = make(tmp_path), tmp_path / "host.toml"
    proc = _cli("native", "calibrate", "--openmp", runtime, "--out", out)
    assert proc.returncode == 2 and proc.stdout == "" and not out.exists()
    assert proc.stderr.startswith(f"simsched: error: --openmp {runtime}: {message}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@needs_native
def test_no_openmp_compiler_is_one_line_through_the_cli(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CC"}
    env["PATH"] = str(empty)
    out = tmp_path / "host.toml"
    proc = _cli("native", "calibrate", "--openmp", "gnu", "--out", out, env=env)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr == ("simsched: error: --openmp: no C compiler here builds OpenMP programs ($CC, cc or "
                           "gcc with -fopenmp): install one (e.g. gcc) to measure an OpenMP runtime\n")


@needs_native
@pytest.mark.skipif(not HAS_COMPILER, reason="no compiler builds OpenMP")
def test_a_probe_that_fails_is_one_line_through_the_cli_and_leaves_nothing(tmp_path):
    # A shared library that is no OpenMP runtime, under a runtime's name: the probe cannot start on it.
    impostor = tmp_path / "libiomp5.so"
    shutil.copy(native._native.__file__, impostor)
    out = tmp_path / "host.toml"
    proc = _cli("native", "calibrate", "--openmp", impostor, "--out", out, "--threads", 1, "--force")
    assert proc.returncode == 2 and not out.exists() and proc.stdout == ""
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"simsched: error: the OpenMP probe on libiomp5 ({impostor}): the program exited "
                           "with status 127"), proc.stderr
    assert proc.stderr.count("simsched: error") == 1 and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libiomp5.so"]


def test_the_probe_ships_with_the_package():
    assert (openmp.HERE / f"{omp_calibrate.PROBE}.c").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert f"{omp_calibrate.PROBE}.c" in data["simsched.native"]


@needs_native
def test_native_validate_warns_that_the_files_costs_are_an_openmp_runtimes(tmp_path, main):
    machine = _machine_with(tmp_path, GOOD)
    proc = main("native", "validate", "--machine", machine, "--threads", 1, "--points", 2, "--repeat", 1,
                "--no-openmp", "--schedulers", "omp-static")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        f"simsched: warning: machine file {machine} has an OpenMP runtime's loop_setup and chunk (native "
        "calibrate --openmp), not those of simsched's native runtime that this command runs: calibrate "
        "without --openmp to compare with it")
