"""The per-stage TMPC choice: a multiple-choice knapsack, greedy (reference) or exact.

For one stage, one (t, d) and one y (microbatches in flight), each node i of the
stage picks one option l (a TMPC) with

* cost_l = E_l / (d B_edge) + f (d - 1) w_l / (d N B_resync) + p_l / d   (time per sample;
  E_l = the node's cut-edge bytes with its sync terms; version 1: f = 4 and
  B_edge = B_resync = B, computed as (E_l / d + 4 (d - 1) w_l / (d N)) / B + p_l / d), and
* mem_l  = a_l * y + b_l + s_l / d  (bytes on each device; s = 0 in version 1),

to minimise sum cost subject to sum mem <= M (docs/problem.md §2.2).  The solvers here only
see the arrays cost and mem, which :mod:`piper.dp` fills with these formulas; they do not
depend on the version.  Options of node i are
``off[i]..off[i+1]-1`` of the flat arrays; node order is the stage's node order
(file order), and both solvers sum memory and time in that order, exactly as the
evaluator does, so a plan's memory check here and in the evaluator agree bit for bit.

* :func:`greedy_knapsack` is the reference heuristic (``solveKnapsack`` with
  ``KNAPSACK_FAST_HEURISTIC`` in msr-fiddle/piper ``algo.cpp``), reproduced
  operation by operation.  It may return a slightly-over-memory choice (it stops
  when less than 1e-9 bytes remain to be shaved), as the reference does.
* :func:`exact_knapsack` is provably optimal: a Pareto merge over (memory, time)
  in node order, with pruning by memory (partial + least memory of the rest > M),
  by time (partial + fastest rest > incumbent) and early completion (when the
  rest can take its fastest options and still fit, that completion is optimal
  for the state).

Both return +inf when no choice fits, and write the chosen option (an index into
the flat arrays) of every node into ``choice``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["greedy_knapsack", "exact_knapsack", "knapsack", "GREEDY", "EXACT"]

GREEDY = 0
EXACT = 1

INF = np.inf


@njit(cache=True)
def least_option(off: np.ndarray, vals: np.ndarray, out: np.ndarray) -> None:
    """out[i] = the option of node i (options off[i]..off[i+1]-1) with the least vals
    (first in list order on ties): with costs the fastest choice, with memories the
    least-memory one."""
    n = off.shape[0] - 1
    for i in range(n):
        best = off[i]
        for j in range(off[i] + 1, off[i + 1]):
            if vals[best] > vals[j]:
                best = j
        out[i] = best


@njit(cache=True)
def total_of(idx: np.ndarray, vals: np.ndarray) -> float:
    """sum of vals[idx[i]] over i, in node order."""
    out = 0.0
    for i in range(idx.shape[0]):
        out += vals[idx[i]]
    return out


@njit(cache=True)
def _take(idx: np.ndarray, cost: np.ndarray, choice: np.ndarray) -> float:
    """Record the choice ``idx`` in ``choice`` and return its cost (node order)."""
    val = 0.0
    for i in range(idx.shape[0]):
        val += cost[idx[i]]
        choice[i] = idx[i]
    return val


@njit(cache=True)
def _settle_easy(off: np.ndarray, cost: np.ndarray, mem: np.ndarray, M: float, choice: np.ndarray,
                 fast: np.ndarray, low: np.ndarray) -> tuple[bool, float]:
    """The two cases every knapsack settles first. Fills fast (the fastest option of
    every node) and, if needed, low (the least-memory one). Returns (True, value) when
    the all-fastest choice fits (recorded in choice) or even the least-memory choice
    does not (value +inf); else (False, 0.0)."""
    least_option(off, cost, fast)
    if total_of(fast, mem) <= M:
        return True, _take(fast, cost, choice)
    least_option(off, mem, low)
    if total_of(low, mem) > M:
        return True, INF
    return False, 0.0


@njit(cache=True)
def greedy_knapsack(off: np.ndarray, cost: np.ndarray, mem: np.ndarray, M: float, choice: np.ndarray) -> float:
    """The reference heuristic, step for step.

    1. H = the fastest option of every node; if sum mem(H) <= M return it.
    2. If even the least-memory option of every node exceeds M: infeasible (+inf).
    3. Else list every swap (i -> l) saving memory (mem[H_i] - mem[l] > 1e-9) with
       ratio (cost[l] - cost[H_i]) / saving, sort by (ratio, i, l), and apply the
       swaps in that order (a later swap of the same node replaces its current
       choice, its saving taken against that choice) until the memory still to
       shave off, sum mem(H) - M reduced by each saving, is below 1e-9.
    4. (Not in the reference, which allows at most 2 options per node: if the
       list runs out first, which needs >= 3 options, take the least-memory choice.)
    """
    n = off.shape[0] - 1
    H = np.empty(n, dtype=np.int64)
    low = np.empty(n, dtype=np.int64)
    settled, value = _settle_easy(off, cost, mem, M, choice, H, low)
    if settled:
        return value
    shave = total_of(H, mem) - M
    m_total = off[n]
    ratios = np.empty(m_total, dtype=np.float64)
    who = np.empty(m_total, dtype=np.int64)
    opt = np.empty(m_total, dtype=np.int64)
    cnt = 0
    for i in range(n):
        for j in range(off[i], off[i + 1]):
            saving = mem[H[i]] - mem[j]
            if saving > 1e-9:
                ratios[cnt] = (cost[j] - cost[H[i]]) / saving
                who[cnt] = i
                opt[cnt] = j
                cnt += 1
    # entries were generated in (node, option) order: a stable sort by ratio
    # gives the reference's tuple order (ratio, node position, option position)
    order = np.argsort(ratios[:cnt], kind="mergesort")
    for q in range(cnt):
        r = order[q]
        i = who[r]
        j = opt[r]
        saving = mem[H[i]] - mem[j]
        shave -= saving
        H[i] = j
        if shave < 1e-9:
            break
    if shave >= 1e-9:
        # only possible with > 2 options per node (the reference refuses those):
        # a later swap of a node can undo memory savings and the list runs out
        # before the stage fits; fall back to the least-memory choice (feasible).
        for i in range(n):
            H[i] = low[i]
    val = 0.0
    for i in range(n):
        val += cost[H[i]]
        choice[i] = H[i]
    return val


@njit(cache=True)
def ensure_room(a: np.ndarray, need: int) -> np.ndarray:
    """``a`` if it holds ``need`` items, else a copy with at least twice the room
    (compiled once per dtype; also used by :mod:`piper.dp`)."""
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def _lagrange_pick(off: np.ndarray, cost: np.ndarray, mem: np.ndarray, lam: float) -> tuple[float, float]:
    """Every node's option minimising cost + lam mem (first on ties): (its total memory,
    its total cost + lam mem)."""
    n = off.shape[0] - 1
    used = 0.0
    val = 0.0
    for i in range(n):
        b = off[i]
        for j in range(off[i] + 1, off[i + 1]):
            if cost[j] + lam * mem[j] < cost[b] + lam * mem[b]:
                b = j
        used += mem[b]
        val += cost[b] + lam * mem[b]
    return used, val


@njit(cache=True)
def _lagrange_multiplier(off: np.ndarray, cost: np.ndarray, mem: np.ndarray, M: float) -> float:
    """A multiplier lam >= 0 (near-)maximising L(lam) = sum_i min_l (cost_l + lam mem_l) - lam M."""
    hi = 1.0
    for _ in range(200):
        used, _ = _lagrange_pick(off, cost, mem, hi)
        if used <= M:
            break
        hi *= 4.0
    lo = 0.0
    best_lam = 0.0
    best_val = -INF
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        used, val = _lagrange_pick(off, cost, mem, mid)
        val -= mid * M
        if val > best_val:
            best_val = val
            best_lam = mid
        if used > M:
            lo = mid
        else:
            hi = mid
    return best_lam


@njit(cache=True)
def exact_knapsack(off: np.ndarray, cost: np.ndarray, mem: np.ndarray, M: float, choice: np.ndarray) -> float:
    """Optimal multiple-choice knapsack: min sum cost s.t. sum mem <= M (+inf if none fits).

    Pareto merge in node order over states (partial memory, partial cost), keeping
    only non-dominated states (a state with no more memory and no more cost
    dominates: completions add the same terms, and float addition is monotone).
    """
    n = off.shape[0] - 1
    fast = np.empty(n, dtype=np.int64)
    low = np.empty(n, dtype=np.int64)
    settled, value = _settle_easy(off, cost, mem, M, choice, fast, low)
    if settled:
        return value
    # incumbent: the greedy choice if it truly fits, else the least-memory choice
    inc = np.empty(n, dtype=np.int64)
    g = greedy_knapsack(off, cost, mem, M, inc)
    m_inc = 0.0
    for i in range(n):
        m_inc += mem[inc[i]]
    if not (m_inc <= M):
        g = 0.0
        for i in range(n):
            inc[i] = low[i]
            g += cost[low[i]]
    best = g
    # suffix sums (for pruning only: conservative tolerances, exact final checks)
    suf_min_mem = np.zeros(n + 1)
    suf_fast_mem = np.zeros(n + 1)
    suf_fast_cost = np.zeros(n + 1)
    for i in range(n - 1, -1, -1):
        suf_min_mem[i] = suf_min_mem[i + 1] + mem[low[i]]
        suf_fast_mem[i] = suf_fast_mem[i + 1] + mem[fast[i]]
        suf_fast_cost[i] = suf_fast_cost[i + 1] + cost[fast[i]]
    tol_m = 1e-11 * abs(M) + 1e-300
    # Lagrangian bound: for any lam >= 0 and a feasible completion of a state (m, c) at
    # node i, value >= c + lam m + sum_{j > i} min_l (cost_l + lam mem_l) - lam M.
    # lam by bisection on the dual's subgradient (any lam is valid; a good one prunes more).
    lam = _lagrange_multiplier(off, cost, mem, M)
    suf_r = np.zeros(n + 1)
    for i in range(n - 1, -1, -1):
        r = INF
        for j in range(off[i], off[i + 1]):
            v = cost[j] + lam * mem[j]
            if v < r:
                r = v
        suf_r[i] = suf_r[i + 1] + r
    tol_c = 1e-9 * (abs(best) + lam * abs(M)) + 1e-300
    # global state store: parent state id and option per state
    g_par = np.empty(1024, dtype=np.int64)
    g_opt = np.empty(1024, dtype=np.int64)
    n_glob = 0
    # current layer
    cur_m = np.zeros(1)
    cur_c = np.zeros(1)
    cur_id = np.full(1, -1, dtype=np.int64)
    best_state = -2  # -2: incumbent array; >= 0: finalize from state id at step best_step
    best_step = -1
    for i in range(n):
        k_opts = off[i + 1] - off[i]
        nc = cur_m.shape[0] * k_opts
        cm = np.empty(nc)
        cc = np.empty(nc)
        cp = np.empty(nc, dtype=np.int64)
        co = np.empty(nc, dtype=np.int64)
        q = 0
        for s in range(cur_m.shape[0]):
            for j in range(off[i], off[i + 1]):
                m2 = cur_m[s] + mem[j]
                c2 = cur_c[s] + cost[j]
                if m2 + suf_min_mem[i + 1] > M + tol_m:
                    continue
                if c2 + suf_fast_cost[i + 1] > best * (1.0 + 1e-12):
                    continue
                if c2 + lam * m2 + suf_r[i + 1] - lam * M > best + tol_c:
                    continue
                cm[q] = m2
                cc[q] = c2
                cp[q] = cur_id[s]
                co[q] = j
                q += 1
        if q == 0:
            break
        order = np.argsort(cm[:q], kind="mergesort")
        # dominance filter: ascending memory, keep strictly decreasing cost;
        # equal memory: keep the cheapest (first after a secondary pass)
        keep = np.empty(q, dtype=np.int64)
        nk = 0
        run_min = INF
        idx = 0
        while idx < q:
            # group of equal memory: find the cheapest
            jb = idx
            bsel = order[idx]
            while jb + 1 < q and cm[order[jb + 1]] == cm[order[idx]]:
                jb += 1
                if cc[order[jb]] < cc[bsel]:
                    bsel = order[jb]
            if cc[bsel] < run_min:
                run_min = cc[bsel]
                keep[nk] = bsel
                nk += 1
            idx = jb + 1
        # register kept states
        g_par = ensure_room(g_par, n_glob + nk)
        g_opt = ensure_room(g_opt, n_glob + nk)
        new_m = np.empty(nk)
        new_c = np.empty(nk)
        new_id = np.empty(nk, dtype=np.int64)
        nn = 0
        for r in range(nk):
            s = keep[r]
            gid = n_glob
            g_par[gid] = cp[s]
            g_opt[gid] = co[s]
            n_glob += 1
            # early completion: the rest can all be fastest and still fit
            if i + 1 < n and cm[s] + suf_fast_mem[i + 1] < M - tol_m:
                v = cc[s] + suf_fast_cost[i + 1]
                if v < best:
                    best = v
                    best_state = gid
                    best_step = i
                continue
            new_m[nn] = cm[s]
            new_c[nn] = cc[s]
            new_id[nn] = gid
            nn += 1
        cur_m = new_m[:nn]
        cur_c = new_c[:nn]
        cur_id = new_id[:nn]
        if nn == 0:
            break
        if i == n - 1:
            for s in range(nn):
                if cur_m[s] <= M and cur_c[s] < best:
                    best = cur_c[s]
                    best_state = cur_id[s]
                    best_step = n - 1
    if best_state == -2:
        for i in range(n):
            choice[i] = inc[i]
        return best
    for i in range(best_step + 1, n):
        choice[i] = fast[i]
    gid = best_state
    i = best_step
    while gid >= 0:
        choice[i] = g_opt[gid]
        gid = g_par[gid]
        i -= 1
    # recompute the value in node order (the evaluator's summation order)
    val = 0.0
    for i in range(n):
        val += cost[choice[i]]
    return val


@njit(cache=True)
def knapsack(mode: int, off: np.ndarray, cost: np.ndarray, mem: np.ndarray, M: float, choice: np.ndarray) -> float:
    """Dispatch on ``mode`` (``GREEDY`` or ``EXACT``)."""
    if mode == GREEDY:
        return greedy_knapsack(off, cost, mem, M, choice)
    return exact_knapsack(off, cost, mem, M, choice)
