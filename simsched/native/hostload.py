"""How busy other work keeps this host's CPUs: what decides whether a calibration's figures can be trusted.

A calibration times the hardware; on CPUs that other processes (or the hypervisor) also use,
its probes time the sharing instead. The kernel's own accounts say how much of each CPU's time
went to others over a stretch: ``/proc/stat`` per CPU (busy and steal time) less this process's
own CPU time, with ``/proc/loadavg`` and the tasks runnable (``procs_running``) beside them.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
PROC_LOADAVG = Path("/proc/loadavg")

# The host is too busy to calibrate when other work took more than this share of the measured CPUs' time ...
BUSY_SHARE = 0.25
# ... or the hypervisor took more than this share of it (steal time: the virtual CPU did not run at all).
STEAL_SHARE = 0.05
# The look before anything is measured: this long, asleep (so all the CPUs' busy time is others').
LOOK_S = 0.5
LOOK_SAMPLES = 10


@dataclass(frozen=True)
class Load:
    """Other work on some CPUs over a stretch of time: shares of their time, and the host's load figures."""

    cpus: tuple[int, ...]
    seconds: float
    others: float     # share of the CPUs' time that other work ran (their busy time less this process's)
    steal: float      # share the hypervisor took (steal time)
    loadavg: float    # the 1-minute load average of the whole host
    runnable: float   # tasks runnable besides this process, the mean of the samples taken (-1: none taken)

    def busy(self) -> str | None:
        """Why these CPUs were too busy to calibrate on, or None."""
        if self.others > BUSY_SHARE:
            taken = f"other work used {self.others:.0%}"
        elif self.steal > STEAL_SHARE:
            taken = f"the hypervisor took {self.steal:.0%} (steal time)"
        else:
            return None
        return f"{taken} of CPU(s) {list(self.cpus)} over {self.seconds:.1f} s ({self.host()})"

    def describe(self) -> str:
        """The load figures in words: others' share, steal, load average and runnable tasks."""
        return (f"others used {self.others:.0%} and steal took {self.steal:.0%} of CPU(s) {list(self.cpus)} "
                f"over {self.seconds:.1f} s ({self.host()})")

    def host(self) -> str:
        """The whole host's load figures: the load average and the tasks runnable besides this process."""
        runnable = f", {self.runnable:.1f} other task(s) runnable" if self.runnable >= 0 else ""
        return f"load average {self.loadavg:.2f}{runnable}"


def _cpu_ticks(cpus) -> tuple[int, int, int] | None:
    """(busy, steal, total) clock ticks of ``cpus`` since boot (/proc/stat); None where it is unreadable."""
    wanted = {f"cpu{c}" for c in cpus}
    busy = steal = total = 0
    found = 0
    try:
        for line in PROC_STAT.read_text().splitlines():
            fields = line.split()
            if not fields or fields[0] not in wanted:
                continue
            # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is in user.
            values = [int(x) for x in fields[1:9]] + [0] * (8 - len(fields[1:9]))
            user, nice, system, idle, iowait, irq, softirq, stolen = values
            busy += user + nice + system + irq + softirq
            steal += stolen
            total += user + nice + system + idle + iowait + irq + softirq + stolen
            found += 1
    except (OSError, ValueError):
        return None
    return (busy, steal, total) if found == len(wanted) else None


def _procs_running() -> int | None:
    try:
        for line in PROC_STAT.read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _loadavg() -> float:
    try:
        return float(PROC_LOADAVG.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def _own_ticks() -> float:
    """This process's CPU time (every thread's, user and system) and its ended children's, in clock ticks."""
    # A probe run as a program of its own (the OpenMP runtime's) is this calibration's work, not others'.
    seconds = sum(usage.ru_utime + usage.ru_stime for usage in (resource.getrusage(resource.RUSAGE_SELF),
                                                               resource.getrusage(resource.RUSAGE_CHILDREN)))
    return seconds * os.sysconf("SC_CLK_TCK")


class Meter:
    """The load others put on ``cpus`` from its start until :meth:`read` (this process's time left out)."""

    def __init__(self, cpus):
        self.cpus = tuple(int(c) for c in cpus)
        self.start = time.monotonic()
        self.ticks = _cpu_ticks(self.cpus)
        self.own = _own_ticks()
        self.running: list[int] = []

    def sample(self) -> None:
        """Note the tasks runnable now besides this one (this process is running while it reads the count)."""
        running = _procs_running()
        if running is not None:
            self.running.append(max(running - 1, 0))

    def read(self) -> Load | None:
        """The load since the start, or None where /proc/stat is not readable here."""
        ticks = _cpu_ticks(self.cpus)
        if self.ticks is None or ticks is None:
            return None
        busy, steal, total = (now - then for now, then in zip(ticks, self.ticks))
        if total <= 0:
            return None
        # This process's threads ran on these CPUs (the probes are pinned there): their time is not others'.
        others = max(busy - (_own_ticks() - self.own), 0.0) / total
        runnable = sum(self.running) / len(self.running) if self.running else -1.0
        seconds = time.monotonic() - self.start
        return Load(self.cpus, seconds, min(others, 1.0), steal / total, _loadavg(), runnable)


def look(cpus, seconds: float = LOOK_S, samples: int = LOOK_SAMPLES) -> Load | None:
    """The load on ``cpus`` over ``seconds`` while this process sleeps (None without /proc/stat)."""
    meter = Meter(cpus)
    for _ in range(samples):
        time.sleep(seconds / samples)
        meter.sample()
    return meter.read()
