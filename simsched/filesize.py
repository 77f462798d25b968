"""The size limits of the text files simsched parses whole, checked before a file is read."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import SimschedError

# A machine file: room for a 1024-core latency matrix as native calibrate writes it (about 7 MiB).
MACHINE_FILE_BYTES = 16 * 2**20
# An experiment file: its grid, sections and published figures (the shipped ones are a few KiB).
EXPERIMENT_FILE_BYTES = 1 * 2**20


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"


def read_limited(path: str | Path, what: str, limit: int) -> bytes:
    """The bytes of ``path``, a ``what`` (e.g. "machine file"), refused unread when larger than ``limit``.

    The size is taken from the file system first; what is read is bounded too, for files that
    report no size (as /proc's) or grow while read.
    """
    path = Path(path)
    refused = f"{path} is over the {_mib(limit)} limit on {what}s"
    try:
        size = os.stat(path).st_size
        if size > limit:
            raise SimschedError(f"{path} is {_mib(size)}, over the {_mib(limit)} limit on {what}s")
        with open(path, "rb") as source:
            data = source.read(limit + 1)
    except OSError as exc:
        raise SimschedError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SimschedError(refused)
    return data
