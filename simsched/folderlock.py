"""An exclusive lock on a results folder, held by one sweep at a time and naming its holder to the others."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import weakref
from pathlib import Path

from .errors import SimschedError

LOCK = "sweep.lock"


class FolderLock:
    """The lock file ``sweep.lock`` of a folder, locked with ``flock`` and removed when released.

    The kernel drops the lock when its holder dies, however it dies, so a lock file left by a
    killed sweep is taken over by the next one; while held, the file names the holder's process,
    host and start time.
    """

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK
        fd = _locked(self.path)
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())}
        try:
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps(holder) + "\n").encode())
        except OSError as exc:
            _release(fd, self.path)
            raise SimschedError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        # Released on release(), or when this object goes or the interpreter ends after an error.
        self._finalizer = weakref.finalize(self, _release, fd, self.path)

    def release(self) -> None:
        """Remove the lock file and unlock the folder (again: nothing)."""
        self._finalizer()


def _locked(path: Path) -> int:
    """A descriptor of ``path`` locked by this process, or the refusal naming the sweep that holds it."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SimschedError(f"cannot write in the results folder {path.parent}: {exc.strerror or exc}") \
                from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise SimschedError(f"{path.parent} is in use by another sweep ({holder}); wait for it to end "
                                "or stop it, or use another --out") from None
        except OSError as exc:
            os.close(fd)
            raise SimschedError(f"cannot lock results folder {path.parent}: {exc.strerror or exc}") from None
        # A holder removes the file while it still holds the lock: a lock taken on the removed file
        # guards nothing, so it is taken again on the file that now bears the name.
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _holder(fd: int) -> str:
    """The holder a lock file names, in words."""
    try:
        data = json.loads(os.pread(fd, 4096, 0))
        return f"pid {int(data['pid'])} on {data['host']}, started {data['started']}"
    except (OSError, ValueError, TypeError, KeyError):
        return "its process is starting"  # the holder has locked the file but not yet written itself in


def _release(fd: int, path: Path) -> None:
    try:
        os.unlink(path)  # before unlocking: a sweep waiting on this file then retries on a new one
    except OSError:
        pass
    os.close(fd)
