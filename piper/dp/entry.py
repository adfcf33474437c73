"""The entry point: version 2's two edge-bandwidth runs and uniform plans."""

from __future__ import annotations

import math
from dataclasses import replace

from piper.core import stopping
from piper.core.errors import SolverError
from piper.core.options import TPS, Options, candidates
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result
from piper.dp.compile_clock import compile_seconds, solve_clock
from piper.dp.driver import solve_run
from piper.dp.ideals import enumerate_ideals, ideal_pairs, pair_cap
from piper.dp.iteration import check_iteration_keys
from piper.dp.limits import Progress, TimeUp
from piper.dp.runs import UNIFORM_MAX_WORK, edge_runs, restrict
from piper.dp.schedules import solve_schedules


@stopping.polled  # SIGINT / SIGTERM: seen between kernel calls (piper.core.stopping.polled)
def solve_dp(problem: Problem, options: Options | None = None) -> Result:
    """Piper's DP (exact or greedy knapsack per ``options.knapsack``); see the module docstring.

    Version 2 (docs/problem.md §2.2): B_edge is a property of the whole plan (B_in when
    sum d t <= G, else B), so the DP runs twice when G < k: once over plans with at most
    G devices and cut edges at B_in (exact for them), once over all plans with cut edges
    at B (exact for plans spanning nodes; with B_in >= B a plan inside one node is scored
    pessimistically there), and the better plan wins (:func:`_solve_edges`).  With G >= k
    (always in version 1) there is one run, at B_in (= B without the key): every number
    is then exactly the version-1 number.

    Uniform plans (``options.uniform``, docs/problem.md §2.5): one DP (both runs) per
    allowed (t, d) with only that pair allowed; the best wins (:func:`_solve_uniform`).

    Result: ``objective`` = the DP's value (max stage value of its plan), ``tps`` =
    the evaluator's score of the plan, ``stats`` with ``ideals``, ``ideal_pairs``,
    ``curve`` ([k', best TPS or None]), ``entries``, ``segments``, ``candidates``,
    ``tests`` and phase timings; with two runs also ``runs`` (one summary per run).

    Compiling the kernels (the first run after an install) does not count: the DP's clock
    stands still while numba compiles (:mod:`piper.dp.compile_clock`), and the seconds it took
    are ``stats["compile_s"]`` when there were any.
    """
    options = options or Options()
    if options.knapsack not in ("exact", "greedy"):
        raise SolverError(f"unknown knapsack mode {options.knapsack!r}; use 'exact' or 'greedy'")
    # docs/problem.md §10: refused here, in one line, when the DP cannot price the keys exactly
    check_iteration_keys(problem, candidates(problem, options))
    compiled_before = compile_seconds()
    plain = options.objective == TPS and options.virtual_stage_choices() == (1,)
    if plain and options.params.get("upper_bound") is None:
        result = _solve_tps(problem, options)  # Piper's DP, exactly as before version 3
    else:  # version 3's options; solve_schedules also refuses the upper_bound knob for the TPS over 1F1B
        result = solve_schedules(problem, options, _solve_tps)
    compile_s = compile_seconds() - compiled_before
    return replace(result, stats={**result.stats, "compile_s": compile_s}) if compile_s > 0 else result


def _solve_tps(problem: Problem, options: Options) -> Result:
    """Piper's DP for the TPS over 1F1B plans (free or uniform)."""
    return _solve_uniform(problem, options) if options.uniform else _solve_edges(problem, options)


def _remaining(options: Options, start: float) -> Options:
    if options.time_limit_s is None:
        return options
    return replace(options, time_limit_s=max(0.0, options.time_limit_s - (solve_clock() - start)))


def _solve_edges(problem: Problem, options: Options, pair: tuple[int, int] | None = None) -> Result | None:
    """The DP with version 2's plan-level edge bandwidth (see :func:`solve_dp`); ``pair`` =
    (t, d): only that pair (a uniform run; None when no run allows it)."""
    start = solve_clock()
    runs = edge_runs(problem)
    if pair is None and len(runs) == 1:
        return solve_run(problem, options, runs[0][1])  # version 1 (and G >= k): one run, as ever
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    results: list[tuple[Result, Problem, float]] = []
    for prob, bw_edge in runs:
        cand = candidates(prob, options)
        if pair is not None:
            if cand.infeasible_reason is None:
                cand = restrict(cand, *pair)
            if cand is None:
                continue
        results.append((solve_run(prob, _remaining(options, start), bw_edge, cand), prob, bw_edge))
    if not results:
        return None
    if len(results) == 1:
        res, prob, _ = results[0]
        if prob is problem:
            return res
        return make_result(problem, name, res.status, res.plan, time_s=solve_clock() - start,
                           objective=res.objective, bound=res.bound if res.status != Status.OPTIMAL else None,
                           stats=res.stats, message=res.message)
    return combine_edges(problem, options, name, results, start)


def combine_edges(problem: Problem, options: Options, name: str, results: list[tuple[Result, Problem, float]],
                  start: float) -> Result:
    """The better of the run inside one node (k = G, edges at B_in) and the run over all
    plans (edges at B); see :func:`solve_dp`.  With B_in < B (allowed, if odd) the second
    run scores a plan inside one node optimistically: when its best plan is one, its value
    is only a lower bound on plans spanning nodes, and the result is then FEASIBLE with
    that bound unless the first run's optimum is already no larger."""
    (r1, p1, _), (r2, _, _) = results
    g = problem.node_size
    exact = options.knapsack == "exact"
    odd = problem.bandwidth_intra < problem.bandwidth
    plans = [(r, i) for i, r in enumerate((r1, r2)) if r.plan is not None]
    scored = [(make_result(problem, name, r.status, r.plan, time_s=0.0).tps, i, r) for r, i in plans]
    message = "; ".join(m for m in (r1.message, r2.message) if m)
    timed = any(r.status in (Status.UNKNOWN, Status.FEASIBLE) and "time limit" in r.message for r in (r1, r2))
    bound: float | None = None
    stats = dict((r2 if r2.plan is not None or r1.plan is None else r1).stats)
    stats["runs"] = [{"devices": p.devices, "edge_bandwidth": bw, "status": r.status.value, "objective": r.objective,
                      "tps": None if math.isinf(r.tps) else r.tps, "time_s": r.time_s} for r, p, bw in results]
    if not scored:
        status = Status.UNKNOWN if timed else Status.INFEASIBLE
        stats.pop("curve", None)
        return make_result(problem, name, status, None, time_s=solve_clock() - start, stats=stats,
                           message=message or "no plan fits in memory on the available devices")
    if exact:
        # the least DP value is the optimum (run 1 first on ties); run 2's plan inside one node
        # is never better than run 1's real optimum, so it only wins on value when B_in < B
        best = min(plans, key=lambda ri: (ri[0].objective, ri[1]))
        res = best[0]
        objective = res.objective
        if odd and r2.plan is not None and r2.plan.devices_used <= g:
            # a lower bound on every plan: run 2's optimum, or its bound when run 2 stopped early
            # (a stopped run's objective is an incumbent, no bound)
            lower = r2.objective if r2.status == Status.OPTIMAL else (r2.bound or 0.0)
            if r1.plan is not None and r1.status == Status.OPTIMAL and r1.objective <= lower:
                res, objective = r1, r1.objective
            else:
                # run 2's value is a lower bound only; keep the best real plan
                _, _, res = min(scored, key=lambda x: (x[0], x[1]))
                objective = make_result(problem, name, res.status, res.plan, time_s=0.0).tps
                bound = lower
                message = "; ".join(m for m in (message, "intraNodeBandwidth < bandwidth: plans spanning nodes are "
                                                "only bounded below (the DP scored a plan inside one node at B)") if m)
        statuses = {r1.status, r2.status}
        if bound is not None or timed or Status.FEASIBLE in statuses or Status.UNKNOWN in statuses:
            status = Status.FEASIBLE
            if bound is None:
                bound = 0.0
        else:
            status = Status.OPTIMAL
    else:
        _, _, res = min(scored, key=lambda x: (x[0], x[1]))
        objective = res.objective
        status = Status.FEASIBLE
    curve1, curve2 = r1.stats.get("curve"), r2.stats.get("curve")
    stats.pop("curve", None)
    if curve1 is not None and curve2 is not None and not odd:
        c1 = {int(a): v for a, v in curve1}
        c2 = {int(a): v for a, v in curve2}
        curve = []
        for kk in sorted(set(c1) | set(c2)):
            if min(kk, p1.devices) not in c1 or kk not in c2:
                continue
            vals = [v for v in (c1[min(kk, p1.devices)], c2[kk]) if v is not None]
            curve.append([kk, min(vals) if vals else None])
        stats["curve"] = curve
    return make_result(problem, name, status, res.plan, time_s=solve_clock() - start, objective=objective,
                       bound=bound, stats=stats, message=message)


def _solve_uniform(problem: Problem, options: Options) -> Result:
    """Uniform plans (docs/problem.md §2.5): the DP once per allowed (t, d), only that pair
    allowed (both edge runs of version 2 each); the best plan wins.  No curve."""
    start = solve_clock()
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    cand = candidates(problem, options)
    if cand.infeasible_reason is not None:
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=solve_clock() - start,
                           stats={"uniform": True}, message=cand.infeasible_reason)
    k = problem.devices
    pairs_td = [(t, d) for t in cand.ts for d in cand.ds if t * d <= k
                and all(t in per_t for per_t in cand.tmpcs.values())]
    try:
        deadline = None if options.time_limit_s is None else start + options.time_limit_s
        ideals = enumerate_ideals(problem, options.max_ideals, linearize=options.linearize, deadline=deadline,
                                  progress=Progress(options.progress))
    except TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start,
                           stats={"uniform": True},
                           message=f"time limit ({options.time_limit_s} s) hit while enumerating ideals")
    try:
        n_pairs = ideal_pairs(ideals, deadline=deadline, max_pairs=pair_cap(options.params)).count
    except TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start,
                           stats={"uniform": True},
                           message=f"time limit ({options.time_limit_s} s) hit while pairing the {len(ideals):,} ideals")
    n_dps = len(pairs_td) * len(edge_runs(problem))
    cap = int(options.params.get("max_ideal_pairs", UNIFORM_MAX_WORK))
    if n_dps * n_pairs > cap:
        raise SolverError(
            f"uniform plans need one DP per (t, d) pair: {len(pairs_td)} pairs x {len(edge_runs(problem))} "
            f"edge-bandwidth run(s) = {n_dps} DPs over {n_pairs:,} ideal pairs each = {n_dps * n_pairs:,} "
            f"ideal-pair passes, over the limit of {cap:,}; raise it with --max-ideal-pairs "
            f"(params['max_ideal_pairs']) if time allows, or use --linearize (n + 1 ideals), --no-dp / --no-tp, "
            f"or fewer devices")
    opts = replace(options, uniform=False, params={**options.params, "curve": False, "curve_points": None})
    found: list[tuple[Result, tuple[int, int]]] = []
    for t, d in pairs_td:
        res = _solve_edges(problem, _remaining(opts, start), (t, d))
        if res is not None:
            found.append((res, (t, d)))
    stats: dict = {"uniform": True, "uniform_pairs": len(pairs_td), "dps": n_dps, "ideal_pairs": n_pairs}
    with_plan = [(r, td) for r, td in found if r.plan is not None]
    timed = any("time limit" in r.message for r, _ in found)
    if not with_plan:
        status = Status.UNKNOWN if timed or any(r.status == Status.UNKNOWN for r, _ in found) else Status.INFEASIBLE
        return make_result(problem, name, status, None, time_s=solve_clock() - start, stats=stats,
                           message="no uniform plan fits in memory on the available devices"
                           if status == Status.INFEASIBLE else "time limit hit before any uniform plan was found")
    exact = options.knapsack == "exact"
    if exact:
        res, td = min(with_plan, key=lambda x: x[0].objective)
    else:
        res, td = min(with_plan, key=lambda x: x[0].tps)
    stats.update(t=td[0], d=td[1], runs=[{"t": t, "d": d, "status": r.status.value, "objective": r.objective}
                                          for r, (t, d) in found])
    if exact and all(r.status in (Status.OPTIMAL, Status.INFEASIBLE) for r, _ in found):
        status, bound = Status.OPTIMAL, None
    elif exact:
        status = Status.FEASIBLE
        # every (t, d)'s bound (a proven optimum or lower bound; 0 when unknown) bounds the optimum
        bound = min((r.bound for r, _ in found if r.status != Status.INFEASIBLE), default=0.0)
    else:
        status, bound = Status.FEASIBLE, None
    message = "; ".join(sorted({r.message for r, _ in found if r.message and r.plan is not None}))
    if timed:
        cut = sum("time limit" in r.message for r, _ in found)
        message = "; ".join(m for m in (message, f"time limit ({options.time_limit_s} s): {cut} of {len(found)} "
                                                 f"(t, d) pairs not solved to the end") if m)
    return make_result(problem, name, status, res.plan, time_s=solve_clock() - start, objective=res.objective,
                       bound=bound, stats=stats, message=message)
