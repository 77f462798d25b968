"""The workload registry: generators of per-iteration costs (ns), named by ``name:key=value`` specs."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import SimschedError
from ..footprint import ELEMENT_BYTES, PATTERNS, PLACEMENTS, Footprint
from ..loop import Loop, check_total
from ..spec import Param, format_spec, parse_spec, resolve_params
from ..registry import WORKLOADS, import_modules, on_subclass

_N = Param("n", int, 1000, lambda v: v >= 1, ">= 1", help="number of iterations")
_FINITE_NON_NEGATIVE = (lambda v: v >= 0, ">= 0")


def _cost(name, default, help=""):
    return Param(name, float, default, *_FINITE_NON_NEGATIVE, help=help)


# The data each iteration touches (the locality model): every flat workload takes these.
DATA_PARAMS = {
    "bytes": Param("bytes", int, 0, lambda v: v >= 0, ">= 0",
                   help="bytes of data of its own each iteration touches (0: no data model)"),
    "pattern": Param("pattern", str, "stride", choices=PATTERNS,
                     help="how an iteration walks its data: stride (13, defeats the prefetcher), stream or random"),
    "placement": Param("placement", str, "first-touch", choices=PLACEMENTS,
                       help="home NUMA node of the data: first-touch (by the core that first runs the iteration) "
                            "or interleave"),
    "data": Param("data", str, "data", help="name of the data set: loops naming the same one touch the same data"),
}


class Workload:
    """A parallel loop's iteration costs in ns, drawn from the run's seeded generator."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Param]] = {}
    # Parameters that scale every iteration's cost alike: they change the loop's duration, not its shape.
    DURATION_PARAMS: ClassVar[tuple[str, ...]] = ()
    # Whether the workload takes DATA_PARAMS: a flat loop whose iterations may each touch data of their own.
    TOUCHES_DATA: ClassVar[bool] = True
    # Whether its loops are a function of its parameters and the generator's state alone (no file, no
    # state of its own), so that ``draw_loops`` may hand a later run the loops an earlier one drew.
    # A class says so itself: a subclass that draws otherwise does not inherit it.
    REUSABLE: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any):
        # Defining a subclass with a name of its own registers it: built-in workloads and plugins alike.
        super().__init_subclass__(**kwargs)
        on_subclass(WORKLOADS, cls)

    def __init__(self, **params: Any):
        self.given = dict(params)
        schema = {**DATA_PARAMS, **self.PARAMS} if self.TOUCHES_DATA else self.PARAMS
        self.params = resolve_params(f"workload {self.name}", schema, params)
        self.check()

    def check(self) -> None:
        """Cross-parameter validation."""

    def loop_sizes(self) -> list[tuple[int, int]] | None:
        """The loops it puts in a program as (iterations, how many such loops), known before any is drawn.

        Where the draw decides, the sizes are lower bounds; None when only reading its files
        tells. The memory check of a run (``simsched.budget``) works from these before
        drawing anything. By default: one loop of ``n`` iterations, for a workload of one
        loop that has an ``n``.
        """
        if type(self).loops is Workload.loops and "n" in self.PARAMS:
            return [(self.params["n"], 1)]
        return None

    def input_files(self) -> list[Path]:
        """The user's files that the workload reads (none; a workload that reads files names them here)."""
        return []

    @property
    def spec(self) -> str:
        return format_spec(self.name, {k: self.params[k] for k in self.given})

    def costs(self, rng: np.random.Generator) -> np.ndarray:
        """The loop's iteration costs in ns, checked finite and non-negative."""
        with np.errstate(all="ignore"):  # overflow shows up below as a clear error, not a warning
            try:
                costs = np.asarray(self.generate(rng), dtype=float)
            except (ValueError, OverflowError) as exc:
                # A distribution's parameter out of what NumPy can draw from (e.g. lavamd's particles=1e300).
                message = f"workload {self.spec}: cannot draw its costs: {exc}"
                raise SimschedError(message.splitlines()[0]) from None
        if not np.all(np.isfinite(costs)):
            raise SimschedError(f"workload {self.spec}: iteration costs must be finite")
        if np.any(costs < 0):
            raise SimschedError(f"workload {self.spec}: iteration costs must be >= 0")
        with np.errstate(over="ignore"):
            total = float(costs.sum())
        check_total(total, f"workload {self.spec}: the iteration costs")
        return costs

    def generate(self, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def bytes_per_iteration(self, n: int) -> np.ndarray:
        """The bytes each of the ``n`` iterations touches: ``bytes`` each, unless the workload says otherwise."""
        return np.full(n, self.params["bytes"], dtype=np.int64)

    def touches_data(self) -> bool:
        """Whether its loops touch data, known before any is drawn: with ``bytes=``, when it gives some; an
        application's (``data=0|1``, derived from its input), when ``data`` is on."""
        if self.TOUCHES_DATA:
            return bool(self.params.get("bytes"))
        return bool(self.params.get("data", 0))

    def footprint(self, n: int) -> Footprint | None:
        """The data the loop's ``n`` iterations touch, or None when the workload gives no bytes."""
        if not self.TOUCHES_DATA or not self.params.get("bytes"):
            return None
        p = self.params
        return Footprint(self.bytes_per_iteration(n), p["pattern"], p["placement"], p["data"])

    def footprint_of(self, values, what: str) -> Footprint:
        """A footprint of bytes per iteration read from a file (``what`` names them), with this workload's data."""
        values = np.asarray(values)
        if values.dtype.kind not in "iufO":
            raise SimschedError(f"{what} must hold whole numbers >= 0, not {_kind_of(values)} values")
        if values.dtype.kind not in "iu":
            values = np.asarray(values, dtype=float)
            if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
                raise SimschedError(f"{what} must hold whole numbers >= 0")
        if np.any(values < 0):
            raise SimschedError(f"{what} must hold whole numbers >= 0")
        p = self.params
        return Footprint(values.astype(np.int64), p["pattern"], p["placement"], p["data"])

    def loops(self, rng: np.random.Generator) -> list[Loop]:
        """The loops this workload puts in a program: one, unless the workload is a loop nest or a sequence."""
        costs = self.costs(rng)
        return [Loop(costs, data=self.footprint(costs.size))]


class UForall(Workload):
    """Equal iterations (the uforall micro-benchmark): ``cost_ns`` each, or ``total_us`` for the loop.

    ``instrumentation`` models the benchmark timing itself as it runs (simsched.instrumentation):
    per ns of work, that much more time with every core of the worker's socket busy, none
    on a core alone. It is 0 (uninstrumented) unless given; E1 gives the one value fitted
    to the plateau of AV21's curves, which AV21 puts down to instrumentation overhead.
    """

    name = "uforall"
    summary = "n equal iterations of cost_ns each (or total_us for the whole loop), optionally instrumented"
    REUSABLE = True
    PARAMS = {"n": _N, "cost_ns": _cost("cost_ns", 1000.0, "ns per iteration"),
              "total_us": Param("total_us", float, 0.0, *_FINITE_NON_NEGATIVE,
                                help="sequential time of the whole loop (overrides cost_ns)"),
              "instrumentation": Param(
                  "instrumentation", float, 0.0, *_FINITE_NON_NEGATIVE,
                  help="extra time per ns of work that the benchmark's self-timing costs with every core of the "
                       "socket busy, rising linearly from none on a core alone (0: uninstrumented; E1's 0.6 is "
                       "fitted to AV21's plateau)")}
    DURATION_PARAMS = ("cost_ns", "total_us")

    def check(self):
        if "cost_ns" in self.given and "total_us" in self.given:
            raise SimschedError("workload uforall: give either cost_ns or total_us, not both")

    def generate(self, rng):
        n = self.params["n"]
        each = self.params["total_us"] * 1e3 / n if "total_us" in self.given else self.params["cost_ns"]
        return np.full(n, each)

    def loop_sizes(self):
        return [(self.params["n"], 1)]

    def loops(self, rng):
        return [Loop(self.costs(rng), data=self.footprint(self.params["n"]),
                     instrumentation=self.params["instrumentation"])]


class Uniform(Workload):
    name = "uniform"
    summary = "costs uniform in [low_ns, high_ns)"
    REUSABLE = True
    PARAMS = {"n": _N, "low_ns": _cost("low_ns", 0.0), "high_ns": _cost("high_ns", 2000.0)}

    def check(self):
        if self.params["high_ns"] < self.params["low_ns"]:
            raise SimschedError("workload uniform: high_ns must be >= low_ns")

    def generate(self, rng):
        p = self.params
        return rng.uniform(p["low_ns"], p["high_ns"], p["n"])


class Normal(Workload):
    name = "normal"
    summary = "normally distributed costs (mean_ns, std_ns), clipped at 0"
    REUSABLE = True
    PARAMS = {"n": _N, "mean_ns": _cost("mean_ns", 1000.0), "std_ns": _cost("std_ns", 250.0)}

    def generate(self, rng):
        p = self.params
        return np.clip(rng.normal(p["mean_ns"], p["std_ns"], p["n"]), 0.0, None)


class Linear(Workload):
    name = "linear"
    summary = "a ramp from first_ns to last_ns"
    REUSABLE = True
    PARAMS = {"n": _N, "first_ns": _cost("first_ns", 0.0), "last_ns": _cost("last_ns", 2000.0)}

    def generate(self, rng):
        p = self.params
        return np.linspace(p["first_ns"], p["last_ns"], p["n"])


class ExpIncreasing(Workload):
    """The iCh synth generator: exponential samples with scale beta, sorted ascending."""

    name = "exp-inc"
    summary = "exponential(beta) samples x unit_ns, sorted ascending (iCh synth)"
    descending = False
    REUSABLE = True
    PARAMS = {"n": _N,
              "beta": Param("beta", float, 1e6, lambda v: v > 0, "> 0", help="exponential scale"),
              "unit_ns": Param("unit_ns", float, 1e-3, lambda v: v > 0, "> 0",
                               help="ns per unit of sampled work (default: mean 1 us per iteration)")}
    DURATION_PARAMS = ("unit_ns",)

    def generate(self, rng):
        p = self.params
        costs = np.sort(rng.exponential(p["beta"], p["n"])) * p["unit_ns"]
        return costs[::-1] if self.descending else costs


class ExpDecreasing(ExpIncreasing):
    name = "exp-dec"
    summary = "exponential(beta) samples x unit_ns, sorted descending (iCh synth)"
    REUSABLE = True
    descending = True


class FileCosts(Workload):
    """Per-iteration costs in ns from a CSV (one column, or a ``cost_ns`` column) or a .npy file."""

    name = "file"
    summary = "costs in ns from path=FILE.csv or FILE.npy (a CSV may add a bytes column: data per iteration)"
    PARAMS = {"path": Param("path", str, "", help="CSV or .npy file of costs in ns")}

    file_bytes = None  # a ``bytes`` column of the CSV, read with the costs

    def check(self):
        if not self.params["path"]:
            raise SimschedError("workload file: parameter path= is required")

    def input_files(self):
        return [Path(self.params["path"])]

    def footprint(self, n):
        if self.file_bytes is None:
            return super().footprint(n)
        return self.footprint_of(self.file_bytes, f"workload file: {self.params['path']}: the bytes column")

    def generate(self, rng):
        path = Path(self.params["path"])
        if not path.is_file():
            raise SimschedError(f"workload file: no such file {path}")
        try:
            if path.suffix == ".npy":
                costs = np.load(path, allow_pickle=False)
            else:
                import pandas as pd
                frame = pd.read_csv(path)
                if "bytes" in frame.columns:
                    if "bytes" in self.given:
                        raise SimschedError(f"workload file: {path} has a bytes column; give bytes= or the column, "
                                            "not both")
                    self.file_bytes = frame["bytes"].to_numpy()
                if "cost_ns" in frame.columns:
                    costs = frame["cost_ns"].to_numpy()
                elif frame.shape[1] == 1:
                    costs = pd.read_csv(path, header=None).iloc[:, 0].to_numpy() \
                        if _is_number(frame.columns[0]) else frame.iloc[:, 0].to_numpy()
                else:
                    raise SimschedError(f"workload file: {path} needs one column or a cost_ns column")
            costs = np.asarray(costs)
            # True/False, complex, text, time and record values are no costs: converting them would invent
            # some. (A CSV's text that pandas left unparsed is refused below, naming the value.)
            if costs.dtype.kind not in "iufO":
                raise SimschedError(f"workload file: {path} holds {_kind_of(costs)} values; costs must be "
                                    "real numbers (integers or floats)")
            costs = np.asarray(costs, dtype=float)
            if costs.ndim != 1:
                raise SimschedError(f"workload file: {path} holds a {costs.ndim}-D array of shape "
                                    f"{costs.shape}; costs must be a 1-D array")
        except SimschedError:
            raise
        except Exception as exc:  # unreadable or non-numeric data
            raise SimschedError(f"workload file: cannot read costs from {path}: {exc}".splitlines()[0]) from None
        if costs.size == 0:
            raise SimschedError(f"workload file: {path} holds no costs")
        return costs


class Nested(Workload):
    """The E2 nested loop: outer iteration i does r x unit_us of work (r uniform in 1..r_max), then an inner loop.

    The inner loop of iteration i runs j in [step * i, inner_end), ``inner_us`` each (empty
    ranges are skipped).
    """

    name = "nested"
    TOUCHES_DATA = False
    summary = "outer loop of r x unit_us (r in 1..r_max), each then an inner loop over [step*i, inner_end)"
    PARAMS = {"n": Param("n", int, 64, lambda v: v >= 1, ">= 1", help="outer iterations"),
              "unit_us": _cost("unit_us", 100.0, "outer work unit in us"),
              "r_max": Param("r_max", int, 10, lambda v: v >= 1, ">= 1", help="outer work is r x unit_us, r in 1..r_max"),
              "step": Param("step", int, 4, lambda v: v >= 0, ">= 0", help="inner loop of iteration i starts at step*i"),
              "inner_end": Param("inner_end", int, 1024, lambda v: v >= 1, ">= 1", help="inner loops end at this j"),
              "inner_us": _cost("inner_us", 10.0, "cost of one inner iteration in us")}

    def generate(self, rng):
        p = self.params
        return rng.integers(1, p["r_max"] + 1, p["n"]) * p["unit_us"] * 1e3

    def loop_sizes(self):
        p = self.params
        # Iterations i with step * i < inner_end have inner loops: the first is the largest, the rest >= 1.
        if p["step"] == 0:
            return [(p["n"], 1), (p["inner_end"], p["n"])]
        inner = min(p["n"], -(-p["inner_end"] // p["step"]))
        return [(p["n"], 1), (p["inner_end"], 1)] + ([(1, inner - 1)] if inner > 1 else [])

    def loops(self, rng):
        p = self.params
        inner = {}
        for i in range(p["n"]):
            size = p["inner_end"] - p["step"] * i
            if size > 0:
                inner[i] = Loop(np.full(size, p["inner_us"] * 1e3))
        return [Loop(self.costs(rng), inner=inner)]


class BlockMatmul(Workload):
    """Block matrix multiplication D x D in B x B blocks: D/B loops (the sequential k steps) of (D/B)^2 block products.

    The default cost of one block product is the published measurement for B = 128, 64
    and 32 on an SPE (HPR11: about 2.8 ms, 390 us, 60 us); other B need ``block_us``.
    """

    name = "matmul"
    TOUCHES_DATA = False
    summary = "D/B loops of (D/B)^2 block products of block_us each (E2 matrix multiplication)"
    PUBLISHED_BLOCK_US = {128: 2800.0, 64: 390.0, 32: 60.0}
    PARAMS = {"d": Param("d", int, 2048, lambda v: v >= 1, ">= 1", help="matrix dimension"),
              "b": Param("b", int, 128, lambda v: v >= 1, ">= 1", help="block dimension (divides d)"),
              "block_us": _cost("block_us", 0.0, "one block product in us (default: published for B = 128, 64, 32)")}
    DURATION_PARAMS = ("block_us",)

    def check(self):
        d, b = self.params["d"], self.params["b"]
        if d % b:
            raise SimschedError(f"workload matmul: b={b} must divide d={d}")
        if "block_us" not in self.given and b not in self.PUBLISHED_BLOCK_US:
            raise SimschedError(f"workload matmul: give block_us for b={b} (published only for b = 128, 64, 32)")

    def block_ns(self) -> float:
        p = self.params
        return 1e3 * (p["block_us"] if "block_us" in self.given else self.PUBLISHED_BLOCK_US[p["b"]])

    def generate(self, rng):
        blocks = self.params["d"] // self.params["b"]
        return np.full(blocks * blocks, self.block_ns())

    def loop_sizes(self):
        blocks = self.params["d"] // self.params["b"]
        return [(blocks * blocks, blocks)]

    def loops(self, rng):
        loop = Loop(self.costs(rng))
        return [loop] * (self.params["d"] // self.params["b"])


class Arrays(Workload):
    """The locality microbenchmark: each iteration strides over an array of its own (balanced or a ramp of sizes).

    ``balanced``: every array holds ``bytes``. ``unbalanced``: iteration j's array holds
    bytes x 2 (j + 0.5) / n, rounded to whole 8-byte elements, a ramp from near 0 to twice
    the mean, so that equal blocks of iterations carry very unequal work. The compute is the
    memory accesses themselves (plus ``cost_ns`` per iteration, 0 by default).
    """

    name = "arrays"
    summary = "each iteration walks an array of its own of bytes (balanced) or a ramp of sizes (unbalanced)"
    PARAMS = {"n": _N, "bytes": Param("bytes", int, 4096, lambda v: v >= ELEMENT_BYTES, f">= {ELEMENT_BYTES}",
                                      help="bytes of each iteration's array (the mean, when unbalanced)"),
              "balance": Param("balance", str, "balanced", choices=("balanced", "unbalanced"),
                                        help="equal arrays, or sizes rising linearly with the iteration"),
              "cost_ns": _cost("cost_ns", 0.0, "compute per iteration besides its memory accesses")}

    def generate(self, rng):
        return np.full(self.params["n"], self.params["cost_ns"])

    def bytes_per_iteration(self, n):
        mean = self.params["bytes"]
        if self.params["balance"] == "balanced":
            return np.full(n, mean, dtype=np.int64)
        ramp = mean * 2.0 * (np.arange(n) + 0.5) / n
        return np.maximum(np.round(ramp / ELEMENT_BYTES), 1).astype(np.int64) * ELEMENT_BYTES


# What an array holds, by its dtype's kind, in words (kinds that are not numbers).
_KINDS = {"b": "true/false", "c": "complex", "U": "text", "S": "text", "M": "date", "m": "time span",
          "V": "record"}


def _kind_of(values: np.ndarray) -> str:
    return f"{_KINDS.get(values.dtype.kind, 'non-numeric')} ({values.dtype})"


def _is_number(text) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class ArrayWorkload(Workload):
    """Costs given directly as an array (API use)."""

    name = "array"
    LISTED = False  # made from an array by get_workload, never named in a spec
    TOUCHES_DATA = False

    def __init__(self, costs):
        self._costs = np.asarray(costs, dtype=float)
        self.given, self.params = {}, {}

    @property
    def spec(self):
        return f"array:n={self._costs.size}"

    def loop_sizes(self):
        return [(self._costs.size, 1)]

    def generate(self, rng):
        return self._costs


# Every module here: the workloads they define (subclasses of Workload, above) register themselves.
import_modules(__name__, __path__)

# Workload classes by name (the registry itself: a plugin's workload appears here once it is imported).
REGISTRY: dict[str, type[Workload]] = WORKLOADS


# The loops this process drew lately, by workload and generator state: a sweep runs one workload on
# many schedulers and thread counts, and sorting 10^6 draws costs more than a run of a few hundred chunks.
_RECENT: "OrderedDict[tuple, tuple[list[Loop], dict]]" = OrderedDict()
RECENT_ITERATIONS = 4_000_000  # what _RECENT may hold in all: 32 MB of prefix sums


def draw_loops(workload: Workload, rng: np.random.Generator) -> list[Loop]:
    """``workload.loops(rng)``, or the same loops again if this process drew them from the same generator state.

    Reused loops leave ``rng`` in the state drawing them would, so a run cannot tell the
    difference. Only flat loops without data are kept; their prefix sums are made read-only.
    """
    if not vars(type(workload)).get("REUSABLE", False):
        return workload.loops(rng)
    key = (type(workload), tuple(sorted(workload.params.items())), repr(rng.bit_generator.state))
    if key in _RECENT:
        _RECENT.move_to_end(key)
        loops, state = _RECENT[key]
        rng.bit_generator.state = state
        return list(loops)
    loops = workload.loops(rng)
    size = sum(loop.n for loop in loops)
    if size <= RECENT_ITERATIONS and all(loop.data is None and not loop.inner for loop in loops):
        for loop in loops:
            loop.prefix.flags.writeable = False
        _RECENT[key] = (loops, rng.bit_generator.state)
        while sum(loop.n for kept, _ in _RECENT.values() for loop in kept) > RECENT_ITERATIONS:
            _RECENT.popitem(last=False)
    return list(loops)


def get_workload(spec: "str | Workload | np.ndarray", **params: Any) -> Workload:
    """A workload from a ``name:key=value,...`` spec, a Workload, or an array of costs."""
    if isinstance(spec, Workload):
        return spec
    if isinstance(spec, (np.ndarray, list, tuple)):
        return ArrayWorkload(spec)
    name, given = parse_spec(spec, "workload")
    if name not in REGISTRY:
        from .. import plugins

        plugins.load_automatic()  # $SIMSCHED_PLUGINS and installed packages' entry points, once
    if name not in REGISTRY:
        raise SimschedError(f"unknown workload {name!r} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name](**{**given, **params})


__all__ = ["REGISTRY", "Workload", "draw_loops", "get_workload"]
