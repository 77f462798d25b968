"""The ``simsched`` command line: run, machines, sweep, fit, rank, breakdown, plot, advise and native."""

from __future__ import annotations

import errno
import sys

from ..errors import ExecutionError, SimschedError
from .arguments import build_parser
from .native_commands import cmd_native, cmd_record
from .report_commands import cmd_plot, cmd_report, cmd_sensitivity
from .simulation_commands import (cmd_advise, cmd_breakdown, cmd_fit, cmd_machines, cmd_rank, cmd_run,
                                  cmd_schedulers, cmd_sweep, cmd_workloads)

__all__ = ["main", "build_parser", "COMMANDS"]


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"simsched: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    import warnings

    warnings.showwarning = _one_line_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "plugin", None):
            from .. import plugins

            plugins.activate(args.plugin)
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # output a full device refuses fails here, as one line, rather than at exit
        return status
    except ExecutionError as exc:
        print(f"simsched: internal error (please report it): {exc}", file=sys.stderr)
        return 3
    except SimschedError as exc:
        print(f"simsched: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("simsched: error: out of memory (is the loop or a parameter far too large?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("simsched: interrupted", file=sys.stderr)
        return 128 + getattr(exc, "signum", 2)
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        _drop_stdout()
        what = exc.filename or "the output"
        print(f"simsched: error: cannot write {what}: {exc.strerror}", file=sys.stderr)
        return 2


# A device or disk that takes no more data: what was printed is lost, so it ends the command as an error.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _drop_stdout() -> None:
    """Point the standard output at /dev/null, so that what it still buffers fails no second time at exit."""
    import os

    try:
        sys.stdout.flush()
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # a captured stdout, as in tests, has no descriptor
        pass


COMMANDS = {"run": cmd_run, "machines": cmd_machines, "sweep": cmd_sweep, "fit": cmd_fit, "rank": cmd_rank,
            "breakdown": cmd_breakdown, "plot": cmd_plot, "advise": cmd_advise, "native": cmd_native,
            "report": cmd_report, "sensitivity": cmd_sensitivity, "record": cmd_record,
            "schedulers": cmd_schedulers, "workloads": cmd_workloads}
