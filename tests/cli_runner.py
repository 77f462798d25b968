"""Batches of ``python -m simsched.cli`` runs, forked from one warm interpreter rather than each started cold.

Starting an interpreter that imports numpy, pandas, SciPy and SimPy costs most of a second, and the tests
that judge what the command line answers to bad input run it hundreds of times. :func:`run_batch` runs such
a batch through a zygote: one real interpreter, started once per test process, that imports all of that and
then forks a child per command line. Each child is a process of its own that runs what ``python -m
simsched.cli ARGS`` runs, in the case's folder and environment, with its standard output and error in files;
its status, output and error come back as a real subprocess's would. Where ``os.fork`` is missing, or a
case's environment differs in what an interpreter reads as it starts, the case runs as a real subprocess.

Run as a script (``python cli_runner.py --serve N``), this file is the zygote.
"""

from __future__ import annotations

import atexit
import errno
import json
import locale
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Hashable, Iterable, Mapping, NamedTuple, Sequence

MODULE = "simsched.cli"
# Runs at once: one a CPU, the CPUs shared among pytest-xdist's workers (each has a zygote of its own).
_SHARERS = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
WORKERS = max(2, (os.cpu_count() or 2) // (int(_SHARERS) if _SHARERS.isdigit() and int(_SHARERS) > 0 else 1))

# What the zygote imports once so that no child imports it again: the command line and the modules it
# imports at its start or lazily. Not matplotlib.pyplot: importing it picks the plotting backend, which
# each run picks for itself as a fresh interpreter does. Nor SciPy's stats and optimize, nor networkx:
# few runs need them, and they would add more than a second to every zygote's start.
PRELOAD = ("numpy", "pandas", "simpy", "scipy", "scipy.io", "scipy.linalg", "scipy.sparse",
           "scipy.sparse.csgraph", "pyarrow", "pyarrow.parquet", "matplotlib",
           "simsched.cli", "simsched.engine", "simsched.schedulers", "simsched.workloads", "simsched.native",
           "simsched.analysis")

# Environment variables an interpreter or those libraries read as they start: a fork reads them no more,
# so a case that gives one of them another value than the zygote started with runs as a real subprocess.
STARTUP_VARIABLES = ("PYTHON", "LANG", "LC_", "LD_", "HOME", "XDG_", "MPL", "NPY_", "OPENBLAS", "GOTO",
                     "OMP_", "MKL_", "ARROW", "JE_")


class _Request(NamedTuple):
    """One command line to run: the command a subprocess would run, its arguments, folder and environment."""

    command: list[str]
    args: list[str]
    cwd: str
    env: dict[str, str]
    extra: bool  # whether the case changed the environment at all


def run_batch(cases: Mapping[Hashable, Sequence], timeout: float = 300, real: Iterable[Hashable] = (),
              module: str = MODULE) -> dict[Hashable, subprocess.CompletedProcess]:
    """Every case's ``python -m MODULE ARGS``, run concurrently: a CompletedProcess (text output) by key.

    A case is ``(args,)``, ``(args, cwd)`` or ``(args, cwd, env)``: ``cwd`` None is this process's folder,
    ``env`` maps variables to set on top of this process's environment (None to unset one). The keys in
    ``real`` run as genuine subprocesses, so the real entry point stays tested beside the forks. A run past
    ``timeout`` seconds is killed: status -9, with a line saying so after its standard error.
    """
    requests = {key: _request(module, *case) for key, case in cases.items()}
    real = set(real) & set(requests)
    zygote = None
    if _can_fork():
        forkable = {key: r for key, r in requests.items() if key not in real}
        if forkable:
            zygote = _zygote()
            real |= {key for key, r in forkable.items() if not zygote.starts_alike(r.env)}
    else:
        real = set(requests)
    forked = {key: r for key, r in requests.items() if key not in real}
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {key: pool.submit(_run_real, requests[key], timeout) for key in real}
        results = zygote.run(forked, timeout, module) if forked else {}
        results.update((key, future.result()) for key, future in futures.items())
    return {key: results[key] for key in cases}


def run_real_batch(cases: Mapping[Hashable, Sequence], timeout: float = 300,
                   module: str = MODULE) -> dict[Hashable, subprocess.CompletedProcess]:
    """The same as :func:`run_batch`, every case a genuine subprocess."""
    return run_batch(cases, timeout, real=cases, module=module)


def zygote_state() -> dict:
    """The zygote's state, as it reports it: its pid, runs in progress, threads, whether pyplot is loaded."""
    return _zygote().state()


def _request(module: str, args: Sequence, cwd=None, env: Mapping[str, str | None] | None = None) -> _Request:
    args = [str(arg) for arg in args]
    cwd = os.path.abspath(cwd if cwd is not None else os.getcwd())
    if not os.path.isdir(cwd):  # as subprocess refuses such a folder, before anything runs
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
    full = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            full.pop(name, None)
        else:
            full[name] = str(value)
    return _Request([sys.executable, "-m", module, *args], args, cwd, full, env is not None)


def _can_fork() -> bool:
    return hasattr(os, "fork") and os.name == "posix"


def _run_real(request: _Request, timeout: float) -> subprocess.CompletedProcess:
    """One case as a genuine subprocess."""
    try:
        return subprocess.run(request.command, capture_output=True, text=True, cwd=request.cwd,
                              env=request.env if request.extra else None, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        out, err = (_decode(data or b"") if isinstance(data, bytes) else data or ""
                    for data in (exc.stdout, exc.stderr))
        return subprocess.CompletedProcess(request.command, -9, out, err + _killed(timeout))


def _killed(timeout: float) -> str:
    return f"cli_runner: killed after {timeout:g} s\n"


def _decode(data: bytes) -> str:
    """Output bytes as text, exactly as ``subprocess.run(text=True)`` makes them."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


_LOCK = threading.Lock()
_ZYGOTE: _Zygote | None = None


def _zygote() -> _Zygote:
    """This process's zygote: started the first time it is needed, and again if it has died."""
    global _ZYGOTE
    with _LOCK:
        if _ZYGOTE is None or not _ZYGOTE.alive():
            if _ZYGOTE is not None:
                _ZYGOTE.close()
            else:
                atexit.register(_close)
            _ZYGOTE = _Zygote()
        return _ZYGOTE


def _close() -> None:
    if _ZYGOTE is not None:
        _ZYGOTE.close()


class _Zygote:
    """The warm interpreter this process forks its command lines from, the pipes to it and its folder."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="simsched-cli-runner-"))
        self.env = dict(os.environ)
        self.log = self.folder / "zygote.log"
        self.count = 0
        self.lock = threading.Lock()
        with open(self.log, "wb") as log:
            command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(WORKERS)]
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         cwd=self.folder)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def starts_alike(self, env: Mapping[str, str]) -> bool:
        """Whether an interpreter started in ``env`` starts as the zygote did."""
        names = {name for name in (*env, *self.env) if name.startswith(STARTUP_VARIABLES)}
        return all(env.get(name) == self.env.get(name) for name in names)

    def run(self, requests: Mapping[Hashable, _Request], timeout: float, module: str) -> dict:
        """Each request forked by the zygote, at most WORKERS at once: its CompletedProcess by key."""
        with self.lock:
            pending, lines = {}, []
            for key, request in requests.items():
                self.count += 1
                out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
                pending[self.count] = (key, request, out, err)
                lines.append(json.dumps({"id": self.count, "module": module, "args": request.args,
                                         "cwd": request.cwd, "env": request.env, "timeout": timeout,
                                         "stdout": str(out), "stderr": str(err)}))
            replies = self._exchange(lines, bound=timeout * (len(lines) // WORKERS + 1) + 120)
            results = {}
            for reply in replies:
                key, request, out, err = pending.pop(reply["id"])
                stdout, stderr = (_decode(path.read_bytes()) if path.exists() else "" for path in (out, err))
                for path in (out, err):
                    path.unlink(missing_ok=True)
                if reply["timed_out"]:
                    stderr += _killed(timeout)
                status = reply["returncode"]
                results[key] = subprocess.CompletedProcess(request.command, status, stdout, stderr)
            return results

    def state(self) -> dict:
        with self.lock:
            self.count += 1
            return self._exchange([json.dumps({"id": self.count, "op": "state"})], bound=120)[0]

    def _exchange(self, lines: list[str], bound: float) -> list[dict]:
        """Send the request lines, return a reply to each; a zygote not done in ``bound`` s is killed."""
        data = "".join(line + "\n" for line in lines).encode()
        # A writer of its own: the replies come back while the requests still go out, and either pipe fills.
        writer = threading.Thread(target=self._send, args=(data,), daemon=True)
        watchdog = threading.Timer(bound, self.proc.kill)
        watchdog.daemon = True
        writer.start()
        watchdog.start()
        try:
            replies = []
            while len(replies) < len(lines):
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the command-line zygote ended (status {self.proc.wait()}): "
                                       f"{self.log.read_text(errors='replace')[-4000:]}")
                replies.append(json.loads(line))
                if "error" in replies[-1]:
                    raise RuntimeError(f"the command-line zygote refused a request: {replies[-1]['error']}")
            return replies
        finally:
            watchdog.cancel()
            writer.join(timeout=10)

    def _send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the zygote died; the reader says so
            pass

    def close(self) -> None:
        """End the zygote (it kills any child still running) and remove its folder."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


# -- the zygote -------------------------------------------------------------------------------------------

def _serve(workers: int) -> None:
    """Import what the command line needs, then fork a child per request line on stdin until stdin ends."""
    import selectors
    import signal

    replies = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # so that nothing the zygote itself prints can mix into the replies
    os.close(null)
    sys.path[0] = os.getcwd()  # the tests' folder is no part of a run's module path
    signal.signal(signal.SIGTERM, _stop)
    _preload()

    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    running: dict[int, dict] = {}  # pid -> the request, its pidfd or None, its deadline, whether killed
    queue: list[dict] = []
    buffer, reading = b"", True

    def reply(message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(replies, data):]

    def start(request: dict) -> None:
        inherited = [replies, selector.fileno(), *(child["pidfd"] for child in running.values()
                                                  if child["pidfd"] is not None)]
        pid = os.fork()
        if pid == 0:
            _child(request, inherited)
        try:
            os.setpgid(pid, pid)  # as the child does: whichever is first, the group exists before any kill
        except OSError:
            pass
        pidfd = None
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(pid)
                selector.register(pidfd, selectors.EVENT_READ, pid)
            except OSError:
                pidfd = None
        running[pid] = {"request": request, "pidfd": pidfd, "killed": False,
                        "deadline": time.monotonic() + float(request["timeout"])}

    def reap(pid: int, status: int) -> None:
        child = running.pop(pid)
        if child["pidfd"] is not None:
            selector.unregister(child["pidfd"])
            os.close(child["pidfd"])
        reply({"id": child["request"]["id"], "returncode": os.waitstatus_to_exitcode(status),
               "timed_out": child["killed"]})

    def kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    try:
        while reading or queue or running:
            while queue and len(running) < workers:
                start(queue.pop(0))
            now = time.monotonic()
            wait = min((child["deadline"] for child in running.values() if not child["killed"]), default=None)
            wait = None if wait is None else max(0.0, wait - now)
            if any(child["pidfd"] is None for child in running.values()):
                wait = 0.02 if wait is None else min(wait, 0.02)  # no pidfd to wait on: look again soon
            for key, _ in selector.select(wait):
                if key.fileobj == 0:
                    chunk = os.read(0, 1 << 16)
                    if not chunk:
                        reading = False
                        selector.unregister(0)
                        for pid in running:  # whoever wanted these answers is gone
                            kill(pid)
                        queue.clear()
                        continue
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        _take(json.loads(line), queue, reply, running)
                else:
                    pid, status = os.waitpid(key.data, 0)
                    reap(pid, status)
            for pid, child in list(running.items()):
                if child["pidfd"] is None:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        reap(pid, status)
                        continue
                if not child["killed"] and time.monotonic() >= child["deadline"]:
                    child["killed"] = True
                    kill(pid)
    finally:
        for pid in list(running):
            kill(pid)
            os.waitpid(pid, 0)


def _take(request: dict, queue: list, reply, running: dict) -> None:
    """Queue a run, or answer a question about the zygote at once."""
    if request.get("op") == "state":
        tasks = "/proc/self/task"
        reply({"id": request["id"], "pid": os.getpid(), "running": len(running),
               "threads": len(os.listdir(tasks)) if os.path.isdir(tasks) else None,
               "pyplot": "matplotlib.pyplot" in sys.modules})
    elif request.get("op", "run") == "run":
        queue.append(request)
    else:
        reply({"id": request.get("id"), "error": f"unknown op {request.get('op')!r}"})


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def _preload() -> None:
    import importlib
    import pkgutil

    # pyarrow's allocator runs a housekeeping thread unless told not to; the zygote forks single-threaded.
    # (OpenBLAS's threads stop by themselves before each fork, and start again in a child that needs them.)
    allocator = "JE_ARROW_MALLOC_CONF"
    told = allocator not in os.environ
    if told:
        os.environ[allocator] = "background_thread:false"
    try:
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:  # a run that needs it fails in the child just as in a fresh interpreter
                continue
        analysis = sys.modules.get("simsched.analysis")
        for info in pkgutil.iter_modules(getattr(analysis, "__path__", []), "simsched.analysis."):
            importlib.import_module(info.name)
    finally:
        if told:
            del os.environ[allocator]


def _child(request: dict, inherited: list[int]):
    """The forked child: be ``python -m MODULE ARGS`` in the request's folder and environment, then exit."""
    status = 1
    try:
        import signal

        os.setpgid(0, 0)  # its own group, so that a timeout kills what it started too
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        _redirect(0, os.devnull, os.O_RDONLY)
        _redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        _redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        sys.stdin = sys.__stdin__ = _stdio(0, "<stdin>", "r", sys.__stdin__)
        sys.stdout = sys.__stdout__ = _stdio(1, "<stdout>", "w", sys.__stdout__)
        sys.stderr = sys.__stderr__ = _stdio(2, "<stderr>", "w", sys.__stderr__)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-m", *request["args"]]
        sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
        sys.path[0] = os.getcwd()  # as ``-m`` puts the working folder first
        sys.modules["__main__"] = _fresh_main()
        status = _run_module(request["module"])
    except BaseException:
        try:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        os._exit(status)


def _redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o600)
    os.dup2(opened, fd)
    os.close(opened)


def _stdio(fd: int, name: str, mode: str, like):
    """A standard stream on ``fd``, made as the interpreter makes it (``like``: the zygote's own stream)."""
    import io

    unbuffered = like.write_through and mode == "w"
    buffer = io.open(fd, mode + "b", buffering=0 if unbuffered else -1, closefd=False)
    raw = buffer if unbuffered else buffer.raw
    raw.name = name
    stream = io.TextIOWrapper(buffer, encoding=like.encoding, errors=like.errors, newline="\n",
                              line_buffering=not unbuffered and (raw.isatty() or fd == 2),
                              write_through=unbuffered)
    stream.mode = mode
    return stream


def _fresh_main():
    """An empty ``__main__`` module, as an interpreter has before it runs ``-m``'s module in it."""
    import builtins
    import importlib.machinery
    import types

    main = types.ModuleType("__main__")
    main.__loader__ = importlib.machinery.BuiltinImporter
    main.__annotations__ = {}
    main.__builtins__ = builtins
    return main


def _run_module(module: str) -> int:
    """Run ``module`` as ``python -m`` does, and end as the interpreter ends: the exit status."""
    import runpy
    import signal

    interrupted = False
    try:
        runpy._run_module_as_main(module)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException as exc:
        # The traceback from runpy on, as the interpreter prints it: this frame is no part of it.
        exc.__traceback__ = exc.__traceback__.tb_next
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    status = _finalize(status)
    if interrupted:  # the interpreter ends an unhandled Ctrl-C by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def _exit_status(code) -> int:
    """The status ``sys.exit(code)`` ends an interpreter with; a code that is no number is printed first."""
    if code is None:
        return 0
    if isinstance(code, int):
        return (code if -2 ** 63 <= code < 2 ** 63 else -1) & 0xFF
    if sys.stderr is not None:
        print(code, file=sys.stderr)
    return 1


def _finalize(status: int) -> int:
    """What the interpreter does at exit: wait for threads, run the exit functions, flush the streams."""
    import atexit

    try:
        threading._shutdown()
    except BaseException:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception:
            if stream is sys.stdout:
                status = 120
    return status


if __name__ == "__main__":
    _serve(int(sys.argv[sys.argv.index("--serve") + 1]))
