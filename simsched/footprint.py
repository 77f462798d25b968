"""What a loop's iterations touch: the bytes of each, how they are accessed, where their pages live."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .errors import SimschedError

ELEMENT_BYTES = 8  # the kernels touch 8-byte doubles
PATTERNS = ("stride", "stream", "random")
PLACEMENTS = ("first-touch", "interleave", "master")


@dataclass(eq=False)
class Gather:
    """Reads at random places of a read-only array that all iterations share: ``reads[j]`` by iteration j."""

    reads: np.ndarray
    size: int                       # bytes of the array
    element: int = ELEMENT_BYTES    # bytes of one read
    name: str = "shared"            # the array: gathers naming the same one read the same array

    def __post_init__(self):
        reads = np.asarray(self.reads)
        whole = not reads.size or np.issubdtype(reads.dtype, np.integer)
        if reads.ndim != 1 or not whole or np.any(reads < 0):
            raise SimschedError("a gather needs a 1-D array of whole numbers >= 0 of reads per iteration")
        self.reads = reads.astype(np.int64)
        for key in ("size", "element"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise SimschedError(f"a gather's {key} must be a whole number of bytes >= 1, got {value!r}")


@dataclass(eq=False)
class Footprint:
    """The data a loop's iterations touch: bytes per iteration, how they are accessed, and where pages live."""

    bytes: np.ndarray
    pattern: str = "stride"
    placement: str = "first-touch"
    data: str = "data"
    # Reads of an array all iterations share, besides each iteration's own bytes (None: none).
    gather: Gather | None = None
    # A footprint the workload gives unasked: left out, not refused, where the data model does not apply.
    optional: bool = False

    def __post_init__(self):
        values = np.asarray(self.bytes)
        if values.ndim != 1:
            raise SimschedError(f"a footprint needs a 1-D array of bytes per iteration, got shape {values.shape}")
        if values.size and not np.issubdtype(values.dtype, np.integer):
            if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
                raise SimschedError("bytes per iteration must be whole numbers")
        if np.any(values < 0):
            raise SimschedError("bytes per iteration must be >= 0")
        self.bytes = values.astype(np.int64)
        if self.pattern not in PATTERNS:
            raise SimschedError(f"unknown access pattern {self.pattern!r} (known: {', '.join(PATTERNS)})")
        if self.placement not in PLACEMENTS:
            raise SimschedError(f"unknown page placement {self.placement!r} (known: {', '.join(PLACEMENTS)})")
        if self.gather is not None and self.gather.reads.size != values.size:
            raise SimschedError(f"a footprint of {values.size} iterations needs {values.size} gather counts, "
                                f"got {self.gather.reads.size}")

    @property
    def total(self) -> int:
        return int(self.bytes.sum())


def only_optional(loops) -> bool:
    """Whether every footprint of these loops is one its workload gave unasked (True when there is none)."""
    return all(loop.data is None or loop.data.optional for loop in loops)


def without_optional(loops) -> list:
    """The loops, those whose footprint their workload gave unasked replaced by copies without it."""
    kept = []
    for loop in loops:
        if loop.data is not None and loop.data.optional:
            loop = copy.copy(loop)
            loop.data = None
        kept.append(loop)
    return kept
