"""The threshold engine: stage tables, the feasibility test and the search over thresholds."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..ideals import IdealPairs, Ideals
from ..knapsack import GREEDY, _least, _total, knapsack
from ..problem import Problem
from .arrays import _BIG, HEUR, _Arrays
from .limits import _Progress, _TimeUp
from .stage import (_choice_runs, _d_invariant, _fits, _mem_at, _push_entry, _push_segment, _stage_costs, _stage_nodes,
                    _stage_options, _stage_scratch)


@njit(cache=True)
def _build_tables(p_i, p_j, words, n, ts, ds, k, S, n_mb, bw, M, mode, ub,
                  opt_start, opt_cnt, tp, tw, ta, tb, in_ptr, in_src, out_ptr, out_dst,
                  inb_ptr, inb, outb_ptr, outb, rq, pq, c0, rb, sq):
    """Stage tables for the pairs (p_i[r], p_j[r]): entries (pair, t, d) with their
    segments (y_lo, y_hi, value), value = K(stage, t, d, y) for y_lo <= y <= y_hi.

    mode HEUR: achievable values only (greedy choices, reused while they fit and
    across d): a cheap table whose optimum bounds the exact one from above."""
    kmode = GREEDY if mode == HEUR else mode
    n_ent = 0
    n_seg = 0
    e_i = np.empty(1024, dtype=np.int64)
    e_j = np.empty(1024, dtype=np.int64)
    e_t = np.empty(1024, dtype=np.int64)
    e_d = np.empty(1024, dtype=np.int64)
    e_s0 = np.empty(1024, dtype=np.int64)
    s_lo = np.empty(1024, dtype=np.int64)
    s_hi = np.empty(1024, dtype=np.int64)
    s_val = np.empty(1024, dtype=np.float64)
    max_opts = tp.shape[0] + 1
    in_i, in_j, nodes, off, qidx, ebytes, cost, mem, ch = _stage_scratch(n, max_opts)
    fast = np.empty(n, dtype=np.int64)
    run_lo = np.empty(16, dtype=np.int64)
    run_hi = np.empty(16, dtype=np.int64)
    run_ch = np.empty(16 * n, dtype=np.int64)
    costs_d = np.empty((ds.shape[0], max_opts))
    alive = np.zeros(ds.shape[0], dtype=np.bool_)
    for r in range(p_i.shape[0]):
        I = p_i[r]
        J = p_j[r]
        nx = _stage_nodes(words, I, J, n, in_i, in_j, nodes)
        for ti in range(ts.shape[0]):
            t = ts[ti]
            if not _stage_options(nodes, nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src, out_ptr,
                                  out_dst, inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes):
                continue
            m = off[nx]
            if mode != GREEDY and _d_invariant(nx, off, qidx, tw, sq, 0):
                # every node's options share w: cost_q(d) = cost_q(1) / d + (a per-node
                # constant), so the optimal choice at each y is the same for every d.
                # Solve at d = 1 over y = 1..S once, then price those choices at each d.
                # With a bound ub on the optimum, only values <= ub matter: (t, d) is
                # dropped once its value (non-decreasing in y) exceeds ub, and y stops
                # at the largest ceil(S / d) of the (t, d) still in play.
                y_limit = S
                if ub < np.inf:
                    y_limit = 0
                    for di in range(ds.shape[0]):
                        d = ds[di]
                        if t * d > k:
                            break
                        _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, costs_d[di])
                        _least(off[: nx + 1], costs_d[di, :m], fast)
                        alive[di] = _total(fast[:nx], costs_d[di]) <= ub
                        if alive[di]:
                            y_limit = max(y_limit, (S + d - 1) // d)
                _stage_costs(m, qidx, ebytes, ds[0], ds, bw, rq, pq, c0, rb, cost)
                n_run, run_lo, run_hi, run_ch = _choice_runs(nx, n, m, off, qidx, ta, tb, sq, M, cost, mem, ch, fast,
                                                             kmode, mode == HEUR, y_limit, ub, t, k, S, ds,
                                                             alive, costs_d, run_lo, run_hi, run_ch)
                if n_run == 0:
                    continue
                for di in range(ds.shape[0]):
                    d = ds[di]
                    if t * d > k:
                        break
                    _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, cost)
                    y_max = (S + d - 1) // d
                    seg_start = n_seg
                    for rr in range(n_run):
                        if run_lo[rr] > y_max:
                            break
                        val = _total(run_ch[rr * n: rr * n + nx], cost)
                        if val > ub:
                            break  # and every later run (values grow with y)
                        hi = min(run_hi[rr], y_max)
                        if n_seg > seg_start and s_val[n_seg - 1] == val:
                            s_hi[n_seg - 1] = hi
                        else:
                            s_lo, s_hi, s_val = _push_segment(s_lo, s_hi, s_val, n_seg, run_lo[rr], hi, val)
                            n_seg += 1
                    if n_seg > seg_start:
                        e_i, e_j, e_t, e_d, e_s0 = _push_entry(e_i, e_j, e_t, e_d, e_s0, n_ent, I, J, t, d, seg_start)
                        n_ent += 1
                continue
            for di in range(ds.shape[0]):
                d = ds[di]
                if t * d > k:
                    break
                _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, cost)
                # fastest option of every node (first on ties), for the greedy fast path
                _least(off[: nx + 1], cost, fast)
                y_max = (S + d - 1) // d
                if ub < np.inf and _total(fast[:nx], cost) > ub:
                    continue  # even the all-fastest value exceeds the bound
                seg_start = n_seg
                y = 1
                while y <= y_max:
                    _mem_at(m, qidx, ta, tb, sq, di, y, mem)
                    val = knapsack(kmode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                    if val == np.inf or val > ub:
                        break  # memory only grows with y (and exact values with it)
                    y2 = y + 1
                    if mode != GREEDY:
                        # the optimal choice stays optimal while it fits (K is non-decreasing)
                        while y2 <= y_max and _fits(nx, ch, ta, tb, sq, di, qidx, y2, M):
                            y2 += 1
                    else:
                        all_fast = True
                        for i in range(nx):
                            if ch[i] != fast[i]:
                                all_fast = False
                                break
                        if all_fast:
                            # the greedy returns the all-fastest choice whenever it fits
                            while y2 <= y_max and _fits(nx, fast, ta, tb, sq, di, qidx, y2, M):
                                y2 += 1
                    if n_seg > seg_start and s_val[n_seg - 1] == val and s_hi[n_seg - 1] == y - 1:
                        s_hi[n_seg - 1] = y2 - 1
                    else:
                        s_lo, s_hi, s_val = _push_segment(s_lo, s_hi, s_val, n_seg, y, y2 - 1, val)
                        n_seg += 1
                    y = y2
                if n_seg > seg_start:
                    e_i, e_j, e_t, e_d, e_s0 = _push_entry(e_i, e_j, e_t, e_d, e_s0, n_ent, I, J, t, d, seg_start)
                    n_ent += 1
    return (e_i[:n_ent].copy(), e_j[:n_ent].copy(), e_t[:n_ent].copy(), e_d[:n_ent].copy(), e_s0[:n_ent].copy(),
            s_lo[:n_seg].copy(), s_hi[:n_seg].copy(), s_val[:n_seg].copy())


@njit(cache=True)
def _test(T, n_ideals, e_i, e_j, e_t, e_d, e_s0, e_s1, s_lo, s_hi, s_val, S, g, f_ent, best_s):
    """Least devices per (ideal, budget) with every stage value <= T.

    g[I, s] = min_{s' <= s} f[I, s'],  f[I, s] = min over entries e of I whose value
    at y = ceil(s / d) is <= T of t d + g[J, s - d];  g[0, :] = 0.
    f_ent[I, s] = the entry attaining f[I, s]; best_s[I, s] = the s' attaining g[I, s].
    Entries are grouped by I ascending.  Returns g[n_ideals - 1, S].
    """
    big = np.int64(1) << np.int64(60)
    for s in range(S + 1):
        g[0, s] = 0
        best_s[0, s] = s
    f = np.empty(S + 1, dtype=np.int64)
    n_ent = e_i.shape[0]
    e = 0
    for I in range(1, n_ideals):
        for s in range(S + 1):
            f[s] = big
            f_ent[I, s] = -1
        while e < n_ent and e_i[e] == I:
            J = e_j[e]
            d = e_d[e]
            td = e_t[e] * d
            for q in range(e_s0[e], e_s1[e]):
                if s_val[q] > T:
                    continue
                lo = d * (s_lo[q] - 1) + 1
                if lo < d:
                    lo = d
                hi = d * s_hi[q]
                if hi > S:
                    hi = S
                for s in range(lo, hi + 1):
                    c = td + g[J, s - d]
                    if c < f[s]:
                        f[s] = c
                        f_ent[I, s] = e
            e += 1
        run = big
        arg = -1
        for s in range(S + 1):
            if f[s] < run:
                run = f[s]
                arg = s
            g[I, s] = run
            best_s[I, s] = arg
    return g[n_ideals - 1, S]

@dataclass
class DPTables:
    """Stage tables of all ideal pairs (see the module docstring)."""

    ideals: Ideals
    pairs: IdealPairs
    e_i: np.ndarray
    e_j: np.ndarray
    e_t: np.ndarray
    e_d: np.ndarray
    e_s0: np.ndarray
    e_s1: np.ndarray
    s_lo: np.ndarray
    s_hi: np.ndarray
    s_val: np.ndarray

    @property
    def entries(self) -> int:
        return int(self.e_i.shape[0])

    @property
    def segments(self) -> int:
        return int(self.s_val.shape[0])


def build_tables(problem: Problem, arr: _Arrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                 deadline: float | None = None, progress: _Progress | None = None, ub: float = math.inf) -> DPTables:
    """Stage tables for every ideal pair, in chunks (time limit and progress between chunks).
    With a finite ``ub`` (exact knapsack only), only stage values <= ub are guaranteed present."""
    n_ideals = len(ideals)
    counts = np.diff(pairs.ptr)
    p_i_all = np.repeat(np.arange(n_ideals, dtype=np.int64), counts)
    p_j_all = pairs.sub.astype(np.int64)
    total = p_i_all.shape[0]
    S = min(problem.microbatches, problem.devices)
    parts = []
    chunk = 4096
    start = 0
    while start < total:
        stop = min(total, start + chunk)
        t0 = time.perf_counter()
        parts.append(_build_tables(
            p_i_all[start:stop], p_j_all[start:stop], ideals.words, arr.n, arr.ts, arr.ds, problem.devices, S,
            problem.microbatches, arr.bw_edge, problem.memory_per_device, mode, ub,
            arr.opt_start, arr.opt_cnt, arr.tp, arr.tw, arr.ta, arr.tb, arr.in_ptr, arr.in_src, arr.out_ptr,
            arr.out_dst, arr.inb_ptr, arr.inb, arr.outb_ptr, arr.outb, arr.rq, arr.pq, arr.c0, arr.rb, arr.sq))
        # aim at ~0.5 s per chunk
        dt = time.perf_counter() - t0
        chunk = int(min(1 << 20, max(64, chunk * (0.5 / max(dt, 1e-3)))))
        start = stop
        if progress is not None:
            progress.say(f"stage tables: {stop}/{total} ideal pairs")
        if deadline is not None and time.perf_counter() > deadline and start < total:
            raise _TimeUp()
    seg_base = 0
    fixed = []
    for part in parts:
        e_i, e_j, e_t, e_d, e_s0, s_lo, s_hi, s_val = part
        fixed.append((e_i, e_j, e_t, e_d, e_s0 + seg_base, s_lo, s_hi, s_val))
        seg_base += s_val.shape[0]
    cat = lambda idx, dt: (np.concatenate([p[idx] for p in fixed]) if fixed else np.zeros(0, dt))  # noqa: E731
    e_i, e_j, e_t, e_d, e_s0 = (cat(i, np.int64) for i in range(5))
    s_lo, s_hi = cat(5, np.int64), cat(6, np.int64)
    s_val = cat(7, np.float64)
    e_s1 = np.empty_like(e_s0)
    if e_s0.shape[0]:
        e_s1[:-1] = e_s0[1:]
        e_s1[-1] = s_val.shape[0]
    return DPTables(ideals, pairs, e_i, e_j, e_t, e_d, e_s0, e_s1, s_lo, s_hi, s_val)


class _Search:
    """Feasibility tests m(T) = least devices for threshold T, memoised."""

    def __init__(self, tables: DPTables, S: int, deadline: float | None, progress: _Progress,
                 ub: float = math.inf) -> None:
        self.tb = tables
        self.S = S
        n_ideals = len(tables.ideals)
        self.g = np.empty((n_ideals, S + 1), dtype=np.int64)
        self.f_ent = np.empty((n_ideals, S + 1), dtype=np.int64)
        self.best_s = np.empty((n_ideals, S + 1), dtype=np.int64)
        # with a bound ub the tables are complete only up to ub: search below it
        self.cands = np.unique(tables.s_val if math.isinf(ub) else tables.s_val[tables.s_val <= ub])
        self.memo: dict[int, int] = {}
        self.deadline = deadline
        self.progress = progress
        self.tests = 0

    def devices(self, idx: int) -> int:
        """m(cands[idx]): least devices for threshold cands[idx] (2^60 = impossible)."""
        if idx in self.memo:
            return self.memo[idx]
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise _TimeUp()
        tb = self.tb
        m = int(_test(float(self.cands[idx]), len(tb.ideals), tb.e_i, tb.e_j, tb.e_t, tb.e_d, tb.e_s0, tb.e_s1,
                      tb.s_lo, tb.s_hi, tb.s_val, self.S, self.g, self.f_ent, self.best_s))
        self.tests += 1
        self.memo[idx] = m
        self.progress.say(f"threshold test {self.tests}: T={self.cands[idx]:.6g} needs {m if m < _BIG else 'no'} devices")
        return m

    def least_index(self, k: int, lo: int = 0, hi: int | None = None) -> int | None:
        """Least idx in [lo, hi] with m(cands[idx]) <= k (None if none)."""
        hi = len(self.cands) - 1 if hi is None else hi
        if hi < lo or self.devices(hi) > k:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if self.devices(mid) <= k:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def curve(self, ks: list[int]) -> dict[int, int | None]:
        """For every k' in ks, the least idx with m <= k' (divide and conquer)."""
        out: dict[int, int | None] = {}
        n_c = len(self.cands)
        stack = [(0, n_c, sorted(set(ks)))]  # answers in [lo, hi]; hi == n_c means "none"
        while stack:
            lo, hi, kk = stack.pop()
            if not kk:
                continue
            if lo == hi:
                for k in kk:
                    out[k] = lo if lo < n_c else None
                continue
            mid = (lo + hi) // 2
            m = self.devices(mid)
            stack.append((lo, mid, [k for k in kk if k >= m]))
            stack.append((mid + 1, hi, [k for k in kk if k < m]))
        return out
