"""Compiled kernels of the table engine: Piper's dp[I][k'][s] itself, one pass over the ideal pairs.

See :mod:`piper.dp` for the method and :mod:`piper.dp.table` for the driver.  Numba's cache
does not see edits of callees in other files: after editing :mod:`piper.dp.stage`, delete
``piper/dp/__pycache__``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from piper.dp.knapsack import EXACT, knapsack, least_option, total_of
from piper.dp.stage import (
    ChoiceRuns,
    choice_fits,
    choice_memory,
    choice_runs,
    d_invariant,
    entry_or_zero,
    has_sharded,
    new_scratch,
    options_memory_at,
    stage_costs,
    stage_nodes,
    stage_options,
)


class DegreePairs(NamedTuple):
    """The options o = (t[o], d[o]) of a stage: t in ts, d in ds, t d <= k (t-major, d ascending)."""

    t: np.ndarray
    d: np.ndarray


class IdealGraph(NamedTuple):
    """The ideals as bit sets (``words[I]``, 64 nodes a word) and, per ideal I, its sub-ideals
    ``sub[ptr[I]:ptr[I + 1]]`` (:class:`piper.dp.ideals.IdealPairs`)."""

    words: np.ndarray
    ptr: np.ndarray
    sub: np.ndarray


class IdealLowerBounds(NamedTuple):
    """Per ideal and allowed degree t (index into ts): least_time = the sum over its nodes of the
    least time per sample of their TMPCs at t; missing = its number of nodes without a TMPC at t."""

    least_time: np.ndarray
    missing: np.ndarray


@njit(cache=True)
def _pair_values(lay, lim, words, I, J, mode, opts, K, sc, runs):
    """K[o, y] = stage value of I \\ J with option o = (opts.t[o], opts.d[o]) at y (inf if none).

    Returns False when no option of the stage fits at y = 1 (the pair is useless)."""
    n, ts, ds = lay.n, lay.ts, lay.ds
    S, M = lim.budget, lim.memory
    opt_t, opt_d = opts.t, opts.d
    off, cost, mem, ch = sc.off, sc.cost, sc.mem, sc.ch
    nx = stage_nodes(words, I, J, n, sc)
    any_ok = False
    n_opts = opt_t.shape[0]
    for o in range(n_opts):
        for y in range(S + 2):
            K[o, y] = np.inf
    for ti in range(ts.shape[0]):
        t = ts[ti]
        if not stage_options(lay, sc, nx, ti):
            continue
        m = off[nx]
        if mode == EXACT and d_invariant(lay, sc, nx):
            stage_costs(lay, sc, m, ds[0], cost)
            n_run, runs = choice_runs(lay, lim, sc, nx, mode, np.bool_(False), S, np.inf, t, runs)
            if n_run == 0:
                continue
            any_ok = True
            for o in range(n_opts):
                if opt_t[o] != t:
                    continue
                d = opt_d[o]
                stage_costs(lay, sc, m, d, cost)
                y_max = (S + d - 1) // d
                for rr in range(n_run):
                    if runs.lo[rr] > y_max:
                        break
                    val = total_of(runs.ch[rr * n: rr * n + nx], cost)
                    for y in range(runs.lo[rr], min(runs.hi[rr], y_max) + 1):
                        K[o, y] = val
            continue
        for o in range(n_opts):
            if opt_t[o] != t:
                continue
            d = opt_d[o]
            di = 0
            while ds[di] != d:
                di += 1
            stage_costs(lay, sc, m, d, cost)
            y_max = (S + d - 1) // d
            y = np.int64(1)
            while y <= y_max:
                options_memory_at(lay, sc, m, di, y)
                val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                if val == np.inf:
                    break
                any_ok = True
                K[o, y] = val
                y2 = y + 1
                if mode == EXACT:
                    while y2 <= y_max and choice_fits(lay, sc, nx, ch, di, y2, M):
                        K[o, y2] = val
                        y2 += 1
                y = y2
    return any_ok


@njit(cache=True)
def _region_update(cur, dpm, J, td, d, y, S, k, val, ub):
    """cur[k', s] = min(cur[k', s], max(val, dpm[J, k' - t d, s - d])) for k' >= t d and the
    budgets s with ceil(s / d) = y, s >= d.  Values above ub (a proven bound) are dropped."""
    if val > ub:
        return
    s_lo = max(d, d * (y - 1) + 1)
    s_hi = min(S, d * y)
    for kap in range(td, k + 1):
        for s in range(s_lo, s_hi + 1):
            prev = dpm[J, kap - td, s - d]
            mx = val if val > prev else prev
            if mx < cur[kap, s]:
                cur[kap, s] = mx


@njit(cache=True)
def _region_needs(cur, dpm, J, td, d, y, S, k, lb, ub):
    """Could a stage value >= lb improve cur (and stay <= ub) in the region of (t d, d, y)?
    y = 0: every budget s >= d."""
    s_lo = max(d, d * (y - 1) + 1)
    s_hi = min(S, d * y)
    if y == 0:
        s_lo = d
        s_hi = S
    if lb > ub:
        return False
    for kap in range(td, k + 1):
        for s in range(s_lo, s_hi + 1):
            prev = dpm[J, kap - td, s - d]
            mx = lb if lb > prev else prev
            if mx < cur[kap, s] and mx <= ub:
                return True
    return False


@njit(cache=True)
def table_dp(lay, lim, graph, opts, mode, ub, low_bounds, dpm, i0, i1):
    """Fill dpm[I] for I in [i0, i1): dpm[I, k', s] = min over J < I and options (t, d),
    t d <= k', d <= s, of max(dpm[J, k' - t d, s - d], K(I \\ J, t, d, ceil(s / d))),
    then made non-increasing in k' and s ("at most" semantics, as the reference).

    Two passes over the sub-ideals J of each I.  Pass 1 enters the cheap stage
    values: exact ones where the all-fastest choice fits (every knapsack returns
    it then) and, for the exact knapsack, the least-memory choice's value (an
    achievable upper bound).  Pass 2 solves a knapsack only where the stage's
    lower bound (its all-fastest value F) could still improve some cur[k', s]:
    a skipped term max(K, prev) >= max(F, prev) >= cur, so the result is exact.
    A pair, or one degree t of it, is skipped outright when, for every option
    (t, d), even the bound sum_v min p_v(t) / d (low_bounds.least_time[., t]: per-ideal sums
    of the least p at t; low_bounds.missing counts the layers without a TMPC at t) cannot
    improve cur.
    Pass 1 keeps, per pair and option, the least F among its (t, d, y) left to
    pass 2 (hard_f); pass 2 revisits a pair only where that F could improve cur
    somewhere in the option's budgets (cur only decreases, so the test is exact).
    Terms above ub (the value of a known plan, or +inf) are dropped: dpm then
    holds inf where only such terms exist, which cannot change the optimum.
    """
    n, ts, ds, ta, tb = lay.n, lay.ts, lay.ds, lay.ta, lay.tb
    k, S, M = lim.devices, lim.budget, lim.memory
    words, ptr, sub = graph.words, graph.ptr, graph.sub
    pmin, pmiss = low_bounds.least_time, low_bounds.missing
    opt_t, opt_d = opts.t, opts.d
    n_opts = opt_t.shape[0]
    cur = np.empty((k + 1, S + 1))
    max_opts = lay.tp.shape[0] + 1
    sc = new_scratch(lay)
    off, qidx, mem, ch = sc.off, sc.qidx, sc.mem, sc.ch
    cost1 = np.empty(max_opts)
    low = np.empty(n, dtype=np.int64)
    F = np.empty(n_opts)
    o_list = np.empty(n_opts, dtype=np.int64)
    costs = np.empty((n_opts, max_opts))
    fasts = np.empty((n_opts, n), dtype=np.int64)
    FA = np.empty(n_opts)
    FB = np.empty(n_opts)
    hard = np.zeros(1024, dtype=np.bool_)
    hard_f = np.empty((1024, n_opts))
    useful_t = np.zeros(ts.shape[0], dtype=np.bool_)
    o_di = np.empty(n_opts, dtype=np.int64)  # option -> index of its d in ds (for sq)
    for o in range(n_opts):
        di = 0
        while ds[di] != opt_d[o]:
            di += 1
        o_di[o] = di
    for I in range(i0, i1):
        cur[:, :] = np.inf
        n_sub = ptr[I + 1] - ptr[I]
        if hard.shape[0] < n_sub:
            hard = np.zeros(2 * n_sub, dtype=np.bool_)
            hard_f = np.empty((2 * n_sub, n_opts))
        for phase in range(2):
            for p in range(ptr[I], ptr[I + 1]):
                if phase == 1 and not hard[p - ptr[I]]:
                    continue  # every stage value of this pair was entered exactly in pass 1
                hard[p - ptr[I]] = False
                J = np.int64(sub[p])  # sub is int32: J as int64, as the other engines pass it
                useful = False
                for ti in range(ts.shape[0]):
                    useful_t[ti] = False
                    if pmiss[I, ti] != pmiss[J, ti]:
                        continue  # a layer of I - J has no TMPC at this t
                    base = (pmin[I, ti] - pmin[J, ti]) * (1.0 - 1e-9)
                    for o in range(n_opts):
                        if opt_t[o] != ts[ti]:
                            continue
                        d = opt_d[o]
                        # pass 2 only solves where pass 1 left a gap (inf: none for o)
                        lb = hard_f[p - ptr[I], o] if phase == 1 else base / d
                        if lb == np.inf:
                            continue
                        if _region_needs(cur, dpm, J, opt_t[o] * d, d, np.int64(0), S, k, lb, ub):
                            useful_t[ti] = True
                            useful = True
                            break
                if not useful:
                    continue
                if phase == 0:
                    hard_f[p - ptr[I], :] = np.inf
                nx = stage_nodes(words, I, J, n, sc)
                for ti in range(ts.shape[0]):
                    t = ts[ti]
                    if not useful_t[ti]:
                        continue
                    if not stage_options(lay, sc, nx, ti):
                        continue
                    m = off[nx]
                    d_inv = mode == EXACT and d_invariant(lay, sc, nx)
                    # sharded memory s / d: the least-memory choice and infeasibility depend on d
                    shard = has_sharded(lay, sc, nx)
                    if d_inv:
                        stage_costs(lay, sc, m, ds[0], cost1)
                    # per option of this t: costs, fastest choice, its value F, its memory A y + B
                    n_o = 0
                    for o in range(n_opts):
                        if opt_t[o] != t:
                            continue
                        o_list[n_o] = o
                        stage_costs(lay, sc, m, opt_d[o], costs[n_o])
                        least_option(off[: nx + 1], costs[n_o, :m], fasts[n_o])
                        F[n_o] = total_of(fasts[n_o][:nx], costs[n_o])
                        fa = 0.0
                        fb = 0.0
                        odi = o_di[o]
                        for i in range(nx):
                            q = qidx[fasts[n_o, i]]
                            fa += ta[q]
                            fb += tb[q]
                            if shard:
                                fb += entry_or_zero(lay.sq, odi, q)
                        FA[n_o] = fa
                        FB[n_o] = fb
                        n_o += 1
                    # a lower bound on the least memory: sum of per-node least a and least b (s / d >= 0)
                    la = 0.0
                    lb_ = 0.0
                    for i in range(nx):
                        ma = np.inf
                        mb = np.inf
                        for j in range(off[i], off[i + 1]):
                            q = qidx[j]
                            ma = min(ma, ta[q])
                            mb = min(mb, tb[q])
                        la += ma
                        lb_ += mb
                    hi_tol = M * (1.0 + 1e-10)
                    lo_tol = M * (1.0 - 1e-10)
                    have_choice = False  # d-invariant exact: the last optimal choice (in ch)
                    for y in range(1, S + 1):
                        if la * y + lb_ > hi_tol:
                            break  # surely no choice fits at y or any larger y
                        low_ready = False
                        low_di = -1
                        infeasible = False
                        any_opt = False
                        any_fits = False
                        for r in range(n_o):
                            o = o_list[r]
                            d = opt_d[o]
                            di = o_di[o]
                            if (S + d - 1) // d < y:
                                continue
                            any_opt = True
                            td = t * d
                            cost = costs[r]
                            approx = FA[r] * y + FB[r]
                            if approx <= lo_tol:
                                fast_fits = True
                            elif approx > hi_tol:
                                fast_fits = False
                            else:  # close to the limit: the evaluator's exact sum
                                fast_fits = choice_memory(lay, sc, nx, fasts[r], di, y) <= M
                            if fast_fits:
                                any_fits = True
                                if phase == 0:
                                    _region_update(cur, dpm, J, td, d, y, S, k, F[r], ub)
                                continue
                            if shard:
                                # memory a y + b + s / d: per d (options of one t come in d order)
                                if low_di != di:
                                    options_memory_at(lay, sc, m, di, y)
                                    least_option(off[: nx + 1], mem[:m], low)
                                    infeasible = choice_memory(lay, sc, nx, low, di, y) > M
                                    low_di = di
                                if infeasible:
                                    continue  # a larger d may still fit (s / d shrinks)
                                any_fits = True
                            else:
                                if not low_ready:
                                    options_memory_at(lay, sc, m, di, y)
                                    least_option(off[: nx + 1], mem[:m], low)
                                    infeasible = choice_memory(lay, sc, nx, low, di, y) > M
                                    low_ready = True
                                if infeasible:
                                    break  # memory does not depend on d: no option fits at y
                            if phase == 0:
                                hard[p - ptr[I]] = True
                                if F[r] < hard_f[p - ptr[I], o]:
                                    hard_f[p - ptr[I], o] = F[r]
                                if mode == EXACT:
                                    _region_update(cur, dpm, J, td, d, y, S, k, total_of(low[:nx], cost), ub)
                                continue
                            if not _region_needs(cur, dpm, J, td, d, y, S, k, F[r], ub):
                                continue
                            if d_inv:
                                if not (have_choice and choice_memory(lay, sc, nx, ch, np.int64(0), y) <= M):
                                    knapsack(mode, off[: nx + 1], cost1[:m], mem[:m], M, ch[:nx])
                                    have_choice = True
                                val = total_of(ch[:nx], cost)
                            else:
                                val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                            _region_update(cur, dpm, J, td, d, y, S, k, val, ub)
                        if not any_opt:
                            break
                        if shard:
                            if not any_fits:
                                break  # no d fits at y, hence none at a larger y (memory grows with y)
                        elif infeasible:
                            break
                if phase == 1:
                    hard[p - ptr[I]] = False
        for kap in range(k + 1):
            for s in range(S + 1):
                v = cur[kap, s]
                if kap > 0 and cur[kap - 1, s] < v:
                    v = cur[kap - 1, s]
                if s > 0 and cur[kap, s - 1] < v:
                    v = cur[kap, s - 1]
                cur[kap, s] = v
                dpm[I, kap, s] = v


@njit(cache=True)
def table_step(lay, lim, graph, opts, mode, dpm, I, kap, s, target):
    """One reconstruction step: (J, o, k'', s'') with k'' <= kap, s'' <= s and
    max(dpm[J, k'' - t d, s'' - d], K(I \\ J, o, ceil(s'' / d))) <= target; J = -1 if none.
    (The table may hold an achievable upper bound where the exact stage value is lower.)"""
    n, S = lay.n, lim.budget
    opt_t, opt_d = opts.t, opts.d
    n_opts = opt_t.shape[0]
    K = np.empty((n_opts, S + 2))
    sc = new_scratch(lay)
    # room for every run (at most S): no growth; the (t, d) pruning is off (no bound here)
    runs = ChoiceRuns(np.empty(S + 1, dtype=np.int64), np.empty(S + 1, dtype=np.int64),
                      np.empty((S + 1) * n, dtype=np.int64))
    for p in range(graph.ptr[I], graph.ptr[I + 1]):
        J = np.int64(graph.sub[p])
        if not _pair_values(lay, lim, graph.words, I, J, mode, opts, K, sc, runs):
            continue
        for o in range(n_opts):
            d = opt_d[o]
            td = opt_t[o] * d
            for kk in range(td, kap + 1):
                for ss in range(d, s + 1):
                    val = K[o, (ss + d - 1) // d]
                    prev = dpm[J, kk - td, ss - d]
                    mx = val if val > prev else prev
                    if mx <= target:
                        return J, o, kk, ss
    return -1, -1, -1, -1
