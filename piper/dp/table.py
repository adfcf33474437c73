"""The table engine: Piper's dp[I][k'][s] itself, one pass over the ideal pairs."""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

from ..ideals import IdealPairs, Ideals
from ..knapsack import EXACT, _least, _total, knapsack
from ..plan import Plan, Stage
from ..problem import Problem
from ..result import SolverError
from .arrays import _Arrays
from .limits import _Progress, _TimeUp
from .stage import (_choice_runs, _d_invariant, _fits, _mem_at, _mem_choice, _sharded, _stage_choice, _stage_costs,
                    _stage_nodes, _stage_options, _stage_scratch)


@njit(cache=True)
def _pair_values(words, I, J, n, ts, ds, k, S, n_mb, bw, M, mode, opt_start, opt_cnt, tp, tw, ta, tb,
                 in_ptr, in_src, out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb, rq, pq, c0, rb, sq, opt_t, opt_d, K, work_nodes,
                 in_i, in_j, off, qidx, ebytes, cost, mem, ch, fast, alive, costs_d, run_lo, run_hi, run_ch):
    """K[o, y] = stage value of I \\ J with option o = (opt_t[o], opt_d[o]) at y (inf if none).

    Returns False when no option of the stage fits at y = 1 (the pair is useless)."""
    nx = _stage_nodes(words, I, J, n, in_i, in_j, work_nodes)
    nodes = work_nodes[:nx]
    any_ok = False
    n_opts = opt_t.shape[0]
    for o in range(n_opts):
        for y in range(S + 2):
            K[o, y] = np.inf
    for ti in range(ts.shape[0]):
        t = ts[ti]
        if not _stage_options(nodes, nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src, out_ptr, out_dst,
                              inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes):
            continue
        m = off[nx]
        if mode == EXACT and _d_invariant(nx, off, qidx, tw, sq, 0):
            _stage_costs(m, qidx, ebytes, ds[0], ds, bw, rq, pq, c0, rb, cost)
            n_run, run_lo, run_hi, run_ch = _choice_runs(nx, n, m, off, qidx, ta, tb, sq, M, cost, mem, ch, fast, mode,
                                                         False, S, np.inf, t, k, S, ds, alive, costs_d,
                                                         run_lo, run_hi, run_ch)
            if n_run == 0:
                continue
            any_ok = True
            for o in range(n_opts):
                if opt_t[o] != t:
                    continue
                d = opt_d[o]
                _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, cost)
                y_max = (S + d - 1) // d
                for rr in range(n_run):
                    if run_lo[rr] > y_max:
                        break
                    val = _total(run_ch[rr * n: rr * n + nx], cost)
                    for y in range(run_lo[rr], min(run_hi[rr], y_max) + 1):
                        K[o, y] = val
            continue
        for o in range(n_opts):
            if opt_t[o] != t:
                continue
            d = opt_d[o]
            di = 0
            while ds[di] != d:
                di += 1
            _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, cost)
            y_max = (S + d - 1) // d
            y = 1
            while y <= y_max:
                _mem_at(m, qidx, ta, tb, sq, di, y, mem)
                val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                if val == np.inf:
                    break
                any_ok = True
                K[o, y] = val
                y2 = y + 1
                if mode == EXACT:
                    while y2 <= y_max and _fits(nx, ch, ta, tb, sq, di, qidx, y2, M):
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
def _table_dp(i0, i1, ptr, sub, words, n, ts, ds, k, S, n_mb, bw, M, mode, opt_start, opt_cnt, tp, tw, ta, tb,
              in_ptr, in_src, out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb, rq, pq, c0, rb, sq, opt_t, opt_d, dpm,
              pmin, pmiss, ub):
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
    (t, d), even the bound sum_v min p_v(t) / d (pmin[., t]: per-ideal sums of the
    least p at t; pmiss counts the layers without a TMPC at t) cannot improve cur.
    Pass 1 keeps, per pair and option, the least F among its (t, d, y) left to
    pass 2 (hard_f); pass 2 revisits a pair only where that F could improve cur
    somewhere in the option's budgets (cur only decreases, so the test is exact).
    Terms above ub (the value of a known plan, or +inf) are dropped: dpm then
    holds inf where only such terms exist, which cannot change the optimum.
    """
    n_opts = opt_t.shape[0]
    cur = np.empty((k + 1, S + 1))
    max_opts = tp.shape[0] + 1
    in_i, in_j, nodes, off, qidx, ebytes, cost, mem, ch = _stage_scratch(n, max_opts)
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
                J = sub[p]
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
                        if _region_needs(cur, dpm, J, opt_t[o] * d, d, 0, S, k, lb, ub):
                            useful_t[ti] = True
                            useful = True
                            break
                if not useful:
                    continue
                if phase == 0:
                    hard_f[p - ptr[I], :] = np.inf
                nx = _stage_nodes(words, I, J, n, in_i, in_j, nodes)
                for ti in range(ts.shape[0]):
                    t = ts[ti]
                    if not useful_t[ti]:
                        continue
                    if not _stage_options(nodes[:nx], nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src,
                                          out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes):
                        continue
                    m = off[nx]
                    d_inv = mode == EXACT and _d_invariant(nx, off, qidx, tw, sq, 0)
                    # sharded memory s / d: the least-memory choice and infeasibility depend on d
                    shard = _sharded(nx, off, qidx, sq, 0)
                    if d_inv:
                        _stage_costs(m, qidx, ebytes, ds[0], ds, bw, rq, pq, c0, rb, cost1)
                    # per option of this t: costs, fastest choice, its value F, its memory A y + B
                    n_o = 0
                    for o in range(n_opts):
                        if opt_t[o] != t:
                            continue
                        o_list[n_o] = o
                        _stage_costs(m, qidx, ebytes, opt_d[o], ds, bw, rq, pq, c0, rb, costs[n_o])
                        _least(off[: nx + 1], costs[n_o, :m], fasts[n_o])
                        F[n_o] = _total(fasts[n_o][:nx], costs[n_o])
                        fa = 0.0
                        fb = 0.0
                        odi = o_di[o]
                        for i in range(nx):
                            q = qidx[fasts[n_o, i]]
                            fa += ta[q]
                            fb += tb[q]
                            if sq is not None:
                                if shard:
                                    fb += sq[odi, q]
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
                                fast_fits = _mem_choice(nx, fasts[r], qidx, ta, tb, sq, di, y) <= M
                            if fast_fits:
                                any_fits = True
                                if phase == 0:
                                    _region_update(cur, dpm, J, td, d, y, S, k, F[r], ub)
                                continue
                            if shard:
                                # memory a y + b + s / d: per d (options of one t come in d order)
                                if low_di != di:
                                    _mem_at(m, qidx, ta, tb, sq, di, y, mem)
                                    _least(off[: nx + 1], mem[:m], low)
                                    infeasible = _mem_choice(nx, low, qidx, ta, tb, sq, di, y) > M
                                    low_di = di
                                if infeasible:
                                    continue  # a larger d may still fit (s / d shrinks)
                                any_fits = True
                            else:
                                if not low_ready:
                                    _mem_at(m, qidx, ta, tb, sq, di, y, mem)
                                    _least(off[: nx + 1], mem[:m], low)
                                    infeasible = _mem_choice(nx, low, qidx, ta, tb, sq, di, y) > M
                                    low_ready = True
                                if infeasible:
                                    break  # memory does not depend on d: no option fits at y
                            if phase == 0:
                                hard[p - ptr[I]] = True
                                if F[r] < hard_f[p - ptr[I], o]:
                                    hard_f[p - ptr[I], o] = F[r]
                                if mode == EXACT:
                                    _region_update(cur, dpm, J, td, d, y, S, k, _total(low[:nx], cost), ub)
                                continue
                            if not _region_needs(cur, dpm, J, td, d, y, S, k, F[r], ub):
                                continue
                            if d_inv:
                                if not (have_choice and _mem_choice(nx, ch, qidx, ta, tb, sq, 0, y) <= M):
                                    knapsack(mode, off[: nx + 1], cost1[:m], mem[:m], M, ch[:nx])
                                    have_choice = True
                                val = _total(ch[:nx], cost)
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
def _table_step(I, kap, s, target, ptr, sub, words, n, ts, ds, k, S, n_mb, bw, M, mode, opt_start, opt_cnt, tp,
                tw, ta, tb, in_ptr, in_src, out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb, rq, pq, c0, rb, sq, opt_t, opt_d, dpm):
    """One reconstruction step: (J, o, k'', s'') with k'' <= kap, s'' <= s and
    max(dpm[J, k'' - t d, s'' - d], K(I \\ J, o, ceil(s'' / d))) <= target; J = -1 if none.
    (The table may hold an achievable upper bound where the exact stage value is lower.)"""
    n_opts = opt_t.shape[0]
    K = np.empty((n_opts, S + 2))
    in_i, in_j, work_nodes, off, qidx, ebytes, cost, mem, ch = _stage_scratch(n, tp.shape[0] + 1)
    run_lo = np.empty(S + 1, dtype=np.int64)
    run_hi = np.empty(S + 1, dtype=np.int64)
    run_ch = np.empty((S + 1) * n, dtype=np.int64)
    fast = np.empty(n, dtype=np.int64)
    alive = np.zeros(0, dtype=np.bool_)  # (t, d) pruning is off: no bound here
    costs_d = np.empty((0, 0))
    for p in range(ptr[I], ptr[I + 1]):
        J = sub[p]
        if not _pair_values(words, I, J, n, ts, ds, k, S, n_mb, bw, M, mode, opt_start, opt_cnt, tp, tw, ta,
                            tb, in_ptr, in_src, out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb, rq, pq, c0, rb, sq, opt_t, opt_d, K,
                            work_nodes, in_i, in_j, off, qidx, ebytes, cost, mem, ch, fast, alive, costs_d,
                            run_lo, run_hi, run_ch):
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


def _options_arrays(arr: _Arrays, k: int) -> tuple[np.ndarray, np.ndarray]:
    """All options o = (t, d): t in ts, d in ds, t d <= k (t-major, d ascending)."""
    ot, od = [], []
    for t in arr.ts:
        for d in arr.ds:
            if t * d <= k:
                ot.append(int(t))
                od.append(int(d))
    return np.array(ot, dtype=np.int64), np.array(od, dtype=np.int64)


def _pmin(problem: Problem, arr: _Arrays, ideals: Ideals) -> tuple[np.ndarray, np.ndarray]:
    """Per ideal and allowed degree t (index into ``arr.ts``): the sum over its nodes of
    the least p of their TMPCs at t (d times it is a lower bound on any stage value at
    (t, d) of those nodes, as cut edges and resync only add), and the number of its
    nodes without a TMPC at t (a stage at t cannot hold them)."""
    n_t = len(arr.ts)
    least = np.zeros((arr.n, n_t))
    miss = np.zeros((arr.n, n_t))
    for v in range(arr.n):
        for ti in range(n_t):
            vals = [arr.tp[arr.opt_start[v, ti] + r] for r in range(arr.opt_cnt[v, ti])]
            if vals:
                least[v, ti] = min(vals)
            else:
                miss[v, ti] = 1.0
    bits = ((ideals.words[:, :, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).reshape(len(ideals), -1)
    b = bits[:, : arr.n].astype(np.float64)
    return b @ least, (b @ miss).astype(np.int64)


def _solve_table(problem: Problem, arr: _Arrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                 deadline: float | None, progress: _Progress, ub: float = math.inf
                 ) -> tuple[np.ndarray, Plan | None, float]:
    """The table engine: dpm[I, k', s] for all ideals, then the plan at (V, k, S).
    ``ub``: the value of a known plan (terms above it are dropped), or +inf."""
    k = problem.devices
    S = min(problem.microbatches, k)
    opt_t, opt_d = _options_arrays(arr, k)
    n_ideals = len(ideals)
    size_gb = n_ideals * (k + 1) * (S + 1) * 8 / 1e9
    if size_gb > 3.0:
        raise SolverError(f"the DP table would need {size_gb:.1f} GB ({n_ideals} ideals x {k + 1} x {S + 1}); "
                          f"use fewer devices, --linearize, or the threshold engine (params engine='threshold')")
    dpm = np.empty((n_ideals, k + 1, S + 1))
    dpm[0] = 0.0
    consts = (problem.microbatches, arr.bw_edge, problem.memory_per_device, mode, arr.opt_start, arr.opt_cnt,
              arr.tp, arr.tw, arr.ta, arr.tb, arr.in_ptr, arr.in_src, arr.out_ptr, arr.out_dst, arr.inb_ptr, arr.inb,
              arr.outb_ptr, arr.outb, arr.rq, arr.pq, arr.c0, arr.rb, arr.sq, opt_t, opt_d)
    i0 = 1
    step = 16
    ptr = pairs.ptr
    pmin, pmiss = _pmin(problem, arr, ideals)
    while i0 < n_ideals:
        i1 = min(n_ideals, i0 + step)
        t0 = time.perf_counter()
        _table_dp(i0, i1, ptr, pairs.sub, ideals.words, arr.n, arr.ts, arr.ds, k, S, *consts, dpm, pmin, pmiss, ub)
        dt = time.perf_counter() - t0
        step = int(min(1 << 16, max(1, step * (0.5 / max(dt, 1e-3)))))
        i0 = i1
        progress.say(f"DP table: {i1}/{n_ideals} ideals ({int(ptr[i1])}/{pairs.count} ideal pairs)")
        if deadline is not None and time.perf_counter() > deadline and i0 < n_ideals:
            raise _TimeUp()
    full = ideals.full
    target = float(dpm[full, k, S])
    if math.isinf(target):
        return dpm, None, math.inf
    t_index = {int(t): i for i, t in enumerate(arr.ts)}
    stages: list[Stage] = []
    cur, kap, s = full, k, S
    while cur != 0:
        J, o, kk, ss = _table_step(cur, kap, s, target, ptr, pairs.sub, ideals.words, arr.n, arr.ts, arr.ds, k, S,
                                   *consts, dpm)
        if J < 0:
            raise SolverError(f"internal error: DP reconstruction lost its way at ideal {cur}")
        t, d = int(opt_t[o]), int(opt_d[o])
        y = -(-int(ss) // d)
        nodes, chosen, _ = _stage_choice(
            ideals.words, cur, J, arr.n, t_index[t], d, y, arr.ds, problem.microbatches, arr.bw_edge,
            problem.memory_per_device, mode, arr.opt_start, arr.opt_cnt, arr.tp, arr.tw, arr.ta, arr.tb,
            arr.in_ptr, arr.in_src, arr.out_ptr, arr.out_dst, arr.inb_ptr, arr.inb, arr.outb_ptr, arr.outb, arr.rq, arr.pq, arr.c0, arr.rb, arr.sq)
        ids = tuple(problem.nodes[int(v)].id for v in nodes)
        names = {problem.nodes[int(v)].id: arr.labels[int(q)][2] for v, q in zip(nodes, chosen)}
        stages.append(Stage(ids, d, t, names))
        cur, kap, s = int(J), int(kk) - t * d, int(ss) - d
        target = float(dpm[cur, kap, s])
    return dpm, Plan(tuple(stages)), float(dpm[full, k, S])
