"""The table engine's driver: Piper's dp[I][k'][s] filled in chunks of ideals, then the plan.

The kernels are in :mod:`piper.dp.table_kernels`; the method in :mod:`piper.dp`.
"""

from __future__ import annotations

import math

import numpy as np

from piper.core.errors import SolverError
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.dp.arrays import LayerArrays, RunArrays, limits_of
from piper.dp.compile_clock import solve_clock
from piper.dp.ideals import IdealPairs, Ideals
from piper.dp.limits import Progress, TimeUp, next_chunk, past
from piper.dp.reconstruct import build_plan, table_steps
from piper.dp.table_kernels import DegreePairs, IdealGraph, IdealLowerBounds, table_dp


def degree_pairs(layers: LayerArrays, k: int) -> DegreePairs:
    """All options o = (t, d): t in ts, d in ds, t d <= k (t-major, d ascending)."""
    ot, od = [], []
    for t in layers.ts:
        for d in layers.ds:
            if t * d <= k:
                ot.append(int(t))
                od.append(int(d))
    return DegreePairs(np.array(ot, dtype=np.int64), np.array(od, dtype=np.int64))


def ideal_lower_bounds(layers: LayerArrays, ideals: Ideals) -> IdealLowerBounds:
    """Per ideal and allowed degree t (index into ``layers.ts``): the sum over its nodes of
    the least p of their TMPCs at t (d times it is a lower bound on any stage value at
    (t, d) of those nodes, as cut edges and resync only add), and the number of its
    nodes without a TMPC at t (a stage at t cannot hold them)."""
    n_t = len(layers.ts)
    least = np.zeros((layers.n, n_t))
    miss = np.zeros((layers.n, n_t))
    for v in range(layers.n):
        for ti in range(n_t):
            vals = [layers.tp[layers.opt_start[v, ti] + r] for r in range(layers.opt_cnt[v, ti])]
            if vals:
                least[v, ti] = min(vals)
            else:
                miss[v, ti] = 1.0
    bits = ((ideals.words[:, :, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).reshape(len(ideals), -1)
    b = bits[:, : layers.n].astype(np.float64)
    return IdealLowerBounds(b @ least, (b @ miss).astype(np.int64))


def solve_table(problem: Problem, run: RunArrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                deadline: float | None, progress: Progress, ub: float = math.inf
                ) -> tuple[np.ndarray, Plan | None, float]:
    """The table engine: dpm[I, k', s] for all ideals, then the plan at (V, k, S).
    ``ub``: the value of a known plan (terms above it are dropped), or +inf.
    Returns (dpm, the plan or None, its DP value in time per sample)."""
    lim = limits_of(problem)
    k, S = lim.devices, lim.budget
    opts = degree_pairs(run.layers, k)
    n_ideals = len(ideals)
    size_gb = n_ideals * (k + 1) * (S + 1) * 8 / 1e9
    if size_gb > 3.0:
        raise SolverError(f"the DP table would need {size_gb:.1f} GB ({n_ideals} ideals x {k + 1} x {S + 1}); "
                          f"use fewer devices, --linearize, or the threshold engine (params engine='threshold')")
    dpm = np.empty((n_ideals, k + 1, S + 1))
    dpm[0] = 0.0
    graph = IdealGraph(ideals.words, pairs.ptr, pairs.sub)
    low_bounds = ideal_lower_bounds(run.layers, ideals)
    i0 = 1
    step = 16
    while i0 < n_ideals:
        i1 = min(n_ideals, i0 + step)
        t0 = solve_clock()
        table_dp(run.layers, lim, graph, opts, mode, ub, low_bounds, dpm, i0, i1)
        dt = solve_clock() - t0
        step = next_chunk(step, dt, 1, 1 << 16)
        i0 = i1
        progress.say(f"DP table: {i1}/{n_ideals} ideals ({int(pairs.ptr[i1])}/{pairs.count} ideal pairs)")
        if past(deadline) and i0 < n_ideals:
            raise TimeUp()
    full = ideals.full
    value = float(dpm[full, k, S])
    if math.isinf(value):
        return dpm, None, math.inf
    plan, _ = build_plan(problem, run, lim, ideals.words, mode, table_steps(run, lim, graph, opts, mode, dpm, full))
    return dpm, plan, value
