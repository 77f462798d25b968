"""An OpenMP runtime's own costs for a machine file: its chunk claim, its fork and join, its contended claim.

``simsched native calibrate --openmp [RUNTIME]`` predicts a real OpenMP runtime rather than
simsched's own native one: it builds ``omp_runtime_probe.c`` with the C compiler (``-fopenmp``),
runs it on that runtime (Intel's ``libiomp5`` or LLVM's ``libomp`` standing in for ``libgomp.so.1``
through a folder of links put first on ``LD_LIBRARY_PATH``, or the compiler's own ``libgomp``), one
bound, spinning thread per calibrated CPU, and turns the probe's timed empty loops into the
``[costs_ns]`` ``loop_setup`` and ``chunk`` the model charges, with the raw figures in ``[openmp]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..machine import OPENMP_RUNTIMES as RUNTIMES
from . import ompt, openmp
from .ompt import Runtime

PROBE = "omp_runtime_probe"
# Each figure is the median of this many timed loops (or blocks of fork/joins), after one left out.
PROBE_SAMPLES = 20
# Chunks one thread claims in the chunk probes; iterations per thread of the loops on all threads.
PROBE_CHUNKS = 20_000
# Fork/joins timed together: a runtime's omp_get_wtime may tick in microseconds (libiomp5's does).
PROBE_FORKS = 200
PROBE_TIMEOUT_S = 300.0
# What the probe prints, one line per sample (see omp_runtime_probe.c).
FIGURES = ("static1", "dynamic1", "forkjoin", "static", "dynamic", "dynamic64", "guided")
# The words that name the compiler's own runtime instead of a path.
GNU_WORDS = ("gnu", "libgomp")
# Simulated empty loops the model's own fork and join charge is read from (the first, colder, left out).
EMPTY_LOOPS = 5
# loop_setup is fitted until the model's empty loop is this close to the measured one (the file keeps 0.1 ns),
# in at most so many simulations.
FIT_NS = 0.05
FIT_ROUNDS = 6
# What an OpenMP runtime's library says its version is: a what(1) string, "@(#) Intel(R) OMP version: ...".
WHAT_VERSION = re.compile(rb"@\(#\) ([^\x00\n]*OMP version: [^\x00\n]*)")
OPENMP_MACRO = re.compile(r"_OPENMP\s*=\s*'(\d+)'")
VERSION_SCAN_BYTES = 64 << 20


def _named(path: Path) -> str | None:
    name = path.resolve().name
    return next((runtime for runtime in RUNTIMES if name.startswith(runtime)), None)


def runtime_for(spec: str) -> Runtime:
    """The runtime ``--openmp`` names: a library's path, ``gnu``/``libgomp``, or "" for the default.

    The default is the OMPT runtime ``simsched record`` would record with (see :func:`ompt.find_runtime`),
    else the compiler's own libgomp.
    """
    if spec == "":
        try:
            found = ompt.find_runtime()
        except ompt.NoRuntime:
            return Runtime("libgomp", None)
        return runtime_for(str(found.path))
    if spec in GNU_WORDS:
        return Runtime("libgomp", None)
    path = Path(spec)
    if not path.exists():
        raise SimschedError(f"--openmp {spec}: no such file (name a runtime's library, e.g. libiomp5.so or "
                            "libomp.so.5, or the word gnu)")
    if not path.is_file():
        raise SimschedError(f"--openmp {spec}: not a file")
    name = _named(path)
    if name is None:
        raise SimschedError(f"--openmp {spec}: not an OpenMP runtime (expected libiomp5.so, libomp.so.5 or "
                            "libgomp.so.1, or the word gnu)")
    try:
        with open(path, "rb") as file:
            elf = file.read(4) == b"\x7fELF"
    except OSError as exc:
        raise SimschedError(f"--openmp {spec}: cannot be read: {exc.strerror or exc}") from None
    if not elf:
        raise SimschedError(f"--openmp {spec}: not a shared library (no ELF header)")
    return Runtime(name, path)


def probe_environment(runtime: Runtime, folder: Path, cpus: list[int]) -> dict[str, str]:
    """The probe's environment: ``runtime`` first, a bound, spinning thread per CPU of ``cpus``, no tool."""
    threads = len(cpus)
    if runtime.path is not None:
        env = ompt.environment(runtime, ompt.shim_folder(runtime, folder), threads, "static", None)
    else:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "true", "OMP_DYNAMIC": "false"}
    for name in ("OMP_TOOL_LIBRARIES", "KMP_AFFINITY", "GOMP_CPU_AFFINITY", "OMP_SCHEDULE"):
        env.pop(name, None)  # binding and schedule are the calibration's, not whatever the shell had
    # One place per calibrated CPU, in order: the team's threads bind to them one by one.
    places = ",".join(f"{{{cpu}}}" for cpu in cpus)
    env.update(OMP_WAIT_POLICY="active", OMP_PLACES=places, OMP_TOOL="disabled", OMP_DISPLAY_ENV="true")
    return env


@dataclass(frozen=True)
class ProbeOutput:
    """What one run of the probe printed: its team, the runtimes it had loaded, each figure's samples (ns)."""

    threads: int
    libraries: list[str]
    samples: dict[str, list[float]]


def parse_output(text: str) -> ProbeOutput:
    """The probe's printout (see omp_runtime_probe.c), refused where it is not one."""
    threads, libraries, samples = None, [], {name: [] for name in FIGURES}
    for number, line in enumerate(text.splitlines(), 1):
        word, _, rest = line.strip().partition(" ")
        try:
            if word == "threads":
                threads = int(rest)
            elif word == "library":
                libraries.append(rest.strip())
            elif word in samples:
                value = float(rest)
                if not np.isfinite(value) or value < 0:
                    raise ValueError(rest)
                samples[word].append(value)
            elif line.strip():
                raise ValueError(line)
        except ValueError:
            raise SimschedError(f"the OpenMP probe printed an unexpected line {number}: "
                                f"{line.strip()!r}") from None
    if threads is None or threads < 1:
        raise SimschedError("the OpenMP probe did not say how many threads its team got")
    short = [name for name, values in samples.items() if len(values) < 2]
    if short:
        raise SimschedError(f"the OpenMP probe printed fewer than 2 samples of {', '.join(short)}")
    return ProbeOutput(threads, libraries, samples)


def figures(output: ProbeOutput, chunks: int) -> dict:
    """The runtime's figures from the probe's samples, each the median of a figure's samples after the first.

    ``chunk_ns``: a dynamic,1 chunk claimed by a lone thread, beyond its iteration (the static loop's
    per-iteration time); ``loop_setup_ns``: one empty parallel for (fork and join); ``contended_chunk_ns``:
    per chunk per thread, all threads claiming (None with one thread: none contends).
    """
    median = {name: float(np.median(values[1:])) for name, values in output.samples.items()}
    threads = output.threads
    return {
        "threads": threads, "chunks": chunks, "samples": min(len(v) for v in output.samples.values()) - 1,
        "iteration_ns": median["static1"] / chunks,
        "chunk_ns": max(median["dynamic1"] - median["static1"], 0.0) / chunks,
        "loop_setup_ns": median["forkjoin"],
        "contended_chunk_ns": (max(median["dynamic"] - median["static"], 0.0) / chunks
                               if threads > 1 else None),
        "loop_iterations": chunks * threads, "static_loop_ns": median["static"],
        "dynamic64_loop_ns": median["dynamic64"], "guided_loop_ns": median["guided"],
    }


def library_version(path: Path, stderr: str = "") -> str:
    """The runtime's version: its library's what(1) string, else the ``_OPENMP`` OMP_DISPLAY_ENV shows."""
    try:
        with open(path, "rb") as file:
            found = WHAT_VERSION.search(file.read(VERSION_SCAN_BYTES))
    except OSError:
        found = None
    if found:
        return found.group(1).decode(errors="replace").strip()
    macro = OPENMP_MACRO.search(stderr)
    return f"_OPENMP {macro.group(1)}" if macro else ""


def loaded_runtime(runtime: Runtime, libraries: list[str]) -> Path:
    """The library the probe ran on, refused unless it is ``runtime``'s."""
    loaded = [Path(p) for p in libraries]
    names = ", ".join(libraries) or "no OpenMP runtime"
    if runtime.path is not None:
        target = runtime.path.resolve()
        if not any(p.resolve() == target for p in loaded):
            raise SimschedError(f"the OpenMP probe ran on {names}, not {runtime.path}: is it linked with a "
                                "run path to another runtime?")
        return runtime.path.resolve()
    gnu = [p for p in loaded if p.name.startswith("libgomp")]
    if not gnu:
        raise SimschedError(f"--openmp gnu: the OpenMP probe ran on {names}, not libgomp (the C compiler's "
                            "-fopenmp links another runtime, or LD_LIBRARY_PATH puts one first)")
    return gnu[0]


@dataclass
class Probe:
    """The OpenMP probe built for one runtime and the calibrated CPUs, ready to run."""

    runtime: Runtime
    binary: Path
    env: dict[str, str]
    cpus: list[int]
    chunks: int = PROBE_CHUNKS
    samples: int = PROBE_SAMPLES
    forks: int = PROBE_FORKS

    @classmethod
    def build(cls, spec: str, folder: Path, cpus: list[int]) -> Probe:
        """The probe of the runtime ``spec`` names (see :func:`runtime_for`), built in ``folder``."""
        runtime = runtime_for(spec)
        binary = openmp.build(PROBE, folder)
        if binary is None:
            raise SimschedError("--openmp: no C compiler here builds OpenMP programs ($CC, cc or gcc with "
                                "-fopenmp): install one (e.g. gcc) to measure an OpenMP runtime")
        return cls(runtime, binary, probe_environment(runtime, Path(folder), cpus), list(cpus))

    def run(self) -> tuple[str, str]:
        """The probe's stdout and stderr; the probe is killed if it outlives its time or is interrupted."""
        command = [str(self.binary), str(self.chunks), str(self.samples), str(self.forks)]
        return ompt.run_program(command, self.env, PROBE_TIMEOUT_S,
                                f"the OpenMP probe on {self.runtime.describe()}", output=True)

    def measure(self, progress=print) -> dict:
        """Run the probe: the runtime's figures (see :func:`figures`), its library, version and profile."""
        from .probe_figure import Figure

        progress(f"the OpenMP runtime {self.runtime.describe()} on {len(self.cpus)} thread(s): empty loops "
                 f"of {self.chunks:,} iterations a thread and blocks of {self.forks} fork/joins, the median "
                 f"of {self.samples} each")
        stdout, stderr = self.run()
        output = parse_output(stdout)
        if output.threads != len(self.cpus):
            raise SimschedError(f"the OpenMP probe on {self.runtime.describe()} got a team of "
                                f"{output.threads} thread(s), not the {len(self.cpus)} asked for")
        path = loaded_runtime(self.runtime, output.libraries)
        result = figures(output, self.chunks)
        result.update(runtime=self.runtime.name, path=str(path), version=library_version(path, stderr),
                      profile=self.runtime.profile)
        spread = {name: Figure.of(values[1:], 50) for name, values in output.samples.items()}
        progress(f"  fork/join: {spread['forkjoin'].spread()}")
        progress(f"  chunk: {result['chunk_ns']:.1f} ns (dynamic,1 loops "
                 f"{spread['dynamic1'].spread(digits=0)}, static {spread['static1'].spread(digits=0)})")
        if result["contended_chunk_ns"] is not None:
            progress(f"  contended chunk: {result['contended_chunk_ns']:.1f} ns (dynamic,1 loops on "
                     f"{output.threads} threads {spread['dynamic'].spread(digits=0)})")
        return result


def empty_loop_ns(machine, profile: str, threads: int) -> float:
    """What ``machine``'s model charges one empty ``omp-static`` loop of one iteration per thread (ns)."""
    from ..engine import simulate

    result = simulate(machine, f"omp-static:runtime={profile}", f"uforall:n={threads},cost_ns=0", threads,
                      repeat=EMPTY_LOOPS)
    return float(np.median(result.loop_ns[1:]))


def fit_costs(omp: dict, atomic: float, model: Callable[[], object]) -> None:
    """Set ``omp["chunk"]`` and ``omp["loop_setup"]``: the [costs_ns] that make the model charge the figures.

    The model charges a claim's atomic and an empty loop's fork and join barriers itself: ``chunk``
    is the measured claim less the calibrated atomic, and ``loop_setup`` what makes ``model()`` (the
    machine file with ``omp``'s costs so far) charge an empty loop the measured fork/join: the
    fork/join less the model's own charge (``omp["modeled_loop_ns"]``, with ``loop_setup`` 0), refined
    by simulating until within FIT_NS, since how far the model's loops overlap changes with their start.
    """
    omp["chunk"] = max(omp["chunk_ns"] - atomic, 0.0)
    omp["loop_setup"] = omp["modeled_loop_ns"] = 0.0
    target, profile, threads = omp["loop_setup_ns"], omp["profile"], omp["threads"]
    omp["modeled_loop_ns"] = charged = empty_loop_ns(model(), profile, threads)
    for _ in range(FIT_ROUNDS):
        setup = max(omp["loop_setup"] + target - charged, 0.0)
        if setup == omp["loop_setup"] or abs(target - charged) <= FIT_NS:
            break
        omp["loop_setup"] = setup
        charged = empty_loop_ns(model(), profile, threads)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def costs_text(omp: dict, native_loop_setup: float, native_chunk: float) -> str:
    """The [costs_ns] loop_setup and chunk of ``omp``'s runtime, commented with how they were measured."""
    p, name = omp["threads"], omp["runtime"]
    version = f" ({omp['version']})" if omp.get("version") else ""
    forkjoin, modeled = f"{omp['loop_setup_ns']:.1f}", f"{omp['modeled_loop_ns']:.1f}"
    over = "" if omp["loop_setup"] > 0 else "# The model's own charge is the larger: loop_setup is 0.\n"
    claim, iteration = f"{omp['chunk_ns']:.1f}", f"{omp['iteration_ns']:.2f}"
    return f'''# loop_setup and chunk: the OpenMP runtime {name}'s, measured by omp_runtime_probe.c (built
# with -fopenmp) run on {omp["path"]}{version},
# {p} thread(s) bound one per CPU (OMP_PROC_BIND=true, OMP_WAIT_POLICY=active), each figure the median of
# {omp["samples"]} timed loops after one left out; [openmp] has the raw figures.
# loop_setup: an empty `parallel for schedule(static)` of one iteration per thread on {p} thread(s), fork
# to join, took {forkjoin} ns (timed in blocks of {PROBE_FORKS}); loop_setup makes this file's model charge
# the same empty loop (omp-static:runtime={omp["profile"]}) as much, where with loop_setup = 0 it charges
# {modeled} ns (its barriers).
{over}# chunk: a schedule(dynamic,1) loop of {omp["chunks"]:,} empty iterations claimed by one thread of a
# team of two (the other blocked outside the loop), per chunk, less the schedule(static) loop's
# {iteration} ns an iteration: {claim} ns; less an atomic, which the model charges a claim itself.
# (simsched's own native runtime, which plain `native calibrate` writes: loop_setup {native_loop_setup:.1f},
# chunk {native_chunk:.1f})
loop_setup = {omp["loop_setup"]:.1f}
chunk = {omp["chunk"]:.1f}
'''


def section_text(omp: dict) -> str:
    """The [openmp] section: the calibrated runtime and its raw figures, each commented."""
    p, n, chunks = omp["threads"], omp["loop_iterations"], omp["chunks"]
    contended = ""
    if omp["contended_chunk_ns"] is not None:
        contended = (f"contended_chunk_ns = {omp['contended_chunk_ns']:.1f}   # dynamic,1, all {p} threads "
                     f"claiming: (its loop - the static one) / {chunks:,}\n")
    return f'''
[openmp]
# The OpenMP runtime whose costs [costs_ns] loop_setup and chunk are, and the probe's raw figures in ns,
# each the median of {omp["samples"]} after one left out. The loops below are of {n:,} empty iterations on
# {p} thread(s), inside one parallel region, each timed to the end of its barrier.
runtime = {_toml_string(omp["runtime"])}
path = {_toml_string(omp["path"])}
version = {_toml_string(omp["version"])}
profile = {_toml_string(omp["profile"])}          # the omp schedulers' runtime= that models it
threads = {p}
chunk_ns = {omp["chunk_ns"]:.1f}             # dynamic,1, one thread claiming: a chunk beyond its iteration
loop_setup_ns = {omp["loop_setup_ns"]:.1f}       # an empty parallel for, an iteration a thread: fork to join
{contended}loop_iterations = {n}
static_loop_ns = {omp["static_loop_ns"]:.1f}      # schedule(static)
dynamic64_loop_ns = {omp["dynamic64_loop_ns"]:.1f}   # schedule(dynamic,64)
guided_loop_ns = {omp["guided_loop_ns"]:.1f}      # schedule(guided)
'''
