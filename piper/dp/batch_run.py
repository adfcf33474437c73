"""One batch-time DP run over 1F1B plans (one edge bandwidth, one device budget): stage tables
(:mod:`piper.dp.bt_tables`), the front DP (:mod:`piper.dp.fronts`) and the plan.

Exact with the exact knapsack when every node's TMPCs share one w (then each stage's choice of
least TPS is one of least tau); otherwise the plan is the DP's optimum over those choices and a
second DP with each stage's least tau (:data:`~piper.dp.bt_tables.BatchSegments.tau_low`)
bounds the optimum from below (docs/dp.md, "batch time").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from piper.core.options import Candidates
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.dp.arrays import limits_of, run_arrays
from piper.dp.bt_tables import BatchTables, build_batch_tables
from piper.dp.compile_clock import solve_clock
from piper.dp.fronts import best_final, front_pass, new_pool, walk_back
from piper.dp.ideals import IdealPairs, Ideals
from piper.dp.knapsack import EXACT
from piper.dp.limits import TimeUp, next_chunk, past
from piper.dp.reconstruct import StageStep, build_plan

__all__ = ["SLACK", "BatchRun", "batch_run"]

#: relative slack on an upper bound before it prunes (the DP sums a plan's terms in another order
#: than the computation that gave the bound; :func:`piper.dp.limits.with_slack`)
SLACK = 1e-9


@dataclass(frozen=True)
class BatchRun:
    """The outcome of one run: its best plan (None: none with value <= ``ub``), the DP's value of it
    (batch time, time units), a proven lower bound on every plan of the run's class (inf: none
    exists; 0: nothing proven) and whether the search ran to the end."""

    plan: Plan | None
    value: float
    lower: float
    complete: bool
    stats: dict = field(default_factory=dict)


def _tables(problem: Problem, layers, ideals: Ideals, pairs: IdealPairs, mode: int, t_max: float,
            deadline: float | None, classes: tuple[np.ndarray, np.ndarray] | None = None) -> BatchTables:
    """Stage tables of every ideal pair; with ``classes`` (each pair's class, one pair per class:
    :func:`piper.dp.chain.pair_classes`) only the classes' representatives are solved and their
    entries repeated for every pair of the class (they share the segments)."""
    lim = limits_of(problem)
    n_ideals = len(ideals)
    counts = np.diff(pairs.ptr)
    p_i = np.repeat(np.arange(n_ideals, dtype=np.int64), counts)
    p_j = pairs.sub.astype(np.int64)
    todo = np.arange(p_i.shape[0]) if classes is None else classes[1]
    parts: list[BatchTables] = []
    chunk = 2048
    start = 0
    while start < todo.shape[0]:
        stop = min(todo.shape[0], start + chunk)
        t0 = solve_clock()
        sel = todo[start:stop]
        parts.append(build_batch_tables(layers, lim, ideals.words, p_i[sel], p_j[sel], mode, t_max))
        chunk = next_chunk(chunk, solve_clock() - t0, 64, 1 << 20)
        start = stop
        if past(deadline) and start < todo.shape[0]:
            raise TimeUp()
    tab = _concat(parts)
    if classes is None:
        return tab
    return _expand(tab, classes, p_i, p_j, n_ideals)


def _expand(tab: BatchTables, classes: tuple[np.ndarray, np.ndarray], p_i: np.ndarray, p_j: np.ndarray,
            n_ideals: int) -> BatchTables:
    """The representatives' entries repeated for every pair of their class (pairs in order)."""
    cls, reps = classes
    rep_keys = p_i[reps] * n_ideals + p_j[reps]
    which = np.searchsorted(rep_keys, tab.ideal * n_ideals + tab.sub)
    per_rep = np.bincount(which, minlength=reps.shape[0])
    first = np.zeros(reps.shape[0], dtype=np.int64)
    np.cumsum(per_rep[:-1], out=first[1:])
    lens = per_rep[cls]
    total = int(lens.sum())
    offsets = np.cumsum(lens) - lens
    idx = np.repeat(first[cls] - offsets, lens) + np.arange(total, dtype=np.int64)
    return BatchTables(np.repeat(p_i, lens), np.repeat(p_j, lens), tab.t[idx], tab.d[idx], tab.first_seg[idx],
                       tab.seg_stop[idx], tab.segments, tab.exact_tau)


def _concat(parts: list[BatchTables]) -> BatchTables:
    if len(parts) == 1:
        return parts[0]
    base = 0
    first = []
    for p in parts:
        first.append(p.first_seg + base)
        base += p.segments.value.shape[0]
    cat = np.concatenate
    segs = type(parts[0].segments)(*(cat([getattr(p.segments, f) for p in parts])
                                     for f in parts[0].segments._fields))
    first_seg = cat(first) if first else np.zeros(0, np.int64)
    stop = np.empty_like(first_seg)
    if stop.shape[0]:
        stop[:-1] = first_seg[1:]
        stop[-1] = segs.value.shape[0]
    return BatchTables(cat([p.ideal for p in parts]), cat([p.sub for p in parts]), cat([p.t for p in parts]),
                       cat([p.d for p in parts]), first_seg, stop, segs, all(p.exact_tau for p in parts))


def rest_work(layers, ideals: Ideals) -> tuple[np.ndarray, np.ndarray]:
    """Per ideal I: the least compute p (time units) of the layers outside I, over their allowed t
    and TMPCs, and the least t p (device-time): what the stages before I must at least do."""
    least = np.zeros(layers.n)
    least_t = np.zeros(layers.n)
    for v in range(layers.n):
        vals = [(layers.tp[layers.opt_start[v, ti] + r], float(layers.ts[ti]))
                for ti in range(len(layers.ts)) for r in range(layers.opt_cnt[v, ti])]
        least[v] = min(p for p, _ in vals)
        least_t[v] = min(p * t for p, t in vals)
    bits = ((ideals.words[:, :, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).reshape(len(ideals), -1)
    outside = 1.0 - bits[:, : layers.n].astype(np.float64)
    return outside @ least, outside @ least_t


def _fronts(problem: Problem, tab: BatchTables, n_ideals: int, ub: float, use_low: bool, deadline: float | None,
            rest: np.ndarray, rest_t: np.ndarray) -> tuple[float, int, int, object]:
    """The front DP: (least DP value, its final entry, its s, the pool)."""
    S = min(problem.microbatches, problem.devices)
    k = problem.devices
    with_dev = bool(tab.t.shape[0]) and int(tab.t.max()) * S > k
    ent_ptr = np.searchsorted(tab.ideal, np.arange(n_ideals + 1, dtype=np.int64)).astype(np.int64)
    pool, used, ne_used = new_pool(n_ideals, S)
    proposed = 0
    # ideals in chunks of about CHUNK_S seconds, the deadline checked between them: an ideal's
    # fronts cost grows with the ideals below it (1,024 devices, DeepSeek-V3's 65 ideals: the
    # 7th took 1.6 s), so the chunk starts at one ideal and grows by the time the last one took
    chunk = 1
    lo = 1
    while lo < n_ideals:
        hi = min(n_ideals, lo + chunk)
        t0 = solve_clock()
        pool, used, ne_used, more = front_pass(tab, tab.segments, ent_ptr, lo, hi, S, k, float(problem.microbatches),
                                               ub, with_dev, use_low, pool, used, ne_used, rest, rest_t)
        proposed += int(more)
        chunk = next_chunk(chunk, solve_clock() - t0, 1, 1 << 20)
        lo = hi
        if past(deadline) and hi < n_ideals:
            raise TimeUp()
    best, x, s = best_final(pool, n_ideals - 1, S, float(problem.microbatches))
    return float(best), int(x), int(s), (pool, used, proposed)


def batch_run(problem: Problem, cand: Candidates, bw_edge: float, ideals: Ideals, pairs: IdealPairs, mode: int,
              ub: float = math.inf, deadline: float | None = None,
              classes: tuple[np.ndarray, np.ndarray] | None = None) -> BatchRun:
    """The least batch time over the 1F1B plans of ``problem`` (its ``devices`` is the run's device
    budget) with every cut edge at ``bw_edge`` bytes/s, under ``cand``; only plans of value <= ``ub``
    (a known plan's value) are searched.  ``classes``: pairs whose stages cost the same (an
    identical chain, :func:`piper.dp.chain.pair_classes`)."""
    t0 = solve_clock()
    run = run_arrays(problem, cand, bw_edge)
    ub_slack = ub + SLACK * abs(ub) if math.isfinite(ub) else math.inf
    t_max = ub_slack / problem.microbatches
    stats: dict = {}
    try:
        tab = _tables(problem, run.layers, ideals, pairs, mode, t_max, deadline, classes)
        stats.update(entries=int(tab.t.shape[0]), segments=int(tab.segments.value.shape[0]),
                     tables_s=solve_clock() - t0)
        t1 = solve_clock()
        rest, rest_t = rest_work(run.layers, ideals)
        value, x, s, (pool, used, proposed) = _fronts(problem, tab, len(ideals), ub_slack, False, deadline, rest,
                                                      rest_t)
        stats.update(front_entries=int(used), proposed=proposed, fronts_s=solve_clock() - t1)
    except TimeUp:
        return BatchRun(None, math.inf, 0.0, False, stats)
    exact = mode == EXACT
    plan = None
    if x >= 0:
        steps = [StageStep(*st) for st in walk_back(pool, tab, x, len(ideals) - 1, s)]
        plan, _ = build_plan(problem, run, limits_of(problem), ideals.words, mode, steps)
    if not exact:
        # the greedy knapsack proves only that no plan exists (its stage memory test is exact)
        lower = math.inf if plan is None and math.isinf(ub) else 0.0
        return BatchRun(plan, value, lower, True, stats)
    if plan is None:
        lower = ub  # the class's optimum is above ub (inf: no plan at all)
    else:
        lower = value
    if not tab.exact_tau:
        # each stage priced at (least TPS, least tau): a lower bound on every plan of the class
        cap = min(ub_slack, value + SLACK * abs(value)) if plan is not None else ub_slack
        try:
            low, _, _, _ = _fronts(problem, tab, len(ideals), cap, True, deadline, rest, rest_t)
        except TimeUp:
            return BatchRun(plan, value, 0.0, False, stats)
        lower = min(low, lower)
        stats["tau_bound"] = lower
    return BatchRun(plan, value, lower, True, stats)
