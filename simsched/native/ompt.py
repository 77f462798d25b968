"""A user's OpenMP program run under simsched's OMPT tool: the tool, the runtime that loads it, and its records.

GCC's libgomp has no tool interface (OMPT), so a program is run on an OMPT runtime: Intel's
``libiomp5`` (``pip install --no-deps intel-openmp``; a release build) or LLVM's ``libomp`` 16 or later
(Debian's ``libomp5-16`` and up; debug builds, about 0.5 us a chunk). Both also provide
libgomp's entry points, so a program built by GCC runs on them when the runtime stands in for
``libgomp.so.1``: a folder of links named as each runtime's library, put first on
``LD_LIBRARY_PATH``. A runtime reports a chunk only when it hands one out, which it does for
loops compiled with a runtime, dynamic or guided schedule (clang and GCC compile a plain static
loop inline); ``OMP_SCHEDULE`` then sets the schedule of ``schedule(runtime)`` loops.

The tool (``_ompt.c``) writes one binary file of records per run; :func:`read_events` reads it.
"""

from __future__ import annotations

import functools
import glob
import importlib.machinery
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..machine import OPENMP_RUNTIMES

HERE = Path(__file__).resolve().parent
# The names a program may ask for its OpenMP runtime by; the links in the shim folder carry all of them.
RUNTIME_SONAMES = ("libomp.so.5", "libomp.so", "libiomp5.so", "libgomp.so.1")
GOMP = re.compile(r"^libgomp\.so")
OMPT_CAPABLE = re.compile(r"^lib(i?omp5?)\.so")
# Debian's LLVM runtimes live in /usr/lib/llvm-N/lib; versions before 16 do not report chunks.
FIRST_LLVM_WITH_CHUNKS = 16
RECORD_DTYPE = np.dtype([("time", "<u8"), ("kind", "<u8"), ("a", "<u8"), ("b", "<u8"), ("c", "<u8")])
MAGIC = 0x31544D4F53444D53
HEADER_WORDS = 8
VERSION_BYTES = 256
# Record kinds, as _ompt.c numbers them.
PARALLEL_BEGIN, PARALLEL_END, IMPLICIT_BEGIN, IMPLICIT_END, WORK_BEGIN, WORK_END, CHUNK, SYNC_BEGIN, \
    SYNC_END, TASK_CREATE, COUNT, ITERATION, TOOL = range(1, 14)
# ompt_work_t values of a worksharing loop: OpenMP 5.0's ompt_work_loop, 5.2's by schedule.
LOOP_WORK = {1: "", 10: "static", 11: "dynamic", 12: "guided", 13: "other"}
CALLBACK_NAMES = {3: "parallel_begin", 4: "parallel_end", 5: "task_create", 7: "implicit_task", 20: "work",
                  23: "sync_region", 32: "dispatch"}
# Without these the recording has no loops or no chunks: a runtime that cannot deliver them is refused.
NEEDED_CALLBACKS = (7, 20, 32)


def tool_path() -> Path:
    """The shipped OMPT tool's shared library, or an error saying that this install has none."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = HERE / f"_ompt{suffix}"
        if candidate.is_file():
            return candidate
    raise SimschedError("the OMPT tool is not built in this install (no C compiler when simsched was "
                        "installed): install a C compiler and reinstall simsched")


@dataclass(frozen=True)
class Runtime:
    """An OpenMP runtime: which one, its library (None: whichever libgomp a program loads) and its version."""

    name: str           # libiomp5, libomp or libgomp
    path: Path | None
    version: str = ""   # LLVM's major version where the path says it, else ""

    @property
    def label(self) -> str:
        """The runtime's name with LLVM's version where the path says it: libiomp5, libomp 16."""
        return f"{self.name}{' ' + self.version if self.version else ''}"

    @property
    def profile(self) -> str:
        """The omp schedulers' ``runtime=`` profile that models this runtime."""
        return OPENMP_RUNTIMES[self.name]

    def describe(self) -> str:
        """The runtime in words: its name, and its library where one was named."""
        return f"{self.name} ({self.path})" if self.path is not None else self.name


def _llvm_version(path: Path) -> str:
    match = re.search(r"llvm-(\d+)", str(path.resolve()))
    return match.group(1) if match else ""


class NoRuntime(SimschedError):
    """No OpenMP runtime with the tool interface is installed where simsched looks."""


def runtime_at(path: str | Path, option: str = "--runtime") -> Runtime:
    """The runtime at ``path`` (a libiomp5 or libomp shared library), refused where it cannot be one."""
    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"{option} {path}: no such file")
    name = path.resolve().name
    if name.startswith("libiomp5"):
        return Runtime("libiomp5", path)
    if name.startswith("libomp"):
        version = _llvm_version(path)
        if version and int(version) < FIRST_LLVM_WITH_CHUNKS:
            raise SimschedError(f"{option} {path}: LLVM's libomp {version} does not report chunks to a tool "
                                f"(ompt_callback_dispatch); use libomp {FIRST_LLVM_WITH_CHUNKS} or later, or "
                                "Intel's libiomp5 (pip install --no-deps intel-openmp)")
        return Runtime("libomp", path, version)
    raise SimschedError(f"{option} {path}: not an OMPT runtime (expected libiomp5.so or libomp.so.5)")


def _candidates() -> list[Path]:
    """Where OMPT runtimes are looked for, first found first used."""
    found = []
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix, sys.exec_prefix)):
        found.append(Path(prefix) / "lib" / "libiomp5.so")  # pip install --no-deps intel-openmp
    llvm = sorted(glob.glob("/usr/lib/llvm-*/lib/libomp.so.5"), key=lambda p: -int(_llvm_version(Path(p)) or 0))
    found += [Path(p) for p in llvm]
    found += [Path(p) for p in ("/usr/lib/x86_64-linux-gnu/libomp.so.5", "/usr/lib/aarch64-linux-gnu/libomp.so.5",
                                "/usr/local/lib/libomp.so", "/usr/local/lib/libiomp5.so")]
    return found


def find_runtime(explicit: str | None = None) -> Runtime:
    """The OMPT runtime to record with: ``explicit``, else $SIMSCHED_OMP_RUNTIME, else the first one installed."""
    if explicit:
        return runtime_at(explicit)
    if os.environ.get("SIMSCHED_OMP_RUNTIME"):
        return runtime_at(os.environ["SIMSCHED_OMP_RUNTIME"], "SIMSCHED_OMP_RUNTIME")
    for path in _candidates():
        if path.is_file():
            version = _llvm_version(path) if "iomp5" not in path.name else ""
            if version and int(version) < FIRST_LLVM_WITH_CHUNKS:
                continue
            return runtime_at(path)
    raise NoRuntime("no OpenMP runtime with the tool interface (OMPT) found: pip install --no-deps intel-openmp, "
                        f"or install LLVM's libomp {FIRST_LLVM_WITH_CHUNKS} or later (Debian: libomp5-16), "
                        "or name one with --runtime PATH")


def program_path(command: list[str]) -> Path:
    """The program to record (the first word of ``command``), refused unless it is an executable file."""
    if not command:
        raise SimschedError("no program to record: give it after --, e.g. simsched record -- ./a.out ARGS")
    word = command[0]
    found = shutil.which(word) if os.sep not in word else word
    if found is None or not Path(found).exists():
        raise SimschedError(f"program {word!r} not found")
    path = Path(found)
    if path.is_dir() or not os.access(path, os.X_OK):
        raise SimschedError(f"program {word!r} is not an executable file")
    return path


def openmp_libraries(program: Path) -> list[str] | None:
    """The OpenMP runtimes ``program`` loads (its libraries' too, as ldd lists them), or None where that cannot
    be told before it runs (a script, no ldd)."""
    with open(program, "rb") as file:
        if file.read(4) != b"\x7fELF":
            return None  # a script: what it runs is known only after the run
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    out = subprocess.run([ldd, str(program)], capture_output=True, text=True)
    if out.returncode != 0:
        return None  # statically linked, or not for this machine: the run will tell
    needed = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
    return [name for name in needed if GOMP.match(name) or OMPT_CAPABLE.match(name)]


def check_program(program: Path) -> None:
    """Refuse, before any run, an ELF program that links no OpenMP runtime."""
    libraries = openmp_libraries(program)
    if libraries is not None and not libraries:
        raise SimschedError(f"program {program} uses no OpenMP runtime (it links none of libgomp, libomp, "
                            "libiomp5): there are no parallel loops to record")


def shim_folder(runtime: Runtime, folder: Path) -> Path:
    """A folder of links that make ``runtime`` answer to every OpenMP runtime's name, libgomp's included."""
    shim = folder / "runtime"
    shim.mkdir(exist_ok=True)
    for name in RUNTIME_SONAMES:
        link = shim / name
        if not link.exists():
            link.symlink_to(runtime.path.resolve())
    return shim


def environment(runtime: Runtime, shim: Path, threads: int, schedule: str, events: Path | None,
                chunks: bool = True) -> dict[str, str]:
    """The program's environment: the runtime in front, ``threads`` bound threads, ``schedule``, the tool
    (recording ``events``; every chunk too unless ``chunks`` is false)."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(shim), env.get("LD_LIBRARY_PATH", "")) if p)
    env.update(OMP_NUM_THREADS=str(threads), OMP_SCHEDULE=schedule, OMP_PROC_BIND="true", OMP_DYNAMIC="false")
    env.pop("OMP_TOOL_LIBRARIES", None)
    env.pop("SIMSCHED_OMPT_OUT", None)
    env.pop("SIMSCHED_OMPT_CHUNKS", None)
    if events is not None:
        env.update(OMP_TOOL="enabled", OMP_TOOL_LIBRARIES=str(tool_path()), SIMSCHED_OMPT_OUT=str(events),
                   SIMSCHED_OMPT_CHUNKS="1" if chunks else "0")
    return env


def run_program(command: list[str], env: dict[str, str], timeout_s: float, what: str,
                output: bool = False) -> tuple[str, str]:
    """Run ``command`` to its end in its own process group (killed whole on a timeout or an interrupt); its
    standard output and error if ``output``, else empty. A failure is one line naming ``what`` and the
    program's last words."""
    try:
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE if output else subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise SimschedError(f"{what}: {command[0]!r} cannot be started: {exc.strerror or exc}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise SimschedError(f"{what}: the program ran past --timeout {timeout_s:g} s and was stopped") from None
    except BaseException:
        _kill(process)
        raise
    if process.returncode != 0:
        last = next((line for line in reversed(stderr.decode(errors="replace").splitlines()) if line.strip()), "")
        status = (f"signal {-process.returncode}" if process.returncode < 0 else f"status {process.returncode}")
        raise SimschedError(f"{what}: the program exited with {status}" + (f": {last.strip()}" if last else ""))
    if not output:
        return "", ""
    return stdout.decode(errors="replace"), stderr.decode(errors="replace")


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@dataclass
class Events:
    """One run's records: per thread (registration order, the initial thread first), times in ns from the start."""

    runtime_version: str
    refused: list[int]
    threads: list[np.ndarray] = field(default_factory=list)  # RECORD_DTYPE arrays, "time" as float64 ns
    codes: dict[int, tuple[str, int]] = field(default_factory=dict)  # code address -> (object file, offset)
    ns_per_tick: float = 1.0  # what a TOOL record's ticks are in ns


def events_file(prefix: Path) -> Path:
    """The one file of records the tool wrote for a run (``PREFIX.PID``), refused where there is none or several."""
    found = [p for p in prefix.parent.glob(prefix.name + ".*") if p.suffix[1:].isdigit()]
    if not found:
        raise SimschedError("the program ran, but no OMPT runtime loaded the recording tool: is the program "
                            "linked statically, or with a run path (DT_RPATH) to libgomp? It must find its "
                            "OpenMP runtime through LD_LIBRARY_PATH")
    if len(found) > 1:
        raise SimschedError(f"the program ran {len(found)} OpenMP processes (a script that runs several, or a "
                            "program that forks): record one OpenMP program at a time")
    return found[0]


def read_events(prefix: Path) -> Events:
    """The tool's records of one run (see _ompt.c for the layout), every length checked."""
    path = events_file(prefix)
    data = path.read_bytes()

    def cut(start: int, size: int) -> bytes:
        if start + size > len(data):
            raise SimschedError(f"{path}: the tool's records end early ({len(data)} bytes): was the program "
                                "stopped while it wrote them?")
        return data[start:start + size]

    header = np.frombuffer(cut(0, HEADER_WORDS * 8), dtype="<u8")
    if int(header[0]) != MAGIC:
        raise SimschedError(f"{path}: not a recording of simsched's OMPT tool")
    tick0, ns0, tick1, ns1, threads, refused_count = (int(x) for x in header[2:])
    offset = HEADER_WORDS * 8
    refused = [int(x) for x in np.frombuffer(cut(offset, 8 * refused_count), dtype="<u8")]
    offset += 8 * refused_count
    version = cut(offset, VERSION_BYTES).split(b"\0")[0].decode(errors="replace")
    offset += VERSION_BYTES
    ns_per_tick = (ns1 - ns0) / (tick1 - tick0) if tick1 > tick0 else 1.0
    by_thread: dict[int, np.ndarray] = {}
    for _ in range(threads):
        thread, count = (int(x) for x in np.frombuffer(cut(offset, 16), dtype="<u8"))
        offset += 16
        by_thread[thread] = np.frombuffer(cut(offset, count * RECORD_DTYPE.itemsize), dtype=RECORD_DTYPE)
        offset += count * RECORD_DTYPE.itemsize
    if offset != len(data):
        raise SimschedError(f"{path}: {len(data) - offset} bytes after the tool's records: not one run's file")
    events = Events(version, refused, ns_per_tick=ns_per_tick)
    times = np.dtype([(name, "<f8" if name == "time" else "<u8") for name in RECORD_DTYPE.names])
    for thread in sorted(by_thread):
        raw = by_thread[thread]
        converted = np.empty(raw.size, dtype=times)
        for name in RECORD_DTYPE.names:
            converted[name] = raw[name]
        converted["time"] = (raw["time"].astype(np.int64) - tick0) * ns_per_tick
        events.threads.append(converted)
    codes = Path(f"{path}.codes")
    if codes.is_file():
        for line in codes.read_text(errors="replace").splitlines():
            parts = line.split("\t", 2)
            if len(parts) == 3:  # address, offset in its object, the object's file
                events.codes[int(parts[0], 16)] = (parts[2], int(parts[1], 16))
    return events


def check_callbacks(events: Events, runtime: Runtime) -> None:
    """Refuse a recording from a runtime that would not report threads, loops or chunks."""
    missing = [CALLBACK_NAMES[c] for c in NEEDED_CALLBACKS if c in events.refused]
    if missing:
        raise SimschedError(f"the runtime {runtime.path} ({events.runtime_version or runtime.label}) does not "
                            f"deliver {', '.join('ompt_callback_' + m for m in missing)}: use Intel's libiomp5 "
                            f"(pip install --no-deps intel-openmp) or LLVM's libomp {FIRST_LLVM_WITH_CHUNKS} or later")


@functools.lru_cache(maxsize=4096)
def source_line(file: str, offset: int) -> str:
    """``file:line`` of the call whose return address is ``offset`` in ``file``, else ``object+0xOFFSET``."""
    fallback = f"{Path(file).name or 'unknown'}+{offset:#x}"
    addr2line = shutil.which("addr2line")
    if not file or addr2line is None or not Path(file).is_file():
        return fallback
    # A return address lies after its call: one byte back is inside the call. Of the inlined frames there
    # (innermost first), the last is the function that makes the call: the loop's own code.
    out = subprocess.run([addr2line, "-i", "-e", file, f"{max(offset - 1, 0):#x}"], capture_output=True, text=True)
    lines = out.stdout.splitlines()
    if out.returncode != 0 or not lines:
        return fallback
    source, _, number = lines[-1].split(" (discriminator")[0].strip().rpartition(":")
    if source and source != "??" and number.isdigit() and number != "0":
        return f"{Path(source).name}:{number}"
    return fallback


def scratch() -> tempfile.TemporaryDirectory:
    """A folder for the runs' records, removed whatever happens."""
    return tempfile.TemporaryDirectory(prefix="simsched-record-")
