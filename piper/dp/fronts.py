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

__all__ = ["FrontPool", "best_final", "front_pass", "new_pool", "walk_back"]

#: flags and counts passed to the kernels below as int64 scalars, not int literals: numba would
#: compile a callee once per literal value (one compiled version each, piper.dp.stage)
ZERO = np.int64(0)
ONE = np.int64(1)


class FrontPool(NamedTuple):
    """All front entries: max TPS (time per sample), Sigma tau (time units), devices, the entry they
    extend (-1 for the empty plan), the table entry of their newest stage, and 1 when that stage is
    the designated one; ``start`` / ``count`` give each state's entries, and ``ne_start`` /
    ``ne_count`` each ideal's budgets s with entries (ascending, in ``ne_s``)."""

    t: np.ndarray
    sigma: np.ndarray
    dev: np.ndarray
    prev: np.ndarray
    ent: np.ndarray
    des: np.ndarray
    start: np.ndarray
    count: np.ndarray
    ne_start: np.ndarray
    ne_count: np.ndarray
    ne_s: np.ndarray
    #: per state: the least Sigma and the least D of its entries
    low_sigma: np.ndarray
    low_dev: np.ndarray


def new_pool(n_ideals: int, S: int) -> tuple[FrontPool, int, int]:
    """A pool holding only the empty plan at (I = {}, s = 0, f = 0); returns (pool, entries used,
    budgets listed)."""
    size = 1024
    pool = FrontPool(np.zeros(size), np.zeros(size), np.zeros(size, dtype=np.int64),
                     np.full(size, -1, dtype=np.int64), np.full(size, -1, dtype=np.int64),
                     np.zeros(size, dtype=np.int8), np.zeros(n_ideals * (S + 1) * 2, dtype=np.int64),
                     np.zeros(n_ideals * (S + 1) * 2, dtype=np.int64), np.zeros(n_ideals, dtype=np.int64),
                     np.zeros(n_ideals, dtype=np.int64), np.zeros(size, dtype=np.int64),
                     np.zeros(n_ideals * (S + 1) * 2), np.zeros(n_ideals * (S + 1) * 2, dtype=np.int64))
    pool.count[0] = 1  # state (0, 0, 0): the empty plan, entry 0
    pool.ne_count[0] = 1  # ideal 0 has budget 0 (ne_s[0] = 0)
    return pool, 1, 1


@njit(cache=True)
def _state(i, s, f, S):
    return (i * (S + 1) + s) * 2 + f


@njit(cache=True)
def _grow(pool, need, ne_need):
    return FrontPool(ensure_room(pool.t, need), ensure_room(pool.sigma, need), ensure_room(pool.dev, need),
                     ensure_room(pool.prev, need), ensure_room(pool.ent, need), ensure_room(pool.des, need),
                     pool.start, pool.count, pool.ne_start, pool.ne_count, ensure_room(pool.ne_s, ne_need),
                     pool.low_sigma, pool.low_dev)


class _Candidates(NamedTuple):
    """Entries proposed for the states of one ideal: target budget s and flag f, then as in the pool."""

    s: np.ndarray
    f: np.ndarray
    t: np.ndarray
    sigma: np.ndarray
    dev: np.ndarray
    prev: np.ndarray
    ent: np.ndarray
    des: np.ndarray


@njit(cache=True)
def _new_candidates(size):
    return _Candidates(np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int8), np.empty(size), np.empty(size),
                       np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
                       np.empty(size, dtype=np.int8))


@njit(cache=True)
def _push(c, n, s, f, t, sigma, dev, prev, ent, des):
    if n + 1 > c.s.shape[0]:
        c = _Candidates(ensure_room(c.s, n + 1), ensure_room(c.f, n + 1), ensure_room(c.t, n + 1),
                        ensure_room(c.sigma, n + 1), ensure_room(c.dev, n + 1), ensure_room(c.prev, n + 1),
                        ensure_room(c.ent, n + 1), ensure_room(c.des, n + 1))
    c.s[n] = s
    c.f[n] = f
    c.t[n] = t
    c.sigma[n] = sigma
    c.dev[n] = dev
    c.prev[n] = prev
    c.ent[n] = ent
    c.des[n] = des
    return c, n + 1


@njit(cache=True)
def _completion(n_mb, T, sigma, flag, s, D, S, k, rest, rest_t):
    """A lower bound on N T' + Sigma' of every plan completing an entry (T, sigma, D devices) of a
    state (I, s, flag): the stages before I hold the layers outside I, whose least compute is
    ``rest`` (least t p: ``rest_t``) on at most S - s replicas and k - D devices, so their max TPS is
    at least rest / (S - s) and rest_t / (k - D) (TPS_i >= tau_i / d_i); their tau adds at least
    ``rest`` when the designated stage is placed already."""
    if rest > 0.0:
        if s >= S or D >= k:
            return np.inf
        T = max(T, rest / (S - s), rest_t / (k - D))
        if flag == 1:
            sigma += rest
    return n_mb * T + sigma


@njit(cache=True)
def _merge(st_t, st_s, st_d, n_st, new_t, new_s, new_d):
    """The (T, Sigma) staircase of the union of a staircase and a state's entries (sorted by T),
    each point with its D (time per sample, time units, devices)."""
    n_new = new_t.shape[0]
    out_t = np.empty(n_st + n_new)
    out_s = np.empty(n_st + n_new)
    out_d = np.empty(n_st + n_new, dtype=np.int64)
    i = j = n = 0
    best = np.inf
    while i < n_st or j < n_new:
        if j >= n_new or (i < n_st and (st_t[i] < new_t[j] or st_t[i] == new_t[j] and st_s[i] <= new_s[j])):
            t, sg, dv = st_t[i], st_s[i], st_d[i]
            i += 1
        else:
            t, sg, dv = new_t[j], new_s[j], new_d[j]
            j += 1
        if sg < best:
            if n > 0 and out_t[n - 1] == t:
                n -= 1
            out_t[n] = t
            out_s[n] = sg
            out_d[n] = dv
            n += 1
            best = sg
    return out_t, out_s, out_d, n


@njit(cache=True)
def _insert(st_a, st_b, n_st, a, b):
    """Insert (a, b) into the staircase (st_a ascending, st_b descending; room for one more),
    dropping the points it dominates; returns the new size.  The caller checked that no point has
    a' <= a and b' <= b."""
    lo, hi = 0, n_st
    while lo < hi:  # first point with a' > a
        mid = (lo + hi) // 2
        if st_a[mid] <= a:
            lo = mid + 1
        else:
            hi = mid
    end = lo
    while end < n_st and st_b[end] >= b:  # later points with b' >= b are dominated
        end += 1
    shift = end - lo - 1
    if shift < 0:
        for r in range(n_st, lo, -1):
            st_a[r] = st_a[r - 1]
            st_b[r] = st_b[r - 1]
    elif shift > 0:
        for r in range(lo + 1, n_st - shift):
            st_a[r] = st_a[r + shift]
            st_b[r] = st_b[r + shift]
    st_a[lo] = a
    st_b[lo] = b
    return n_st - shift


@njit(cache=True)
def _settle(pool, used, ne_used, I, S, c, n_c, with_dev):
    """Sort the candidates of ideal I by state and keep each state's Pareto front (least T, Sigma
    and, with_dev, D); list I's budgets with entries.  An entry is also dropped when a state of I
    with a smaller budget and the same flag holds one with no larger T, Sigma (and D): every
    completion of it completes that one too (the stages before I see smaller suffix sums, so no
    more microbatches in flight, and have more budget left).  With devices that check looks only
    at the entry of least Sigma among those of no larger T (sound, not complete).
    Returns (pool, used, ne_used)."""
    pool = _grow(pool, used + n_c, ne_used + n_c)
    pool.ne_start[I] = ne_used
    if n_c == 0:
        return pool, used, ne_used
    order = np.argsort(c.dev[:n_c], kind="mergesort")
    order = order[np.argsort(c.sigma[:n_c][order], kind="mergesort")]
    order = order[np.argsort(c.t[:n_c][order], kind="mergesort")]
    order = order[np.argsort(c.f[:n_c][order], kind="mergesort")]
    order = order[np.argsort(c.s[:n_c][order], kind="mergesort")]
    # per flag, the staircase (T, Sigma) of the entries at smaller budgets, with each point's D
    st_t = [np.empty(0), np.empty(0)]
    st_s = [np.empty(0), np.empty(0)]
    st_d = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
    n_st = [0, 0]
    # the state's own staircase (Sigma ascending, D descending) of its kept entries (devices only)
    own_s = np.empty(n_c)
    own_d = np.empty(n_c)
    r = 0
    while r < n_c:
        q0 = order[r]
        s, f = c.s[q0], c.f[q0]
        first = used
        best_s = np.inf
        n_own = ZERO
        while r < n_c and c.s[order[r]] == s and c.f[order[r]] == f:
            q = order[r]
            r += 1
            t_q, s_q, d_q = c.t[q], c.sigma[q], c.dev[q]
            if with_dev:
                lo, hi = 0, n_own
                while lo < hi:
                    mid = (lo + hi) // 2
                    if own_s[mid] <= s_q:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo > 0 and own_d[lo - 1] <= d_q:
                    continue
            elif not s_q < best_s:
                continue
            # the staircase point of least Sigma among those with T' <= t_q
            lo, hi = 0, n_st[f]
            while lo < hi:
                mid = (lo + hi) // 2
                if st_t[f][mid] <= t_q:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > 0 and st_s[f][lo - 1] <= s_q and (not with_dev or st_d[f][lo - 1] <= d_q):
                continue
            if with_dev:
                n_own = _insert(own_s, own_d, n_own, s_q, d_q)
            best_s = min(best_s, s_q)
            pool.t[used] = t_q
            pool.sigma[used] = s_q
            pool.dev[used] = d_q
            pool.prev[used] = c.prev[q]
            pool.ent[used] = c.ent[q]
            pool.des[used] = c.des[q]
            used += 1
        if used == first:
            continue
        st = _state(I, s, np.int64(f), S)
        pool.start[st] = first
        pool.count[st] = used - first
        pool.low_sigma[st] = pool.sigma[first:used].min()
        pool.low_dev[st] = pool.dev[first:used].min()
        st_t[f], st_s[f], st_d[f], n_st[f] = _merge(st_t[f], st_s[f], st_d[f], n_st[f], pool.t[first:used],
                                                    pool.sigma[first:used], pool.dev[first:used])
        if pool.ne_count[I] == 0 or pool.ne_s[ne_used - 1] != s:
            pool.ne_s[ne_used] = s
            ne_used += 1
            pool.ne_count[I] += 1
    return pool, used, ne_used


@njit(cache=True)
def front_pass(tab, seg, ent_ptr, i_lo, i_hi, S, k, n_mb, ub, with_dev, use_low, pool, used, ne_used, rest, rest_t):
    """Fill the fronts of the ideals i_lo .. i_hi - 1 (all smaller ideals done), from the batch
    tables ``tab`` (entries of ideal I: ent_ptr[I] .. ent_ptr[I + 1] - 1) and segments ``seg``;
    ``use_low``: price stages with tau_low (a lower-bound DP).  ``rest[I]`` / ``rest_t[I]``: the
    least compute (least t p) of the layers outside I, for :func:`_completion`.  Each entry (J, t, d)
    of I extends only the budgets J has entries for.  Returns (pool, entries used, budgets listed,
    candidates proposed)."""
    e_sub, e_t, e_d, e_s0, e_s1 = tab.sub, tab.t, tab.d, tab.first_seg, tab.seg_stop
    c = _new_candidates(256)
    proposed = 0
    for I in range(i_lo, i_hi):
        n_c = ZERO
        r0, r1 = rest[I], rest_t[I]
        for e in range(ent_ptr[I], ent_ptr[I + 1]):
            d = e_d[e]
            td = e_t[e] * d
            J = e_sub[e]
            q = e_s0[e]
            for idx in range(pool.ne_start[J], pool.ne_start[J] + pool.ne_count[J]):
                s = pool.ne_s[idx] + d
                if s > S:
                    break
                y = (s + d - 1) // d
                while q < e_s1[e] and seg.y_hi[q] < y:
                    q += 1
                if q >= e_s1[e]:
                    break
                if seg.y_lo[q] > y:
                    continue
                K = seg.value[q]
                if _completion(n_mb, K, 0.0, ZERO, s, ZERO, S, k, r0, 0.0) > ub:
                    break  # and at every larger s: K and the rest's least TPS only grow
                tau = seg.tau_low[q] if use_low else seg.tau[q]
                src = _state(J, s - d, ZERO, S)
                # the least T, Sigma and D of a state bound all its entries' completions at once
                n_src = pool.count[src]
                if n_src:
                    lo_t = max(K, pool.t[pool.start[src]])
                    lo_d = pool.low_dev[src] + td
                    if _completion(n_mb, lo_t, pool.low_sigma[src] + tau, ZERO, s, lo_d, S, k, r0, r1) > ub and \
                            _completion(n_mb, lo_t, pool.low_sigma[src], ONE, s, lo_d, S, k, r0, r1) > ub:
                        n_src = 0
                for x in range(pool.start[src], pool.start[src] + n_src):
                    T = max(pool.t[x], K)
                    D = pool.dev[x] + td
                    if D > k:
                        continue
                    sig = pool.sigma[x]
                    if _completion(n_mb, T, sig + tau, ZERO, s, D, S, k, r0, r1) <= ub:
                        c, n_c = _push(c, n_c, s, ZERO, T, sig + tau, D, x, e, ZERO)
                    if _completion(n_mb, T, sig, ONE, s, D, S, k, r0, r1) <= ub:
                        c, n_c = _push(c, n_c, s, ONE, T, sig, D, x, e, ONE)
                src = _state(J, s - d, ONE, S)
                if pool.count[src] == 0 or _completion(n_mb, max(K, pool.t[pool.start[src]]), pool.low_sigma[src] + tau,
                                                       ONE, s, pool.low_dev[src] + td, S, k, r0, r1) > ub:
                    continue
                for x in range(pool.start[src], pool.start[src] + pool.count[src]):
                    T = max(pool.t[x], K)
                    D = pool.dev[x] + td
                    if D > k:
                        continue
                    sig = pool.sigma[x] + tau
                    if _completion(n_mb, T, sig, ONE, s, D, S, k, r0, r1) <= ub:
                        c, n_c = _push(c, n_c, s, ONE, T, sig, D, x, e, ZERO)
        pool, used, ne_used = _settle(pool, used, ne_used, I, S, c, n_c, with_dev)
        proposed += n_c
    return pool, used, ne_used, proposed


@njit(cache=True)
def best_final(pool, full, S, n_mb):
    """(least N T + Sigma over the entries of (V, s, 1), s = 1..S; its entry index and s), or
    (inf, -1, -1) when there is none."""
    best = np.inf
    arg = -1
    arg_s = -1
    for s in range(1, S + 1):
        st = _state(full, s, ONE, S)
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
