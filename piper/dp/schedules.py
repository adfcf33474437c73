"""The DP under version 3's options (docs/problem.md §9): the batch-time objective and interleaved
plans, for both objectives; each schedule's best plan, then the best of them.

* 1F1B, TPS: Piper's DP as ever (the caller's function, :mod:`piper.dp.entry`).
* 1F1B, batch time: on an identical chain (:mod:`piper.dp.chain`) the uniform plans by counts
  (:mod:`piper.dp.groups`, v = 1) are exact and fast; free plans then run the front DP over ideals
  (:mod:`piper.dp.batch`) below that plan's value.  Any other graph: the front DP (free, or one per
  (t, d) when uniform).
* interleaved (v >= 2), either objective: exact by counts on an identical chain; otherwise a
  heuristic with a proven bound (:mod:`piper.dp.interleaved_any`).

Status: "optimal" only when every part searched its whole space exactly (exact knapsack, no time
limit, batch time exact in tau) and the best plan meets the least proven bound; otherwise
"feasible" with that bound, "infeasible" when every part proved it has no plan, else "unknown".
``objective``, ``bound`` are in the objective's units (``Result.objective_kind``).

The knob ``params["upper_bound"]`` (a value in the objective's units, e.g. the best plan a caller
already holds from another workload) searches only for plans better than it. When the search is
exact and complete and finds none, the status is "unknown" with no plan and ``bound`` = the knob:
a proof that no plan is better than it (``python -m piper plan`` uses it across
micro-batch sizes). It applies to the batch-time and interleaved searches; Piper's 1F1B DP for
the TPS does not take it (a SolverError says so).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import BATCH_TIME, Options, candidates
from piper.core.plan import ONE_F_ONE_B
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result
from piper.dp.batch import solve_batch_1f1b
from piper.dp.chain import identical_chain, relaxed_chain
from piper.dp.compile_clock import solve_clock
from piper.dp.groups import solve_groups
from piper.dp.interleaved_any import interleaved_heuristic
from piper.dp.knapsack import EXACT, GREEDY
from piper.dp.limits import with_slack
from piper.dp.outcome import Outcome

__all__ = ["solve_schedules"]


def _from_result(res: Result) -> Outcome:
    """A TPS Result of Piper's 1F1B DP as an Outcome (its TPS, its bound)."""
    complete = "time limit" not in res.message and res.status != Status.UNKNOWN
    return Outcome(res.plan, res.tps, res.bound, complete, dict(res.stats), res.message)


def _one_f_one_b_batch(problem: Problem, options: Options, cand, chain, mode: int, deadline: float | None,
                       ub: float) -> Outcome:
    """The best 1F1B plan for the batch time below ``ub`` (a known plan's value; inf: none)."""
    if chain is not None and not options.linearize:
        # uniform plans by counts: exact for them, and an upper bound that prunes the free search
        uni = solve_groups(problem, chain, cand, (1,), True, mode, ub=ub, deadline=deadline)
        if options.uniform or not uni.complete:
            return uni
        cap = min(ub, uni.value)
        free = solve_batch_1f1b(problem, options, cand, ub=cap, deadline=deadline, chain=chain)
        stats = {"uniform_by_counts": uni.stats, **free.stats}
        if free.plan is not None and free.value <= uni.value:
            return replace(free, stats=stats)
        return Outcome(uni.plan, uni.value, min(free.lower, uni.lower, cap), free.complete, stats)
    return solve_batch_1f1b(problem, options, cand, ub=ub, deadline=deadline)


def solve_schedules(problem: Problem, options: Options, tps_1f1b: Callable[[Problem, Options], Result]) -> Result:
    """The best plan over the schedules and objective ``options`` ask for (module docstring);
    ``tps_1f1b`` is Piper's 1F1B DP for the TPS."""
    start = solve_clock()
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    mode = EXACT if options.knapsack == "exact" else GREEDY
    batch = options.objective == BATCH_TIME
    kind = options.objective
    # v above the layers is never reached (each chunk holds one): not tried
    kinds = tuple(v for v in options.virtual_stage_choices() if v <= max(2, problem.n))
    deadline = None if options.time_limit_s is None else start + options.time_limit_s
    # the knob is checked before anything else, so that it is never ignored (an infeasible instance included)
    cutoff = upper_bound(options)
    if math.isfinite(cutoff) and 1 in kinds and not batch:
        raise SolverError("the DP's upper_bound knob applies to the batch-time and interleaved searches, not to "
                          "Piper's 1F1B DP for the TPS (use --schedule interleaved or --objective batch-time)")
    cand = candidates(problem, options)
    if cand.infeasible_reason is not None:
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=solve_clock() - start,
                           message=cand.infeasible_reason, objective_kind=kind)
    chain = identical_chain(problem, cand)
    parts: list[tuple[str, Outcome]] = []
    inter = tuple(v for v in kinds if v >= 2)
    prune = with_slack(cutoff)  # a plan at the cutoff computed a few ulps apart is still found
    interleaved = None
    if inter and batch:
        # the interleaved search is fast (by counts) and its plan often prunes the 1F1B search
        interleaved = _interleaved(problem, cand, chain, inter, batch, mode, prune, deadline, options.linearize)
    if 1 in kinds:
        if batch:
            known = _value(problem, interleaved, kind)
            ub = min(prune, with_slack(known) if math.isfinite(known) else math.inf)
            parts.append((ONE_F_ONE_B, _one_f_one_b_batch(problem, options, cand, chain, mode, deadline, ub)))
        else:
            one = replace(options, max_virtual_stages=1, schedule=ONE_F_ONE_B)
            parts.append((ONE_F_ONE_B, _from_result(tps_1f1b(problem, one))))
    if inter:
        if interleaved is None:
            known = min((_value(problem, oc, kind) for _, oc in parts), default=math.inf)
            ub = min(prune, with_slack(known) if math.isfinite(known) else math.inf)
            interleaved = _interleaved(problem, cand, chain, inter, batch, mode, ub, deadline, options.linearize)
        parts.append(("interleaved", interleaved))
    # below the cutoff, "nothing found" by an exhaustive search proves every plan >= cutoff; the
    # interleaved heuristic (other graphs than identical chains) is not exhaustive
    exhaustive = chain is not None or not inter
    return _combine(problem, name, kind, mode, parts, chain is not None, solve_clock() - start,
                    cutoff=cutoff if exhaustive else math.inf)


def upper_bound(options: Options) -> float:
    """The ``upper_bound`` knob (+inf when not given): search only for plans better than it."""
    value = options.params.get("upper_bound")
    if value is None:
        return math.inf
    value = float(value)
    if math.isnan(value) or value <= 0:
        raise SolverError(f"the DP's upper_bound knob must be a number > 0, got {options.params['upper_bound']!r}")
    return value


def _value(problem: Problem, oc: Outcome | None, kind: str) -> float:
    """The evaluator's value of an outcome's plan (inf without one)."""
    return math.inf if oc is None or oc.plan is None else evaluate(problem, oc.plan).value(kind)


def _interleaved(problem: Problem, cand, chain, kinds: tuple[int, ...], batch: bool, mode: int, ub: float,
                 deadline: float | None, linearize: bool) -> Outcome:
    """The best interleaved plan (v in ``kinds``) below ``ub``: exact by counts on an identical chain,
    else the heuristic, its bound raised by the exact optimum of the relaxed identical chain when the
    graph is a chain whose inner layers differ only in their numbers (:func:`relaxed_chain`: every
    interleaved plan costs at least that optimum)."""
    if chain is not None:
        return solve_groups(problem, chain, cand, kinds, batch, mode, ub=ub, deadline=deadline)
    relaxed = relaxed_chain(problem, cand) if mode == EXACT else None  # (a path has one order: linearize changes nothing)
    if relaxed is None:
        return interleaved_heuristic(problem, cand, kinds, batch, mode, deadline=deadline, linearize=linearize)
    r_problem, r_cand, r_chain = relaxed
    # the relaxation first: its exact optimum bounds every interleaved plan, so when it holds nothing
    # below ub neither does the graph (no heuristic then: most of the planner's cut-off solves)
    bound = solve_groups(r_problem, r_chain, r_cand, kinds, batch, mode, ub=ub, deadline=deadline)
    relaxed_stats = {"first": r_chain.first, "stop": r_chain.stop, "lower": bound.lower, "complete": bound.complete,
                     **bound.stats}
    if bound.complete and bound.plan is None:
        return Outcome(None, math.inf, bound.lower, True, {"relaxed_chain": relaxed_stats})
    found = interleaved_heuristic(problem, cand, kinds, batch, mode, deadline=deadline, linearize=linearize)
    if bound.plan is not None:
        # the relaxation's best plan priced on the graph itself (the same stages and choices): a plan
        # the heuristic's cuts may have missed
        score = evaluate(problem, bound.plan)
        value = score.value("batch-time" if batch else "tps")
        if not score.oom and value < found.value:
            found = replace(found, plan=bound.plan, value=value)
    stats = {**found.stats, "relaxed_chain": relaxed_stats}
    if not (bound.complete and found.complete):
        return replace(found, stats=stats)
    # both bounds hold for every interleaved plan: the layouts' (found.lower = min(it, the heuristic's
    # value)) and the relaxation's optimum; neither above a plan found
    return replace(found, lower=min(found.value, max(found.lower, bound.lower)), stats=stats)


def _combine(problem: Problem, name: str, kind: str, mode: int, parts: list[tuple[str, Outcome]], on_chain: bool,
             elapsed: float, cutoff: float = math.inf) -> Result:
    best_plan, best = None, math.inf
    for _, oc in parts:
        if oc.plan is not None:
            got = evaluate(problem, oc.plan).value(kind)
            if got < best:
                best_plan, best = oc.plan, got
    lower = min(oc.lower for _, oc in parts)
    complete = all(oc.complete for _, oc in parts)
    stats = {"identical_chain": on_chain, "parts": {label: oc.stats for label, oc in parts}}
    message = "; ".join(oc.message for _, oc in parts if oc.message)
    if best_plan is None and math.isfinite(cutoff) and complete and mode == EXACT:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=elapsed, bound=max(lower, cutoff), stats=stats,
                           objective_kind=kind, message=f"no plan better than the upper bound {cutoff:.6g} "
                                                        "(the upper_bound knob): every plan is at least that")
    if best_plan is None:
        status = Status.INFEASIBLE if complete and math.isinf(lower) else Status.UNKNOWN
        if status == Status.INFEASIBLE and not message:
            message = "no plan fits in memory on the available devices"
        if status == Status.UNKNOWN and not message:
            message = ("time limit hit before any plan was found" if not complete else
                       "no plan found, and no proof that none exists (interleaved plans of a graph that is not a "
                       "chain of identical layers are searched by a heuristic)")
        bound = lower if status == Status.UNKNOWN and complete and mode == EXACT and math.isfinite(lower) else None
        return make_result(problem, name, status, None, time_s=elapsed, bound=bound, stats=stats, message=message,
                           objective_kind=kind)
    bound = min(lower, best)
    exact = mode == EXACT and complete and best <= with_slack(lower)
    status = Status.OPTIMAL if exact else Status.FEASIBLE
    if mode != EXACT:
        bound = 0.0
    elif not exact and not message:
        message = f"best plan {best:.6g}, proven bound {bound:.6g}"
    return make_result(problem, name, status, best_plan, time_s=elapsed, objective=best, bound=bound, stats=stats,
                       message=message, objective_kind=kind)
