"""Output files: a path checked before any work is done, then written whole or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .errors import SimschedError


def check_output(path: str | Path, option: str) -> Path:
    """Return ``path`` if a file can be created there, else raise naming ``option`` (e.g. ``--out``)."""
    path = Path(path)
    if path.is_dir():
        raise SimschedError(f"{option}: {path} is a folder, not a file")
    folder = path.parent
    if not folder.exists():
        raise SimschedError(f"{option}: folder {folder} does not exist")
    if not folder.is_dir():
        raise SimschedError(f"{option}: {folder} is a file, not a folder, so {path} cannot be written")
    return path


def write_whole(path: str | Path, write: Callable[[Path], object], option: str = "") -> Path:
    """Have ``write`` fill a file beside ``path``, then move it to ``path``: a failed write leaves nothing."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        write(partial)
        partial.replace(path)
    except OSError as exc:
        where = f"{option}: " if option else ""
        raise SimschedError(f"{where}cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if partial.exists():
            partial.unlink()
    return path


def image_path(path: str | Path, option: str = "--out") -> Path:
    """The file a figure saved as ``path`` lands in: savefig appends ``.png`` to a name without a suffix."""
    import matplotlib
    from matplotlib.backend_bases import FigureCanvasBase

    path = Path(path)
    if not path.suffix:
        # As savefig names it: trailing dots dropped, the default format (savefig.format) appended.
        return path.with_name(path.name.rstrip(".") + "." + matplotlib.rcParams["savefig.format"])
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise SimschedError(f"{option}: cannot save a plot as {path.suffix} (formats: {', '.join(sorted(formats))})")
    return path


def save_figure(fig, path: str | Path, option: str = "") -> Path:
    """Save a matplotlib figure whole to ``path`` (see ``image_path``) and return the file written."""
    path = image_path(path, option or "plot")
    return write_whole(path, lambda partial: fig.savefig(partial, format=path.suffix[1:].lower(), dpi=120), option)
