"""``python -m piper info|evaluate|solve|model|plan|export|show ...``: the planner's command line.

User errors (bad file, bad JSON, invalid problem or plan, bad flag) exit with
status 2 and a one-line message on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from .cli import (
    ArgumentParser,
    add_cluster_args,
    add_strict_arg,
    load_workload,
    positive_int,
    run_main,
)
from .evaluate import evaluate
from .plan import load_plan, render_plan
from .problem import Problem
from .provenance import check_plan_record
from .solve_cmd import add_solve_args
from .solve_cmd import cmd_solve as run_solve


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m piper", description="Piper: plan data / pipeline / tensor parallelism for DNN training.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    info = sub.add_parser("info", help="describe a workload: layers, edges, degrees, TMPCs, ideals, cluster")
    info.add_argument("file", help="workload JSON")
    add_cluster_args(info)
    add_strict_arg(info)
    info.add_argument("--max-ideals", type=positive_int, default=200_000, metavar="N", help="stop counting ideals past N")
    info.add_argument("--json", action="store_true", help="print one JSON object")

    ev = sub.add_parser("evaluate", help="score a plan: TPS and per-stage breakdown")
    ev.add_argument("file", help="workload JSON")
    ev.add_argument("plan", help="plan JSON (reference output shape)")
    add_cluster_args(ev)
    add_strict_arg(ev, plan=True)
    ev.add_argument("--json", action="store_true", help="print one JSON object")

    so = sub.add_parser("solve", help="find the best plan (Piper's DP by default; any registered solver)")
    add_solve_args(so, default_solver="dp")
    from .frontend.cli import add_model_parser
    from .frontend.plan_cmd import add_plan_parser

    add_model_parser(sub)
    add_plan_parser(sub)
    from .show_cmd import add_show_parser

    add_show_parser(sub)
    from .export_cmd import add_export_parser

    add_export_parser(sub)
    return p


def _load(args) -> Problem:
    """The workload with the cluster flags applied; warnings (unknown keys, ...) one line each on
    stderr, or with --strict an unknown key is an error (exit 2)."""
    return load_workload(args.file, args)


def cmd_info(args) -> int:
    problem = _load(args)
    tmpc_ids = sorted({c.id for nd in problem.nodes for lst in nd.tmpcs.values() for c in lst})
    from .ideals import count_ideals  # here, not at the top: it loads numba

    ideals = count_ideals(problem, args.max_ideals)
    names: dict[str, int] = {}
    for nd in problem.nodes:
        key = nd.name or "(unnamed)"
        names[key] = names.get(key, 0) + 1
    info = {
        "layers": problem.n,
        "edges": len(problem.edges),
        "degrees": list(problem.degrees),
        "tmpc_ids": tmpc_ids,
        "max_tmpcs_per_degree": max(len(lst) for nd in problem.nodes for lst in nd.tmpcs.values()),
        "ideals": ideals,
        "layer_kinds": names,
        "devices": problem.devices,
        "memory_per_device_bytes": problem.memory_per_device,
        "microbatches": problem.microbatches,
        "bandwidth_bytes_per_s": problem.bandwidth,
        "devices_per_node": problem.node_size,
        "intra_node_bandwidth_bytes_per_s": problem.bandwidth_intra,
        "allreduce_factor": problem.resync_factor,
        "version2_features": list(problem.version2_features()),
        "unknown_keys": list(problem.unknown_keys),
    }
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"workload      {args.file}")
    kinds = sorted(names.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{n}x {k}" for k, n in kinds[:4])
    if len(kinds) > 4:
        shown += f", {len(kinds) - 4} other names"
    print(f"layers        {problem.n} ({shown})")
    print(f"edges         {len(problem.edges)}")
    print(f"degrees t     {', '.join(map(str, problem.degrees))}")
    print(f"TMPC ids      {', '.join(tmpc_ids)} (at most {info['max_tmpcs_per_degree']} per layer and degree)")
    print(f"ideals        {ideals if ideals is not None else f'more than {args.max_ideals}'}")
    print(
        f"cluster       k={problem.devices} devices, M={problem.memory_per_device:.6g} bytes "
        f"({problem.memory_per_device / 2**30:.4g} GiB), N={problem.microbatches} microbatches, "
        f"B={problem.bandwidth:.6g} bytes/s ({problem.bandwidth / 2**30:.4g} GiB/s)"
    )
    print(
        f"cluster shape {problem.devices} devices in nodes of {problem.node_size}, network {problem.bandwidth:.6g} bytes/s, "
        f"intra-node {problem.bandwidth_intra:.6g} bytes/s, all-reduce factor {problem.resync_factor:.6g}"
    )
    features = problem.version2_feature_notes()
    print(f"version 2     {'; '.join(f'{k} ({v})' for k, v in features.items()) if features else 'none (a version-1 instance)'}")
    return 0


def cmd_evaluate(args) -> int:
    problem = _load(args)
    plan = load_plan(args.plan)
    # a plan saved by the project records its workload and cluster (piper.provenance)
    for line in check_plan_record(args.plan, problem, strict=bool(args.strict)):
        print(f"piper: warning: {line}", file=sys.stderr)
    score = evaluate(problem, plan)
    if args.json:
        print(json.dumps(score.to_dict()))
    else:
        print(render_plan(problem, plan, score))
    return 0


def cmd_solve(args) -> int:
    return run_solve(args, prog="piper")


def cmd_plan(args) -> int:
    from .frontend.plan_cmd import cmd_plan as run

    return run(args)


def cmd_model(args) -> int:
    from .frontend.cli import cmd_model as run

    return run(args)


def cmd_export(args) -> int:
    from .export_cmd import cmd_export as run

    return run(args)


def cmd_show(args) -> int:
    from .show_cmd import cmd_show as run

    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return {"info": cmd_info, "evaluate": cmd_evaluate, "solve": cmd_solve, "model": cmd_model, "plan": cmd_plan,
            "export": cmd_export, "show": cmd_show}[args.command](args)


if __name__ == "__main__":
    sys.exit(run_main(main, prog="piper"))
