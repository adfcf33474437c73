"""``python -m piper plan PRESET|config.json --gpu h100 --nodes 64 [...]``: from a model
config to the best plan in one command.

Searches the context-parallel size and the micro-batch size (:mod:`piper.frontend.planner`: one
workload per pair, unless ``--cp`` / ``--micro-batch`` fix them; ``--max-cp`` bounds c) and, for
each, solves with Piper's DP (exact knapsack; ``--solver``
for another registered solver) the plan a framework runs (one (d, t) in every stage, as
Megatron-LM, DeepSpeed and torchtitan need) and Piper's free plan. It minimizes the batch time
by default (``--objective``; docs/problem.md §9: one iteration, with the pipeline's fill and
drain, is what a user waits for), over 1F1B and interleaved schedules up to
``--max-virtual-stages`` (default 8). It prints the runnable plan with its predicted training
speed and, next to it, the free plan and its gain; ``--free`` makes the free plan the one
``--plan-out`` writes, ``--uniform`` skips the free search. An interleaved winner is replayed
pass by pass (:mod:`piper.frontend.schedule_check`); when its pass order holds more than the
memory limit or takes over 5% longer than the formula, its workload is solved again with fewer
virtual stages (down to 1F1B) until a plan passes; when a rejected plan was better by the formulas,
the status is "feasible" with the rejected solves' bound (docs/frontend.md, "The schedule check"). Sequence parallelism is one switch for the whole model
(``--sequence-parallel``, on by default), as the frameworks have it; a ``megatron`` line says how
Megatron-LM would run the plan when its per-layer recomputation has no Megatron setting
(docs/frontend.md, "What the frameworks can run"). All numbers from the one evaluator's score:

* batch time (seconds per iteration): ``Score.batch_time`` (docs/problem.md §2.4, §9);
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
import math
import re
import sys
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from piper.cli.common import (
    add_objective_args,
    did_you_mean,
    positive_int,
    seconds_or_zero_arg,
    write_plan,
)
from piper.cli.model import (
    add_context_scheme_arguments,
    add_model_arguments,
    check_model_outputs,
    model_from_args,
    write_workload,
)
from piper.core.errors import UsageError
from piper.core.evaluate import evaluate
from piper.core.options import BATCH_TIME, TPS, Options
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.core.result import Status
from piper.frontend.caveats import prediction_caveats, runner_up_form_check
from piper.frontend.context import (
    ANY_SCHEMES,
    SEARCH_SCHEMES,
    describe_comm_types,
    hierarchical_a2a_sizes,
    layer_comm_types,
)
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.metrics import memory_breakdown_text, plan_metrics
from piper.frontend.moe_costs import moe_micro_batch_caveat
from piper.frontend.planner import (
    ONE_RECOMPUTE_SETTING,
    Candidate,
    PlanSearch,
    as_scored,
    context_parallel_choices,
    micro_batch_choices,
    other_moe_form_s,
    search_plans,
    takes_iteration_keys,
    with_optimizer_step_s,
)
from piper.frontend.recompute import check_recompute_modules
from piper.frontend.schedule_check import ScheduleCheck, check_schedule
from piper.frontend.window_check import needs_window_check, window_check
from piper.frontend.workload import TrainingSetup, check_recompute_modules_for, workload_nodes
from piper.render.table import render_plan

__all__ = ["add_plan_parser", "cmd_plan"]

#: the most virtual stages the plan command searches unless asked
DEFAULT_MAX_VIRTUAL_STAGES = 8


def add_plan_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="from a model config to the best plan and its predicted throughput")
    add_model_arguments(p, recompute=None)  # plan searches the recomputation (none, selective, full)
    # refused with a line saying why (model's and score's --recompute would be silently moot here)
    p.add_argument("--recompute", dest="recompute_given", metavar="KIND", help=argparse.SUPPRESS)
    g = p.add_argument_group("planning")
    g.add_argument("--solver", default="dp", help="registered solver (default dp: Piper's DP, exact knapsack)")
    g.add_argument("--uniform", action="store_true",
                   help="only the plan the frameworks run (one (d, t) in every stage); skip Piper's free plan")
    g.add_argument("--free", action="store_true", help="write Piper's free plan with --plan-out (default: the runnable one)")
    g.add_argument("--cp", type=positive_int, metavar="C",
                   help="fix the context-parallel size (default: searched, docs/frontend.md: 1, and for sequences "
                        "of 16k tokens or more the powers of two that leave >= 4k tokens per device)")
    g.add_argument("--max-cp", type=positive_int, metavar="C", help="search context-parallel sizes up to C only")
    add_context_scheme_arguments(g, plan=True)
    g.add_argument("--sequence-parallel", choices=SEQUENCE_PARALLEL_MODES, default="on",
                   help="at t > 1: 'on' (default) or 'off' for the whole model, as the frameworks' one switch "
                        "(Megatron-Core needs it on for MoE layers); 'per-layer' lets each layer choose (Piper's "
                        "workload; such a plan may not export)")
    g.add_argument("--recompute-per-layer", action="store_true",
                   help="let each transformer layer choose its recomputation (Piper's workload; the frameworks "
                        "have one setting for the model, which is what plan searches by default: none, selective "
                        "or full on every layer)")
    g.add_argument("--search-recompute-modules", nargs="+", metavar="LIST",
                   help="search what selective recomputation recomputes: each LIST is a comma-separated list of "
                        "Megatron-Core modules (e.g. core_attn core_attn,mlp core_attn,layernorm,mlp), each "
                        "searched as its own workloads; the answer is the best over them all (default: the one "
                        "list of --recompute-modules, core_attn)")
    g.add_argument("--overlap-grad-reduce", action="store_true",
                   help="the layout runs Megatron-LM's --overlap-grad-reduce: the search prices the gradient reduce "
                        "hidden behind the last micro-batch's backward pass (docs/problem.md §10)")
    g.add_argument("--overlap-param-gather", action="store_true",
                   help="the layout runs --overlap-param-gather: the weight all-gather hidden behind the first "
                        "micro-batch's forward pass")
    g.add_argument("--time-limit", type=seconds_or_zero_arg, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   help=f"time limit of the whole command's search, seconds (default {DEFAULT_TIME_LIMIT_S:g}: the "
                        "free search of a thousand devices can take hours; 0: none)")
    g.add_argument("--plan-out", metavar="PLAN.json",
                   help="write the plan here, with the workload hash and cluster it was made for (key madeFor)")
    add_objective_args(p, objective=BATCH_TIME, max_virtual_stages=DEFAULT_MAX_VIRTUAL_STAGES,
                       default_note=", or the workload's layers if fewer")
    # not given: the default, or the model's workload layers when fewer (cmd_plan); given above them: refused
    p.set_defaults(max_virtual_stages=None)
    return p


#: ``--sequence-parallel`` -> ``TrainingSetup.sequence_parallel``
SEQUENCE_PARALLEL_MODES = {"on": True, "off": False, "per-layer": None}

#: seconds ``plan`` searches for when ``--time-limit`` is not given: the uniform searches of the largest
#: presets take seconds (DeepSeek-V3 on 1,024 H100: 4 s), the free ones minutes to hours (Llama 3 70B
#: on 512 H100: 152 s; DeepSeek-V3 on 1,024: one of its 35 free searches did not end in 137 s); the
#: answer says when the limit cut a solve (status, "not proven exact")
DEFAULT_TIME_LIMIT_S = 300.0


def _candidate_summary(c: Candidate) -> dict[str, Any]:
    return {"context_parallel": c.context_parallel, "micro_batch": c.micro_batch, "expert_parallel": c.expert_parallel,
            "cp_comm_type": c.cp_comm_type, "cp_a2a_size": c.cp_a2a_size, "uniform": c.uniform,
            "status": c.result.status.value,
            "value": c.value if c.result.plan is not None else None, "time_s": c.result.time_s,
            "recompute": None if c.recompute is None else list(c.recompute),
            "recompute_modules": None if c.recompute_modules is None else list(c.recompute_modules),
            "degrees": None if c.degrees is None else list(c.degrees),
            "cutoff": c.cutoff, "pruned": c.pruned, "message": c.result.message}


def _search_summary(search: PlanSearch) -> dict[str, Any]:
    """How the search went: solves made, solves cut off by a bound and why (docs/frontend.md)."""
    return {"workloads": len({(c.context_parallel, c.cp_comm_type, c.cp_a2a_size, c.expert_parallel, c.micro_batch,
                               c.recompute, c.degrees, c.recompute_modules)
                              for c in search.candidates}),
            "solves": search.solves, "cut_solves": search.cut_solves,
            "pruned_by_bound": search.pruned,
            "resolved_without_cutoff": search.resolved,
            "rejected_by_schedule_check": len(search.rejected),
            "pruned_reason": "the solver proved, below the cutoff (the best value found before the solve), that "
                             "the workload holds no better plan (status unknown, bound >= cutoff)"}


def _as_megatron_runs(problem: Problem, plan: Plan, batch_time_s: float) -> dict[str, Any]:
    """How Megatron-LM would run the plan (``python -m piper export --to megatron``): ``exports``
    when it takes the plan as it is; when only the per-layer recomputation has no Megatron setting
    (export rule E6), the setting ``--fit-recompute`` picks with the evaluator's batch time of the
    plan with it (seconds) and its change; else the refusal (``reason``)."""
    from piper.core.errors import ExportError
    from piper.export import export_plan
    from piper.export.ends import move_ends
    from piper.export.fit import fit_setting

    out: dict[str, Any] = {"exports": False, "setting": None, "batch_time_s": None, "change": None, "reason": None}
    try:
        ex = export_plan(problem, plan, "megatron")
        emptied = [n for n in ex.notes if n.startswith("rule E2: stage")]
        if emptied:
            # a chunk of only the final norm: Megatron-LM runs it empty and the norm with the loss
            # (piper/export/common.py); the evaluator cannot score an empty chunk, so no new figure
            return {**out, "exports": True, "setting": "final norm run with the loss (its chunk empty)",
                    "reason": emptied[0]}
        moved = move_ends(problem, plan) if any(n.startswith("rule E2: moved") for n in ex.notes) else None
        if moved is None:
            return {**out, "exports": True, "batch_time_s": batch_time_s, "change": 0.0}
        # the end nodes one stage off their place move there (piper/export/ends.py), re-scored
        moved_s = evaluate(problem, moved[0]).batch_time
        return {**out, "exports": True, "setting": "end nodes moved into the first / last stage",
                "batch_time_s": moved_s, "change": moved_s / batch_time_s - 1.0, "reason": moved[1]}
    except ExportError as exc:
        if not exc.recompute:
            return {**out, "reason": str(exc)}
        refusal = exc
    try:
        fitted, setting, _ = fit_setting(problem, plan, "megatron", refusal, objective=BATCH_TIME)
    except ExportError as exc:
        return {**out, "reason": str(exc)}
    fitted_s = evaluate(problem, fitted).batch_time
    return {**out, "setting": setting, "batch_time_s": fitted_s, "change": fitted_s / batch_time_s - 1.0,
            "reason": str(refusal).split(";")[0]}


def _per_layer_optimum(cfg: Any, hw: Any, setup: Any, info: Any, options: Options, chosen: Candidate, check: bool,
                       started: float, micro_batches: tuple[int, ...], cps: tuple[int, ...],
                       schemes: tuple[str | None, ...] | None = None,
                       module_sets: tuple[tuple[str, ...], ...] | None = None) -> dict[str, Any]:
    """The best runnable plan with each layer choosing its recomputation (Piper's workload, which no
    framework runs), over the same c, e, micro-batch sizes, degrees and recompute-module lists as the
    answer's search: how much the one-setting rule costs. Solved in the time the command has left;
    ``batch_time_s`` None when that ran out."""
    left = None
    if options.time_limit_s is not None:
        left = options.time_limit_s - (time.perf_counter() - started)
        if left <= 0:
            return {"batch_time_s": None, "status": "unknown", "gain": None, "recompute": None,
                    "message": "no time left"}
    search = search_plans(cfg, hw, setup, info, replace(options, time_limit_s=left), micro_batches=micro_batches,
                          free=False, context_parallels=cps, prune=True, check_schedules=check, per_degree=True,
                          iteration_keys=takes_iteration_keys(info, setup), cp_comm_types=schemes,
                          module_sets=module_sets)
    best = search.runnable
    if best is None:
        return {"batch_time_s": None, "status": "/".join(sorted({c.result.status.value for c in search.candidates})),
                "gain": None, "recompute": None, "message": "no plan"}
    kinds = sorted({tid.split("+")[0] for st in best.result.plan.stages for v, tid in st.tmpcs.items()
                    if best.problem.node_by_id[v].kind == "transformer"})  # the layers' recomputation kinds
    # as for plan's own answer: optimal only when every solve was proven and no interleaved plan the
    # schedule check rejected beats it (that search then answers with the plans that pass)
    proven = (search.exact_over(True) and best.result.status == Status.OPTIMAL
              and _rejected_below(search, best, False) is None)
    return {"batch_time_s": best.result.score.batch_time, "status": "optimal" if proven else "feasible",
            "gain": chosen.result.score.batch_time / best.result.score.batch_time - 1.0, "recompute": kinds,
            "message": ""}


def _module_sets(args: argparse.Namespace, cfg: TransformerConfig) -> tuple[tuple[str, ...], ...] | None:
    """--search-recompute-modules: the lists, each checked as --recompute-modules is (known modules,
    each recomputing something in ``cfg``), in Megatron-Core's order; None without the flag. Refused:
    with --recompute-modules (one list or a search), an empty list, a list given twice."""
    given = args.search_recompute_modules
    if given is None:
        return None
    if args.recompute_modules is not None:
        raise UsageError("--recompute-modules fixes what selective recomputation recomputes, "
                         "--search-recompute-modules searches it: give one of them")
    out: list[tuple[str, ...]] = []
    for i, text in enumerate(given, start=1):
        where = f"--search-recompute-modules list {i} ({text!r})"
        names = [x.strip() for x in str(text).split(",")]
        if not all(names):
            raise UsageError(f"{where}: an empty module name (lists are comma-separated, e.g. core_attn,mlp)")
        modules = check_recompute_modules(names, where)
        check_recompute_modules_for(cfg, modules)
        if modules in out:
            raise UsageError(f"{where} is list {out.index(modules) + 1} again (the order of a list does not matter)")
        out.append(modules)
    return tuple(out)


def why_no_plan(messages: list[str]) -> str:
    """The solves' messages, one per kind: messages that differ in their figures only (the same layer
    short of memory by different amounts in each workload) are one, given with the figures of the
    first in text order and how many solves said it; "" when there are none. The search's list was
    one clause per distinct figure: 19 clauses, 2,792 characters, for GPT-OSS on 2 nodes."""
    groups: dict[str, list[str]] = {}
    for m in messages:
        if m:
            groups.setdefault(re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", m), []).append(m)
    out = []
    for key in sorted(groups):
        said = sorted(groups[key])
        out.append(said[0] if len(said) == 1 else f"{said[0]} ({len(said)} solves said this, with their own figures)"
                   if len(set(said)) > 1 else f"{said[0]} ({len(said)} solves)")
    return "; ".join(out)


def _side_status(setup: TrainingSetup, options: Options, search: PlanSearch, side: Candidate,
                 side_check: ScheduleCheck) -> str:
    """The status of the plan shown beside the answer (the free plan, or the runnable one under
    ``--free``) over its own kind's search, by the answer's rule: "optimal" only when its solve was,
    every solve of its kind was proven, no interleaved plan the schedule check rejected beats it, it
    passes the check itself and its kind's search priced what ``score`` prices (no window check is
    owed); its solve's own status otherwise, "optimal" lowered to "feasible"."""
    free = not side.uniform
    status = side.result.status
    if status == Status.OPTIMAL and not (search.exact_over(side.uniform) and side_check.ok
                                         and _rejected_below(search, side, free) is None
                                         and not needs_window_check(setup, options, search, free)):
        return Status.FEASIBLE.value
    return status.value


def _rejected_below(search: PlanSearch, chosen: Candidate | None, free: bool) -> dict[str, Any] | None:
    """The best interleaved plan the schedule check rejected whose value (by the formulas) is below
    the answer's, with the bound it leaves on every plan the options allow: the least of the answer's
    value and the rejected solves' bounds when every solve was exact, else None. None when no
    rejected plan beats the answer (the answer's status then stands as the solver proved it)."""
    if chosen is None:
        return None
    kind = [c for c in search.rejected if c.uniform == (not free)]
    below = [c for c in kind if c.rejected.value < chosen.value * (1 - 1e-9)]
    if not below:
        return None
    best = below[0]
    bound = min([chosen.value] + [c.rejected.bound for c in kind]) if search.exact_over(not free) else None
    return {"schedule": best.rejected.plan.schedule.to_dict(), "micro_batch": best.micro_batch,
            "context_parallel": best.context_parallel, "expert_parallel": best.expert_parallel,
            "status": best.rejected.status.value, "value": best.rejected.value, "bound": bound,
            "count": len(kind), **best.rejected_check.to_dict()}


def _answer_bound(search: PlanSearch, chosen: Candidate, free: bool) -> float | None:
    """A proven lower bound on every plan of the answer's kind over the workloads searched, in the
    objective's units: the least of each solve's own (its value when optimal, +inf when infeasible,
    its bound otherwise; a solve whose interleaved plan the schedule check rejected also the rejected
    solve's bound), at most the answer's value. None when some solve proved nothing (bound 0 or none:
    a time limit, the greedy knapsack)."""
    least = chosen.value
    for c in search.candidates:
        if c.uniform == free:
            continue
        r = c.result
        own = c.value if r.status == Status.OPTIMAL else math.inf if r.status == Status.INFEASIBLE else (r.bound or 0.0)
        if c.rejected is not None:
            own = min(own, c.rejected.bound or 0.0)
        least = min(least, own)
    return least if least > 0 and math.isfinite(least) else None


def _scored_value(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, cand: Candidate, objective: str) -> float:
    """``cand``'s plan as ``score`` prices it (its own overlap window, the optimizer step), in the
    objective's units; inf when it does not fit."""
    scored = as_scored(cfg, hw, setup, cand)
    return math.inf if scored is None else scored.tps if objective == TPS else scored.batch_time


def _best_as_scored(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, search: PlanSearch,
                    chosen: Candidate, free: bool, objective: str) -> Candidate:
    """The candidate of the answer's kind whose plan ``score`` prices best (ties: ``chosen``, then the
    search's order); ``chosen`` when none beats it."""
    best, best_value = chosen, _scored_value(cfg, hw, setup, chosen, objective)
    for c in search.candidates:
        if c is chosen or c.uniform == free or c.result.plan is None:
            continue
        value = _scored_value(cfg, hw, setup, c, objective)
        if value < best_value * (1 - 1e-12):
            best, best_value = c, value
    return best


def cmd_plan(args: argparse.Namespace) -> int:
    if args.recompute_given is not None:
        raise UsageError(f"--recompute {args.recompute_given}: plan searches the recomputation (none, selective, full, "
                         "one for the model); --recompute-per-layer lets each layer choose, --recompute-modules says "
                         "what selective recomputes")
    from piper.solvers.registry import get_solver, solver_names

    started = time.perf_counter()  # --time-limit counts from here

    if args.list or not args.model:
        from piper.cli.model import cmd_model

        return cmd_model(args)
    if args.free and args.uniform:
        raise UsageError("--free writes Piper's free plan, --uniform skips it: give one of them")
    check_model_outputs(args, [("--out", args.out), ("--plan-out", args.plan_out)])
    try:
        info = get_solver(args.solver)
    except KeyError as exc:
        raise UsageError(str(exc.args[0]) + did_you_mean(args.solver, solver_names())) from None
    sizes = args.hierarchical_context_parallel_sizes
    if sizes is not None:
        if args.cp is not None and sizes[0] * sizes[1] != args.cp:
            raise UsageError(f"--hierarchical-context-parallel-sizes {sizes[0]} {sizes[1]}: their product "
                             f"{sizes[0] * sizes[1]} must be --cp {args.cp}")
        if args.cp_comm_type == SEARCH_SCHEMES:
            raise UsageError("--hierarchical-context-parallel-sizes goes with --cp-comm-type a2a+p2p, not any")
        args.cp = sizes[0] * sizes[1]  # the sizes fix c
    if args.cp is not None and args.max_cp is not None:
        # --cp fixes c; --max-cp bounds a search that --cp switches off: one of them is ignored
        fixed = (f"--cp {args.cp}" if sizes is None else
                 f"--hierarchical-context-parallel-sizes {sizes[0]} {sizes[1]} (c = {args.cp})")
        raise UsageError(f"{fixed} fixes the context-parallel size, --max-cp {args.max_cp} bounds its search: "
                         "give one of them")
    if args.schedule == "1f1b" and args.max_virtual_stages is not None and args.max_virtual_stages > 1:
        raise UsageError(f"--max-virtual-stages {args.max_virtual_stages} bounds interleaved plans, which --schedule "
                         "1f1b excludes: give one of them")
    if args.cp_comm_type is not None and args.cp == 1:
        raise UsageError(f"--cp-comm-type {args.cp_comm_type} needs context parallelism: drop --cp 1")
    # --cp-comm-type any: the per-layer default (the ring, and the all-to-all on sliding-window layers)
    # and the three other schemes on every layer, one workload each at c > 1 (a2a+p2p: one per C1);
    # a2a+p2p without its sizes: one workload per C1
    schemes: tuple[str | None, ...] | None = None
    if args.cp_comm_type == SEARCH_SCHEMES:
        schemes = ANY_SCHEMES
    elif args.cp_comm_type == "a2a+p2p" and sizes is None:
        schemes = ("a2a+p2p",)
    cfg, hw, setup = model_from_args(args, overlap_grad_reduce=args.overlap_grad_reduce,
                                     overlap_param_gather=args.overlap_param_gather,
                                     cp_comm_type=None if schemes is not None else args.cp_comm_type,
                                     cp_a2a_size=None if sizes is None else sizes[0])
    if args.sequence_parallel == "off" and cfg.moe is not None:
        raise UsageError(f"--sequence-parallel off: {cfg.name}'s MoE layers need sequence parallelism at t > 1 "
                         "(Megatron-Core's rule); use on (the default) or per-layer")
    setup = replace(setup, sequence_parallel=SEQUENCE_PARALLEL_MODES[args.sequence_parallel])
    module_sets = _module_sets(args, cfg)
    layers = len(workload_nodes(cfg))
    if args.max_virtual_stages is None:
        args.max_virtual_stages = min(DEFAULT_MAX_VIRTUAL_STAGES, layers)
    elif args.max_virtual_stages > layers:
        raise UsageError(f"--max-virtual-stages {args.max_virtual_stages}: more than the {layers} layers of "
                         f"{cfg.name}'s workload (its transformer layers, the embedding, the final norm and the "
                         "head; each chunk of an interleaved plan holds at least one)")
    options = Options(time_limit_s=args.time_limit or None, progress=False, objective=args.objective,
                      schedule=args.schedule, max_virtual_stages=args.max_virtual_stages)
    say = None if args.json else (lambda line: print(f"piper: {line}", file=sys.stderr, flush=True))
    cps = context_parallel_choices(cfg, hw, setup, args.cp, args.max_cp)
    if schemes is not None:  # each scheme's own c (the all-to-all's heads bound c, the all-gather's do not;
        # a2a+p2p's are the ring's, each searched with the C1 whose groups split the heads)
        def own(k: str | None) -> tuple[int, ...]:
            if k == "a2a+p2p":
                return (() if cfg.sliding_window_layers else
                        context_parallel_choices(cfg, hw, replace(setup, cp_comm_type="p2p"), args.cp, args.max_cp))
            return context_parallel_choices(cfg, hw, replace(setup, cp_comm_type=k), args.cp, args.max_cp)

        cps = tuple(sorted((set(cps) if None in schemes or args.cp is not None else {1}).union(*(own(k) for k in schemes))))
    if schemes == ("a2a+p2p",):
        if cfg.sliding_window_layers:
            raise UsageError(f"--cp-comm-type a2a+p2p: {cfg.name}'s layer {cfg.sliding_window_layers[0]} (0-based) attends "
                             "within a sliding window, which Transformer Engine's ring attention refuses; use "
                             "--cp-comm-type a2a, allgather or any")
        if args.cp is not None and not hierarchical_a2a_sizes(cfg, args.cp):
            raise UsageError(f"--cp-comm-type a2a+p2p at --cp {args.cp}: no all-to-all size C1 divides {args.cp} "
                             f"strictly between 1 and {args.cp}")
    if args.cp_comm_type is not None and cps == (1,):
        raise UsageError(f"--cp-comm-type {args.cp_comm_type}: no context-parallel size above 1 is searched for "
                         f"{cfg.seq_length}-token sequences on these GPUs (docs/frontend.md); give --cp C")
    check = args.schedule != "interleaved"  # --schedule interleaved: the check only reports
    # one recomputation setting for the whole model, as the frameworks have (docs/frontend.md)
    recomputes = (None,) if args.recompute_per_layer else ONE_RECOMPUTE_SETTING
    search = search_plans(cfg, hw, setup, info, options, micro_batches=micro_batch_choices(
        setup.global_batch, args.micro_batch), free=not args.uniform, progress=say, context_parallels=cps,
        prune=True, check_schedules=check, started=started, recomputes=recomputes, per_degree=True,
        iteration_keys=takes_iteration_keys(info, setup), cp_comm_types=schemes, module_sets=module_sets)
    chosen = search.free if args.free else search.runnable
    kept_failing = False
    if chosen is None:
        # no plan passed the schedule check: keep the best interleaved plan that failed it (reported)
        failed = [c for c in search.rejected if c.uniform == (not args.free) and c.rejected.plan is not None]
        if failed:
            chosen = replace(failed[0], result=failed[0].rejected, rejected=None, rejected_check=None)
            kept_failing = True
    rejected = _rejected_below(search, chosen, args.free)
    window_needed = chosen is not None and not kept_failing and needs_window_check(setup, options, search, args.free)
    window = None
    if window_needed:
        # the search's pricing differs from `score`'s (per-layer recomputation's shared least overlap, or
        # no iteration keys): answer the plan found that `score` prices best, then bound the plans the
        # search may overvalue and take a better one the check finds (piper/frontend/window_check.py)
        chosen = _best_as_scored(cfg, hw, setup, search, chosen, args.free, args.objective)
        left = None if options.time_limit_s is None else max(0.0, options.time_limit_s - (time.perf_counter() - started))
        def resolve(c: Candidate) -> Candidate | None:
            # the search's own solve of c's workload, without a cutoff (its schedule-check fallbacks too)
            # (its recompute modules as a one-list search, so that the answer carries them)
            own = replace(setup, cp_comm_type=c.cp_comm_type, cp_a2a_size=c.cp_a2a_size)
            one = search_plans(cfg, hw, replace(own, expert_parallel=c.expert_parallel) if cfg.moe is not None
                               else own, info, options, micro_batches=(c.micro_batch,), free=args.free,
                               context_parallels=(c.context_parallel,), degrees=c.degrees, check_schedules=check,
                               recomputes=(c.recompute,), per_degree=c.uniform, iteration_keys=search.iteration_keys,
                               started=started,
                               module_sets=None if c.recompute_modules is None else (c.recompute_modules,))
            return one.free if args.free else one.runnable

        window = window_check(search, _scored_value(cfg, hw, setup, chosen, args.objective), info, options,
                              free=args.free, time_limit_s=left, progress=say,
                              rescore=lambda c: _scored_value(cfg, hw, setup, c, args.objective), resolve=resolve)
        chosen = window.better or chosen
    if chosen is None:
        statuses = sorted({c.result.status.value for c in search.candidates})
        msg = {"status": "/".join(statuses),
               "message": why_no_plan([c.result.message for c in search.candidates]) or "no plan fits"}
        if args.json:
            print(json.dumps({**msg, "plan": None, "time_s": search.time_s, "time_limit_s": options.time_limit_s,
                              "search": _search_summary(search),
                              "candidates": [_candidate_summary(c) for c in search.candidates]}))
        else:
            print(f"no plan: {msg['message']} (status {msg['status']})")
        return 0
    if args.out:
        write_workload(args.out, chosen.workload)
    if args.plan_out:
        write_plan(args.plan_out, chosen.result.plan, chosen.problem, "--plan-out")
    plan, score = chosen.result.plan, chosen.result.score
    run_cfg = cfg.with_changes(micro_batch=chosen.micro_batch)
    chosen_setup = chosen.setup_for(setup)  # its recompute modules, when the search tried several lists
    metrics = plan_metrics(run_cfg, hw, chosen_setup, chosen.problem, plan, score)
    other = search.runnable if args.free else search.free
    other_metrics = None if other is None else plan_metrics(cfg.with_changes(micro_batch=other.micro_batch), hw,
                                                             other.setup_for(setup), other.problem, other.result.plan,
                                                             other.result.score)
    other_check = None if other is None else check_schedule(other.problem, other.result.plan, other.result.score)
    other_status = None if other is None else _side_status(setup, options, search, other, other_check)
    # "optimal" only when every solve of the answer's kind was proven (the winner is then the best over
    # every workload searched) and no rejected interleaved plan beats it by the formulas (the answer is
    # then the best plan that passed the check; the rejected solves' bounds bound the rest)
    exact = search.exact_over(not args.free)
    # the answer's micro-batch, c and scheme
    caveats = prediction_caveats(run_cfg, hw, chosen.context_parallel, chosen.cp_comm_type)
    # each layer's context-parallel scheme of the answer (None at c = 1)
    comm_types = layer_comm_types(cfg, chosen.cp_comm_type) if chosen.context_parallel > 1 else None
    # a2a+p2p's (C1, C2) of the answer; None for the other schemes
    hierarchical = (None if chosen.cp_a2a_size is None else
                    [chosen.cp_a2a_size, chosen.context_parallel // chosen.cp_a2a_size])
    per_layer = None  # the per-layer search over the same workloads: what the one-setting rule costs
    if chosen.recompute is not None and not args.free:
        per_layer = _per_layer_optimum(cfg, hw, setup, info, options, chosen, check, started,
                                       micro_batch_choices(setup.global_batch, args.micro_batch), cps, schemes,
                                       module_sets)
    # the free plan is Piper's (no framework runs one (d, t) per stage): only the runnable plan is asked
    megatron = None if args.free else _as_megatron_runs(chosen.problem, plan, score.batch_time)
    status = chosen.result.status.value
    if chosen.result.status == Status.OPTIMAL and (rejected is not None or not exact or kept_failing):
        status = Status.FEASIBLE.value
    # the iteration as `score` prices this layout: the optimizer step and the overlap window of its own
    # schedule (the search's workloads carry the step and each plan's window when the solver takes the keys)
    with_step = with_optimizer_step_s(cfg, hw, setup, chosen)
    # beyond the fit rows' micro-batch the MoE form decides the time: the runner-up form's figure beside it
    form_check = None
    if moe_micro_batch_caveat(run_cfg, hw, chosen.context_parallel) is not None and math.isfinite(with_step):
        other_s = other_moe_form_s(cfg, hw, setup, chosen)
        if other_s is not None:
            form_check, line = runner_up_form_check(hw, with_step, other_s, "plan")
            caveats.append(line)
    # not proven: how far from the best plan it can be (the rejected plans' bound when those decide it)
    bound = rejected["bound"] if rejected is not None else None if exact else _answer_bound(search, chosen, args.free)
    # the window check (above): "optimal" only when no plan the search may overvalue beats the answer
    if window is not None:
        if not window.proven:
            status = Status.FEASIBLE.value
        elif window.better is not None and exact and rejected is None and not kept_failing:
            # proven: every 1F1B plan is at least the search's winner, every other at least the bound
            status = Status.OPTIMAL.value
        if bound is not None or (exact and not window.proven):
            bound = window.bound if bound is None else min(bound, window.bound)
            bound = bound if math.isfinite(bound) and bound > 0 else None  # 0: the check proved nothing
    if args.json:
        out = {"status": status, "solver": chosen.result.solver, **metrics,
               "bound": bound,
               "batch_time_with_optimizer_step_s": with_step if math.isfinite(with_step) else None,
               "iteration_keys_in_search": search.iteration_keys,
               "plan": plan.to_dict(), "time_s": search.time_s, "time_limit_s": options.time_limit_s,
               "micro_batch": chosen.micro_batch,
               "context_parallel": chosen.context_parallel, "context_parallel_searched": list(cps),
               "cp_comm_types": comm_types,
               "hierarchical_context_parallel_sizes": hierarchical,
               "cp_comm_type_searched": None if schemes is None else [k or "default" for k in schemes],
               "expert_parallel": chosen.expert_parallel,
               "schedule": plan.schedule.to_dict(), "objective": args.objective, "uniform": chosen.uniform,
               "exact": exact, "exact_all": search.exact, "gain_of_free": search.gain,
               "runnable" if args.free else "free": None if other is None else
               {**other_metrics, "micro_batch": other.micro_batch, "context_parallel": other.context_parallel,
                "status": other_status,
                "schedule": other.result.plan.schedule.to_dict(), "plan": other.result.plan.to_dict(),
                "schedule_check": other_check.to_dict()},
               "search": _search_summary(search),
               "schedule_check": check_schedule(chosen.problem, plan, score).to_dict(),
               "rejected_interleaved": rejected, "caveats": caveats, "moe_form_check": form_check, "megatron": megatron,
               "window_check": None if window is None else window.to_dict(),
               "recompute": None if chosen.recompute is None else list(chosen.recompute),
               "recompute_modules": list(chosen_setup.recompute_modules),
               "recompute_modules_searched": None if module_sets is None else [list(m) for m in module_sets],
               "recompute_per_layer": per_layer,
               "candidates": [_candidate_summary(c) for c in search.candidates]}
        print(json.dumps(out))
        return 0
    print(render_plan(chosen.problem, plan, score))
    m = metrics
    kind = "Piper's free plan" if args.free else "runnable plan (one (d, t) in every stage)"
    schedule = plan.schedule.label()
    print(f"model         {cfg.name}: {args.nodes} x {hw.devices_per_node} {hw.name}, global batch "
          f"{setup.global_batch} x {cfg.seq_length} tokens, micro-batch {chosen.micro_batch} "
          f"(searched: {', '.join(str(b) for b in micro_batch_choices(setup.global_batch, args.micro_batch))})"
          + (f", experts over e = {chosen.expert_parallel} devices (searched: "
             f"{', '.join(sorted({str(c.expert_parallel) for c in search.candidates}, key=int))})"
             if cfg.moe is not None else ""))
    if len(cps) > 1 or chosen.context_parallel > 1:
        print(f"context       context-parallel size c = {chosen.context_parallel} (searched: "
              f"{', '.join(str(c) for c in cps)}); each stage's t is its tensor-parallel size x {chosen.context_parallel}"
              + (f"; {describe_comm_types(comm_types)}" if comm_types else "")
              + ("" if hierarchical is None else f", C1 x C2 = {hierarchical[0]} x {hierarchical[1]}")
              + ("" if schemes is None else f" (schemes searched: {', '.join(k or 'the default' for k in schemes)})"))
    exactness = "not proven exact" if not exact else (
        "exact over 1F1B plans, every plan compared passing the schedule check" if rejected is not None else "exact")
    print(f"plan          {kind}: {m['stages']} stages, {schedule}, on {m['devices_used']} of {m['devices']} devices "
          f"({chosen.result.solver}, {status}; search {search.time_s:.2f} s"
          f"{'' if options.time_limit_s is None else f' of {options.time_limit_s:g} s allowed'}, "
          f"{exactness})")
    final_check = check_schedule(chosen.problem, plan, score)
    if not final_check.ok:
        why = "--schedule interleaved" if args.schedule == "interleaved" else "no 1F1B plan fits"
        print(f"schedule      this plan fails the schedule check (kept: {why}): " + "; ".join(final_check.reasons))
    if rejected is not None:
        print(f"schedule      the best interleaved plan ({rejected['schedule']['virtualStages']} virtual stages, "
              f"formula {rejected['formula_batch_time_s']:.4g} s) failed the schedule check: "
              + "; ".join(rejected["reasons"]) + f". This plan is the best of those that pass it "
              f"({rejected['count']} solve(s) answered with fewer virtual stages instead)")
    if not exact:
        # why the answer is not proven: the solves of its kind that ended without a proof
        open_solves = [c for c in search.candidates if c.uniform == (not args.free) and not search.proven(c)]
        by_status = ", ".join(f"{n} {st}" for st, n in sorted(Counter(c.result.status.value for c in open_solves).items()))
        reasons = sorted({c.result.message.split(" (")[0] if c.result.status == Status.FEASIBLE else c.result.message
                          for c in open_solves if c.result.message})
        shown = "; ".join(r for r in reasons if not r.startswith("best plan"))[:300]
        gap = "" if bound is None or rejected is not None else (
            f"; proven bound {bound:.4g} ({args.objective}): the answer is within "
            f"{100 * ((chosen.value if window is None else window.value) / bound - 1):.1f}% of the best plan searched")
        print(f"{'unproven':<13} {len(open_solves)} of {sum(1 for c in search.candidates if c.uniform == (not args.free))} "
              f"solves ended without a proof ({by_status})" + (f": {shown}" if shown else "") + gap)
    if window is not None:
        covered = ("interleaved plans, which hide it behind more as `score` prices them"
                   if window.schedules == "interleaved" else
                   "every plan, which a recomputing layer's longer backward pass lets hide more as `score` prices it"
                   if search.iteration_keys else
                   "every plan (the solver does not take the iteration keys here, so the search priced neither the "
                   "optimizer step nor the overlap)")
        verdict = ("none beats the answer" if window.proven else
                   "the answer is not proven against them" + (
                       f": proven bound {window.bound:.4g} ({args.objective}), the answer within "
                       f"{100 * (window.value / window.bound - 1):.1f}%" if window.bound > 0 else
                       f" ({window.unproven} workload(s) left unbounded: the time limit, or a solver without bounds)"))
        hid = ("the search gave each layer the least resync overlap of its TMPCs (--recompute-per-layer)"
               if search.iteration_keys and window.schedules != "interleaved" else
               "the search hid the resync behind 1F1B's window of one micro-batch" if search.iteration_keys
               else "`score` prices the optimizer step and the resync's overlap")
        print(f"{'window':<13} {hid}; {covered}, bounded without the resync: {window.solves} "
              f"solves, {window.pruned} pruned by bound ({window.time_s:.2f} s): {verdict}")
    if search.cut_solves:
        print(f"search        {search.solves} solves, {search.cut_solves} below the best "
              f"value found before "
              f"them: {search.pruned} pruned by bound (proven to hold no better plan)"
              + (f", {search.resolved} solved again without the cutoff (ties)" if search.resolved else ""))
    if not math.isfinite(with_step) or (search.iteration_keys and abs(with_step - m["batch_time_s"]) <= 1e-9 * with_step):
        step = " (with the optimizer step)" if search.iteration_keys else ""
    elif search.iteration_keys:
        step = (f" (with the optimizer step; {with_step:.4g} s with its schedule's overlap window, as `score` "
                f"prices this layout)")
    else:
        step = f" ({with_step:.4g} s with the optimizer step, as `score` prices this layout)"
    print(f"predicted     batch time {m['batch_time_s']:.4g} s{step}, {m['tokens_per_s']:.4g} tokens/s, "
          f"{m['tflops_per_device']:.4g} TFLOP/s per device, MFU {100 * m['mfu']:.1f}%")
    if chosen.recompute is not None:
        modules = (f" ({', '.join(chosen_setup.recompute_modules)}"
                   + ("" if module_sets is None else
                      f"; lists searched: {'; '.join(','.join(m) for m in module_sets)}") + ")"
                   if chosen.recompute[0] == "selective" else "")
        line = (f"{'recompute':<13} {chosen.recompute[0]}{modules} on every layer, one setting for the model as the frameworks "
                f"have it (searched: {', '.join(k[0] for k in ONE_RECOMPUTE_SETTING)}; --recompute-per-layer lets each layer choose)")
        if per_layer is not None and per_layer["batch_time_s"] is not None:
            gain = per_layer["gain"]
            line += (f"; each layer choosing (which no framework runs): {per_layer['batch_time_s']:.4g} s "
                     f"({per_layer['status']}), {100 * abs(gain):.1f}% {'faster' if gain >= 0 else 'slower'}")
            if gain < 0:
                line += " (its best interleaved plans fail the schedule check)"
        print(line)
    if megatron is not None and megatron["exports"] and megatron["setting"] is not None:
        figure = ("not re-scored: " + megatron["reason"].split("; ", 1)[1] if megatron["batch_time_s"] is None
                  else f"{megatron['batch_time_s']:.4g} s ({100 * megatron['change']:+.2f}%)")
        print(f"{'megatron':<13} exports with the {megatron['setting']}: {figure}")
    if megatron is not None and not megatron["exports"]:
        if megatron["setting"] is not None:
            print(f"{'megatron':<13} its per-layer recomputation has no Megatron-LM setting; the best that fits, "
                  f"{megatron['setting']}, runs it in {megatron['batch_time_s']:.4g} s ({100 * megatron['change']:+.1f}%; "
                  f"export --fit-recompute)")
        else:
            print(f"{'megatron':<13} not exportable: {megatron['reason']}")
    for line in caveats:
        print(f"{'caveat':<13} {line}")
    order = m["schedule_order_memory_bytes"]
    order_note = ("" if abs(order - m["max_memory_per_device_bytes"]) <= 0.005 * m["max_memory_per_device_bytes"]
                  else f" (by the schedule's pass order {order / 1e9:.2f} GB)")
    print(f"memory        fullest stage {m['max_memory_per_device_bytes'] / 1e9:.2f} GB of "
          f"{m['memory_limit_bytes'] / 1e9:.2f} GB{order_note}; bottleneck stage {m['bottleneck_stage']}")
    print(" " * 14 + memory_breakdown_text(m["memory_breakdown"]))
    if other is not None and other_metrics is not None:
        gain = search.gain
        label = ("runnable plan" if args.free else "Piper's free plan") + f" ({other_status})"
        print(f"{'vs' if args.free else 'free plan':<13} {label}: batch time {other_metrics['batch_time_s']:.4g} s "
              f"(micro-batch {other.micro_batch}"
              + (f", c = {other.context_parallel}" if other.context_parallel > 1 else "")
              + f", {other.result.plan.schedule.label()}, {other_metrics['stages']} stages)"
              + ("" if gain is None else
                 (f"; the free plan is {100 * gain:.1f}% faster by {args.objective}" if gain >= 0 else
                  f"; the free plan is {-100 * gain:.1f}% slower: the free search's one workload of every degree "
                  "prices the resync between nodes at the largest degree's bandwidth, the runnable search's "
                  "workloads at each degree's own")
                 + ("" if args.free else " (--free writes it; the frameworks need one (d, t) per stage)")))
        if other_check is not None and not other_check.ok:
            print(f"{'':<13} (that plan fails the schedule check: " + "; ".join(other_check.reasons) + ")")
    return 0
