"""Compiled kernels of the group engine (:mod:`piper.dp.groups`): one device group's knapsack as
its count of identical layers grows, and the DP over the groups of a uniform plan.

A group's items (one per layer it holds, each with its TMPC options as flat arrays, options of
item i at ``off[i] .. off[i + 1] - 1``) are its fixed items first, then its identical "middle"
layers; ``off`` is laid out for the largest count, so the group with m middle layers is the
first ``n_fixed + m`` items.  Per option: cost (its share of the group's TPS, time per sample),
tau (its share of the group's tau, time units per microbatch), memory (bytes), as
:mod:`piper.dp.groups` computes them (docs/problem.md §9.2).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from piper.dp.knapsack import EXACT, ensure_room, knapsack, total_of

__all__ = ["group_curve", "group_points", "group_choice", "group_dp", "group_dp_rows"]


@njit(cache=True)
def group_curve(off, cost, mem, tauv, n_fixed, m_lo, m_hi, M, t_max, mode, shared, out_k, out_tau, out_low,
                it_fixed, it_mid, n_mb):
    """For m = m_lo .. m_hi middle layers: the group's least TPS (out_k[m - m_lo]), the tau of that
    choice and a lower bound on every fitting choice's tau (exact: the least tau when the TMPCs of
    some item differ in w, else the same choice's).  Stops at the first m whose value is +inf or
    above t_max (the value is non-decreasing in m: dropping a layer keeps a choice fitting and
    makes it no slower); the entries from there on are +inf.

    docs/problem.md §10 (:mod:`piper.dp.iteration`; ``it_fixed`` empty when the workload has no such
    key): the options' costs leave the resync out, and the group with m middle layers adds
    max(0, N R - H) / N + O / N, with (R, H, O) = it_fixed + m it_mid (resync time per sample, h and
    the step of the fixed items, and of one middle layer: the same for every choice). Still
    non-decreasing in m, since h d <= N p (:func:`piper.dp.iteration.check_iteration_keys`)."""
    n_max = n_fixed + m_hi
    ch = np.empty(max(1, n_max), dtype=np.int64)
    ch2 = np.empty(max(1, n_max), dtype=np.int64)
    for r in range(m_hi - m_lo + 1):
        out_k[r] = np.inf
        out_tau[r] = np.inf
        out_low[r] = np.inf
    for m in range(m_lo, m_hi + 1):
        ni = n_fixed + m
        val = knapsack(mode, off[: ni + 1], cost, mem, M, ch[:ni])
        if val != np.inf and it_fixed.shape[0]:
            resync = it_fixed[0] + m * it_mid[0]
            hide = it_fixed[1] + m * it_mid[1]
            step = it_fixed[2] + m * it_mid[2]
            val += max(0.0, n_mb * resync - hide) / n_mb + step / n_mb
        if val == np.inf or val > t_max:
            break
        tau = total_of(ch[:ni], tauv)
        low = tau
        if not shared:
            # np.int64: a literal mode would compile knapsack once more (piper.dp.stage)
            other = knapsack(np.int64(EXACT), off[: ni + 1], tauv, mem, M, ch2[:ni])
            if other < low:
                low = other
        out_k[m - m_lo] = val
        out_tau[m - m_lo] = tau
        out_low[m - m_lo] = low


@njit(cache=True)
def group_points(e_off, e_cost, e_tau, e_mem, e_shared, k_cost, k_tau, k_mem, k_shared, io, n_o, n_i, n_none, room,
                 sync_free, M, t_max, mode, e_it, k_it, n_mb):
    """Every point of one group (:func:`piper.dp.groups._group_curves`, one :func:`group_curve` per
    count of one-layer chunks cut on both sides, ``singles`` = 0 .. io), in one call.

    The group's end layers are items e_off[0] .. e_off[-1] of e_cost, e_tau, e_mem (their options
    flat); row r of k_cost, k_tau, k_mem holds the options of an identical layer cut on both sides
    (r = 0), before it only (1), after it only (2), neither (3); e_shared / k_shared[r]: whether
    those options share one resync.  The group's chunks of identical layers: io cut on both sides,
    n_o after only, n_i before only, n_none neither.  Items are laid out as the group's items
    (ends, singles, cut before, cut after, then the middle layers).  Returns the points' counts,
    values, tau, tau bounds and singles, and whether every curve's options share one resync.

    ``e_it`` (the end layers' resync time per sample, h and step, summed) and ``k_it`` (one identical
    layer's): docs/problem.md §10's terms (:func:`group_curve`); both empty without the keys."""
    n_e = e_off.shape[0] - 1
    q = k_cost.shape[1]
    total = 0
    for singles in range(io + 1):
        least = singles + 2 * (io - singles) + n_o + n_i + n_none
        if least <= room:
            total += room - least + 1
    out_c = np.empty(total, dtype=np.int64)
    out_k = np.empty(total)
    out_tau = np.empty(total)
    out_low = np.empty(total)
    out_s = np.empty(total, dtype=np.int64)
    n_out = 0
    all_shared = True
    for singles in range(io + 1):
        least = singles + 2 * (io - singles) + n_o + n_i + n_none
        if least > room:
            continue
        roomy = (io - singles) + n_o + n_i + n_none > 0
        top = room if roomy else least
        if sync_free and singles > 0:
            top = least
        extra = top - least
        counts = (singles, io - singles + n_i, io - singles + n_o, n_none + extra)
        shared = e_shared and k_shared[3]
        for r in range(3):
            if counts[r] > 0:
                shared = shared and k_shared[r]
        all_shared = all_shared and shared
        n_items = n_e + counts[0] + counts[1] + counts[2] + counts[3]
        size = e_off[n_e] + q * (n_items - n_e)
        off = np.empty(n_items + 1, dtype=np.int64)
        cost = np.empty(size)
        tau = np.empty(size)
        mem = np.empty(size)
        for j in range(n_e + 1):
            off[j] = e_off[j]
        for j in range(e_off[n_e]):
            cost[j] = e_cost[j]
            tau[j] = e_tau[j]
            mem[j] = e_mem[j]
        item = n_e
        at = e_off[n_e]
        for r in range(4):
            for _ in range(counts[r]):
                for x in range(q):
                    cost[at + x] = k_cost[r, x]
                    tau[at + x] = k_tau[r, x]
                    mem[at + x] = k_mem[r, x]
                at += q
                item += 1
                off[item] = at
        n_fixed = n_e + counts[0] + counts[1] + counts[2]
        m_lo = n_none
        m_hi = n_none + extra
        n = m_hi - m_lo + 1
        pk = np.empty(n)
        ptau = np.empty(n)
        plow = np.empty(n)
        it_fixed = np.empty(0)
        if e_it.shape[0]:
            it_fixed = np.empty(3)
            for r in range(3):
                it_fixed[r] = e_it[r] + (n_fixed - n_e) * k_it[r]
        group_curve(off, cost, mem, tau, n_fixed, m_lo, m_hi, M, t_max, mode, shared, pk, ptau, plow,
                    it_fixed, k_it, n_mb)
        base = least - n_none
        for r in range(n):
            if pk[r] == np.inf:
                break
            out_c[n_out] = base + m_lo + r
            out_k[n_out] = pk[r]
            out_tau[n_out] = ptau[r]
            out_low[n_out] = plow[r]
            out_s[n_out] = singles
            n_out += 1
    return out_c[:n_out], out_k[:n_out], out_tau[:n_out], out_low[:n_out], out_s[:n_out], all_shared


@njit(cache=True)
def group_choice(off, cost, mem, n_fixed, m, M, mode):
    """The knapsack's choice (flat option index per item) for the group with m middle layers."""
    ni = n_fixed + m
    ch = np.empty(max(1, ni), dtype=np.int64)
    knapsack(mode, off[: ni + 1], cost, mem, M, ch[:ni])
    return ch[:ni].copy()


@njit(cache=True)
def _suffix_bounds(ptr, p_c, p_k, p_tau, n_groups):
    """Per g, over the groups g .. L - 1: the least and most layers they can hold, the largest of
    their least values, the sum of their least tau and the largest tau of any of their points."""
    c_lo = np.zeros(n_groups + 1, dtype=np.int64)
    c_hi = np.zeros(n_groups + 1, dtype=np.int64)
    k_lo = np.zeros(n_groups + 1)
    tau_lo = np.zeros(n_groups + 1)
    tau_hi = np.zeros(n_groups + 1)
    for g in range(n_groups - 1, -1, -1):
        lo_c, hi_c, lo_k, lo_t, hi_t = 1 << 60, -1, np.inf, np.inf, 0.0
        for p in range(ptr[g], ptr[g + 1]):
            lo_c = min(lo_c, p_c[p])
            hi_c = max(hi_c, p_c[p])
            lo_k = min(lo_k, p_k[p])
            lo_t = min(lo_t, p_tau[p])
            hi_t = max(hi_t, p_tau[p])
        c_lo[g] = c_lo[g + 1] + lo_c
        c_hi[g] = c_hi[g + 1] + hi_c
        k_lo[g] = max(k_lo[g + 1], lo_k)
        tau_lo[g] = tau_lo[g + 1] + lo_t
        tau_hi[g] = max(tau_hi[g + 1], hi_t)
    return c_lo, c_hi, k_lo, tau_lo, tau_hi


@njit(cache=True)
def group_dp(ptr, p_c, p_k, p_tau, n_groups, total, n_mb, v, ub, batch):
    """Pick one point per group (group g's points: ptr[g] .. ptr[g + 1] - 1, each holding p_c
    identical layers at value p_k and tau p_tau) so that the counts sum to ``total``, minimising
    max p_k ("tps", batch False) or N max p_k + (sum p_tau - max p_tau) / v (batch: a designated
    group's tau is left out, as in :mod:`piper.dp.fronts`).  States (groups done, layers used,
    designated placed) hold Pareto fronts of (max value, sum of undesignated tau).  An entry is
    dropped when even the cheapest completion (every later group at its least value and tau, the
    largest tau designated) is above ``ub``, and a state when the later groups cannot hold the
    layers left.  Returns (best value, the point index of every group), or (inf, empty)."""
    for g in range(n_groups):
        if ptr[g + 1] == ptr[g]:
            return np.inf, np.empty(0, dtype=np.int64)
    c_lo, c_hi, k_lo, tau_lo, tau_hi = _suffix_bounds(ptr, p_c, p_k, p_tau, n_groups)
    n_states = (n_groups + 1) * (total + 1) * 2
    start = np.zeros(n_states, dtype=np.int64)
    count = np.zeros(n_states, dtype=np.int64)
    cap = 1024
    f_t = np.empty(cap)
    f_s = np.empty(cap)
    f_prev = np.empty(cap, dtype=np.int64)
    f_pt = np.empty(cap, dtype=np.int64)
    f_t[0] = 0.0
    f_s[0] = 0.0
    f_prev[0] = -1
    f_pt[0] = -1
    count[0] = 1
    used = 1
    c_t = np.empty(64)
    c_s = np.empty(64)
    c_prev = np.empty(64, dtype=np.int64)
    c_pt = np.empty(64, dtype=np.int64)
    for g in range(n_groups):
        # layers used after g + 1 groups: the later groups must be able to hold the rest
        u_lo = max(0, total - c_hi[g + 1])
        u_hi = total - c_lo[g + 1]
        for u2 in range(u_lo, u_hi + 1):
            for f2 in range(2):
                nc = 0
                for p in range(ptr[g], ptr[g + 1]):
                    c = p_c[p]
                    u = u2 - c
                    if u < 0:
                        continue
                    K = p_k[p]
                    tau = p_tau[p]
                    for f in range(2):
                        if f > f2:
                            continue
                        des = f2 - f  # 1: this group is the designated one
                        if des == 1 and not batch:
                            continue
                        src = (g * (total + 1) + u) * 2 + f
                        for x in range(start[src], start[src] + count[src]):
                            T = max(f_t[x], K)
                            S = f_s[x] + (0.0 if des == 1 else tau)
                            if batch:
                                rest = tau_lo[g + 1] - (tau_hi[g + 1] if f2 == 0 else 0.0)
                                val = n_mb * max(T, k_lo[g + 1]) + (S + max(0.0, rest)) / v
                            else:
                                val = max(T, k_lo[g + 1])
                            if val > ub:
                                continue
                            if nc + 1 > c_t.shape[0]:
                                c_t = ensure_room(c_t, nc + 1)
                                c_s = ensure_room(c_s, nc + 1)
                                c_prev = ensure_room(c_prev, nc + 1)
                                c_pt = ensure_room(c_pt, nc + 1)
                            c_t[nc] = T
                            c_s[nc] = S if batch else 0.0
                            c_prev[nc] = x
                            c_pt[nc] = p
                            nc += 1
                dst = ((g + 1) * (total + 1) + u2) * 2 + f2
                start[dst] = used
                if nc == 0:
                    continue
                o1 = np.argsort(c_s[:nc], kind="mergesort")
                order = o1[np.argsort(c_t[:nc][o1], kind="mergesort")]
                best_s = np.inf
                for r in range(nc):
                    q = order[r]
                    if not c_s[q] < best_s:
                        continue
                    best_s = c_s[q]
                    if used + 1 > f_t.shape[0]:
                        f_t = ensure_room(f_t, used + 1)
                        f_s = ensure_room(f_s, used + 1)
                        f_prev = ensure_room(f_prev, used + 1)
                        f_pt = ensure_room(f_pt, used + 1)
                    f_t[used] = c_t[q]
                    f_s[used] = c_s[q]
                    f_prev[used] = c_prev[q]
                    f_pt[used] = c_pt[q]
                    used += 1
                count[dst] = used - start[dst]
    final = ((n_groups * (total + 1)) + total) * 2 + (1 if batch else 0)
    best = np.inf
    arg = -1
    for x in range(start[final], start[final] + count[final]):
        val = n_mb * f_t[x] + f_s[x] / v if batch else f_t[x]
        if val < best:
            best = val
            arg = x
    picks = np.empty(n_groups, dtype=np.int64)
    if arg < 0:
        return best, picks[:0]
    x = arg
    for g in range(n_groups - 1, -1, -1):
        picks[g] = f_pt[x]
        x = f_prev[x]
    return best, picks


@njit(cache=True)
def group_dp_rows(key_ptr, key_c, key_k, key_tau, key_low, row_keys, row_exact, first, n_groups, total, n_mb, v, ub,
                  best, batch, want_low):
    """:func:`group_dp` over the configurations of one layout in order, from row ``first`` of
    ``row_keys`` (row r, group g: the index of that group's points, key u's points at
    key_ptr[u] .. key_ptr[u + 1] - 1 of key_c, key_k, key_tau, key_low), as
    :func:`piper.dp.groups._solve_layout` runs them: a row with a group without points is skipped;
    else its best plan at most ``ub`` is searched, and with ``want_low`` and the row's tau not exact
    (``row_exact``) the same DP on the tau bounds.  Stops after the first row whose plan is below
    ``best``.  Returns (that row or -1, its value, each group's point within its key, the least
    value of the tau-bound DPs run (inf: none), how many rows ran the DP)."""
    low_min = np.inf
    dps = 0
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    for row in range(first, row_keys.shape[0]):
        empty = False
        for g in range(n_groups):
            u = row_keys[row, g]
            size = key_ptr[u + 1] - key_ptr[u]
            if size == 0:
                empty = True
            ptr[g + 1] = ptr[g] + size
        if empty:
            continue
        n = ptr[n_groups]
        p_c = np.empty(n, dtype=np.int64)
        p_k = np.empty(n)
        p_tau = np.empty(n)
        p_low = np.empty(n)
        for g in range(n_groups):
            u = row_keys[row, g]
            at = ptr[g]
            for x in range(key_ptr[u], key_ptr[u + 1]):
                p_c[at] = key_c[x]
                p_k[at] = key_k[x]
                p_tau[at] = key_tau[x]
                p_low[at] = key_low[x]
                at += 1
        value, picks = group_dp(ptr, p_c, p_k, p_tau, n_groups, total, n_mb, v, ub, batch)
        dps += 1
        if want_low and not row_exact[row]:
            low, _ = group_dp(ptr, p_c, p_k, p_low, n_groups, total, n_mb, v, ub, batch)
            low_min = min(low_min, low)
        if picks.shape[0] and value < best:
            chosen = np.empty(n_groups, dtype=np.int64)
            for g in range(n_groups):
                chosen[g] = picks[g] - ptr[g]
            return row, value, chosen, low_min, dps
    return -1, np.inf, np.zeros(0, dtype=np.int64), low_min, dps
