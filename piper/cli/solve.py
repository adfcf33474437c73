"""The one ``solve`` command: ``python -m piper solve FILE --solver NAME [flags]``.

``python -m baselines solve`` is an alias that runs this same code (its default solver is
``milp``) and prints the same JSON. Every flag any solver takes is here; a flag that the
chosen solver does not use is an error naming the solvers that do (never silently
ignored).

``--json`` prints one object on stdout and nothing else: :meth:`piper.core.result.Result.to_dict`
(``null`` is +infinity: no plan, an OOM plan, a proven-infeasible bound). While a solver
runs, file descriptor 1 points at stderr, so native solver logs (CBC, HiGHS, CP-SAT) can
never reach stdout; they are shown only with ``--log``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from piper.cli.common import (
    PICTURE_FORMATS,
    add_ablation_args,
    add_cluster_args,
    add_objective_args,
    add_strict_arg,
    check_outputs,
    check_virtual_stages,
    did_you_mean,
    load_saved_plan,
    load_workload,
    options_from_args,
    positive_int,
    seed_arg,
    stdout_to_stderr,
    write_plan,
)
from piper.core.errors import PlanError, SolverError, UsageError
from piper.core.evaluate import evaluate
from piper.core.result import Result
from piper.core.stopping import Interrupted
from piper.render.table import render_plan
from piper.solvers.registry import SolverInfo, get_solver, solver_names, solvers_with_flag

__all__ = ["add_solve_parser", "add_solve_args", "cmd_solve"]


def add_solve_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("solve", help="find the best plan (Piper's DP by default; any registered solver)")
    add_solve_args(p, default_solver="dp")
    return p


def add_solve_args(parser: argparse.ArgumentParser, default_solver: str = "dp") -> None:
    parser.add_argument("file", help="workload JSON")
    add_cluster_args(parser)
    add_strict_arg(parser)
    add_ablation_args(parser)
    add_objective_args(parser)
    parser.add_argument("--solver", default=default_solver,
                        help=f"registered solver: dp, dp-greedy, milp, milp-highs, cpsat, brute, equi, aggregate "
                             f"(default {default_solver}; README.md, \"Solvers and checks\")")
    g = parser.add_argument_group("solver-specific flags (an error with a solver that does not use them)")
    g.add_argument("--knapsack", choices=("exact", "greedy"), default=None,
                   help="dp: the per-stage TMPC choice (exact = solver dp, greedy = dp-greedy)")
    g.add_argument("--max-ideals", type=positive_int, default=None, metavar="N",
                   help="dp: refuse graphs with more ideals (default 200000)")
    g.add_argument("--max-ideal-pairs", type=positive_int, default=None, metavar="N",
                   help="dp: refuse graphs with more ideal pairs (default 100000000; with --uniform, "
                        "the pairs summed over the (t, d) DPs, default 20000000)")
    g.add_argument("--linearize", action="store_true", help="dp: stages are segments of one topological order")
    curve = g.add_mutually_exclusive_group()
    curve.add_argument("--curve", action="store_true",
                       help="dp: best TPS for every device count 1..k (default: only when cheap)")
    curve.add_argument("--no-curve", action="store_true", help="dp: skip the best-TPS-per-device-count curve")
    g.add_argument("--warm-start", metavar="PLAN.json",
                   help="milp/cpsat: search only below this plan, and prove it optimal if there is nothing there")
    g.add_argument("--split", choices=("none", "sequences"), default="none",
                   help="milp/cpsat with --warm-start: split the proof over the stages' option sequences")
    g.add_argument("--split-backend", choices=("threads", "ray"), default=None,
                   help="milp/cpsat with --split sequences: run the sequences on threads of this process "
                        "(default) or as Ray tasks (pip install -e \".[ray]\")")
    g.add_argument("--ray-address", metavar="ADDRESS", default=None,
                   help="with --split-backend ray: the Ray cluster to join (default: RAY_ADDRESS, "
                        "else a local Ray instance)")
    g.add_argument("--verify", choices=("on", "off"), default=None,
                   help="milp: second proof of an optimal claim (default on); cpsat: re-prove with presolve off (default off)")
    g.add_argument("--seed", type=seed_arg, default=0, help="random seed of milp/cpsat (default 0; 0..2^31 - 1)")
    g.add_argument("--max-model-size", type=positive_int, default=None, metavar="NONZEROS",
                   help="milp/cpsat: refuse a model estimated to have more nonzeros (default 3000000)")
    parser.add_argument("--log", action="store_true", help="show the solver's own log (on stderr)")
    parser.add_argument("--out", metavar="PLAN.json",
                        help="write the plan here, with the workload hash and cluster it was made for (key madeFor)")
    parser.add_argument("--png", metavar="FILE.png",
                        help="also draw the plan into this PNG (as python -m piper show does)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (Result.to_dict) and nothing else")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")


def _require(flag: str, given: bool, info: SolverInfo) -> None:
    """A solver-specific flag given to a solver that does not declare it (``SolverInfo.flags``):
    an error naming the solvers that take it."""
    if given and flag.split(" / ")[0] not in info.flags:
        raise UsageError(f"{flag} applies to {', '.join(solvers_with_flag(flag.split(' / ')[0]))}, "
                         f"not to solver {info.name!r}")


def cmd_solve(args: argparse.Namespace, prog: str = "piper") -> int:
    try:
        info = get_solver("dp-greedy" if args.knapsack == "greedy" and args.solver == "dp" else args.solver)
    except KeyError as exc:
        raise UsageError(str(exc.args[0]) + did_you_mean(args.solver, solver_names())) from None
    name = info.name
    _require("--knapsack", args.knapsack is not None, info)
    if args.knapsack == "exact" and name == "dp-greedy":
        raise UsageError("--knapsack exact contradicts --solver dp-greedy")
    _require("--max-ideals", args.max_ideals is not None, info)
    _require("--max-ideal-pairs", args.max_ideal_pairs is not None, info)
    _require("--linearize", args.linearize, info)
    _require("--curve / --no-curve", args.curve or args.no_curve, info)
    _require("--warm-start", args.warm_start is not None, info)
    _require("--split", args.split != "none", info)
    _require("--verify", args.verify is not None, info)
    _require("--split-backend", args.split_backend is not None, info)
    _require("--ray-address", args.ray_address is not None, info)
    _require("--max-model-size", args.max_model_size is not None, info)
    if args.split != "none" and not args.warm_start:
        raise UsageError("--split needs --warm-start (it splits the proof that no better plan exists)")
    if args.split_backend is not None and args.split != "sequences":
        raise UsageError("--split-backend needs --split sequences")
    if args.ray_address is not None and args.split_backend != "ray":
        raise UsageError("--ray-address needs --split-backend ray")
    if args.quiet:
        from piper.dp.compile_clock import set_notice  # imports numba

        set_notice(None)
    # every output path, before any work: not an input, a format the writer has, writable
    check_outputs([("--out", args.out), ("--png", args.png)],
                  [("the workload", args.file), ("--warm-start", args.warm_start)],
                  formats={"--png": PICTURE_FORMATS})
    problem = load_workload(args.file, args, prog)
    if args.png:
        from piper.cli.show import check_picture_devices  # matplotlib only when drawing

        check_picture_devices(problem, "--png")
    check_virtual_stages(problem, args)
    # the flags checked above, as the solver's knobs (SolverInfo.params)
    params: dict[str, Any] = {}
    if "msg" in (info.params or {}):
        params["msg"] = bool(args.log)
    if args.verify is not None:
        params["verify"] = args.verify == "on"
    if args.split != "none":
        params["split"] = args.split
    if args.split_backend is not None:
        params["split_backend"] = args.split_backend
    if args.ray_address is not None:
        params["ray_address"] = args.ray_address
    if args.curve or args.no_curve:
        params["curve"] = bool(args.curve)
    if args.max_model_size is not None:
        params["max_model_size"] = args.max_model_size
    if args.max_ideal_pairs is not None:
        params["max_ideal_pairs"] = args.max_ideal_pairs
    overrides: dict[str, Any] = dict(progress=not args.quiet, seed=args.seed, params=params,
                                     linearize=args.linearize)
    if args.max_ideals is not None:
        overrides["max_ideals"] = args.max_ideals
    if args.warm_start:
        overrides["warm_start"] = warm = load_saved_plan(args.warm_start, problem, strict=bool(args.strict),
                                                         prog=prog, flag="--warm-start")
        # a plan that cannot be a warm start is refused here, not ignored by the solver
        try:
            warm_score = evaluate(problem, warm)
        except PlanError as exc:
            raise UsageError(f"--warm-start {args.warm_start}: not a valid plan for this workload: {exc}") from None
        if warm_score.oom:
            raise UsageError(f"--warm-start {args.warm_start}: the plan does not fit in memory on this workload "
                             "and cluster, so it cannot be a warm start")
    options = options_from_args(args, **overrides)
    if info.max_nodes is not None and problem.n > info.max_nodes:
        raise SolverError(f"solver {name} handles at most {info.max_nodes} layers; this graph has {problem.n}")
    try:
        with stdout_to_stderr():
            result = info(problem, options)
    except ImportError as exc:
        raise SolverError(f"solver {name} is not available here ({exc})") from None
    except Interrupted as exc:  # SIGINT / SIGTERM: keep the best plan found, then exit 130 / 143
        _keep_incumbent(exc, problem, args)
        raise
    note = str(result.stats.get("warm_start", ""))
    if args.warm_start and "ignored" in note:  # e.g. a stage (t, d) the options exclude
        print(f"{prog}: warning: --warm-start {args.warm_start}: {note}", file=sys.stderr)
    if args.out and result.plan is not None:
        write_plan(args.out, result.plan, problem)
    if args.png and result.plan is not None:
        from piper.cli.show import write_picture

        write_picture(problem, result.plan, args.png, flag="--png", score=result.score,
                      title=str(problem.extra.get("name") or Path(args.file).name))
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    _print_result(problem, result)
    for path in (args.out, args.png):
        if path and result.plan is None:
            print(f"{prog}: no plan written to {path}", file=sys.stderr)
    return 0


def _keep_incumbent(exc: Interrupted, problem: Any, args: argparse.Namespace) -> None:
    """An interrupted solve (docs/errors.md, "Interrupts"): write the solver's best plan so
    far to --out (and print it with --json), and say so in the one line that
    :func:`piper.cli.common.run_main` prints (``exc.note``)."""
    result = exc.result if isinstance(exc.result, Result) else None
    if result is None or result.plan is None:
        exc.note = "no plan found yet" + (f"; nothing written to {args.out}" if args.out else "")
        return
    value = f"TPS {result.tps:.10g}" if result.objective_kind == "tps" else f"batch time {result.batch_time:.10g}"
    what = f"best plan so far (status {result.status.value}, {value})"
    if args.out:
        try:
            write_plan(args.out, result.plan, problem)
        except UsageError as err:
            exc.note = f"{what} not written: {err}"
            return
        exc.note = f"{what} written to {args.out}"
    else:
        exc.note = f"{what}; give --out to keep it"
    if args.json:
        print(json.dumps(result.to_dict()))


def _print_result(problem: Any, result: Result) -> None:
    if result.plan is not None:
        print(render_plan(problem, result.plan, result.score))
    tps = f"{result.tps:.10g}" if math.isfinite(result.tps) else "none (no plan)"
    bound = "inf (proven infeasible)" if math.isinf(result.bound) else f"{result.bound:.10g}"
    tol = f" (tolerance {result.tolerance:.3g})" if result.tolerance else ""
    value = f"TPS {tps}"
    if result.objective_kind != "tps":
        batch = f"{result.batch_time:.10g}" if math.isfinite(result.batch_time) else "none (no plan)"
        value = f"objective {result.objective_kind}: batch time {batch} (TPS {tps})"
    print(f"solver {result.solver}: status {result.status.value}, {value}, bound {bound}{tol}, "
          f"devices used {result.devices_used if result.plan else 0} of {problem.devices}, time {result.time_s:.3f} s")
    if result.message:
        print(f"note: {result.message}")
