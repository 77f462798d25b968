"""The commands run on the host's threads: native (run, calibrate, validate, overhead, replay) and record."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import SimschedError
from .simulation_commands import output_path, write_chunks


def cmd_native(args) -> int:
    from ..signals import signals_interrupt

    # SIGINT and SIGTERM stop the threads within milliseconds (the runtime watches for them) and exit 128 +
    # the signal with one line; without a handler SIGTERM would kill the process silently.
    with signals_interrupt():
        return _native(args)


def _progress_line(line: str) -> None:
    """One line of progress on stderr, at once, on a terminal or not: stdout holds the command's result."""
    print(line, file=sys.stderr, flush=True)


def _native(args) -> int:
    from .. import native

    if args.native_command is None:
        raise SimschedError("native needs a command: run, replay, validate, overhead, calibrate or record")
    native.require()
    if args.native_command == "calibrate":
        from ..native.calibrate import calibrate

        command = "simsched native calibrate " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else \
            "simsched native calibrate"
        out = calibrate(args.out, args.threads, args.rounds, command=command.strip(), progress=_progress_line,
                        force=args.force, openmp=args.openmp)
        print(out.resolve())
        return 0
    if args.native_command == "replay":
        return _native_replay(args)
    if args.native_command == "record":
        return _native_record(args)
    if args.native_command == "overhead":
        from ..native.overhead import format_overhead, overhead
        from ..native.validate import check_machine_file

        from ..output import check_output, image_path

        # A plot that cannot be written is refused before anything is measured.
        plot = image_path(check_output(Path(args.plot), "--plot"), "--plot") if args.plot is not None else None
        table = overhead(check_machine_file(args.machine), args.threads, args.iters_per_thread, args.delay_ns,
                         args.outer, args.test_time_us, _native_schedulers(args.schedulers),
                         openmp=not args.no_openmp)
        print(table.to_json(orient="records") if args.json else format_overhead(table))
        if plot is not None:
            from ..native.overhead import plot_overhead
            from ..output import save_figure

            save_figure(plot_overhead(table), plot, "--plot")
        return 0
    if args.native_command == "validate":
        from ..native.validate import check_machine_file, format_validation, validate

        if args.workload is not None:
            return _native_validate_trace(args)
        if args.locality:
            if args.schedulers is not None:
                raise SimschedError("--locality validates its own three schedulers; --schedulers belongs to the others")
            return _native_validate_locality(args)
        if args.n is not None or args.sweeps is not None:
            raise SimschedError("--n and --sweeps belong to the --locality validation; give --locality too")
        args.points = 10 if args.points is None else args.points
        if args.points < 2 or args.repeat < 1:
            raise SimschedError("--points must be >= 2 and --repeat >= 1")
        table = validate(check_machine_file(args.machine), args.threads, args.points, args.repeat,
                         _native_schedulers(args.schedulers), openmp=not args.no_openmp,
                         progress=_progress_line)
        if args.json:
            print(table.to_json(orient="records"))
        else:
            print(format_validation(table))
        return 0
    from ..schedulers import get_scheduler
    from ..workloads import get_workload

    native.native_config(get_scheduler(args.scheduler))
    get_workload(args.workload)
    native.check_threads(args.threads)
    chunks = output_path(args.chunks)
    trace = output_path(args.trace, "--trace")
    result = native.run(args.scheduler, args.workload, args.threads, seed=args.seed, repeat=args.repeat,
                        timeout_s=args.timeout, array_bytes=args.array_bytes, timeline=trace is not None,
                        late_us=args.late_us)
    write_chunks(result, chunks, "native")
    if trace is not None:
        from ..timeline import write_trace

        write_trace(trace, result, kind="native")
    if args.json:
        print(json.dumps({**result.to_dict(), **native.summary(result)}))
    else:
        print(native.report(result))
    return 0


def _native_record(args) -> int:
    from ..native import kernels, record

    out = record.check_out(args.out)
    record.check_counts(args.block, args.samples)
    options = {key: getattr(args, key) for key in ("matrix", "iters", "graph", "source", "n", "array_bytes",
                                                   "pattern", "repeat", "seed")}
    kernel = kernels.from_options(args.kernel, options)
    loops, meta = record.record(kernel, args.block, args.samples, args.timeout, args.data)
    record.write(out, loops, meta)
    total = sum(float(loop.sum()) for loop in loops)
    print(f"{kernel.spec}: {len(loops)} loop(s), {sum(kernel.loop_sizes)} iterations in blocks of {meta['block']}, "
          f"{total / 1e6:.3f} ms recorded -> {out}")
    return 0


def _native_schedulers(text: str | None) -> list[str] | None:
    """The schedulers of --schedulers, each one native mode runs (checked before anything is measured)."""
    from ..analysis.advice import split_schedulers
    from ..native import native_config
    from ..schedulers import get_scheduler

    if text is None:
        return None
    names = split_schedulers(text)
    for name in names:
        native_config(get_scheduler(name))
    return names


def _native_validate_trace(args) -> int:
    from ..native.validate import check_machine_file, format_trace_validation, validate_trace

    if args.locality or args.points is not None or args.no_openmp or args.n is not None or args.sweeps is not None:
        raise SimschedError("--workload validates a recorded trace; --locality, --points, --no-openmp, --n and "
                            "--sweeps belong to the other validations")
    table = validate_trace(args.workload, check_machine_file(args.machine), args.threads, args.repeat,
                           _native_schedulers(args.schedulers), progress=_progress_line)
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(format_trace_validation(table))
    return 0


def _native_validate_locality(args) -> int:
    from ..native.validate import (LOCALITY_N, LOCALITY_SWEEPS, check_machine_file, format_locality,
                                  locality_errors, validate_locality)

    if args.points is not None or args.no_openmp:
        raise SimschedError("--points and --no-openmp belong to the uforall validation, not --locality")
    table = validate_locality(check_machine_file(args.machine), args.threads,
                              LOCALITY_N if args.n is None else args.n, args.repeat,
                              LOCALITY_SWEEPS if args.sweeps is None else args.sweeps,
                              progress=_progress_line)
    if args.json:
        print(json.dumps({"rows": json.loads(table.to_json(orient="records")),
                          "median_abs_error": locality_errors(table)}))
    else:
        print(format_locality(table))
    return 0


def _native_replay(args) -> int:
    import numpy as np

    from .. import native
    from ..chunkfile import read_chunks, replay_seed
    from ..workloads import get_workload

    out = output_path(args.out, "--out")
    chunks, meta = read_chunks(args.result)
    seed = replay_seed(meta, args.result, get_workload(args.workload), args.seed)
    if meta is None:
        print(f"simsched: {args.result} records no workload or seed (an older chunk table): replaying it "
              f"with seed {seed} unchecked", file=sys.stderr)
    measured, table = native.replay(chunks, args.workload, seed=seed, timeout_s=args.timeout)
    if out is not None:
        from ..output import write_whole

        write_whole(out, lambda partial: table.to_csv(partial, index=False), "--out")
    error = (table["measured_ns"] - table["simulated_ns"]).abs() / table["simulated_ns"].where(
        table["simulated_ns"] > 0)
    figures = {"chunks": int(len(table)), "threads": measured.threads,
               "simulated_ns": float(table["simulated_ns"].sum()), "measured_ns": float(table["measured_ns"].sum()),
               "simulated_makespan_ns": float(chunks["end"].max()),
               "measured_makespan_ns": measured.makespan_ns,
               "median_abs_chunk_error": float(np.nanmedian(error)) if error.notna().any() else None}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"replayed {figures['chunks']} chunks on {figures['threads']} thread(s)")
        print(f"  chunk time   simulated {figures['simulated_ns'] / 1e3:12.3f} us   "
              f"measured {figures['measured_ns'] / 1e3:12.3f} us")
        print(f"  makespan     simulated {figures['simulated_makespan_ns'] / 1e3:12.3f} us   "
              f"measured {figures['measured_makespan_ns'] / 1e3:12.3f} us")
        if figures["median_abs_chunk_error"] is not None:
            print(f"  median |measured - simulated| / simulated per chunk: {figures['median_abs_chunk_error']:.3f}")
    return 0


def cmd_record(args) -> int:
    import tempfile

    from ..host import HOST_MACHINE_FILE
    from ..native.record import check_out
    from ..native.program_validation import (DEFAULT_SCHEDULES, check_validation, format_validation,
                                            split_schedules, validate_program)
    from ..native.user_program import record_program, write_recording

    command = args.program_args[1:] if args.program_args[:1] == ["--"] else args.program_args
    progress = _progress_line if sys.stderr.isatty() else None  # runs take seconds each: say which one is on
    if not args.validate and (args.trace or args.schedules or args.json):
        raise SimschedError("--trace, --schedules and --json go with --validate")
    if not args.validate and not args.out:
        raise SimschedError("record needs --out FILE (the trace to write), or --validate")
    if args.trace and args.out:
        raise SimschedError("--out and --trace: with --trace nothing is recorded, so there is nothing to write")
    out = check_out(args.out) if args.out else None
    schedules = split_schedules(args.schedules) if args.schedules is not None else list(DEFAULT_SCHEDULES)
    if args.validate and args.machine == HOST_MACHINE_FILE and not Path(args.machine).exists():
        raise SimschedError(f"--validate simulates on {HOST_MACHINE_FILE}, which is not here: measure this "
                            "machine first (simsched native calibrate), or name one with --machine")
    if args.validate:
        from ..machine import load_machine

        load_machine(args.machine)  # a bad machine is refused before the program runs
        check_validation(Path(args.trace) if args.trace else None, args.rounds)
    from ..signals import signals_interrupt

    # SIGTERM as SIGINT: the program's process group is killed and the scratch folders removed on the way out.
    with signals_interrupt(), tempfile.TemporaryDirectory(prefix="simsched-trace-") as folder:
        trace = Path(args.trace) if args.trace else None
        if trace is None:
            recording = record_program(command, args.threads, args.repeat, args.block, args.runtime,
                                       args.timeout, progress=progress)
            trace = out or Path(folder) / "recording.npz"  # .npz: no optional reader needed
            write_recording(trace, recording)
            meta = recording.meta
            print(f"recorded {len(recording.loops)} loop instance(s) of {meta['command_line']} on {meta['threads']} "
                  f"threads under OMP_SCHEDULE={meta['schedule']} ({meta['runtime']}); an empty chunk spans "
                  f"{meta['empty_chunk_ns']:.0f} ns in the recording (taken off every chunk), the tool adds "
                  f"{meta['tool_ns_per_chunk']:.0f} ns a chunk to the runtime's {meta['runtime_ns_per_chunk']:.0f}"
                  + (f"; wrote {trace}" if out else ""), file=sys.stderr if args.json else sys.stdout)
        if not args.validate:
            return 0
        report = validate_program(command, trace, args.machine, schedules, args.rounds, args.threads,
                                  args.runtime, args.timeout, progress=progress)
    print(json.dumps(report) if args.json else format_validation(report))
    return 0
