"""The command line of ``python -m experiments.paper`` (its flags are in the package docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from experiments import paper  # its docstring describes the command
from experiments.lib import flags
from experiments.paper.driver import EXPERIMENTS, run_experiment
from experiments.paper.runs import Config, hard_timeout
from piper.cli.common import ArgumentParser, run_main
from piper.core.errors import UsageError
from piper.solvers.execution import WorkerPool, add_backend_args, execution_options

PROG = "python -m experiments.paper"


def build_parser() -> ArgumentParser:
    ap = flags.make_parser(PROG, paper.__doc__)
    ap.add_argument("name", choices=[*EXPERIMENTS, "all"], metavar="NAME",
                    help=f"the experiment: {', '.join(EXPERIMENTS)} or all")
    ap.add_argument("--quick", action="store_true", help="a small slice, seconds (what CI runs)")
    ap.add_argument("--knapsack", choices=("greedy", "exact"), default="greedy",
                    help="the DP's per-stage knapsack (default greedy: the paper's numbers)")
    flags.add_out(ap, Config.out, "NAME.csv and NAME.png per experiment")
    flags.add_time_limit(ap, Config.time_limit_s, "one DP run")
    ap.add_argument("--no-isolate", action="store_true",
                    help="run DP solves in this process (no hard kill past the time limit)")
    add_backend_args(ap)
    flags.add_quiet(ap)
    flags.add_jobs(ap, 1, "fig3 and the tables time every run")
    return ap


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.no_isolate and args.backend != "local":
        raise UsageError("--no-isolate runs the DP in this process: not with --backend ray")
    cfg = Config(out=flags.out_dir(args.out), quick=args.quick, knapsack=args.knapsack, time_limit_s=args.time_limit,
                 isolate=not args.no_isolate, progress=not args.quiet, backend=args.backend, address=args.address)
    execution = execution_options(args, hard_timeout(cfg), ("baselines",))
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    with WorkerPool(execution) as pool:
        for name in names:
            run_experiment(name, replace(cfg, pool=pool))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_main, argv, prog=PROG)
