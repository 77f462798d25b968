"""The error raised for bad user input: files, configs, CLI arguments and parameters."""


class SimschedError(Exception):
    """A problem with what the user asked for, reported as one line without a traceback."""


class ExecutionError(SimschedError):
    """A simulated run broke an invariant (an iteration ran zero or several times)."""


class Interrupted(KeyboardInterrupt):
    """Work stopped by a signal (SIGINT or SIGTERM); the command exits with 128 + the signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def parquet(what: str):
    """pyarrow's (pyarrow, pyarrow.parquet) modules, or a one-line error saying ``what`` needs them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise SimschedError(f"{what} needs pyarrow (pip install 'simsched[parquet]')") from None
    return pyarrow, pyarrow.parquet
