"""Output files: a path checked before any work is done, then written whole or not at all."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

from .errors import SimschedError

# What a path that is neither a file nor a folder is, as an error names it. Character devices
# (/dev/null, a terminal) and FIFOs are streams: they are written in place, never replaced.
_SPECIAL = {stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def _mode(path: Path, option: str) -> int | None:
    """The file mode of what ``path`` leads to (symbolic links followed), or None when nothing is there."""
    try:
        return os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a missing folder, or a file in its place: named later
        return None
    except OSError as exc:  # e.g. a loop of symbolic links
        raise SimschedError(f"{option}: {path}: {exc.strerror or exc}") from None


def _is_stream(mode: int | None) -> bool:
    return mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode))


def _check_kind(path: Path, mode: int | None, option: str) -> None:
    """Refuse a path that leads to a folder or to a special file other than a stream."""
    if mode is None or stat.S_ISREG(mode) or _is_stream(mode):
        return
    if stat.S_ISDIR(mode):
        raise SimschedError(f"{option}: {path} is a folder, not a file")
    what = _SPECIAL.get(stat.S_IFMT(mode), "a special file")
    raise SimschedError(f"{option}: {path} is {what}, not a file")


def _landing(path: Path) -> Path:
    """The file that writing ``path`` replaces: ``path`` with its symbolic links followed (the links stay)."""
    return Path(os.path.realpath(path))


def check_output(path: str | Path, option: str) -> Path:
    """Return ``path`` if a file can be created there, else raise naming ``option`` (e.g. ``--out``).

    A symbolic link is followed (its target is written); a character device or a FIFO is
    written in place; a folder or another special file is refused.
    """
    path = Path(path)
    mode = _mode(path, option)
    _check_kind(path, mode, option)
    if _is_stream(mode):
        return path
    folder = _landing(path).parent
    shown = folder if path.is_symlink() else path.parent  # the folder as the user named it, unless a link moved it
    if not folder.exists():
        raise SimschedError(f"{option}: folder {shown} does not exist")
    if not folder.is_dir():
        raise SimschedError(f"{option}: {shown} is a file, not a folder, so {path} cannot be written")
    return path


def write_whole(path: str | Path, write: Callable[[Path], object], option: str = "") -> Path:
    """Have ``write`` fill a file beside ``path``, then move it to ``path``: a failed write leaves nothing.

    A symbolic link's target is the file replaced; a character device or a FIFO is written
    in place (see ``write_stream``).
    """
    path = Path(path)
    where = f"{option}: " if option else ""
    mode = _mode(path, option or "output")
    _check_kind(path, mode, option or "output")
    if _is_stream(mode):
        return write_stream(path, write, option, fifo=stat.S_ISFIFO(mode))
    target = _landing(path)
    partial = target.with_name(target.name + ".partial")
    try:
        write(partial)
        partial.replace(target)
    except OSError as exc:
        raise SimschedError(f"{where}cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if partial.exists():
            partial.unlink()
    return path


def write_stream(path: Path, write: Callable[[Path], object], option: str = "", fifo: bool = False) -> Path:
    """Have ``write`` write to the device or FIFO ``path`` itself; a FIFO must have a reader already.

    A FIFO nobody reads is refused rather than waited on. The probe that finds its reader
    stays open until ``write`` is done, so that the reader does not see the end of the
    stream between the probe and the write.
    """
    where = f"{option}: " if option else ""
    probe = None
    try:
        if fifo:
            try:
                probe = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    raise SimschedError(f"{where}nothing reads the FIFO {path}: start its reader first") \
                        from None
                raise
        write(path)
    except OSError as exc:
        raise SimschedError(f"{where}cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if probe is not None:
            os.close(probe)
    return path


def image_path(path: str | Path, option: str = "--out") -> Path:
    """The file a figure saved as ``path`` lands in: savefig appends ``.png`` to a name without a suffix."""
    import matplotlib
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(path)
    if not path.suffix:
        if _is_stream(_mode(path, option)):
            return path  # a device or FIFO keeps its name, and takes the default format
        # As savefig names it: trailing dots dropped, the default format (savefig.format) appended.
        return path.with_name(path.name.rstrip(".") + "." + matplotlib.rcParams["savefig.format"])
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise SimschedError(f"{option}: cannot save a plot as {path.suffix} (formats: {', '.join(sorted(formats))})")
    return path


def save_figure(fig, path: str | Path, option: str = "") -> Path:
    """Save a matplotlib figure whole to ``path`` (see ``image_path``) and return the file written."""
    import matplotlib

    path = image_path(path, option or "plot")
    form = path.suffix[1:].lower() or matplotlib.rcParams["savefig.format"]
    return write_whole(path, lambda partial: fig.savefig(partial, format=form, dpi=120), option)
