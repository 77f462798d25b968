"""Where a sweep's points run: in this process, in a pool of local processes, or as tasks on a Dask cluster.

Every pool yields ``(index, row)`` pairs as points finish, in whatever order they finish
(``row`` is None for a point the cluster lost, which a re-run computes again), and can be
stopped at once: ``close(kill=True)`` ends the points still running, so an
interrupted sweep leaves no worker behind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from .errors import SimschedError

Task = Callable[[Any], dict[str, Any]]

# Each point keeps one CPU busy, so processes beyond a few per CPU only compete for them
# (and a mistyped --jobs would fork without end).
JOBS_PER_CPU = 4
# How long a Dask scheduler's address may take to accept a connection before it is refused.
CONNECT_TIMEOUT_S = 5.0


def open_pool(jobs: int = 1, dask: str | None = None) -> "SerialPool | ProcessPool | DaskPool":
    """The pool a sweep runs on: Dask when ``dask`` names a cluster, else ``jobs`` local processes
    (both as ``check_pool`` accepted them)."""
    if dask is not None:
        return DaskPool(dask)
    return SerialPool() if jobs == 1 else ProcessPool(jobs)


def check_pool(jobs: int, dask: str | None = None) -> None:
    """Refuse a pool that cannot open (too many jobs, an unreachable Dask scheduler) before a sweep starts."""
    if dask is None:
        check_jobs(jobs)
    else:
        _check_dask_address(dask)


def check_jobs(jobs: int) -> None:
    """Refuse a number of local worker processes below one or above ``JOBS_PER_CPU`` per CPU."""
    if jobs < 1:
        raise SimschedError(f"--jobs must be >= 1, got {jobs}")
    cpus = os.cpu_count() or 1
    if jobs > JOBS_PER_CPU * cpus:
        raise SimschedError(f"--jobs {jobs} is more than {JOBS_PER_CPU} per CPU of this machine "
                            f"({JOBS_PER_CPU * cpus} for {cpus} CPUs): each point keeps one CPU busy")


def _check_dask_address(address: str) -> None:
    """Refuse a --dask that is neither local:N nor a scheduler address, or a scheduler that does not answer.

    The connection is tried here, without Dask, so that an unreachable scheduler is refused at
    once rather than after Dask's own connection timeout.
    """
    if address.startswith("local:"):
        count = address.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            raise SimschedError(f"--dask local:N needs a number of workers >= 1, got {address!r}")
        return
    scheme, sep, rest = address.partition("://")
    if not sep:
        raise SimschedError(f"--dask takes a scheduler address (tcp://HOST:PORT) or local:N, got {address!r}")
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return  # another of Dask's transports: Dask itself connects
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or (":" in host and not host.startswith("[")):
        return  # no port (Dask's default), or an IPv6 address without brackets: Dask itself connects
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise SimschedError(f"--dask: {address} has no valid port (1 to 65535 after the last ':')")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise SimschedError(f"--dask: cannot reach a Dask scheduler at {address}: {reason}") from None


class SerialPool:
    """Runs points one after another in this process (``--jobs 1``)."""

    def run(self, task: Task, items: Sequence[Any]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        for index, item in enumerate(items):
            yield index, task(item)

    def close(self, kill: bool = False) -> None:
        pass


def _worker_start(parent: int, method: str = "fork") -> None:
    """In a worker process: leave SIGINT to the sweep's own process, die at once on SIGTERM, and die with
    the sweep's process however it ends (even by SIGKILL), so that no worker outlives it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if method == "forkserver":
        # Started by the fork server, not by the sweep: watch the sweep's process itself.
        import threading

        threading.Thread(target=_watch_process, args=(parent,), daemon=True).start()
        return
    if not _die_with_parent():
        import threading

        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the sweep died before the worker could ask to die with it
        os._exit(1)


def _watch_process(pid: int) -> None:
    """End this worker once process ``pid`` is gone."""
    import time

    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass
        time.sleep(0.5)


def _die_with_parent() -> bool:
    """Have the kernel SIGKILL this process when the thread that started it ends (Linux); False elsewhere.

    A sweep starts its workers from the thread that runs it, which lives until the pool is closed.
    """
    import ctypes
    import ctypes.util

    PR_SET_PDEATHSIG = 1
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    """End this worker once its parent is gone (where the kernel cannot be asked to)."""
    import time

    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


START_METHODS = ("fork", "spawn", "forkserver")


def start_method() -> str:
    """How local workers start: $SIMSCHED_START_METHOD (fork, spawn or forkserver), fork by default."""
    method = os.environ.get("SIMSCHED_START_METHOD", "fork")
    if method not in START_METHODS or method not in multiprocessing.get_all_start_methods():
        raise SimschedError(f"SIMSCHED_START_METHOD={method!r}: local workers start by "
                            f"{' or '.join(m for m in START_METHODS if m in multiprocessing.get_all_start_methods())}")
    return method


class ProcessPool:
    """Runs points in ``jobs`` local worker processes, which end with the sweep however it ends."""

    def __init__(self, jobs: int):
        from concurrent.futures import ProcessPoolExecutor

        # Forked workers by default (cheapest: nothing to import again); $SIMSCHED_START_METHOD=spawn or
        # forkserver start them afresh, and they load this process's plugins from $SIMSCHED_PLUGINS.
        method = start_method()
        self.executor = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_start,
                                            initargs=(os.getpid(), method),
                                            mp_context=multiprocessing.get_context(method))

    def run(self, task: Task, items: Sequence[Any]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        from concurrent.futures import as_completed

        from concurrent.futures.process import BrokenProcessPool

        futures = {self.executor.submit(task, item): index for index, item in enumerate(items)}
        for future in as_completed(futures):
            try:
                row = future.result()
            except BrokenProcessPool:  # a worker died (e.g. killed for memory): its points are lost, not failed
                row = None
            yield futures[future], row

    def close(self, kill: bool = False) -> None:
        if kill:
            # Points still running are abandoned: their rows were never written, so a re-run computes them.
            processes = list(getattr(self.executor, "_processes", {}).values())
            self.executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
        else:
            self.executor.shutdown(wait=True)


@contextmanager
def _sigint_ignored():
    """Ignore SIGINT while a local cluster starts: its processes inherit that, so a Ctrl-C reaching the
    whole process group stops only the sweep, which then shuts the cluster down whole."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class DaskPool:
    """Runs points as tasks of a Dask cluster: an existing scheduler's address, or ``local:N`` workers here."""

    def __init__(self, address: str):
        try:
            import logging

            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise SimschedError("--dask needs dask.distributed: pip install 'simsched[dask]'") from None
        self.cluster = None
        if address.startswith("local:"):
            count = address.partition(":")[2]
            # Only critical logs: a worker of this cluster that loses its heartbeat while the cluster
            # shuts down logs an error with a traceback, though nothing failed; a point that fails
            # is reported from its future.
            with _sigint_ignored():
                self.cluster = LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True,
                                            dashboard_address=None, silence_logs=logging.CRITICAL)
            self.client = Client(self.cluster)
        else:
            try:
                self.client = Client(address, timeout="10s")
            except (OSError, TimeoutError) as exc:
                raise SimschedError(f"--dask: cannot reach a Dask scheduler at {address}: {exc}") from None
        self.futures: list = []

    def run(self, task: Task, items: Sequence[Any]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        from dask.distributed import as_completed

        self.futures = self.client.map(task, items, pure=False)
        index = {future.key: i for i, future in enumerate(self.futures)}
        for future in as_completed(self.futures):
            i = index[future.key]
            try:
                row = future.result()
            except Exception:  # the cluster lost the point (its workers kept dying), not the point's own error
                row = None
            yield i, row

    def close(self, kill: bool = False) -> None:
        if kill and self.futures:
            self.client.cancel(self.futures, force=True)
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
