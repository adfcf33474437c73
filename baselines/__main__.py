"""``python -m baselines solve|export FILE ...``: run any registered solver, or write the MILP.

    python -m baselines solve --solver milp|milp-highs|cpsat|brute|dp|... FILE
        [--devices K] [--memory 8GiB] [--microbatches N] [--bandwidth 25GiB]
        [--time-limit S] [--threads N] [--no-dp] [--no-tp] [--no-ar]
        [--warm-start PLAN.json [--split sequences]] [--json]
    python -m baselines export FILE OUT.lp|OUT.mps [cluster and ablation flags]

``--json`` prints one object {"tps", "status", "bound", "time_s", "plan", ...}; tps and
bound are null when not finite. User errors exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence

from piper.cli import (
    ArgumentParser,
    UsageError,
    add_ablation_args,
    add_cluster_args,
    apply_cluster_args,
    options_from_args,
    run_main,
)
from piper.plan import load_plan, render_plan
from piper.problem import load_problem
from piper.result import SolverError

from . import get_solver, solver_names


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m baselines", description="Solve a Piper workload with any registered solver.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    so = sub.add_parser("solve", help="solve a workload with one solver")
    so.add_argument("file", help="workload JSON")
    so.add_argument("--solver", default="milp", help=f"one of: {', '.join(solver_names())} (default milp)")
    add_cluster_args(so)
    add_ablation_args(so)
    so.add_argument("--warm-start", metavar="PLAN.json", help="a plan to start from: milp/cpsat then search only for better plans, and prove it optimal if there is none")
    so.add_argument("--split", choices=("none", "sequences"), default="none",
                    help="milp/cpsat with --warm-start: split the proof search over the stages' option sequences "
                         "(one subproblem per sequence of (t, d); for small device counts, k <= 8 or so)")
    so.add_argument("--seed", type=int, default=0, help="solver random seed")
    so.add_argument("--verify", action="store_true", help="cpsat: re-prove an optimum with presolve off")
    so.add_argument("--log", action="store_true", help="show the solver's own log (on stdout; not with --json)")
    so.add_argument("--out", metavar="PLAN.json", help="write the plan here")
    so.add_argument("--json", action="store_true", help="print one JSON object")

    ex = sub.add_parser("export", help="write the MILP model (.lp or .mps)")
    ex.add_argument("file", help="workload JSON")
    ex.add_argument("out", help="output path, ending in .lp or .mps")
    add_cluster_args(ex)
    add_ablation_args(ex)
    return p


def _num(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def cmd_solve(args) -> int:
    try:
        info = get_solver(args.solver)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    problem = apply_cluster_args(load_problem(args.file), args)
    if args.log and args.json:
        raise UsageError("--log and --json do not mix (the log goes to stdout)")
    params: dict = {"msg": bool(args.log)}
    if args.verify:
        params["verify"] = True
    if args.split != "none":
        if info.name not in ("milp", "milp-highs", "cpsat"):
            raise UsageError(f"--split applies to milp, milp-highs and cpsat, not {info.name}")
        if not args.warm_start:
            raise UsageError("--split needs --warm-start (it splits the proof that no better plan exists)")
        params["split"] = args.split
    warm = load_plan(args.warm_start) if args.warm_start else None
    options = options_from_args(args, warm_start=warm, seed=args.seed, params=params)
    if info.max_nodes is not None and problem.n > info.max_nodes:
        raise SolverError(f"solver {info.name} handles at most {info.max_nodes} layers; this graph has {problem.n}")
    try:
        result = info(problem, options)
    except ImportError as exc:
        raise SolverError(f"solver {info.name} is not available here ({exc})") from None
    if args.out and result.plan is not None:
        result.plan.dump(args.out)
    if args.json:
        out = {
            "tps": _num(result.tps),
            "status": result.status.value,
            "bound": _num(result.bound),
            "time_s": result.time_s,
            "plan": None if result.plan is None else result.plan.to_dict(),
            "solver": result.solver,
            "objective": _num(result.objective) if result.objective is not None else None,
            "devices_used": result.devices_used,
            "stats": {k: v for k, v in result.stats.items() if isinstance(v, (int, float, str, bool, list)) or v is None},
            "message": result.message,
        }
        print(json.dumps(out))
        return 0
    if result.plan is not None:
        print(render_plan(problem, result.plan, result.score))
    tps = f"{result.tps:.10g}" if math.isfinite(result.tps) else "none (no plan)"
    bound = "inf" if math.isinf(result.bound) else f"{result.bound:.10g}"
    size = ""
    if "variables" in result.stats:
        size = f", model {result.stats['variables']} variables / {result.stats.get('constraints', '?')} constraints"
    print(f"solver {result.solver}: status {result.status.value}, TPS {tps}, bound {bound}, "
          f"time {result.time_s:.3f} s{size}")
    if result.message:
        print(f"note: {result.message}")
    return 0


def cmd_export(args) -> int:
    from .milp import write_lp, write_mps

    problem = apply_cluster_args(load_problem(args.file), args)
    options = options_from_args(args)
    if args.out.lower().endswith(".lp"):
        write_lp(problem, options, args.out)
    elif args.out.lower().endswith(".mps"):
        write_mps(problem, options, args.out)
    else:
        raise UsageError(f"output {args.out!r} must end in .lp or .mps")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"solve": cmd_solve, "export": cmd_export}[args.command](args)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot write {getattr(exc, 'filename', '') or 'output'}: {exc.strerror or exc}") from None


if __name__ == "__main__":
    sys.exit(run_main(main, prog="baselines"))
