"""``python -m baselines solve|export FILE ...``: run any registered solver, or write the MILP.

    python -m baselines solve --solver milp|milp-highs|cpsat|brute|dp|... FILE
        [--devices K] [--memory 8GiB] [--microbatches N] [--bandwidth 25GiB]
        [--time-limit S] [--threads N] [--no-dp] [--no-tp] [--no-ar]
        [--warm-start PLAN.json [--split sequences]] [--json]
    python -m baselines export FILE OUT.lp|OUT.mps [cluster and ablation flags]

``solve`` is ``python -m piper solve`` (:mod:`piper.cli.solve`, the same code and the same
JSON) with ``milp`` as its default solver. User errors exit with status 2 and one line on
stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from piper.cli.common import (
    ArgumentParser,
    add_ablation_args,
    add_cluster_args,
    apply_cluster_args,
    check_excluded_tmpcs,
    check_outputs,
    options_from_args,
    run_main,
)
from piper.cli.solve import add_solve_args
from piper.cli.solve import cmd_solve as run_solve
from piper.core.errors import UsageError
from piper.io.workload import load_problem


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m baselines", description="Solve a Piper workload with any registered solver.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    so = sub.add_parser("solve", help="solve a workload with one solver (the same command as python -m piper solve)")
    add_solve_args(so, default_solver="milp")

    ex = sub.add_parser("export", help="write the MILP model (.lp or .mps)")
    ex.add_argument("file", help="workload JSON")
    ex.add_argument("out", help="output path, ending in .lp or .mps")
    add_cluster_args(ex)
    add_ablation_args(ex)
    return p


def cmd_solve(args) -> int:
    return run_solve(args, prog="baselines")


def cmd_export(args) -> int:
    from baselines.milp.model import write_lp, write_mps

    check_outputs([("OUT", args.out)], [("FILE", args.file)], formats={"OUT": (".lp", ".mps")})
    problem = apply_cluster_args(load_problem(args.file), args)
    check_excluded_tmpcs([problem], args.exclude_tmpc)
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
