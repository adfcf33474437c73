"""The planner against the published layouts of issues 30 and 31: the Megatron-LM README's nine H100
GPT rows, [L3] Table 4's three Llama 3 405B rows (8,192 and 16,384 H100, and the long-context row
with context parallelism 16) and the latest release of each Megatron-Bridge MoE layout (Qwen3
30B-A3B, GPT-OSS 120B), both sides scored by the one evaluator with the same pricing and the
catalog's constants.

* **The published layout under the model**: the row as ``experiments.validate`` scores it
  (:func:`experiments.validate.fit.score_case`: per variant the least recomputation that fits, the
  variant with the least batch time; the Llama 3 rows are Meta's v = 8 with memory against the whole
  device, both sides then sharing that limit), i.e.
  ``python -m piper score``'s iteration time with the optimizer step and the resync's overlap.
* **The planner's plan**: :func:`piper.frontend.planner.search_plans` as ``python -m piper plan
  --uniform`` runs it (batch-time objective, micro-batch sizes dividing the batch, 1F1B or
  interleaved up to v = 8, every interleaved plan checked against its played-out schedule, one
  recomputation setting, one workload per degree, sequence parallelism on, the context-parallel
  sizes ``plan`` searches, every expert-parallel size), its workloads carrying the optimizer step and
  the row's overlap of the resync over each plan's own schedule's window (docs/problem.md §10 and
  §10.1, which Piper's DP prices), then each workload's plan rescored as ``score`` prices a layout (:func:`rescore_candidate`: the
  overlap window of the plan's own p, v and micro-batches, wider for an interleaved plan).
* **The search's own check** (``published_on_search_s``; "outside the proof" when the search loses
  there to an interleaved published layout whose v is above the search's most virtual stages, or
  whose workload's interleaved plans failed the schedule check: the search is then exact over 1F1B
  plans only, :func:`~piper.frontend.planner.search_plans`): the published layout evaluated on the
  workload the search solved for its (c, e, b, recomputation, t) (:func:`piper.frontend.planner.search_setup`); when
  that workload was searched and proven, the search's value there must not exceed it
  (``search_no_worse``; the layout is then inside the space the DP is exact over).
* **The window check** (``window_proven``, ``window_bound_s``; rows whose setup overlaps the resync):
  where the search's pricing differs from ``score``'s (per-layer recomputation; not in this table's
  one-setting searches, "-"), :func:`piper.frontend.window_check.window_check`
  bounds, without the resync, the plans a wider window may make faster than the planner's answer,
  as ``python -m piper plan``'s status does: "proven" when none can beat it, else the bound.

``python -m experiments.validate --planner --table published`` prints the table
(docs/results/validation.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from experiments.validate.fit import score_case
from experiments.validate.rows import Case
from piper.core.evaluate import evaluate
from piper.core.options import BATCH_TIME, Options
from piper.frontend.planner import (
    ONE_RECOMPUTE_SETTING,
    Candidate,
    context_parallel_choices,
    micro_batch_choices,
    search_plans,
    search_setup,
    takes_iteration_keys,
    with_optimizer_step_s,
)
from piper.frontend.score import check_layout, layout_plan
from piper.frontend.window_check import needs_window_check, window_check
from piper.frontend.workload import build_workload
from piper.io.workload import load_problem

__all__ = ["MAX_VIRTUAL_STAGES", "compare_published", "published_cases", "published_markdown",
           "rescore_candidate"]

#: the most virtual stages the search takes (``python -m piper plan``'s default)
MAX_VIRTUAL_STAGES = 8


def published_cases() -> list[Case]:
    """The Megatron-LM README's H100 rows, [L3] Table 4's rows (with and without context parallelism)
    and the latest release of each MoE layout (:func:`experiments.validate.moe_rows.latest_cases`)."""
    from experiments.validate.context_rows import llama3_context_cases
    from experiments.validate.moe_rows import latest_cases
    from experiments.validate.rows import llama3_cases, readme_cases

    return readme_cases() + llama3_cases() + llama3_context_cases() + latest_cases()


def rescore_candidate(case: Case, hw: Any, cand: Candidate) -> float:
    """The batch time (seconds) of ``cand``'s plan priced as :func:`piper.frontend.score.score_layout`
    prices a layout: :func:`piper.frontend.planner.with_optimizer_step_s` with the row's setup
    (sequence parallelism on, the resync's overlap where the row has it); inf when it does not fit."""
    return with_optimizer_step_s(case.cfg, hw, replace(case.setup, sequence_parallel=True), cand)


def _published_on_search(case: Case, hw: Any, published: dict[str, Any], built: Any) -> float:
    """The published layout (the variant and recomputation :func:`score_case` chose) on the workload
    the search built for its (c, e, b, recomputation, t)."""
    cfg = case.cfg.with_changes(micro_batch=published["micro_batch"])
    lay = next(lay for c, lay in case.extra.get("variants", ((case.cfg, case.layout),))
               if lay.vp == published["vp"] and c.micro_batch == published["micro_batch"])
    lay = replace(lay, recompute=published["recompute"])
    setup = replace(built, context_parallel=lay.cp)
    if cfg.moe is not None:
        setup = replace(setup, expert_parallel=lay.ep)
    workload = build_workload(cfg, hw, setup, degrees=(lay.width,), recompute=(lay.recompute,))
    problem = load_problem(workload, strict=True)
    score = evaluate(problem, layout_plan(problem, check_layout(cfg, hw, setup, lay), lay))
    return score.batch_time if not score.oom and math.isfinite(score.batch_time) else math.inf


def compare_published(case: Case, solver: str = "dp", time_limit_s: float | None = 600.0) -> dict[str, Any]:
    """One row: the published layout's and the planner's batch times (seconds, the same pricing),
    the gain = published / planner - 1, and the search's own check (module docstring)."""
    from piper.solvers.registry import get_solver

    t0 = time.perf_counter()
    hw = case.hw
    published = score_case(case, (hw.gemm_efficiency, hw.gemm_half_dim))
    published_s = published["batch_time_s"] if published.get("batch_time_s") is not None else math.inf
    # the search's workloads carry the step and the row's overlap of the resync over each plan's window
    # (docs/problem.md §10); rescore_candidate prices each plan with its own schedule's window
    info = get_solver(solver)
    setup = replace(case.setup, sequence_parallel=True)
    keys = takes_iteration_keys(info, setup)
    options = Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=MAX_VIRTUAL_STAGES, progress=False,
                      time_limit_s=time_limit_s)
    cps = context_parallel_choices(case.cfg, hw, setup, None, None)
    search = search_plans(case.cfg, hw, setup, info, options,
                          micro_batches=micro_batch_choices(setup.global_batch, None), free=False,
                          context_parallels=cps, prune=False, check_schedules=True, recomputes=ONE_RECOMPUTE_SETTING,
                          per_degree=True, iteration_keys=keys)
    best, best_s = None, math.inf
    for cand in search.candidates:
        if cand.result.plan is not None:
            value = rescore_candidate(case, hw, cand)
            if value < best_s:
                best, best_s = cand, value
    lay = case.layout
    rec: dict[str, Any] = {
        "row": case.name, "gpus": lay.gpus, "global_batch": case.setup.global_batch, "seq": case.cfg.seq_length,
        "published_t": lay.tp, "published_c": lay.cp, "published_p": lay.pp, "published_d": lay.dp,
        "published_e": lay.ep, "published_v": published.get("vp"), "published_b": published.get("micro_batch"),
        "published_recompute": published.get("recompute"), "published_s": published_s,
        "published_source_s": case.published_time_s,
        # both sides' per-device memory limit: the Llama 3 rows' whole device (reserve 0), else the default reserve's
        "memory_limit_gb": published["memory_limit_bytes"] / 1e9,
        "memory_reserve": "whole device" if case.setup.memory_reserve_bytes == 0 else "default",
        "planner_s": best_s, "exact": search.exact_over(True), "solves": len(search.candidates),
        "rejected_by_schedule_check": len(search.rejected), "context_parallel_searched": list(cps),
    }
    on_search = math.inf
    if published.get("batch_time_s") is not None:
        on_search = _published_on_search(case, hw, published, search_setup(setup, keys))
    # the search's value on the published layout's own workload, when that workload was searched
    same = [c for c in search.candidates
            if (c.context_parallel, c.micro_batch, c.recompute, c.degrees)
            == (lay.cp, published.get("micro_batch"), (published.get("recompute"),), (lay.width,))
            and (case.cfg.moe is None or c.expert_parallel == lay.ep)]
    searched = same[0] if same else None
    rec["published_on_search_s"] = on_search
    rec["search_on_that_workload_s"] = None if searched is None else searched.value
    no_worse = (None if searched is None or not math.isfinite(on_search)
                else searched.value <= on_search * (1 + 1e-9))
    # an interleaved published layout is outside the space the search proved when its v is above the
    # search's most virtual stages, or when that workload's interleaved plans failed the schedule check
    # (the search is then exact over 1F1B plans only, search_plans): a loss there proves nothing
    vp = published.get("vp") or 1
    why = ("" if no_worse is not False or vp == 1 else
           f"v = {vp} is above the search's {MAX_VIRTUAL_STAGES}" if vp > MAX_VIRTUAL_STAGES else
           "its interleaved plans failed the schedule check" if searched.rejected is not None else "")
    rec["search_outside_proof"] = why or None
    rec["search_no_worse"] = None if why else no_worse
    if best is not None:
        plan = best.result.plan
        rec.update({
            "planner_t": plan.stages[0].t // best.context_parallel, "planner_c": best.context_parallel, "planner_p": plan.groups,
            "planner_d": plan.stages[0].d, "planner_e": best.expert_parallel,
            "planner_v": plan.schedule.virtual_stages, "planner_b": best.micro_batch,
            "planner_recompute": "/".join(best.recompute or ("per layer",)),
            "planner_devices": plan.devices_used,  # a stage's t is the t x c devices of its shard
            "planner_status": best.result.status.value,
        })
    # where the search's pricing differs from score's (a solver without the iteration keys; this table's
    # one-setting searches otherwise price every plan as score does): bound the plans it may overvalue,
    # as plan's status does (piper/frontend/window_check.py)
    rec["window_proven"], rec["window_bound_s"] = None, None
    if best is not None and needs_window_check(setup, options, search, False):
        check = window_check(search, best_s, info, options, free=False)
        rec["window_proven"] = check.proven
        rec["window_bound_s"] = check.bound if math.isfinite(check.bound) else None
    rec["gain_percent"] = 100 * (published_s / best_s - 1) if math.isfinite(best_s) else None
    rec["planner_no_worse"] = best_s <= published_s * (1 + 1e-9)
    rec["time_s"] = time.perf_counter() - t0
    return rec


def published_markdown(rows: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table (seconds per iteration; gain = published / planner - 1)."""
    lines = ["| row | GPUs | memory limit GB | published t, c, p, d, e, v, b, recompute | published s (model) | "
             "planner t, c, p, d, e, v, b, recompute | planner s | gain | exact | window check | search check |",
             "|---|---:|---:|---|---:|---|---:|---:|---|---|---|"]
    for r in rows:
        pub = (f"{r['published_t']}, {r['published_c']}, {r['published_p']}, {r['published_d']}, {r['published_e']}, "
               f"{r['published_v']}, {r['published_b']}, {r['published_recompute']}")
        pub_s = f"{r['published_s']:.3f}" if math.isfinite(r["published_s"]) else "does not fit"
        check = {None: "layout's workload not searched", True: "ok", False: "FAILED"}[r["search_no_worse"]]
        if r.get("search_outside_proof"):
            check = (f"outside the proof: {r['search_outside_proof']} (search {r['search_on_that_workload_s']:.3f} s, "
                     f"layout {r['published_on_search_s']:.3f} s there)")
        window = ("-" if r.get("window_proven") is None else "proven" if r["window_proven"] else
                  "bound " + (f"{r['window_bound_s']:.3f} s ({100 * (r['planner_s'] / r['window_bound_s'] - 1):.1f}%)"
                              if r.get("window_bound_s") else "none"))
        limit = f"{r['memory_limit_gb']:.2f}" + (" (whole device)" if r["memory_reserve"] == "whole device" else "")
        if math.isfinite(r["planner_s"]):
            pl = (f"{r['planner_t']}, {r['planner_c']}, {r['planner_p']}, {r['planner_d']}, {r['planner_e']}, "
                  f"{r['planner_v']}, {r['planner_b']}, {r['planner_recompute']}")
            lines.append(f"| {r['row']} | {r['gpus']} | {limit} | {pub} | {pub_s} | {pl} | {r['planner_s']:.3f} | "
                         f"{r['gain_percent']:+.1f}% | {'yes' if r['exact'] else 'no'} | {window} | {check} |")
        else:
            lines.append(f"| {r['row']} | {r['gpus']} | {limit} | {pub} | {pub_s} | no plan | - | - | "
                         f"{'yes' if r['exact'] else 'no'} | {window} | {check} |")
    worse = [r["row"] for r in rows if not r["planner_no_worse"]]
    failed = [r["row"] for r in rows if r["search_no_worse"] is False]
    lines += ["", "Memory limit: the same on both sides of a row; the Llama 3 rows against the whole device (the "
                  "published runs prove their layouts ran), the others under the planner's default reserve.",
              "", ("The planner's plan is no worse than the published layout on every row (under the model)."
                   if not worse else f"Planner WORSE than the published layout on: {', '.join(worse)}."),
              ("" if not failed else f"The search's check FAILED on: {', '.join(failed)}.")]
    return "\n".join(lines).rstrip() + "\n"
