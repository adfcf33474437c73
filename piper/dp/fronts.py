"""The batch-time DP over ideals for 1F1B plans: Pareto fronts of (max TPS, sum of tau) per state.

The objective (docs/problem.md §2.4) is batch_time = N max_i TPS_i + sum_i tau_i - max_i tau_i.
sum_i tau_i - max_i tau_i = min over a *designated* stage j of the sum of the other stages'
tau_i, so a flag f in the state says whether the designated stage is placed, and the DP
minimises over plans and designations together.  A state is (I, s, f): the ideal I split into
stages whose d sum to exactly s (so each stage's y = ceil(s / d) is its true value, s counting
this stage and the later ones), and its value is the Pareto front of the triples

    (T = max TPS_i of its stages, Sigma = sum of tau_i of its undesignated stages, D = sum d_i t_i)

(D only when the device limit can bind, i.e. max t * S > k; otherwise every plan fits).  A stage
I \\ J at (t, d) with table point (K, tau) extends an entry (T, Sigma, D) of (J, s - d, f') to
(max(T, K), Sigma + tau, D + t d) (undesignated, f = f') or (max(T, K), Sigma, D + t d)
(designated, f' = 0, f = 1).  The optimum is min over s <= S and the entries of (V, s, 1) of
N T + Sigma, exactly the least batch time (the max over the plan's TPS and the best designation
are both attained).  Entries with N T + Sigma above an upper bound ``ub`` on the optimum are
dropped (later stages only add), and so are stage values above ``ub / N``.

Entries keep a back pointer (the entry they extend, the table entry of the new stage, whether it
is designated), so the plan is rebuilt by walking back from the best final entry.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from piper.dp.knapsack import ensure_room

__all__ = ["FrontPool", "new_pool", "front_pass", "best_final", "walk_back"]


class FrontPool(NamedTuple):
    """All front entries: max TPS (time per sample), Sigma tau (time units), devices, the entry they
    extend (-1 for the empty plan), the table entry of their newest stage, and 1 when that stage is
    the designated one; ``start`` / ``count`` give each state's entries."""

    t: np.ndarray
    sigma: np.ndarray
    dev: np.ndarray
    prev: np.ndarray
    ent: np.ndarray
    des: np.ndarray
    start: np.ndarray
    count: np.ndarray


def new_pool(n_ideals: int, S: int) -> tuple[FrontPool, int]:
    """A pool holding only the empty plan at (I = {}, s = 0, f = 0); returns (pool, entries used)."""
    size = 1024
    pool = FrontPool(np.zeros(size), np.zeros(size), np.zeros(size, dtype=np.int64),
                     np.full(size, -1, dtype=np.int64), np.full(size, -1, dtype=np.int64),
                     np.zeros(size, dtype=np.int8), np.zeros(n_ideals * (S + 1) * 2, dtype=np.int64),
                     np.zeros(n_ideals * (S + 1) * 2, dtype=np.int64))
    pool.count[0] = 1  # state (0, 0, 0): the empty plan, entry 0
    return pool, 1


@njit(cache=True)
def _state(i, s, f, S):
    return (i * (S + 1) + s) * 2 + f


@njit(cache=True)
def _grow(pool, need):
    return FrontPool(ensure_room(pool.t, need), ensure_room(pool.sigma, need), ensure_room(pool.dev, need),
                     ensure_room(pool.prev, need), ensure_room(pool.ent, need), ensure_room(pool.des, need),
                     pool.start, pool.count)


@njit(cache=True)
def _pareto_into(pool, used, n_c, c_t, c_s, c_d, c_p, c_e, c_f, with_dev):
    """Append the candidates' Pareto front (least T, Sigma and, with_dev, D) to the pool; returns
    (pool, used, first index, count)."""
    if n_c == 0:
        return pool, used, used, 0
    o1 = np.argsort(c_d[:n_c], kind="mergesort")
    o2 = o1[np.argsort(c_s[:n_c][o1], kind="mergesort")]
    order = o2[np.argsort(c_t[:n_c][o2], kind="mergesort")]
    pool = _grow(pool, used + n_c)
    first = used
    best_s = np.inf
    for r in range(n_c):
        q = order[r]
        keep = True
        if with_dev:
            for x in range(first, used):
                if pool.sigma[x] <= c_s[q] and pool.dev[x] <= c_d[q]:
                    keep = False
                    break
        else:
            keep = c_s[q] < best_s
        if not keep:
            continue
        best_s = min(best_s, c_s[q])
        pool.t[used] = c_t[q]
        pool.sigma[used] = c_s[q]
        pool.dev[used] = c_d[q]
        pool.prev[used] = c_p[q]
        pool.ent[used] = c_e[q]
        pool.des[used] = c_f[q]
        used += 1
    return pool, used, first, used - first


@njit(cache=True)
def _push(n_c, c_t, c_s, c_d, c_p, c_e, c_f, t, s, d, p, e, f):
    need = n_c + 1
    if need > c_t.shape[0]:
        c_t, c_s, c_d = ensure_room(c_t, need), ensure_room(c_s, need), ensure_room(c_d, need)
        c_p, c_e, c_f = ensure_room(c_p, need), ensure_room(c_e, need), ensure_room(c_f, need)
    c_t[n_c] = t
    c_s[n_c] = s
    c_d[n_c] = d
    c_p[n_c] = p
    c_e[n_c] = e
    c_f[n_c] = f
    return n_c + 1, c_t, c_s, c_d, c_p, c_e, c_f


@njit(cache=True)
def front_pass(tab, seg, ent_ptr, i_lo, i_hi, S, k, n_mb, ub, with_dev, use_low, pool, used):
    """Fill the fronts of the ideals i_lo .. i_hi - 1 (all smaller ideals done), from the batch
    tables ``tab`` (entries of ideal I: ent_ptr[I] .. ent_ptr[I + 1] - 1) and segments ``seg``;
    ``use_low``: price stages with tau_low (a lower-bound DP).  Returns (pool, entries used)."""
    e_sub, e_t, e_d, e_s0, e_s1 = tab.sub, tab.t, tab.d, tab.first_seg, tab.seg_stop
    t_max = ub / n_mb
    cap = 64
    a_t, a_s, a_d = np.empty(cap), np.empty(cap), np.empty(cap, dtype=np.int64)
    a_p, a_e, a_f = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int8)
    b_t, b_s, b_d = np.empty(cap), np.empty(cap), np.empty(cap, dtype=np.int64)
    b_p, b_e, b_f = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int8)
    for I in range(i_lo, i_hi):
        e0 = ent_ptr[I]
        e1 = ent_ptr[I + 1]
        cursor = np.empty(max(1, e1 - e0), dtype=np.int64)
        for e in range(e0, e1):
            cursor[e - e0] = e_s0[e]
        for s in range(1, S + 1):
            n0 = 0
            n1 = 0
            for e in range(e0, e1):
                d = e_d[e]
                if d > s:
                    continue
                y = (s + d - 1) // d
                q = cursor[e - e0]
                while q < e_s1[e] and seg.y_hi[q] < y:
                    q += 1
                cursor[e - e0] = q
                if q >= e_s1[e] or seg.y_lo[q] > y:
                    continue
                K = seg.value[q]
                if K > t_max:
                    continue
                tau = seg.tau_low[q] if use_low else seg.tau[q]
                td = e_t[e] * d
                J = e_sub[e]
                src = _state(J, s - d, 0, S)
                for x in range(pool.start[src], pool.start[src] + pool.count[src]):
                    T = max(pool.t[x], K)
                    D = pool.dev[x] + td
                    if D > k:
                        continue
                    base = n_mb * T + pool.sigma[x]
                    if base + tau <= ub:
                        n0, a_t, a_s, a_d, a_p, a_e, a_f = _push(n0, a_t, a_s, a_d, a_p, a_e, a_f, T,
                                                                 pool.sigma[x] + tau, D, x, e, 0)
                    if base <= ub:
                        n1, b_t, b_s, b_d, b_p, b_e, b_f = _push(n1, b_t, b_s, b_d, b_p, b_e, b_f, T,
                                                                 pool.sigma[x], D, x, e, 1)
                src = _state(J, s - d, 1, S)
                for x in range(pool.start[src], pool.start[src] + pool.count[src]):
                    T = max(pool.t[x], K)
                    D = pool.dev[x] + td
                    if D > k:
                        continue
                    if n_mb * T + pool.sigma[x] + tau <= ub:
                        n1, b_t, b_s, b_d, b_p, b_e, b_f = _push(n1, b_t, b_s, b_d, b_p, b_e, b_f, T,
                                                                 pool.sigma[x] + tau, D, x, e, 0)
            st = _state(I, s, 0, S)
            pool, used, first, cnt = _pareto_into(pool, used, n0, a_t, a_s, a_d, a_p, a_e, a_f, with_dev)
            pool.start[st] = first
            pool.count[st] = cnt
            pool, used, first, cnt = _pareto_into(pool, used, n1, b_t, b_s, b_d, b_p, b_e, b_f, with_dev)
            pool.start[st + 1] = first
            pool.count[st + 1] = cnt
    return pool, used


@njit(cache=True)
def best_final(pool, full, S, n_mb):
    """(least N T + Sigma over the entries of (V, s, 1), s = 1..S; its entry index and s), or
    (inf, -1, -1) when there is none."""
    best = np.inf
    arg = -1
    arg_s = -1
    for s in range(1, S + 1):
        st = _state(full, s, 1, S)
        for x in range(pool.start[st], pool.start[st] + pool.count[st]):
            v = n_mb * pool.t[x] + pool.sigma[x]
            if v < best:
                best = v
                arg = x
                arg_s = s
    return best, arg, arg_s


def walk_back(pool: FrontPool, tab, x: int, full: int, s: int) -> list[tuple[int, int, int, int, int]]:
    """The stages behind entry ``x`` of (V, s, 1), in pipeline order (the first stage is V \\ J):
    (I, J, t, d, y) each."""
    out = []
    cur = full
    while int(pool.prev[x]) >= 0:
        e = int(pool.ent[x])
        J, t, d = int(tab.sub[e]), int(tab.t[e]), int(tab.d[e])
        out.append((cur, J, t, d, -(-s // d)))
        x = int(pool.prev[x])
        cur, s = J, s - d
    return out
