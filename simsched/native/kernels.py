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

KERNELS = ("spmv", "bfs", "memory")
INT32 = 2**31 - 1


@dataclass
class Kernel:
    """A program of loops of ``sizes`` iterations, ``passes`` times over, whose iterations run a real kernel."""

    name: str
    sizes: np.ndarray
    passes: int = 1
    memory: tuple = ()   # the memory kernel's arguments (simsched.native.kernel), or ()
    csr: tuple = ()      # the CSR-row kernel's arguments, or ()
    meta: dict = field(default_factory=dict)

    @property
    def loop_sizes(self) -> list[int]:
        """The size of every loop of all passes, in order: the loops of a recording."""
        return [int(n) for n in self.sizes] * self.passes

    @property
    def spec(self) -> str:
        """A one-line name of the kernel and its inputs, for results and tables."""
        args = ",".join(f"{key}={value}" for key, value in self.meta.items() if key != "kernel")
        return f"{self.name}:{args}" if args else self.name


def read_sparse(path: "str | Path", what: str) -> "scipy.sparse.csr_matrix":  # noqa: F821
    """A CSR matrix from a Matrix Market file (.mtx) or, for any other suffix, a graph's two-column edge list
    (vertices 0..max, both directions)."""
    import scipy.io
    import scipy.sparse as sp

    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"no {what} file {path}")
    try:
        if path.suffix.lower() == ".mtx":
            return sp.csr_matrix(scipy.io.mmread(str(path)))
        edges = np.loadtxt(path, dtype=np.int64, comments=("#", "%"), ndmin=2)
    except (ValueError, OSError) as exc:
        raise SimschedError(f"{what} file {path}: cannot read it ({str(exc).splitlines()[0]})") from None
    if edges.shape[1] != 2 or not edges.size:
        raise SimschedError(f"{what} file {path}: an edge list needs two integer columns (u v) on each line")
    if edges.min() < 0:
        raise SimschedError(f"{what} file {path}: vertex numbers must be >= 0")
    n = int(edges.max()) + 1
    u, v = np.concatenate((edges[:, 0], edges[:, 1])), np.concatenate((edges[:, 1], edges[:, 0]))
    graph = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(n, n))
    graph.sum_duplicates()
    return graph


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
    a = read_sparse(matrix, "matrix")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise SimschedError(f"matrix file {matrix}: the matrix is empty")
    indptr, indices = _csr_arrays(a, f"matrix file {matrix}")
    x = 1.0 + (np.arange(a.shape[1]) % 10) / 10  # any fixed vector: the work does not depend on it
    csr = (indptr, indices, np.ascontiguousarray(a.data, dtype=np.float64).tobytes(), x.tobytes(), b"",
           int(a.shape[0]))
    return Kernel("spmv", np.array([a.shape[0]], dtype=np.int64), int(iters), csr=csr,
                  meta={"kernel": "spmv", "matrix": str(Path(matrix).resolve()), "iters": int(iters)})


def bfs_frontiers(graph, source: int) -> list[np.ndarray]:
    """The BFS frontiers from ``source`` along the graph's rows (level 0 is the source), each in vertex order."""
    level = np.full(graph.shape[0], -1, dtype=np.int64)
    level[source] = 0
    frontiers = [np.array([source], dtype=np.int64)]
    while True:
        reached = graph[frontiers[-1]].indices
        new = np.unique(reached[level[reached] < 0])
        if not new.size:
            return frontiers
        level[new] = len(frontiers)
        frontiers.append(new.astype(np.int64))


def bfs(graph: "str | Path", source: int = 0) -> Kernel:
    """BFS from ``source`` level by level, the frontiers computed up front: one loop per level, iteration j
    scans the adjacency of the level's j-th vertex and reads its neighbours' levels (work independent of the
    schedule)."""
    g = read_sparse(graph, "graph")
    if g.shape[0] != g.shape[1]:
        raise SimschedError(f"graph file {graph}: an adjacency matrix must be square, got {g.shape}")
    n = g.shape[0]
    if isinstance(source, bool) or not isinstance(source, (int, np.integer)) or not 0 <= source < n:
        raise SimschedError(f"--source must be a vertex in [0, {n - 1}], got {source!r}")
    frontiers = bfs_frontiers(g, int(source))
    level = np.full(n, -1.0)
    for depth, frontier in enumerate(frontiers):
        level[frontier] = depth
    indptr, indices = _csr_arrays(g, f"graph file {graph}")
    rows = np.concatenate(frontiers)
    csr = (indptr, indices, b"", level.tobytes(), rows.tobytes(), int(n))
    return Kernel("bfs", np.array([f.size for f in frontiers], dtype=np.int64), 1, csr=csr,
                  meta={"kernel": "bfs", "graph": str(Path(graph).resolve()), "source": int(source)})


def memory(n: int, array_bytes: int, pattern: str = "stride", repeat: int = 1, seed: int = 0) -> Kernel:
    """The memory kernel: one loop of ``n`` iterations, each over an array of ``array_bytes`` of its own with
    ``pattern``, ``repeat`` loops over the same arrays."""
    from ..locality import ELEMENT_BYTES, PATTERNS, Footprint
    from . import kernel

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
    return Kernel("memory", np.array([n], dtype=np.int64), int(repeat), memory=args,
                  meta={"kernel": "memory", "n": int(n), "array_bytes": int(array_bytes), "pattern": pattern,
                        "repeat": int(repeat), "seed": int(seed)})


def from_meta(meta: dict, where: str) -> Kernel:
    """The kernel a recording's metadata names (``where`` names the recording in errors)."""
    name = meta.get("kernel")
    if name is None:
        raise SimschedError(f"{where} names no kernel in its metadata: only a trace recorded by "
                            "simsched native record can be run natively")
    keys = {"spmv": ("matrix", "iters"), "bfs": ("graph", "source"),
            "memory": ("n", "array_bytes", "pattern", "repeat", "seed")}
    if name not in keys:
        raise SimschedError(f"{where}: unknown kernel {name!r} in its metadata (known: {', '.join(KERNELS)})")
    missing = [key for key in keys[name] if key not in meta]
    if missing:
        raise SimschedError(f"{where}: its {name} kernel metadata lacks {missing[0]!r}")
    args = {key: meta[key] for key in keys[name]}
    return {"spmv": spmv, "bfs": bfs, "memory": memory}[name](**args)
