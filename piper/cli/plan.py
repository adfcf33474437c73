"""``python -m piper plan PRESET|config.json --gpu h100 --nodes 64 [...]``: from a model
config to the best plan in one command.

Builds the workload (:func:`~piper.frontend.workload.build_workload`), solves it with
Piper's DP (exact knapsack; ``--solver`` for another registered solver, ``--uniform`` for
plans with one (d, t) in every stage, as Megatron-LM and DeepSpeed run them) and prints
the plan with its predicted training speed, all from the one evaluator's score:

* batch time (seconds per iteration): ``Score.batch_time`` (docs/problem.md §2.4);
* tokens/s = global batch x sequence length / batch time;
* TFLOP/s per device = hardware FLOPs per iteration (with the recomputation the plan
  chose, counted per layer) / batch time / devices used;
* MFU = model FLOPs per iteration (no recomputation) / batch time / (devices used x peak
  FLOP/s), as in the PaLM paper's definition (Chowdhery et al. 2022, appendix B);
* memory per device (the fullest stage's) and the bottleneck stage.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from piper.cli.common import did_you_mean, seconds_arg, write_plan
from piper.cli.model import (
    add_model_arguments,
    check_model_outputs,
    model_from_args,
    write_workload,
)
from piper.core.errors import UsageError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.frontend.metrics import plan_metrics
from piper.frontend.workload import build_workload
from piper.io.workload import load_problem
from piper.render.table import render_plan

__all__ = ["add_plan_parser", "cmd_plan"]


def add_plan_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="from a model config to the best plan and its predicted throughput")
    add_model_arguments(p)
    g = p.add_argument_group("planning")
    g.add_argument("--solver", default="dp", help="registered solver (default dp: Piper's DP, exact knapsack)")
    g.add_argument("--uniform", action="store_true", help="every stage the same (d, t), as Megatron-LM and DeepSpeed require")
    g.add_argument("--time-limit", type=seconds_arg, metavar="S", help="solver time limit, seconds")
    g.add_argument("--plan-out", metavar="PLAN.json",
                   help="write the plan here, with the workload hash and cluster it was made for (key madeFor)")
    return p


def cmd_plan(args: argparse.Namespace) -> int:
    from piper.solvers.registry import get_solver, solver_names

    if args.list or not args.model:
        from piper.cli.model import cmd_model

        return cmd_model(args)
    check_model_outputs(args, [("--out", args.out), ("--plan-out", args.plan_out)])
    try:
        info = get_solver(args.solver)
    except KeyError as exc:
        raise UsageError(str(exc.args[0]) + did_you_mean(args.solver, solver_names())) from None
    cfg, hw, setup = model_from_args(args)
    workload = build_workload(cfg, hw, setup)
    problem = load_problem(workload, strict=True)
    if args.out:
        write_workload(args.out, workload)
    options = Options(uniform=bool(args.uniform), time_limit_s=args.time_limit, progress=not args.json)
    result = info(problem, options)
    if result.plan is None:
        msg = {"status": result.status.value, "message": result.message or "no plan fits"}
        if args.json:
            print(json.dumps({**msg, "plan": None}))
        else:
            print(f"no plan: {msg['message']} (status {msg['status']})")
        return 0
    if args.plan_out:
        write_plan(args.plan_out, result.plan, problem, "--plan-out")
    score = evaluate(problem, result.plan)
    metrics = plan_metrics(cfg, hw, setup, problem, result.plan, score)
    if args.json:
        print(json.dumps({"status": result.status.value, "solver": result.solver, **metrics,
                          "plan": result.plan.to_dict(), "time_s": result.time_s}))
        return 0
    print(render_plan(problem, result.plan, score))
    m = metrics
    print(f"model         {cfg.name}: {args.nodes} x {hw.devices_per_node} {hw.name}, global batch "
          f"{setup.global_batch} x {cfg.seq_length} tokens, micro-batch {cfg.micro_batch}")
    print(f"plan          {m['stages']} stages on {m['devices_used']} of {m['devices']} devices "
          f"({result.solver}, {result.status.value}, {result.time_s:.2f} s)")
    print(f"predicted     batch time {m['batch_time_s']:.4g} s, {m['tokens_per_s']:.4g} tokens/s, "
          f"{m['tflops_per_device']:.4g} TFLOP/s per device, MFU {100 * m['mfu']:.1f}%")
    print(f"memory        fullest stage {m['max_memory_per_device_bytes'] / 1e9:.2f} GB of "
          f"{m['memory_limit_bytes'] / 1e9:.2f} GB; bottleneck stage {m['bottleneck_stage']}")
    return 0
