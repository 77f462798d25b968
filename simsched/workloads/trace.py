"""Program traces: the iteration costs of a program's loops, in order, in a Parquet, CSV or .npz file.

A trace is read one loop at a time, every value checked on the way: the workload scans the
file once (each loop's size, total and serial code) and gives the engine streamed loops
(:class:`~simsched.loop.StreamedLoop`) that read their costs again when a run needs them.
The format is described in docs/workloads.md (Program traces).
"""

from __future__ import annotations

import csv
import json
import re
import unicodedata
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import SimschedError, parquet
from ..loop import StreamedLoop, Window, check_total, prefix_sums
from ..output import write_whole
from ..spec import Param
from . import Workload

COLUMNS = ("loop", "iteration", "cost_ns", "bytes", "name", "phase", "serial_ns")
REQUIRED = ("loop", "iteration", "cost_ns")
TEXT = ("name", "phase")
PER_LOOP = ("name", "phase", "serial_ns")
WHOLE = ("loop", "iteration", "bytes")  # the other numeric columns are times: finite and >= 0
SUFFIXES = (".parquet", ".csv", ".npz")
# Metadata: Parquet key-value pairs "simsched.KEY" (JSON values), the CSV first line "# simsched: {...}",
# the .npz key "simsched" (a JSON object as a 0-d string array).
META = "simsched"
CSV_META = "# simsched:"
NPZ_KEY = re.compile(r"(cost_ns|bytes)_(0|[1-9][0-9]*)")
NPZ_VECTORS = ("serial_ns", "name", "phase")
# Rows read at a time from a table (a Parquet record batch, a CSV chunk).
BATCH_ROWS = 1 << 16
# Iterations whose prefix sums (and bytes) streamed loops keep in memory between uses: a small program is
# read once; a large one is read again, loop by loop, each time a run passes through it.
HELD_ITERATIONS = 1 << 22


@dataclass
class TraceLoop:
    """One loop as a trace holds it."""

    index: int
    costs: np.ndarray
    bytes: np.ndarray | None = None
    name: str = ""
    phase: str = ""
    serial_ns: float = 0.0


class TraceFile:
    """A trace file, read one loop at a time in program order, every value checked as it is read."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.suffix = self.path.suffix.lower()
        if self.suffix not in SUFFIXES:
            raise self.fail(f"unknown suffix {self.path.suffix or '(none)'!r}: a trace is a "
                            f"{', '.join(SUFFIXES[:-1])} or {SUFFIXES[-1]} file")
        if not self.path.is_file():
            raise self.fail("no such file")
        self.first_line = 2  # a CSV's line number of row 0 (after the header, and after a metadata line)
        self.cursor: tuple[int, Iterator[TraceLoop]] | None = None

    def fail(self, message: str) -> SimschedError:
        return SimschedError(f"trace {self.path}: {message}")

    def row(self, r: int) -> str:
        """How an error names table row ``r`` (rows count from 0, the header not included)."""
        return f"row {r} (line {r + self.first_line})" if self.suffix == ".csv" else f"row {r}"

    # -- reading ---------------------------------------------------------------------------------------------

    def loops(self) -> Iterator[TraceLoop]:
        """Every loop in order, each checked; memory holds one loop (and one batch of rows) at a time."""
        try:
            if self.suffix == ".npz":
                yield from self._npz_loops()
            else:
                yield from self._table_loops(self._parquet_chunks() if self.suffix == ".parquet"
                                             else self._csv_chunks())
        except SimschedError:
            raise
        except Exception as exc:  # a file its reader cannot parse
            raise self.fail(f"cannot read it: {exc}".splitlines()[0]) from None

    def loop(self, index: int) -> TraceLoop:
        """Loop ``index``, read by going on from the last loop read (or from the start, for an earlier one)."""
        if self.cursor is None or self.cursor[0] > index:
            self.cursor = (0, self.loops())
        reader = self.cursor[1]
        for record in reader:
            self.cursor = (record.index + 1, reader)
            if record.index == index:
                return record
        self.cursor = None
        raise self.fail(f"has no loop {index} any more: it changed since it was first read")

    def metadata(self) -> dict[str, Any]:
        """The key-value metadata the file was written with (``{}`` when it has none)."""
        try:
            if self.suffix == ".parquet":
                _, pq = parquet("reading a Parquet trace")
                pairs = pq.ParquetFile(self.path).schema_arrow.metadata or {}
                prefix = META + "."
                return {key.decode()[len(prefix):]: _json_or_text(value.decode())
                        for key, value in pairs.items() if key.decode().startswith(prefix)}
            if self.suffix == ".csv":
                return self._csv_metadata() or {}
            with np.load(self.path, allow_pickle=False) as archive:
                if META not in archive.files:
                    return {}
                value = archive[META]
                if value.dtype.kind != "U" or value.ndim != 0:
                    raise self.fail(f"key {META} must be a JSON object as one string")
                return self._object(str(value.item()), f"key {META}")
        except SimschedError:
            raise
        except Exception as exc:
            raise self.fail(f"cannot read it: {exc}".splitlines()[0]) from None

    def _object(self, text: str, where: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise self.fail(f"{where}: the metadata must be a JSON object")
        return value

    # -- tables: Parquet and CSV ------------------------------------------------------------------------------

    def _columns(self, names: Sequence[str]) -> None:
        for name in names:
            if name not in COLUMNS:
                raise self.fail(f"unknown column {name!r} (a trace has columns {', '.join(REQUIRED)} and "
                                f"optionally {', '.join(c for c in COLUMNS if c not in REQUIRED)})")
            if list(names).count(name) > 1:
                raise self.fail(f"column {name!r} appears twice")
        for name in REQUIRED:
            if name not in names:
                raise self.fail(f"no {name} column (columns: {', '.join(names) or 'none'})")

    def _parquet_chunks(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        pa, pq = parquet("reading a Parquet trace")

        table = pq.ParquetFile(self.path, pre_buffer=False)  # pre-buffering keeps all the bytes read
        schema = table.schema_arrow
        self._columns(schema.names)
        if not table.metadata.num_rows:
            raise self.fail("holds no iterations")
        for field in schema:
            kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
            text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
            number = pa.types.is_integer(kind) or pa.types.is_floating(kind)
            if field.name in TEXT and not text:
                raise self.fail(f"column {field.name} has type {field.type}; it holds text")
            if field.name not in TEXT and not number:
                raise self.fail(f"column {field.name} has type {field.type}; it holds numbers")
        first = 0
        for batch in table.iter_batches(batch_size=BATCH_ROWS):
            columns = {}
            for name, array in zip(batch.schema.names, batch.columns):
                if pa.types.is_dictionary(array.type):
                    array = array.dictionary_decode()
                values = array.to_numpy(zero_copy_only=False)
                if name in TEXT and array.null_count:
                    raise self.fail(f"{self.row(first + int(np.flatnonzero(np.equal(values, None))[0]))}: "
                                    f"{name} is missing")
                columns[name] = values
            yield first, columns
            first += batch.num_rows

    def _csv_metadata(self) -> dict[str, Any] | None:
        with open(self.path, encoding="utf-8", newline="") as handle:
            line = handle.readline()
        if not line.startswith(CSV_META):
            return None
        return self._object(line[len(CSV_META):], "line 1")

    def _csv_chunks(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        import pandas as pd

        skip = 0 if self._csv_metadata() is None else 1
        self.first_line = skip + 2
        with open(self.path, encoding="utf-8", newline="") as handle:
            for _ in range(skip):
                handle.readline()
            header = next(csv.reader([handle.readline()]), [])
            row = next(csv.reader([handle.readline()]), [])
        if not header:
            raise self.fail("is empty: no header line")
        self._columns(header)
        if len(row) > len(header):  # pandas would take the first column for an index
            raise self.fail(f"{self.row(0)}: {len(row)} values for {len(header)} columns")
        reader = pd.read_csv(self.path, skiprows=skip, chunksize=BATCH_ROWS, keep_default_na=False,
                             index_col=False, dtype={name: str for name in TEXT if name in header})
        first = 0
        with reader:
            for frame in reader:
                if frame.empty:
                    continue
                columns = {}
                for name in header:
                    values = frame[name]
                    columns[name] = (values.to_numpy(dtype=object) if name in TEXT
                                     else self._csv_numbers(values, name, first))
                yield first, columns
                first += len(frame)

    def _csv_numbers(self, values, name: str, first: int) -> np.ndarray:
        """A CSV column as numbers; a value that is no number is refused, naming its row."""
        import pandas as pd

        if values.dtype.kind in "iuf":
            return values.to_numpy()
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
        text = values.to_numpy(dtype=object)
        for j in np.flatnonzero(np.isnan(numbers)).tolist():
            if str(text[j]).strip().lower() != "nan":
                raise self.fail(f"{self.row(first + j)}: {name} is {text[j]!r}, not a number")
        return numbers

    def _table_loops(self, chunks: Iterable[tuple[int, dict[str, np.ndarray]]]) -> Iterator[TraceLoop]:
        """Rows grouped into loops: each loop's rows are gathered, then checked and yielded."""
        index, start, pieces = -1, 0, []
        for first, columns in chunks:
            for name, values in columns.items():
                if name not in TEXT:
                    columns[name] = self._checked(values, name,
                                                  lambda j, first=first, name=name: f"{self.row(first + j)}: {name}")
            loop = columns["loop"]
            cuts = np.flatnonzero(np.diff(loop)) + 1
            for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, loop.size].tolist()):
                value = int(loop[lo])
                if value != index:
                    if value != index + 1:
                        rule = "loops are numbered 0, 1, 2, ... in order, the rows of each loop together"
                        raise self.fail(f"{self.row(first + lo)}: the first loop is {value}; {rule}" if index < 0
                                        else f"{self.row(first + lo)}: loop {value} follows loop {index}; {rule}")
                    if pieces:
                        yield self._table_loop(index, start, pieces)
                    index, start, pieces = value, first + lo, []
                pieces.append({name: values[lo:hi] for name, values in columns.items()})
        if not pieces:
            raise self.fail("holds no iterations")
        yield self._table_loop(index, start, pieces)

    def _table_loop(self, index: int, start: int, pieces: list[dict[str, np.ndarray]]) -> TraceLoop:
        column = {name: np.concatenate([p[name] for p in pieces]) for name in pieces[0]}
        iteration = column["iteration"]
        wrong = np.flatnonzero(iteration != np.arange(iteration.size))
        if wrong.size:
            j = int(wrong[0])
            raise self.fail(f"{self.row(start + j)}: loop {index} has iteration {_show(iteration[j])} where {j} "
                            "was expected; iterations run 0, 1, 2, ... within each loop, without gaps or repeats")
        record = TraceLoop(index, column["cost_ns"].astype(float, copy=False),
                           None if "bytes" not in column else column["bytes"].astype(np.int64))
        for name in PER_LOOP:
            if name in column:
                values = column[name]
                differs = np.flatnonzero(values != values[0])
                if differs.size:
                    j = int(differs[0])
                    raise self.fail(f"{self.row(start + j)}: {name} of loop {index} is {_show(values[j])!r}, but "
                                    f"{_show(values[0])!r} on its first row; {name} is one value per loop")
                setattr(record, name, str(values[0]) if name in TEXT else float(values[0]))
        self._total(record)
        return record

    def _checked(self, values: np.ndarray, name: str, where: Callable[[int], str]) -> np.ndarray:
        """Numeric ``values`` of column ``name``, refused at the first that breaks its rule (``where(j)`` names it)."""
        values = np.asarray(values)
        if values.dtype.kind not in "iuf":
            raise self.fail(f"{name} holds {values.dtype} values; it holds numbers")
        if values.dtype.kind in "iu":
            bad, rule = values < 0, "a whole number >= 0" if name in WHOLE else "finite and >= 0"
        elif name in WHOLE:
            bad, rule = ~np.isfinite(values) | (values < 0) | (values != np.round(values)), "a whole number >= 0"
        else:
            bad, rule = ~np.isfinite(values) | (values < 0), "finite and >= 0"
        if bad.any():
            j = int(np.argmax(bad))
            raise self.fail(f"{where(j)} is {_show(values[j])}; it must be {rule}")
        return values.astype(np.int64) if name in WHOLE else values

    def _total(self, record: TraceLoop) -> None:
        check_total(float(prefix_sums(record.costs)[-1]), f"trace {self.path}: the costs of loop {record.index}")

    # -- arrays: .npz -----------------------------------------------------------------------------------------

    def _npz_loops(self) -> Iterator[TraceLoop]:
        if not zipfile.is_zipfile(self.path):
            raise self.fail("is not an .npz archive (a zip file of arrays)")
        with np.load(self.path, allow_pickle=False) as archive:
            loops = self._npz_keys(archive.files)
            vectors = {name: self._npz_vector(archive, name, loops) for name in NPZ_VECTORS if name in archive.files}
            for k in range(loops):
                costs = self._npz_array(archive, f"cost_ns_{k}")
                if not costs.size:
                    raise self.fail(f"cost_ns_{k} is empty; a loop has at least one iteration")
                record = TraceLoop(k, costs.astype(float, copy=False))
                if f"bytes_{k}" in archive.files:
                    record.bytes = self._npz_array(archive, f"bytes_{k}")
                    if record.bytes.size != costs.size:
                        raise self.fail(f"bytes_{k} has {record.bytes.size} values for the {costs.size} "
                                        f"iterations of cost_ns_{k}")
                for name, values in vectors.items():
                    setattr(record, name, str(values[k]) if name in TEXT else float(values[k]))
                self._total(record)
                yield record

    def _npz_keys(self, keys: Sequence[str]) -> int:
        """The number of loops the archive's keys give, every key checked."""
        found: dict[str, set[int]] = {"cost_ns": set(), "bytes": set()}
        for key in keys:
            match = NPZ_KEY.fullmatch(key)
            if match:
                found[match[1]].add(int(match[2]))
            elif key not in NPZ_VECTORS and key != META:
                raise self.fail(f"unknown key {key!r} (a trace has cost_ns_0, cost_ns_1, ... and optionally "
                                f"bytes_K, {', '.join(NPZ_VECTORS)} and {META})")
        if not found["cost_ns"]:
            raise self.fail("holds no loops: no key cost_ns_0")
        loops = max(found["cost_ns"]) + 1
        missing = sorted(set(range(loops)) - found["cost_ns"])
        if missing:
            raise self.fail(f"has no key cost_ns_{missing[0]} but has cost_ns_{loops - 1}; "
                            "loops are numbered 0, 1, 2, ... without gaps")
        extra = sorted(found["bytes"] - found["cost_ns"])
        if extra:
            raise self.fail(f"has key bytes_{extra[0]} but no cost_ns_{extra[0]}")
        return loops

    def _npz_array(self, archive, key: str) -> np.ndarray:
        values = archive[key]
        if values.ndim != 1:
            raise self.fail(f"{key} is a {values.ndim}-D array of shape {values.shape}; it must be 1-D")
        if values.dtype.kind not in "iuf":
            raise self.fail(f"{key} holds {values.dtype} values, not numbers")
        return self._checked(values, key.rsplit("_", 1)[0], lambda j: f"{key}[{j}]")

    def _npz_vector(self, archive, name: str, loops: int) -> np.ndarray:
        values = archive[name]
        if values.ndim != 1 or values.size != loops:
            raise self.fail(f"{name} has shape {values.shape}; it must hold one value per loop ({loops})")
        if name in TEXT:
            if values.dtype.kind != "U":
                raise self.fail(f"{name} holds {values.dtype} values, not strings")
            return values
        if values.dtype.kind not in "iuf":
            raise self.fail(f"{name} holds {values.dtype} values, not numbers")
        return self._checked(values, name, lambda j: f"{name}[{j}]")


class Trace(Workload):
    """A program of loops from a trace file: each loop's costs, and its name, serial code and bytes when given."""

    name = "trace"
    summary = ("a program of loops from path=FILE (.parquet, .csv or .npz): loop, iteration, cost_ns "
               "and optionally bytes, name, phase, serial_ns")
    PARAMS = {"path": Param("path", str, "", help="the trace: a .parquet, .csv or .npz file")}

    def check(self):
        if not self.params["path"]:
            raise SimschedError("workload trace: parameter path= is required")

    def input_files(self):
        return [Path(self.params["path"])]

    def generate(self, rng):
        loops = self.loops(rng)
        if len(loops) > 1:
            raise SimschedError(f"workload {self.spec}: a program of {len(loops)} loops has no single array of costs")
        return np.diff(loops[0].prefix)

    def loops(self, rng):
        """The trace's loops, streamed: read once now (sizes, totals, serial code), again loop by loop when run."""
        trace = TraceFile(self.params["path"])
        window = Window(HELD_ITERATIONS)
        loops = []
        for record in trace.loops():
            data = self.trace_footprint(trace, record)
            loop = StreamedLoop(record.costs.size, float(prefix_sums(record.costs)[-1]),
                                partial(self.read, trace, record.index), window, name=record.name,
                                serial_ns=record.serial_ns, has_data=data is not None, phase=record.phase)
            loop.hold(record.costs, data)
            loops.append(loop)
        return loops

    def read(self, trace: TraceFile, index: int) -> tuple:
        """Loop ``index``'s costs and footprint, read again from the file."""
        record = trace.loop(index)
        return record.costs, self.trace_footprint(trace, record)

    def trace_footprint(self, trace: TraceFile, record: TraceLoop):
        """A loop's footprint: its bytes column (refused together with the bytes parameter), or the parameter's."""
        if record.bytes is None:
            return self.footprint(record.costs.size)
        if "bytes" in self.given:
            raise SimschedError(f"workload trace: {trace.path} has bytes per iteration; give bytes= or the "
                                "bytes column, not both")
        return self.footprint_of(record.bytes, f"trace {trace.path}: bytes of loop {record.index}")


def _show(value: Any) -> Any:
    """A NumPy scalar as the Python value it holds, for error messages."""
    return value.item() if isinstance(value, np.generic) else value


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def trace_metadata(path: str | Path) -> dict[str, Any]:
    """A trace's metadata: its ``simsched.*`` Parquet keys, its CSV ``# simsched:`` line or its .npz key."""
    return TraceFile(path).metadata()


# -- writing ----------------------------------------------------------------------------------------------------

def write_trace(path: str | Path, loops: Iterable[Any], *, names: Sequence[str] | None = None,
                serial_ns: Sequence[float] | None = None, bytes: Iterable[Any] | None = None,
                metadata: dict[str, Any] | None = None, phases: Sequence[str] | None = None) -> Path:
    """Write a program trace: ``loops`` (1-D cost arrays, ns, in program order) to a .parquet, .csv or .npz file.

    ``names``, ``phases`` and ``serial_ns`` give one value per loop (names and phases without
    control characters); ``bytes`` one array per loop, as long as its costs; ``metadata`` a
    JSON-serializable dict (``trace_metadata`` reads it back). ``loops`` and ``bytes`` may be
    generators: one loop is held at a time. The file appears whole or not at all.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise SimschedError(f"write_trace: {path}: unknown suffix; a trace is a {', '.join(SUFFIXES[:-1])} "
                            f"or {SUFFIXES[-1]} file")
    metadata = dict(metadata or {})
    if not all(isinstance(key, str) for key in metadata):
        raise SimschedError("write_trace: metadata keys must be strings")
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise SimschedError(f"write_trace: metadata must be JSON-serializable: {exc}") from None
    given = {"bytes": bytes, "name": names, "phase": phases, "serial_ns": serial_ns}
    present = tuple(name for name in COLUMNS if name in given and given[name] is not None)
    records = _records(loops, names, phases, serial_ns, bytes)
    writer = {".parquet": _write_parquet, ".csv": _write_csv, ".npz": _write_npz}[suffix]
    return write_whole(path, lambda partial_path: writer(partial_path, records, present, metadata))


def _records(loops, names, phases, serial_ns, footprints) -> Iterator[TraceLoop]:
    """The loops to write as checked TraceLoops, one at a time."""
    per_loop = {"name": names, "phase": phases, "serial_ns": serial_ns}
    byte_arrays = iter(footprints) if footprints is not None else None
    count = 0
    for k, costs in enumerate(loops):
        costs = np.asarray(costs, dtype=float)
        if costs.ndim != 1 or not costs.size:
            raise SimschedError(f"write_trace: loop {k}: costs must be a non-empty 1-D array")
        if not np.all(np.isfinite(costs)) or np.any(costs < 0):
            raise SimschedError(f"write_trace: loop {k}: costs must be finite and >= 0")
        record = TraceLoop(k, costs)
        if byte_arrays is not None:
            values = next(byte_arrays, None)
            values = np.asarray([] if values is None else values)
            if values.ndim != 1 or values.size != costs.size or values.dtype.kind not in "iuf":
                raise SimschedError(f"write_trace: loop {k}: bytes must be a 1-D array of {costs.size} numbers")
            if (values.dtype.kind == "f" and (not np.all(np.isfinite(values)) or np.any(values != np.round(values)))
                    or np.any(values < 0)):
                raise SimschedError(f"write_trace: loop {k}: bytes must be whole numbers >= 0")
            record.bytes = values.astype(np.int64)
        for name, values in per_loop.items():
            if values is None:
                continue
            if k >= len(values):
                raise SimschedError(f"write_trace: {name} has {len(values)} values for more loops")
            value = values[k]
            if name == "serial_ns":
                value = float(value)
                if not np.isfinite(value) or value < 0:
                    raise SimschedError(f"write_trace: loop {k}: serial_ns must be finite and >= 0")
            elif not isinstance(value, str):
                raise SimschedError(f"write_trace: loop {k}: {name} must be a string")
            elif any(unicodedata.category(c) == "Cc" for c in value):
                # NUL, CR and the like do not survive every form (NumPy strips trailing NULs).
                raise SimschedError(f"write_trace: loop {k}: {name} {value!r} holds a control character")
            setattr(record, name, value)
        count += 1
        yield record
    if not count:
        raise SimschedError("write_trace: a program needs at least one loop")
    for name, values in per_loop.items():
        if values is not None and len(values) != count:
            raise SimschedError(f"write_trace: {name} has {len(values)} values for {count} loops")
    if byte_arrays is not None and next(byte_arrays, None) is not None:
        raise SimschedError(f"write_trace: bytes has arrays for more than the {count} loops")


def _rows(record: TraceLoop, present: tuple[str, ...]) -> dict[str, np.ndarray]:
    """One loop's rows, column by column, in the order of COLUMNS."""
    n = record.costs.size
    columns = {"loop": np.full(n, record.index, dtype=np.int64), "iteration": np.arange(n, dtype=np.int64),
               "cost_ns": record.costs}
    for name in present:
        value = getattr(record, name)
        columns[name] = value if name == "bytes" else np.full(n, value, dtype=object if name in TEXT else float)
    return columns


def _write_parquet(path: Path, records, present, metadata) -> None:
    pa, pq = parquet("writing a Parquet trace")

    writer = None
    try:
        for record in records:
            table = pa.table(_rows(record, present))
            if writer is None:
                schema = table.schema.with_metadata({f"{META}.{k}": json.dumps(v) for k, v in metadata.items()})
                writer = pq.ParquetWriter(path, schema)
            writer.write_table(table.replace_schema_metadata(writer.schema.metadata))  # one row group per loop
    finally:
        if writer is not None:
            writer.close()


def _write_csv(path: Path, records, present, metadata) -> None:
    import pandas as pd

    with open(path, "w", encoding="utf-8", newline="") as handle:
        if metadata:
            handle.write(f"{CSV_META} {json.dumps(metadata)}\n")
        for record in records:
            pd.DataFrame(_rows(record, present)).to_csv(handle, index=False, header=record.index == 0)


def _write_npz(path: Path, records, present, metadata) -> None:
    vectors = {name: [] for name in NPZ_VECTORS if name in present}
    with open(path, "wb") as handle, zipfile.ZipFile(handle, "w") as archive:
        def put(key: str, array: np.ndarray) -> None:
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)

        for record in records:
            put(f"cost_ns_{record.index}", record.costs)
            if record.bytes is not None:
                put(f"bytes_{record.index}", record.bytes)
            for name, values in vectors.items():
                values.append(getattr(record, name))
        for name, values in vectors.items():
            put(name, np.asarray(values, dtype=float if name == "serial_ns" else str))
        if metadata:
            put(META, np.asarray(json.dumps(metadata)))
