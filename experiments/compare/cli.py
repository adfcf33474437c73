"""The command line of ``experiments.compare``: flags, instances and solvers chosen, the
run on a :class:`piper.solvers.execution.WorkerPool`, reports, exit status."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.compare.cross_checks import InstanceReport
from experiments.compare.plots import write_plots
from experiments.compare.report import (
    clear_outputs,
    render_summary,
    render_table,
    summarize,
    write_failed,
    write_reports,
)
from experiments.compare.runner import run_compare
from experiments.compare.solve import (
    RTOL,
    IsolatedRunner,
    TracedRunner,
    solve_in_process,
)
from experiments.lib.flags import dir_arg, out_dir
from experiments.lib.suites import (
    MAX_SUITE_INSTANCES,
    Instance,
    build_suite,
    is_suite,
    slice_problem,
    suite_count,
    suite_names,
    unique_names,
)
from piper.cli.common import (
    ArgumentParser,
    add_ablation_args,
    add_cluster_args,
    add_objective_args,
    apply_cluster_args,
    check_excluded_tmpcs,
    check_virtual_stages,
    did_you_mean,
    nonnegative_float,
    options_from_args,
    positive_int,
    run_main,
    seconds_or_zero_arg,
)
from piper.core.errors import PoolClosed, UsageError
from piper.io.workload import load_problem
from piper.solvers.execution import (
    Progress,
    WorkerPool,
    add_backend_args,
    execution_options,
)
from piper.solvers.registry import SOLVERS, SolverInfo, solver_names

__all__ = ["build_parser", "main", "cli", "DEFAULT_OUT", "DEFAULT_TIME_LIMIT"]

DEFAULT_OUT = Path("out/compare")
#: default per-solve time limit, seconds
DEFAULT_TIME_LIMIT = 10.0


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m experiments.compare",
        description="Run solvers on instances, score every plan with the evaluator, and check that they agree.",
        epilog=f"Default time limit: {DEFAULT_TIME_LIMIT:g} s per solve. "
        "Exit status: 0 all checks passed, 1 a check failed (the instance is written to OUT/failed/) or no instance was proven by an exact solver, "
        "2 usage error, 130 interrupted.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="workload JSON files (cluster overrides apply to these)")
    p.add_argument("--suite", action="append", default=[], metavar="NAME",
                   help=f"instance suite(s), comma-separated: {', '.join(suite_names())}, random:COUNT[:FIRST_SEED], real-magnitudes:COUNT[:FIRST[:MAXN]] "
                   f"(default: 'default' when no FILE is given; COUNT at most {MAX_SUITE_INSTANCES:,} in all)")  # fmt: skip
    p.add_argument("--solvers", action="append", default=[], metavar="A,B",
                   help="solvers to run, comma-separated (default: every registered one)")  # fmt: skip
    p.add_argument("--slice", type=positive_int, metavar="L", help="keep only the first L layers of each FILE")
    p.add_argument("--jobs", "-j", type=positive_int, default=None, metavar="N",
                   help="instances in parallel (N solver processes or Ray actors; default 1, "
                   "with --backend ray every CPU of the cluster)")  # fmt: skip
    p.add_argument("--out", "-o", type=dir_arg, default=DEFAULT_OUT, metavar="DIR",
                   help=f"report directory ({DEFAULT_OUT}); a run first removes what an earlier run wrote there "
                   "(report.json, report.csv, times.png, gaps.png, failed/*.json), nothing else")  # fmt: skip
    p.add_argument("--hard-timeout", type=seconds_or_zero_arg, metavar="SECONDS",
                   help="kill a solve (run in a worker process) after SECONDS; 0 = no watchdog (and, with "
                   "one local job, solves in this process) (default: 2 x the time limit + 30)")  # fmt: skip
    add_backend_args(p)
    p.add_argument("--rtol", type=nonnegative_float, default=RTOL, help=f"relative tolerance on TPS checks ({RTOL:g})")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", "-q", "--no-progress", dest="quiet", action="store_true",
                   help="no progress lines on stderr (--no-progress: the old name)")
    p.add_argument("--list", action="store_true", help="list suites and solvers, then exit")
    add_cluster_args(p)
    add_ablation_args(p)
    add_objective_args(p)
    p.set_defaults(time_limit=DEFAULT_TIME_LIMIT)
    return p


def _split(values: Sequence[str], flag: str = "") -> list[str]:
    """The comma-separated names of a repeatable flag; an empty name (``--solvers ''``, ``a,,b``)
    is a :class:`UsageError` naming ``flag`` (it would have meant "the default")."""
    out = [x.strip() for v in values for x in v.split(",")]
    if flag and "" in out:
        given = next(v for v in values if "" in (x.strip() for x in v.split(",")))
        raise UsageError(f"{flag} {given!r}: an empty name (give names, comma-separated, or leave the flag out "
                         "for the default)")
    return [x for x in out if x]


def select_solvers(names: Sequence[str]) -> list[SolverInfo]:
    if not names:
        return [SOLVERS[name] for name in solver_names()]
    out = []
    for name in dict.fromkeys(names):
        if name not in solver_names():
            raise UsageError(f"unknown solver {name!r}{did_you_mean(name, solver_names())}; known: {', '.join(SOLVERS)}")
        out.append(SOLVERS[name])
    return out


def select_instances(args: argparse.Namespace) -> list[Instance]:
    suites = _split(args.suite, "--suite") or ([] if args.files else ["default"])
    instances: list[Instance] = []
    for name in suites:
        if not is_suite(name):
            raise UsageError(f"unknown suite {name!r}{did_you_mean(name.split(':')[0], suite_names())}; known: {', '.join(suite_names())}, random:COUNT[:FIRST_SEED], real-magnitudes:COUNT[:FIRST[:MAXN]] (MAXN 6..24)")
    counted = [(name, suite_count(name)) for name in suites]  # random:COUNT, real-magnitudes:COUNT
    total = sum(c for _, c in counted if c)
    if total > MAX_SUITE_INSTANCES:
        named = ",".join(name for name, c in counted if c)
        raise UsageError(f"--suite {named}: {total:,} instances, more than the {MAX_SUITE_INSTANCES:,} one run may "
                         "build (each is built before the first solve); split the sweep into runs with FIRST "
                         f"seeds {MAX_SUITE_INSTANCES:,} apart (random:{MAX_SUITE_INSTANCES}:FIRST)")
    for name in suites:
        instances += build_suite(name)
    cluster_given = any(getattr(args, k) is not None for k in ("devices", "memory", "microbatches", "bandwidth"))
    if (cluster_given or args.slice) and not args.files:
        raise UsageError("--devices/--memory/--microbatches/--bandwidth/--slice apply to FILE arguments; none given")
    for path in args.files:
        problem = load_problem(path)
        name = Path(path).stem
        if args.slice:
            problem = slice_problem(problem, args.slice)
            name = f"{name}[:{args.slice}]"
        problem = apply_cluster_args(problem, args)
        try:
            check_virtual_stages(problem, args)  # as solve does: each chunk of an interleaved plan holds a layer
        except UsageError as exc:
            raise UsageError(f"{path}: {exc}" if len(args.files) > 1 else str(exc)) from None
        instances.append(Instance(name, problem, "file", str(path)))
    return unique_names(instances)


def _list_text() -> str:
    from experiments.lib.suites import SUITES

    lines = ["suites:"]
    lines += [f"  {name:<13} {desc}" for name, (desc, _) in SUITES.items()]
    lines.append(f"  {'random:C[:F]':<13} random_problem(seed) for C seeds from F (e.g. random:320)")
    lines.append("solvers:")
    for info in [SOLVERS[name] for name in solver_names()]:
        extra = f" (<= {info.max_nodes} layers)" if info.max_nodes else ""
        lines.append(f"  {info.name:<13} {'exact' if info.exact else 'heuristic':<9} {info.description}{extra}")
    return "\n".join(lines)


def _rerun_flags(args: argparse.Namespace, solvers: Sequence[SolverInfo]) -> list[str]:
    """The flags that make a re-run of a dumped instance solve the same problem."""
    flags = []
    if args.solvers:
        flags += ["--solvers", ",".join(s.name for s in solvers)]
    if args.time_limit != DEFAULT_TIME_LIMIT:
        flags += ["--time-limit", f"{args.time_limit:g}"]
    flags += [flag for flag, on in (("--no-dp", args.no_dp), ("--no-tp", args.no_tp), ("--no-ar", args.no_ar)) if on]
    for tmpc in args.exclude_tmpc:
        flags += ["--exclude-tmpc", repr(tmpc) if " " in tmpc else tmpc]
    return flags


def _hard_timeout(given: float | None, time_limit: float | None) -> float | None:
    if given is not None:
        if given < 0:
            raise UsageError(f"--hard-timeout must be >= 0 seconds, got {given:g}")
        return given or None
    return None if time_limit is None else 2 * time_limit + 30


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in ("ortools", "PuLP", "highspy", "numpy", "numba"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print(_list_text())
        return 0
    solvers = select_solvers(_split(args.solvers, "--solvers"))
    instances = select_instances(args)
    check_excluded_tmpcs([inst.problem for inst in instances], args.exclude_tmpc)
    options = options_from_args(args)
    hard_timeout = _hard_timeout(args.hard_timeout, options.time_limit_s)
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the report directory {str(out)!r}: {exc.strerror or exc}") from None
    out_dir(out)  # writable, or one line
    clear_outputs(out, keep=args.files)
    execution = execution_options(args, hard_timeout, ["baselines", *_importable_modules(solvers)])
    meta = {
        "command": ["python", "-m", "experiments.compare", *(sys.argv[1:] if argv is None else argv)],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "solvers": [s.name for s in solvers],
        "time_limit_s": options.time_limit_s,
        "threads": options.threads,
        "data_parallel": options.data_parallel,
        "tensor_parallel": options.tensor_parallel,
        "exclude_tmpcs": sorted(options.exclude_tmpcs),
        "jobs": execution.jobs,
        "backend": execution.backend,
        "rtol": args.rtol,
        "hard_timeout_s": hard_timeout,
        "instances": len(instances),
        "versions": _versions(),
    }
    by_name = {inst.name: inst for inst in instances}
    progress = Progress(len(instances), sys.stderr, enabled=not args.quiet)
    start = time.perf_counter()
    finished: list[InstanceReport] = []

    def on_report(report: InstanceReport, reports: list[InstanceReport]) -> None:
        finished[:] = reports
        progress.update(report.name, report.verdict, "ok" if report.ok else "FAIL")
        write_reports(out, reports, {**meta, "complete": False, "wall_s": time.perf_counter() - start})

    pool = WorkerPool(execution)
    runner = TracedRunner(solve_in_process if execution.in_process else IsolatedRunner(pool), progress)
    try:
        reports = run_compare(instances, solvers, options, rtol=args.rtol, pool=pool, runner=runner,
                              on_report=on_report)
    except (KeyboardInterrupt, PoolClosed):
        pool.close()
        progress.close()
        meta.update(complete=False, interrupted=True, wall_s=time.perf_counter() - start)
        write_reports(out, finished, meta)
        write_failed(out, finished, by_name)
        print(f"interrupted: {len(finished)}/{len(instances)} instances kept in {out}", file=sys.stderr)
        raise KeyboardInterrupt from None
    finally:
        pool.close()
    progress.close()
    wall = time.perf_counter() - start
    write_reports(out, reports, {**meta, "complete": True, "wall_s": wall})
    if not args.no_plots:
        write_plots(out, reports)
    failed = write_failed(out, reports, by_name)
    print(render_table(reports))
    print()
    print(render_summary(summarize(reports), wall))
    print(f"reports: {out / 'report.json'}, {out / 'report.csv'}")
    if failed:
        target = str(failed[0]) if len(failed) == 1 else str(out / "failed" / "NAME.json")
        hint = " ".join(["python -m experiments.compare", target, *_rerun_flags(args, solvers)])
        print(f"{len(failed)} failed instance(s) written to {out / 'failed'}; re-run one alone: {hint}", file=sys.stderr)
    if not all(r.ok for r in reports):
        return 1
    if reports and not any(any(run.proof for run in r.runs) for r in reports):
        # nothing was checked: no exact solver proved any instance (e.g. --solvers dp-greedy,equi)
        print("compare: no instance was proven by an exact solver, so nothing was cross-checked", file=sys.stderr)
        return 1
    return 0


def _importable_modules(solvers: Sequence[SolverInfo]) -> list[str]:
    """The solvers' modules that import here (worth preloading in worker processes)."""
    out = []
    for info in solvers:
        try:
            info.load()
        except Exception:
            continue
        out.append(info.target.split(":")[0])
    return list(dict.fromkeys(out))


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cli(argv: Sequence[str] | None = None) -> int:
    """The command: SIGTERM stops it like Ctrl-C (reports kept, solver processes killed)."""
    if threading.current_thread() is not threading.main_thread():
        return run_main(main, argv, prog="python -m experiments.compare")
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return run_main(main, argv, prog="python -m experiments.compare")
    finally:
        signal.signal(signal.SIGTERM, previous)
