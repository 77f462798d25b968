"""Real kernels for native runs and recordings: CSR SpMV rows, BFS frontier vertices and the memory kernel.

A kernel is a program of loops (their sizes) whose iterations do real work in the extension's
loop body, run ``passes`` times in a row; its ``meta`` names it and its inputs, so a recording's
metadata rebuilds it (:func:`from_meta`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..footprint import ELEMENT_BYTES, Footprint, Gather
from ..workloads.graphs import EDGE_BYTES
from ..workloads.sparse import rows_footprint
from .extension import INT32

# A BFS kernel's vertex besides its adjacency: its number in the frontier, its row pointers, its written sum.
BFS_VERTEX_BYTES = 3 * ELEMENT_BYTES


@dataclass
class Kernel:
    """A program of loops of ``sizes`` iterations, ``passes`` times over, whose iterations run a real kernel."""

    name: str
    sizes: np.ndarray
    passes: int = 1
    memory: tuple = ()   # the memory kernel's arguments (simsched.native.kernel), or ()
    csr: tuple = ()      # the CSR-row kernel's arguments, or ()
    meta: dict = field(default_factory=dict)
    # What each loop of one pass touches, as the data model describes it (for a recording with its data).
    data: list = field(default_factory=list)

    @property
    def loop_sizes(self) -> list[int]:
        """The size of every loop of all passes, in order: the loops of a recording."""
        return [int(n) for n in self.sizes] * self.passes

    def footprints(self) -> list:
        """The footprint of every loop of all passes, in order: a pass touches the same data again."""
        return list(self.data) * self.passes

    @property
    def spec(self) -> str:
        """A one-line name of the kernel and its inputs, for results and tables."""
        args = ",".join(f"{key}={value}" for key, value in self.meta.items() if key != "kernel")
        return f"{self.name}:{args}" if args else self.name


def _csr_arrays(matrix, what: str) -> tuple[bytes, bytes]:
    """The matrix's row pointers (int64) and column indices (int32) as the extension reads them."""
    matrix.sort_indices()
    if matrix.shape[1] > INT32 or matrix.nnz > INT32 or matrix.shape[0] > INT32:
        raise SimschedError(f"{what}: native kernels take at most {INT32} rows, columns and nonzeros")
    return (np.ascontiguousarray(matrix.indptr, dtype=np.int64).tobytes(),
            np.ascontiguousarray(matrix.indices, dtype=np.int32).tobytes())


def spmv(matrix: "str | Path", iters: int = 1) -> Kernel:
    """y = A x with A from ``matrix``: one loop per multiplication, iteration i computes row i."""
    if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or not 1 <= iters <= 10_000:
        raise SimschedError(f"--iters must be an integer in [1, 10000], got {iters!r}")
    from ..workloads.sparse import read_matrix

    a = read_matrix(matrix)
    indptr, indices = _csr_arrays(a, f"matrix file {matrix}")
    x = 1.0 + (np.arange(a.shape[1]) % 10) / 10  # any fixed vector: the work does not depend on it
    csr = (indptr, indices, np.ascontiguousarray(a.data, dtype=np.float64).tobytes(), x.tobytes(), b"",
           int(a.shape[0]))
    # The spmv workload's footprint; the arrays were built on the master thread.
    data = rows_footprint(np.diff(a.indptr), a.shape[1], "master", "recorded spmv")
    return Kernel("spmv", np.array([a.shape[0]], dtype=np.int64), int(iters), csr=csr, data=[data],
                  meta={"kernel": "spmv", "matrix": _input_name(matrix), "iters": int(iters)})


def _input_name(path: "str | Path") -> str:
    """How a recording names its input: the file's absolute path, or a shipped matrix's name as given."""
    return str(Path(path).resolve()) if Path(path).is_file() else str(path)


def bfs(graph: "str | Path", source: int = 0) -> Kernel:
    """BFS from ``source`` level by level, the frontiers computed up front: one loop per level, iteration j
    scans the adjacency of the level's j-th vertex and reads its neighbours' levels (work independent of the
    schedule)."""
    from ..workloads.graphs import bfs_levels, read_graph

    g = read_graph(graph)
    n = g.shape[0]
    if isinstance(source, bool) or not isinstance(source, (int, np.integer)) or not 0 <= source < n:
        raise SimschedError(f"--source must be a vertex in [0, {n - 1}], got {source!r}")
    levels = bfs_levels(g, int(source))
    reached = np.flatnonzero(levels >= 0)
    rows = reached[np.argsort(levels[reached], kind="stable")]  # the frontiers in level order, each by vertex
    indptr, indices = _csr_arrays(g, f"graph {graph}")
    csr = (indptr, indices, b"", levels.astype(np.float64).tobytes(), rows.astype(np.int64).tobytes(), int(n))
    sizes = np.bincount(levels[reached]).astype(np.int64)
    # The level's j-th vertex: its number, its two row pointers and its sum written, its adjacency streamed
    # (the level's vertices in order), its neighbours' levels gathered from the array of all n.
    degrees = np.split(np.diff(g.indptr)[rows].astype(np.int64), np.cumsum(sizes)[:-1])
    data = [Footprint(BFS_VERTEX_BYTES + EDGE_BYTES * d, "stream", "master", f"recorded bfs level {level}",
                      gather=Gather(d, int(n) * ELEMENT_BYTES, ELEMENT_BYTES, "recorded levels"))
            for level, d in enumerate(degrees)]
    return Kernel("bfs", sizes, 1, csr=csr, data=data,
                  meta={"kernel": "bfs", "graph": _input_name(graph), "source": int(source)})


def memory(n: int, array_bytes: int, pattern: str = "stride", repeat: int = 1, seed: int = 0) -> Kernel:
    """The memory kernel: one loop of ``n`` iterations, each over an array of ``array_bytes`` of its own with
    ``pattern``, ``repeat`` loops over the same arrays."""
    from ..footprint import PATTERNS
    from .memkernel import kernel

    for name, value, low in (("--n", n, 1), ("--array-bytes", array_bytes, ELEMENT_BYTES), ("--repeat", repeat, 1),
                             ("--seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= 2**63 - 1:
            raise SimschedError(f"{name} must be an integer >= {low}, got {value!r}")
    if n > INT32:
        raise SimschedError(f"--n must be at most {INT32}")
    if pattern not in PATTERNS:
        raise SimschedError(f"unknown --pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    footprint = Footprint(bytes=np.full(int(n), int(array_bytes), dtype=np.int64), pattern=pattern)
    args = kernel(footprint, np.random.default_rng(seed))
    return Kernel("memory", np.array([n], dtype=np.int64), int(repeat), memory=args, data=[footprint],
                  meta={"kernel": "memory", "n": int(n), "array_bytes": int(array_bytes), "pattern": pattern,
                        "repeat": int(repeat), "seed": int(seed)})


def from_meta(meta: dict, where: str) -> Kernel:
    """The kernel a recording's metadata names (``where`` names the recording in errors)."""
    name = meta.get("kernel")
    if name is None:
        raise SimschedError(f"{where} names no kernel in its metadata: only a trace recorded by "
                            "simsched native record can be run natively")
    if name not in OPTIONS:
        raise SimschedError(f"{where}: unknown kernel {name!r} in its metadata (known: {', '.join(OPTIONS)})")
    missing = [key for key in OPTIONS[name] if key not in meta]
    if missing:
        raise SimschedError(f"{where}: its {name} kernel metadata lacks {missing[0]!r}")
    return from_options(name, {key: meta[key] for key in OPTIONS[name]})


# The options each kernel takes on the command line (``native record``), with their defaults.
OPTIONS = {"spmv": {"matrix": None, "iters": 1}, "bfs": {"graph": None, "source": 0},
           "memory": {"n": 4096, "array_bytes": None, "pattern": "stride", "repeat": 1, "seed": 0}}


def from_options(name: str, given: dict) -> Kernel:
    """The kernel ``name`` with the options given (those not None); refuses options it does not take."""
    if name not in OPTIONS:
        raise SimschedError(f"unknown kernel {name!r} (known: {', '.join(OPTIONS)})")
    given = {key: value for key, value in given.items() if value is not None}
    foreign = [key for key in given if key not in OPTIONS[name]]
    if foreign:
        raise SimschedError(f"--{foreign[0].replace('_', '-')} does not apply to the {name} kernel (it takes "
                            + ", ".join("--" + key.replace("_", "-") for key in OPTIONS[name]) + ")")
    args = {**OPTIONS[name], **given}
    missing = [key for key, value in args.items() if value is None]
    if missing:
        raise SimschedError(f"the {name} kernel needs --{missing[0].replace('_', '-')}")
    return {"spmv": spmv, "bfs": bfs, "memory": memory}[name](**args)
