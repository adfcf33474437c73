"""The planner against Megatron's own configuration (issue 29): for every [SC21] Table 1 row, the
best uniform plan of :func:`piper.frontend.planner.search_plans` (batch-time objective, the
micro-batch b and the schedule (1F1B or interleaved up to v = 8) searched) and the layout
Megatron ran, both scored by the one evaluator with the same pricing.

The same pricing: Megatron's layout is scored by :func:`piper.frontend.score.score_layout`
(a workload of its degree t only, with the optimizer step: ``TrainingSetup.optimizer_step``);
the planner's plan is rescored the same way, on the workload of its own b and t with the
optimizer step (:func:`rescore`). The search's workloads carry the step too (docs/problem.md §10,
which Piper's DP prices: ``search_plans(iteration_keys=True)``), so the DP minimizes that iteration;
[SC21]'s runs do not overlap the resync, so there is no overlap to price.

The search runs once per tensor-parallel degree t (``search_plans(degrees=(t,))``): a workload
offering every degree prices the data-parallel resync between nodes at the bandwidth of the
largest degree (:func:`piper.frontend.workload.resync_bandwidths`: one network link per device
for t = 8), which is pessimistic for t < 8, while :func:`score_layout` prices Megatron's t = 1
layout at its own 8 links; one workload per degree prices every layout as ``score`` does.

As ``python -m piper plan`` searches: plans a framework can run (one sequence-parallel switch,
searched off and on for t > 1; one recomputation setting for the model, none, selective or full
on every layer: ``ONE_RECOMPUTE_SETTING``), and every interleaved plan checked as the search finds
it (:mod:`piper.frontend.schedule_check`: unequal chunks whose pass order is slower or holds more
memory than the formulas say); a workload whose plan fails answers with its best 1F1B plan
(``rejected_by_schedule_check`` counts them), so the planner's plan is the best checked one, not an
optimum proven over every interleaved plan.

Also reported: Megatron's plan scored on the planner's own workload of Megatron's b and t
(``megatron_on_search_s``), which the search must not beat by more than its own optimum
(``planner_s`` <= it: the DP is exact over uniform plans) when Megatron's layout is in the space.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from experiments.validate.rows import Case
from piper.core.evaluate import evaluate
from piper.core.options import BATCH_TIME, Options
from piper.frontend.planner import (
    ONE_RECOMPUTE_SETTING,
    micro_batch_choices,
    search_plans,
    search_setup,
    takes_iteration_keys,
)
from piper.frontend.score import check_layout, layout_plan, score_layout
from piper.frontend.workload import build_workload, tensor_parallel_degrees
from piper.io.workload import load_problem

__all__ = ["MAX_VIRTUAL_STAGES", "compare_row", "compare_rows", "megatron_in_space", "planner_markdown", "rescore"]

#: the most virtual stages the comparison searches (``python -m piper plan``'s default)
MAX_VIRTUAL_STAGES = 8


def rescore(case: Case, hw: Any, micro_batch: int, plan: Any) -> float:
    """``plan``'s batch time (seconds) priced as :func:`score_layout` prices a layout: the workload
    of micro-batch ``micro_batch`` and the plan's one degree t, with the optimizer step."""
    degrees = tuple(sorted({st.t for st in plan.stages}))
    setup = replace(case.setup, optimizer_step=True)
    workload = build_workload(case.cfg.with_changes(micro_batch=micro_batch), hw, setup, degrees=degrees)
    score = evaluate(load_problem(workload, strict=True), plan)
    return score.batch_time if not score.oom and math.isfinite(score.batch_time) else math.inf


def megatron_in_space(case: Case, hw: Any, max_virtual_stages: int = MAX_VIRTUAL_STAGES) -> list[str]:
    """Why Megatron's layout lies outside the planner's search space (empty: it lies inside)."""
    why = []
    lay = case.layout
    if case.cfg.micro_batch not in micro_batch_choices(case.setup.global_batch, None):
        why.append(f"micro-batch {case.cfg.micro_batch} not searched")
    if lay.tp not in tensor_parallel_degrees(case.cfg, hw):
        why.append(f"t = {lay.tp} not offered")
    if lay.vp > max_virtual_stages:
        why.append(f"v = {lay.vp} > {max_virtual_stages}")
    return why


def compare_row(case: Case, hw: Any, solver: str = "dp", max_virtual_stages: int = MAX_VIRTUAL_STAGES,
                micro_batches: tuple[int, ...] | None = None, degrees: tuple[int, ...] | None = None,
                time_limit_s: float | None = None) -> dict[str, Any]:
    """One row: Megatron's batch time, the planner's best uniform plan and its batch time (seconds,
    both priced by :func:`rescore` / :func:`score_layout`), and the gain = Megatron / planner - 1."""
    from piper.solvers.registry import get_solver

    t0 = time.perf_counter()
    meg = score_layout(case.cfg, hw, case.setup, case.layout)
    megatron_s = meg["batch_time_s"] if meg["batch_time_s"] is not None else math.inf
    info = get_solver(solver)
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=max_virtual_stages, progress=False,
                      time_limit_s=time_limit_s)
    bs = micro_batches or micro_batch_choices(case.setup.global_batch, None)
    best: dict[str, Any] | None = None
    exact = True
    rejected = 0
    for t in degrees or tensor_parallel_degrees(case.cfg, hw):
        # as python -m piper plan: plans a framework runs (one sequence-parallel switch, one
        # recomputation setting), every interleaved plan checked against its played-out schedule
        # as the search finds it (a failing one's workload answers with its best 1F1B plan)
        for sp in ((False,) if t == 1 else (False, True)):
            setup = replace(case.setup, sequence_parallel=sp)
            search = search_plans(case.cfg, hw, setup, info, options,
                                  micro_batches=bs, free=False, degrees=(t,), recomputes=ONE_RECOMPUTE_SETTING,
                                  check_schedules=True, iteration_keys=takes_iteration_keys(info, setup))
            exact = exact and search.exact
            rejected += len(search.rejected)
            passing = [c for c in search.candidates if c.result.plan is not None]
            for cand in passing:
                value = rescore(case, hw, cand.micro_batch, cand.result.plan)
                if best is None or value < best["planner_s"]:
                    best = {"planner_s": value, "candidate": cand}
    # Megatron's plan on the planner's workload of its b and t: the search's optimum must not exceed it
    meg_search = build_workload(case.cfg, hw, search_setup(case.setup, takes_iteration_keys(info, case.setup)),
                                degrees=(case.layout.tp,))
    problem = load_problem(meg_search, strict=True)
    sizes = check_layout(case.cfg, hw, case.setup, case.layout)
    meg_on_search = evaluate(problem, layout_plan(problem, sizes, case.layout)).batch_time
    rec: dict[str, Any] = {
        "row": case.name, "gpus": case.layout.gpus, "global_batch": case.setup.global_batch,
        "megatron_t": case.layout.tp, "megatron_p": case.layout.pp, "megatron_d": case.layout.dp,
        "megatron_v": case.layout.vp, "megatron_b": case.cfg.micro_batch, "megatron_recompute": case.layout.recompute,
        "megatron_s": megatron_s, "megatron_on_search_s": meg_on_search,
        "outside_space": "; ".join(megatron_in_space(case, hw, max_virtual_stages)),
        "planner_s": math.inf, "exact": exact, "rejected_by_schedule_check": rejected,
    }
    if best is not None:
        cand = best["candidate"]
        plan = cand.result.plan
        tm = sorted({tid for st in plan.stages for tid in st.tmpcs.values()})
        rec.update({
            "planner_s": best["planner_s"], "planner_t": plan.stages[0].t, "planner_d": plan.stages[0].d,
            "planner_p": plan.groups,
            "planner_v": plan.schedule.virtual_stages, "planner_b": cand.micro_batch,
            "planner_tmpcs": "/".join(tm), "planner_devices": sum(st.d * st.t for st in plan.group_stages()),
            "planner_search_s": cand.value,
        })
    rec["gain_percent"] = 100 * (megatron_s / rec["planner_s"] - 1) if math.isfinite(rec["planner_s"]) else None
    rec["planner_no_worse"] = rec["planner_s"] <= megatron_s * (1 + 1e-9)
    rec["time_s"] = time.perf_counter() - t0
    return rec


def compare_rows(cases: list[Case], hardware_of: Any, log: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`compare_row` for every case, ``hardware_of(case)`` pricing it."""
    out = []
    for case in cases:
        rec = compare_row(case, hardware_of(case), **kwargs)
        out.append(rec)
        if log:
            log(f"planner {case.name}: Megatron {rec['megatron_s']:.3f} s, planner {rec['planner_s']:.3f} s "
                f"({rec['gain_percent']:+.1f}%, {rec['time_s']:.0f} s)")
    return out


def planner_markdown(rows: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table (seconds per iteration; gain = Megatron / planner - 1)."""
    header = ("| row | GPUs | Megatron t, p, d, v, b, recompute | Megatron s | planner t, p, d, v, b, TMPCs | "
              "planner s | gain | interleaved plans rejected by the schedule check |")
    lines = [header, "|---|---:|---|---:|---|---:|---:|---:|"]
    for r in rows:
        meg = f"{r['megatron_t']}, {r['megatron_p']}, {r['megatron_d']}, {r['megatron_v']}, {r['megatron_b']}, " \
              f"{r['megatron_recompute']}"
        if math.isfinite(r["planner_s"]):
            pl = f"{r['planner_t']}, {r['planner_p']}, {r['planner_d']}, {r['planner_v']}, {r['planner_b']}, " \
                 f"{r['planner_tmpcs']}"
            lines.append(f"| {r['row']} | {r['gpus']} | {meg} | {r['megatron_s']:.3f} | {pl} | {r['planner_s']:.3f} | "
                         f"{r['gain_percent']:+.1f}% | {r['rejected_by_schedule_check']} |")
        else:
            lines.append(f"| {r['row']} | {r['gpus']} | {meg} | {r['megatron_s']:.3f} | no plan | - | - | "
                         f"{r['rejected_by_schedule_check']} |")
    worse = [r["row"] for r in rows if not r["planner_no_worse"]]
    lines += ["", "Planner no worse than Megatron on every row." if not worse else
              f"Planner WORSE than Megatron on: {', '.join(worse)}."]
    return "\n".join(lines)
