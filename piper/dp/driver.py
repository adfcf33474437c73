"""One DP run: engine choice, heuristic bound, search, curve and status."""

from __future__ import annotations

import math
from dataclasses import replace

from piper.core.errors import SolverError
from piper.core.options import Candidates, Options, candidates
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result
from piper.dp.arrays import HEUR, RunArrays, limits_of, run_arrays
from piper.dp.compile_clock import solve_clock
from piper.dp.ideals import IdealPairs, Ideals, enumerate_ideals, ideal_pairs
from piper.dp.knapsack import EXACT, GREEDY
from piper.dp.limits import Progress, TimeUp, with_slack
from piper.dp.reconstruct import build_plan, threshold_steps
from piper.dp.table import degree_pairs, solve_table
from piper.dp.threshold import Search, build_tables


def _curve_points(problem: Problem, options: Options, pairs: int = 0) -> list[int]:
    """Device counts k' of the curve: ``params["curve_points"]``, or all 1..k with
    ``params["curve"] = True``, none with False; by default all 1..k when cheap
    (k <= 64 and at most 5000 ideal pairs, e.g. BERT), else none."""
    k = problem.devices
    explicit = options.params.get("curve_points")
    if explicit is not None:
        return sorted({int(x) for x in explicit if 1 <= int(x) <= k})
    mode = options.params.get("curve", None)
    if mode is False:
        return []
    if mode is True or (k <= 64 and pairs <= 5000):
        return list(range(1, k + 1))
    return []


def solve_run(problem: Problem, options: Options, bw_edge: float, cand: Candidates | None = None) -> Result:
    """One DP over the plans of ``problem`` (its ``devices`` is this run's device budget) with
    every cut edge at ``bw_edge`` bytes/s, under ``cand`` (default ``candidates(problem,
    options)``; a uniform run passes one (t, d)).  Result as :func:`solve_dp`'s."""
    start = solve_clock()
    deadline = None if options.time_limit_s is None else start + options.time_limit_s
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    if options.knapsack not in ("exact", "greedy"):
        raise SolverError(f"unknown knapsack mode {options.knapsack!r}; use 'exact' or 'greedy'")
    mode = EXACT if options.knapsack == "exact" else GREEDY
    progress = Progress(options.progress)
    cand = candidates(problem, options) if cand is None else cand
    stats: dict = {"knapsack": options.knapsack, "linearize": options.linearize}
    if cand.infeasible_reason is not None:  # no plan on any number of devices: the curve is all None
        stats["curve"] = _none_curve(problem, options, 0)
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=solve_clock() - start,
                           stats=stats, message=cand.infeasible_reason)
    try:
        ideals = enumerate_ideals(problem, options.max_ideals, linearize=options.linearize, deadline=deadline,
                                  progress=progress)
    except TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start, stats=stats,
                           message=f"time limit ({options.time_limit_s} s) hit while enumerating ideals")
    pairs = ideal_pairs(ideals)
    stats.update(ideals=len(ideals), ideal_pairs=pairs.count)
    progress.say(f"{len(ideals)} ideals, {pairs.count} ideal pairs", force=True)
    run = run_arrays(problem, cand, bw_edge)
    S = min(problem.microbatches, problem.devices)
    engine = _choose_engine(options, pairs, run, problem.devices)
    stats["engine"] = engine
    if engine == "table":
        return _finish_table(problem, options, run, ideals, pairs, mode, name, start, deadline, progress, stats, cand)
    pts = _curve_points(problem, options, pairs.count)
    ub = math.inf
    use_bound = options.params.get("greedy_bound", None)
    if use_bound is None:
        use_bound = problem.n > 64
    if mode == EXACT and not pts and use_bound:
        # large stages make exact knapsacks costly: bound the optimum first by a
        # cheap heuristic table (greedy choices, achievable values); then only stage
        # values <= that bound are computed exactly
        t0 = solve_clock()
        try:
            heur = build_tables(problem, run, ideals, pairs, HEUR, deadline, progress)
            hs = Search(heur, S, deadline, progress)
            idx = hs.least_index(problem.devices)
            if idx is not None:
                heur_value = float(hs.cands[idx])
                ub = with_slack(heur_value)
        except TimeUp:
            return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start, stats=stats,
                               message=f"time limit ({options.time_limit_s} s) hit while bounding the optimum")
        stats.update(heuristic_bound=None if math.isinf(ub) else heur_value, bound_s=solve_clock() - t0)
    try:
        t0 = solve_clock()
        tables = build_tables(problem, run, ideals, pairs, mode, deadline, progress, ub)
        stats.update(entries=tables.entries, segments=tables.segments, tables_s=solve_clock() - t0)
    except TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start, stats=stats,
                           message=f"time limit ({options.time_limit_s} s) hit while building stage tables")
    search = Search(tables, S, deadline, progress, ub)
    stats["candidates"] = int(len(search.cands))
    t0 = solve_clock()
    best: int | None = None
    try:
        best = search.least_index(problem.devices)
    except TimeUp:
        pass
    timed_out = best is None and deadline is not None and solve_clock() > deadline
    if best is None and not timed_out:
        stats.update(search_s=solve_clock() - t0, tests=search.tests,
                     curve=_none_curve(problem, options, pairs.count))
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=solve_clock() - start, stats=stats,
                           message="no plan fits in memory on the available devices")
    if best is None:
        # time limit: the best threshold proven feasible so far, if any
        feas = [i for i, m in search.memo.items() if m <= problem.devices]
        if not feas:
            stats.update(tests=search.tests)
            return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start,
                               stats=stats, message=f"time limit ({options.time_limit_s} s) hit during the search")
        plan, obj = _reconstruct(problem, run, search, min(feas), mode)
        stats.update(tests=search.tests)
        return make_result(problem, name, Status.FEASIBLE, plan, time_s=solve_clock() - start,
                           objective=obj, stats=stats, message=f"time limit ({options.time_limit_s} s)")
    stats["search_s"] = solve_clock() - t0
    plan, obj = _reconstruct(problem, run, search, best, mode)
    message = ""
    t0 = solve_clock()
    try:
        if pts:
            idx = search.curve(pts)
            stats["curve"] = [[k, None if idx[k] is None else float(search.cands[idx[k]])] for k in pts]
    except TimeUp:
        message = "time limit hit while computing the curve (stats['curve'] omitted)"
    stats.update(curve_s=solve_clock() - t0, tests=search.tests)
    status = Status.OPTIMAL if mode == EXACT else Status.FEASIBLE
    return make_result(problem, name, status, plan, time_s=solve_clock() - start, objective=obj,
                       stats=stats, message=message)


def _reconstruct(problem: Problem, run: RunArrays, search: Search, idx: int, mode: int) -> tuple[Plan, float]:
    """The plan behind m(cands[idx]) and its DP value (the largest stage value)."""
    return build_plan(problem, run, limits_of(problem), search.tb.ideals.words, mode, threshold_steps(search, idx))


def _none_curve(problem: Problem, options: Options, pairs: int) -> list[list]:
    return [[k, None] for k in _curve_points(problem, options, pairs)]


def _choose_engine(options: Options, pairs: IdealPairs, run: RunArrays, k: int) -> str:
    """``params["engine"]`` ("table" or "threshold"), else: the threshold search unless its
    stage tables would be large (ideal pairs x options > 20 M, e.g. GNMT), then the table."""
    engine = options.params.get("engine", "auto")
    if engine in ("table", "threshold"):
        return engine
    if engine != "auto":
        raise SolverError(f"unknown DP engine {engine!r}; use 'table', 'threshold' or 'auto'")
    n_opts = len(degree_pairs(run.layers, k).t)
    return "table" if pairs.count * max(1, n_opts) > 20_000_000 else "threshold"


def _finish_table(problem: Problem, options: Options, run: RunArrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                  name: str, start: float, deadline: float | None, progress: Progress, stats: dict,
                  cand: Candidates) -> Result:
    t0 = solve_clock()
    want_curve = options.params.get("curve", None) is True or options.params.get("curve_points") is not None
    ub = math.inf
    if not want_curve and not ideals.linear:
        # a bound from the linearized problem (n + 1 ideals, cheap) prunes the full DP
        lin = solve_run(problem, replace(options, linearize=True, time_limit_s=None, progress=False,
                                          params={**options.params, "curve": False, "engine": "auto"}),
                         run.layers.bw_edge, cand)
        ub = with_slack(lin.objective) if lin.objective is not None else math.inf
        stats["linearized_tps"] = None if math.isinf(lin.tps) else lin.tps
    try:
        dpm, plan, obj = solve_table(problem, run, ideals, pairs, mode, deadline, progress, ub)
    except TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=solve_clock() - start, stats=stats,
                           message=f"time limit ({options.time_limit_s} s) hit while filling the DP table")
    stats["table_s"] = solve_clock() - t0
    S = min(problem.microbatches, problem.devices)
    if want_curve or (math.isinf(ub) and options.params.get("curve", None) is not False):
        pts = _curve_points(problem, options) if options.params.get("curve_points") is not None else \
            list(range(1, problem.devices + 1))
        stats["curve"] = [[kk, None if math.isinf(dpm[ideals.full, kk, S]) else float(dpm[ideals.full, kk, S])]
                          for kk in pts]
    if plan is None:
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=solve_clock() - start, stats=stats,
                           message="no plan fits in memory on the available devices")
    status = Status.OPTIMAL if mode == EXACT else Status.FEASIBLE
    return make_result(problem, name, status, plan, time_s=solve_clock() - start, objective=obj, stats=stats)
