"""``python -m piper evaluate WORKLOAD.json PLAN.json``: score a plan with the one evaluator."""

from __future__ import annotations

import json
from typing import Any

from piper.cli.common import ArgumentParser, add_cluster_args, add_strict_arg, load_saved_plan, load_workload
from piper.core.evaluate import evaluate
from piper.render.table import render_plan

__all__ = ["add_evaluate_parser", "cmd_evaluate"]


def add_evaluate_parser(subparsers: Any) -> ArgumentParser:
    ev = subparsers.add_parser("evaluate", help="score a plan: TPS and per-stage breakdown")
    ev.add_argument("file", help="workload JSON")
    ev.add_argument("plan", help="plan JSON (reference output shape)")
    add_cluster_args(ev)
    add_strict_arg(ev, plan=True)
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    return ev


def cmd_evaluate(args) -> int:
    problem = load_workload(args.file, args)
    # a plan saved by the project records its workload and cluster (piper.io.provenance)
    plan = load_saved_plan(args.plan, problem, strict=bool(args.strict))
    score = evaluate(problem, plan)
    if args.json:
        print(json.dumps(score.to_dict()))
    else:
        print(render_plan(problem, plan, score))
    return 0
