"""How the native runtime runs each scheduler: its share of the iterations, its barriers, chunk and count."""

from __future__ import annotations

from ..errors import SimschedError
from ..schedulers.base import default_grain
from ..schedulers.runtimes import guided_sizes
from ..spec import MAX_INT
from .extension import INT32, _check_integer

# Registry name -> (how iterations are shared, full barrier at the fork, full barrier at the join,
# the barrier kind when the scheduler has no ``barrier`` parameter).
NATIVE = {
    "omp-static": ("static", True, True, None),
    "fg-tree": ("static", False, False, "tree"),
    "fg-central": ("static", False, False, "central"),
    "fg-tree-full": ("static", True, True, "tree"),
    "omp-dynamic": ("dynamic", True, True, None),
    "omp-guided": ("guided", True, True, None),
    "stealing": ("stealing", True, True, None),
    "ich": ("ich", True, True, None),
    "hybrid": ("hybrid", True, True, "tree"),
    "wf": ("wf", True, True, None),
    "awf-b": ("awf-b", True, True, None),
    "awf-c": ("awf-c", True, True, None),
    "awf-d": ("awf-d", True, True, None),
    "awf-e": ("awf-e", True, True, None),
    "af": ("af", True, True, None),
    # Chunk tables computed by the scheduler's own ``bounds`` and claimed by index (pls: its static blocks first).
    **{name: ("table", True, True, None) for name in ("tss", "fac2", "fsc", "mfsc", "fac", "tfss", "fiss", "viss",
                                                      "rnd")},
    "pls": ("static-table", True, True, None),
    "static-steal": ("static_steal", True, True, None),
    "nonmonotonic-dynamic": ("static_steal", True, True, None),
    "tbb-simple": ("tbb_simple", True, True, "tree"),
    "tbb-auto": ("tbb_auto", True, True, "tree"),
    "tbb-affinity": ("tbb_affinity", True, True, "tree"),
}
# The native runtime's idle workers spin until work or the next loop comes; none ever sleeps. A simulation
# set beside a native run gives a scheduler that can sleep a count of failed steals that no run reaches.
NEVER_SLEEPS = {"sleep_after": MAX_INT}


# What a chunk-rule scheduler does around its ``bounds`` in a simulation: natively the runtime itself runs the
# loop between its barriers and claims the table ``bounds`` gives, so a plugin's rule runs natively only if it
# leaves these as its built-in ancestor has them.
TABLE_HOOKS = ("setup", "worker", "prepare", "fork", "share", "claim", "join")


def _builtin(cls: type) -> bool:
    return cls.__module__.startswith("simsched.")


def native_entry(scheduler) -> tuple:
    """``scheduler``'s row of :data:`NATIVE`: a built-in's own; for a scheduler defined outside simsched that
    is a chunk rule (an IndexedChunks subclass), the table share of its nearest built-in ancestor."""
    from ..schedulers.selfsched import IndexedChunks

    cls = type(scheduler)
    if _builtin(cls):
        if scheduler.name not in NATIVE:
            raise SimschedError(f"native mode runs {', '.join(NATIVE)}; not {scheduler.name}")
        return NATIVE[scheduler.name]
    if not isinstance(scheduler, IndexedChunks):
        raise SimschedError("native mode runs only chunk-rule schedulers (IndexedChunks/ChunkRule "
                            "subclasses) among those defined outside simsched: the runtime claims the table "
                            f"their bounds give; {scheduler.name} ({cls.__module__}.{cls.__qualname__}) is not one")
    base = next(c for c in cls.__mro__ if _builtin(c))
    changed = [hook for hook in TABLE_HOOKS if getattr(cls, hook) is not getattr(base, hook)]
    if changed:
        raise SimschedError(f"native mode: scheduler {scheduler.name} overrides {', '.join(changed)} of "
                            f"{base.__qualname__}; natively the runtime itself claims the table its bounds "
                            f"give, so a chunk rule runs there only with {', '.join(TABLE_HOOKS)} as "
                            f"{base.__qualname__} has them")
    if tuple(cls.COUNTERS) != tuple(base.COUNTERS):
        own = ", ".join(sorted(set(cls.COUNTERS) - set(base.COUNTERS))) or "fewer"
        raise SimschedError(f"native mode: scheduler {scheduler.name} reports counters of its own ({own}), "
                            "which the native runtime does not count")
    return NATIVE.get(base.name, ("table", True, True, None))


def native_config(scheduler, n: int = 0, threads: int = 1) -> tuple[str, str, bool, bool, int]:
    """How the native runtime runs ``scheduler`` on ``n`` iterations: (share, barrier, fork full, join full, chunk)."""
    share, fork_full, join_full, barrier = native_entry(scheduler)
    if barrier is None:
        # The native runtime has one tree barrier: the simulator's tree-shaped kinds all map to it.
        kind = getattr(scheduler, "barrier_kind", None) or scheduler.params.get("barrier", "tree")
        if kind == "dissemination":
            raise SimschedError("native mode has central and tree barriers, not dissemination")
        barrier = "central" if kind == "central" else "tree"
    params = scheduler.params
    if "sleep_after" in scheduler.PARAMS and params["sleep_after"] != scheduler.PARAMS["sleep_after"].default:
        raise SimschedError(f"native mode: {scheduler.name}'s idle workers spin and never sleep, so "
                            f"sleep_after={params['sleep_after']} has no native counterpart")
    if "mu_every" in scheduler.PARAMS and params["mu_every"] != scheduler.PARAMS["mu_every"].default:
        raise SimschedError(f"native mode: {scheduler.name}'s threads read every progress counter after each chunk, "
                            f"so mu_every={params['mu_every']} has no native counterpart")
    # The TBB partitioners' grainsize and hybrid's grain are the native runtime's chunk: ranges above it split.
    given = params.get("chunk", params.get("grainsize", params.get("grain", 0)))
    chunk = _check_integer("chunk", int(given or 0), 0, INT32)
    if chunk == 0 and share in ("hybrid", "dynamic", "guided"):
        chunk = default_grain(n, threads)  # cilk_for's grain: hybrid's leaves, and omp chunk=0
    if share == "guided" and scheduler.runtime.guided == "llvm":
        share = "guided_llvm"  # libomp's rule: R/2P by CAS, then chunks of k by fetch-and-add
    return share, barrier, fork_full, join_full, chunk


def as_run_natively(scheduler):
    """``scheduler`` as the native runtime runs it, for a simulation beside a native run: no worker sleeps.

    An idle simulated thief then makes one steal attempt after another, an event each, for as
    long as it is idle: a loop whose workers idle for milliseconds simulates in seconds.
    """
    from ..schedulers import get_scheduler

    scheduler = get_scheduler(scheduler)
    if "sleep_after" in scheduler.PARAMS:
        return get_scheduler(scheduler, **NEVER_SLEEPS)
    return scheduler


# The shares whose chunks are at most ``chunk`` iterations, at least where there are more left.
SPLIT_TO_CHUNK = ("dynamic", "stealing", "static_steal", "hybrid", "tbb_simple", "tbb_auto", "tbb_affinity")


def expected_chunks(share: str, chunk: int, sizes, loops: int, threads: int) -> int:
    """About how many chunks a run of ``loops`` loops records: ``sizes`` are the program's loop sizes, run
    over and over; ``share`` and ``chunk`` as :func:`native_config` gives them (tables: their own count).

    Exact for the static, dynamic and guided shares; at most so many for the shares that split down
    to ``chunk`` (stealing, static stealing, hybrid, TBB); for iCh and the factoring shares, whose
    chunks shrink geometrically, P (log2 n + 2) per loop.
    """
    sizes = [int(n) for n in sizes]
    step = max(int(chunk), 1)

    def per_loop(n: int) -> int:
        if share == "static":
            return min(threads, n) if chunk <= 0 else -(-n // step)
        if share == "guided":
            count, left = 0, n
            while left > 0:   # as the runtime sizes them: the rest over P, at least the chunk
                left -= min(max(-(-left // threads), step), left)
                count += 1
            return count
        if share == "guided_llvm":
            return len(guided_sizes("llvm", n, threads, step))
        if share in SPLIT_TO_CHUNK:
            return -(-n // step)
        return min(n, threads * (n.bit_length() + 2))

    per_program = sum(per_loop(n) for n in sizes)
    return per_program * (loops // len(sizes)) + sum(per_loop(n) for n in sizes[:loops % len(sizes)])
