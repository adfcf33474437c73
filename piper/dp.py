"""Piper's two-level dynamic program, solved as a threshold search.

The problem (``PROBLEM.md``): split the DAG into stages S_1..S_L (differences of
nested ideals), give stage i degrees (t_i, d_i) and one TMPC per layer, to
minimise max_i TPS_i subject to sum d_i t_i <= k, sum d_i <= N and memory.

Piper's DP is  dp[I][k'][s] = min over J < I, (t, d) of
max(dp[J][k' - t d][s - d], K(I \\ J, t, d, ceil(s / d))), where K is the stage's
knapsack (:mod:`piper.knapsack`) and s is a *budget* for the sum of d of this and
later stages (``algo.cpp``: "at most" semantics; y is computed from the budget).

Because the objective is a bottleneck (a max), we solve it as a threshold
search instead of carrying a k' dimension:

* **stage tables**: for every ideal pair p = (I, J), allowed t (every layer of
  I \\ J has an allowed TMPC at t) and d (N mod d = 0, d <= S = min(N, k),
  t d <= k), the stage value K(p, t, d, y) for y = 1..ceil(S / d), stored as
  runs of equal value ("segments").  Memory a y + b grows with y, so the
  exact K is non-decreasing in y and a run ends where the run's optimal choice
  stops fitting; the greedy K is recomputed at every y (it need not be monotone).
  Cut edges of the stage: in-edges (u, v) with u outside I, out-edges (v, x)
  with x in J (ideals are successor-closed).
* **feasibility test** for a threshold T: g[I][s] = min devices (sum t d) to
  split ideal I into stages all of value <= T with budget s, i.e.
  f[I][s] = min over entries (J, t, d) with K(., ceil(s / d)) <= T of
  t d + g[J][s - d], g[I][s] = min_{s' <= s} f[I][s'], g[{}][.] = 0.
  A plan with max stage value <= T exists iff g[V][S] <= k.
* **search**: the optimum is one of the table values; binary search over their
  sorted distinct values for the least feasible one.  With the exact knapsack
  this is the exact optimum (``Status.OPTIMAL``); with the greedy knapsack it is
  the reference planner's value (``Status.FEASIBLE``).
* **curve**: m(T) = g[V][S] is the least number of devices reaching T; the best
  TPS with at most k' devices is the least candidate T with m(T) <= k',
  found for all requested k' by divide and conquer over the candidates.
  ``Options.params["curve"]``: True = every k' = 1..k, False = none, default
  (None/"auto") = every k' when k <= 64, else k' in {1, 2, 4, ..., k};
  ``params["curve_points"]`` = an explicit list of k'.

Units: times in the workload's time unit per sample, memory in bytes.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numba import njit

from .ideals import IdealPairs, Ideals, enumerate_ideals, ideal_pairs
from .knapsack import EXACT, GREEDY, knapsack
from .options import Candidates, Options, candidates
from .plan import Plan, Stage
from .problem import Problem
from .result import Result, SolverError, Status, make_result

__all__ = ["solve_dp", "DPTables", "build_tables"]

_BIG = np.int64(1) << np.int64(60)


# ---------------------------------------------------------------------------------
# the problem as flat arrays for compiled code
# ---------------------------------------------------------------------------------


@dataclass
class _Arrays:
    """Flat arrays describing the layers, their allowed TMPCs and edges.

    Node positions follow ``problem.nodes``; ``ts`` are the allowed degrees; the
    allowed TMPCs of node v at degree ts[ti] are flat indices
    ``opt_start[v, ti] .. opt_start[v, ti] + opt_cnt[v, ti] - 1``.
    ``inb[inb_ptr[q] + j]`` = 2 (c + syncTimeFw) bytes of the j-th in-edge of q's
    node under TMPC q (likewise ``outb`` for out-edges and syncTimeBw).
    """

    n: int
    ts: np.ndarray
    ds: np.ndarray
    opt_start: np.ndarray
    opt_cnt: np.ndarray
    tp: np.ndarray
    tw: np.ndarray
    ta: np.ndarray
    tb: np.ndarray
    in_ptr: np.ndarray
    in_src: np.ndarray
    out_ptr: np.ndarray
    out_dst: np.ndarray
    inb_ptr: np.ndarray
    inb: np.ndarray
    outb_ptr: np.ndarray
    outb: np.ndarray
    #: flat index -> (node id, t, TMPC id)
    labels: list[tuple[int, int, str]]


def _arrays(problem: Problem, cand: Candidates) -> _Arrays:
    pos = problem.index
    n = problem.n
    ts = np.array(cand.ts, dtype=np.int64)
    t_index = {t: i for i, t in enumerate(cand.ts)}
    in_lists = [[] for _ in range(n)]
    out_lists = [[] for _ in range(n)]
    for e in problem.edges:  # file order, like the reference's adjacency lists
        in_lists[pos[e.v]].append(e)
        out_lists[pos[e.u]].append(e)
    in_ptr = np.zeros(n + 1, dtype=np.int64)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        in_ptr[v + 1] = in_ptr[v] + len(in_lists[v])
        out_ptr[v + 1] = out_ptr[v] + len(out_lists[v])
    in_src = np.array([pos[e.u] for lst in in_lists for e in lst], dtype=np.int64)
    out_dst = np.array([pos[e.v] for lst in out_lists for e in lst], dtype=np.int64)
    opt_start = np.zeros((n, max(1, len(ts))), dtype=np.int64)
    opt_cnt = np.zeros((n, max(1, len(ts))), dtype=np.int64)
    tp, tw, ta, tb, inb_ptr, outb_ptr = [], [], [], [], [], []
    inb: list[float] = []
    outb: list[float] = []
    labels: list[tuple[int, int, str]] = []
    for v, nd in enumerate(problem.nodes):
        for t, lst in cand.tmpcs[nd.id].items():
            ti = t_index[t]
            opt_start[v, ti] = len(tp)
            opt_cnt[v, ti] = len(lst)
            for _, c in lst:
                tp.append(c.time_per_sample)
                tw.append(c.parameter_size)
                ta.append(c.memory_a)
                tb.append(c.memory_b)
                inb_ptr.append(len(inb))
                for e in in_lists[v]:
                    inb.append(2 * (e.communication_cost + c.sync_fw[e.u]))
                outb_ptr.append(len(outb))
                for e in out_lists[v]:
                    outb.append(2 * (e.communication_cost + c.sync_bw[e.v]))
                labels.append((nd.id, t, c.id))
    f64 = lambda x: np.array(x, dtype=np.float64)  # noqa: E731
    i64 = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    return _Arrays(
        n=n, ts=ts, ds=np.array(cand.ds, dtype=np.int64), opt_start=opt_start, opt_cnt=opt_cnt,
        tp=f64(tp), tw=f64(tw), ta=f64(ta), tb=f64(tb), in_ptr=in_ptr, in_src=in_src, out_ptr=out_ptr,
        out_dst=out_dst, inb_ptr=i64(inb_ptr), inb=f64(inb), outb_ptr=i64(outb_ptr), outb=f64(outb), labels=labels,
    )


# ---------------------------------------------------------------------------------
# compiled kernels: stage options, stage tables, the feasibility test
# ---------------------------------------------------------------------------------


@njit(cache=True)
def _membership(words_row: np.ndarray, n: int, out: np.ndarray) -> None:
    for v in range(n):
        out[v] = ((words_row[v >> 6] >> np.uint64(v & 63)) & np.uint64(1)) != 0


@njit(cache=True)
def _stage_options(nodes, nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src, out_ptr, out_dst,
                   inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes):
    """Options of the stage's nodes at degree ts[ti]: off (nx+1), flat TMPC index
    qidx and cut-edge bytes E per option.  False if some node lacks degree ts[ti].

    E_q = sum over in-edges (u, v), u not in I, of 2 (c + sfw_q[u])
        + sum over out-edges (v, x), x in J, of 2 (c + sbw_q[x]).
    """
    m = 0
    off[0] = 0
    for i in range(nx):
        v = nodes[i]
        cnt = opt_cnt[v, ti]
        if cnt == 0:
            return False
        for r in range(cnt):
            q = opt_start[v, ti] + r
            e = 0.0
            base = inb_ptr[q]
            for j in range(in_ptr[v + 1] - in_ptr[v]):
                if not in_i[in_src[in_ptr[v] + j]]:
                    e += inb[base + j]
            base = outb_ptr[q]
            for j in range(out_ptr[v + 1] - out_ptr[v]):
                if in_j[out_dst[out_ptr[v] + j]]:
                    e += outb[base + j]
            qidx[m] = q
            ebytes[m] = e
            m += 1
        off[i + 1] = m
    return True


@njit(cache=True)
def _stage_costs(m, qidx, ebytes, d, n_mb, bw, tp, tw, cost):
    """cost_q = (E_q / d + 4 (d - 1) w_q / d / N) / B + p_q / d  (the reference's arithmetic)."""
    for r in range(m):
        q = qidx[r]
        comm = ebytes[r] / d + 4.0 * (d - 1) * tw[q] / d / n_mb
        cost[r] = comm / bw + tp[q] / d


@njit(cache=True)
def _d_invariant(nx, off, qidx, tw):
    """True when each node's options all have the same parameter size w."""
    for i in range(nx):
        w0 = tw[qidx[off[i]]]
        for j in range(off[i] + 1, off[i + 1]):
            if tw[qidx[j]] != w0:
                return False
    return True


@njit(cache=True)
def _fits(nx, ch, ta, tb, qidx, y, M):
    mem = 0.0
    for i in range(nx):
        q = qidx[ch[i]]
        mem += ta[q] * y + tb[q]
    return mem <= M


@njit(cache=True)
def _grow_i(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def _grow_f(a, need):
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def _build_tables(p_i, p_j, words, n, ts, ds, k, S, n_mb, bw, M, mode,
                  opt_start, opt_cnt, tp, tw, ta, tb, in_ptr, in_src, out_ptr, out_dst,
                  inb_ptr, inb, outb_ptr, outb):
    """Stage tables for the pairs (p_i[r], p_j[r]): entries (pair, t, d) with their
    segments (y_lo, y_hi, value), value = K(stage, t, d, y) for y_lo <= y <= y_hi."""
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
    in_i = np.zeros(n, dtype=np.bool_)
    in_j = np.zeros(n, dtype=np.bool_)
    nodes = np.empty(n, dtype=np.int64)
    max_opts = tp.shape[0] + 1
    off = np.empty(n + 1, dtype=np.int64)
    qidx = np.empty(max_opts, dtype=np.int64)
    ebytes = np.empty(max_opts, dtype=np.float64)
    cost = np.empty(max_opts, dtype=np.float64)
    mem = np.empty(max_opts, dtype=np.float64)
    ch = np.empty(n, dtype=np.int64)
    fast = np.empty(n, dtype=np.int64)
    run_lo = np.empty(16, dtype=np.int64)
    run_hi = np.empty(16, dtype=np.int64)
    run_ch = np.empty(16 * n, dtype=np.int64)
    for r in range(p_i.shape[0]):
        I = p_i[r]
        J = p_j[r]
        _membership(words[I], n, in_i)
        _membership(words[J], n, in_j)
        nx = 0
        for v in range(n):
            if in_i[v] and not in_j[v]:
                nodes[nx] = v
                nx += 1
        for ti in range(ts.shape[0]):
            t = ts[ti]
            if not _stage_options(nodes, nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src, out_ptr,
                                  out_dst, inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes):
                continue
            m = off[nx]
            if mode == EXACT and _d_invariant(nx, off, qidx, tw):
                # every node's options share w: cost_q(d) = cost_q(1) / d + (a per-node
                # constant), so the optimal choice at each y is the same for every d.
                # Solve at d = 1 over y = 1..S once, then price those choices at each d.
                _stage_costs(m, qidx, ebytes, 1, n_mb, bw, tp, tw, cost)
                n_run = 0
                y = 1
                while y <= S:
                    for j in range(m):
                        q = qidx[j]
                        mem[j] = ta[q] * y + tb[q]
                    val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                    if val == np.inf:
                        break
                    y2 = y + 1
                    while y2 <= S and _fits(nx, ch, ta, tb, qidx, y2, M):
                        y2 += 1
                    if run_ch.shape[0] < (n_run + 1) * n:
                        run_ch = _grow_i(run_ch, (n_run + 1) * n)
                        run_lo = _grow_i(run_lo, n_run + 1)
                        run_hi = _grow_i(run_hi, n_run + 1)
                    run_lo[n_run] = y
                    run_hi[n_run] = y2 - 1
                    for i in range(nx):
                        run_ch[n_run * n + i] = ch[i]
                    n_run += 1
                    y = y2
                if n_run == 0:
                    continue
                for di in range(ds.shape[0]):
                    d = ds[di]
                    if t * d > k:
                        break
                    _stage_costs(m, qidx, ebytes, d, n_mb, bw, tp, tw, cost)
                    y_max = (S + d - 1) // d
                    seg_start = n_seg
                    for rr in range(n_run):
                        if run_lo[rr] > y_max:
                            break
                        val = 0.0
                        for i in range(nx):
                            val += cost[run_ch[rr * n + i]]
                        hi = min(run_hi[rr], y_max)
                        if n_seg > seg_start and s_val[n_seg - 1] == val:
                            s_hi[n_seg - 1] = hi
                        else:
                            s_lo = _grow_i(s_lo, n_seg + 1)
                            s_hi = _grow_i(s_hi, n_seg + 1)
                            s_val = _grow_f(s_val, n_seg + 1)
                            s_lo[n_seg] = run_lo[rr]
                            s_hi[n_seg] = hi
                            s_val[n_seg] = val
                            n_seg += 1
                    if n_seg > seg_start:
                        e_i = _grow_i(e_i, n_ent + 1)
                        e_j = _grow_i(e_j, n_ent + 1)
                        e_t = _grow_i(e_t, n_ent + 1)
                        e_d = _grow_i(e_d, n_ent + 1)
                        e_s0 = _grow_i(e_s0, n_ent + 1)
                        e_i[n_ent] = I
                        e_j[n_ent] = J
                        e_t[n_ent] = t
                        e_d[n_ent] = d
                        e_s0[n_ent] = seg_start
                        n_ent += 1
                continue
            for di in range(ds.shape[0]):
                d = ds[di]
                if t * d > k:
                    break
                _stage_costs(m, qidx, ebytes, d, n_mb, bw, tp, tw, cost)
                # fastest option of every node (first on ties), for the greedy fast path
                for i in range(nx):
                    b = off[i]
                    for j in range(off[i] + 1, off[i + 1]):
                        if cost[b] > cost[j]:
                            b = j
                    fast[i] = b
                y_max = (S + d - 1) // d
                seg_start = n_seg
                y = 1
                while y <= y_max:
                    for j in range(m):
                        q = qidx[j]
                        mem[j] = ta[q] * y + tb[q]
                    val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                    if val == np.inf:
                        break  # memory only grows with y
                    y2 = y + 1
                    if mode == EXACT:
                        # the optimal choice stays optimal while it fits (K is non-decreasing)
                        while y2 <= y_max and _fits(nx, ch, ta, tb, qidx, y2, M):
                            y2 += 1
                    else:
                        all_fast = True
                        for i in range(nx):
                            if ch[i] != fast[i]:
                                all_fast = False
                                break
                        if all_fast:
                            # the greedy returns the all-fastest choice whenever it fits
                            while y2 <= y_max and _fits(nx, fast, ta, tb, qidx, y2, M):
                                y2 += 1
                    if n_seg > seg_start and s_val[n_seg - 1] == val and s_hi[n_seg - 1] == y - 1:
                        s_hi[n_seg - 1] = y2 - 1
                    else:
                        s_lo = _grow_i(s_lo, n_seg + 1)
                        s_hi = _grow_i(s_hi, n_seg + 1)
                        s_val = _grow_f(s_val, n_seg + 1)
                        s_lo[n_seg] = y
                        s_hi[n_seg] = y2 - 1
                        s_val[n_seg] = val
                        n_seg += 1
                    y = y2
                if n_seg > seg_start:
                    e_i = _grow_i(e_i, n_ent + 1)
                    e_j = _grow_i(e_j, n_ent + 1)
                    e_t = _grow_i(e_t, n_ent + 1)
                    e_d = _grow_i(e_d, n_ent + 1)
                    e_s0 = _grow_i(e_s0, n_ent + 1)
                    e_i[n_ent] = I
                    e_j[n_ent] = J
                    e_t[n_ent] = t
                    e_d[n_ent] = d
                    e_s0[n_ent] = seg_start
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


@njit(cache=True)
def _stage_choice(I_row, J_row, n, ti, d, y, n_mb, bw, M, mode, opt_start, opt_cnt, tp, tw, ta, tb,
                  in_ptr, in_src, out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb):
    """(node positions, chosen flat TMPC indices, knapsack value) of one stage."""
    in_i = np.zeros(n, dtype=np.bool_)
    in_j = np.zeros(n, dtype=np.bool_)
    _membership(I_row, n, in_i)
    _membership(J_row, n, in_j)
    nodes = np.empty(n, dtype=np.int64)
    nx = 0
    for v in range(n):
        if in_i[v] and not in_j[v]:
            nodes[nx] = v
            nx += 1
    max_opts = tp.shape[0] + 1
    off = np.empty(nx + 1, dtype=np.int64)
    qidx = np.empty(max_opts, dtype=np.int64)
    ebytes = np.empty(max_opts, dtype=np.float64)
    ok = _stage_options(nodes, nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src, out_ptr, out_dst,
                        inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes)
    chosen = np.full(nx, -1, dtype=np.int64)
    if not ok:
        return nodes[:nx].copy(), chosen, np.inf
    m = off[nx]
    cost = np.empty(m, dtype=np.float64)
    mem = np.empty(m, dtype=np.float64)
    _stage_costs(m, qidx, ebytes, d, n_mb, bw, tp, tw, cost)
    for j in range(m):
        q = qidx[j]
        mem[j] = ta[q] * y + tb[q]
    ch = np.empty(nx, dtype=np.int64)
    val = knapsack(mode, off, cost, mem, M, ch)
    for i in range(nx):
        chosen[i] = qidx[ch[i]]
    return nodes[:nx].copy(), chosen, val


# ---------------------------------------------------------------------------------
# Python driver
# ---------------------------------------------------------------------------------


class _TimeUp(Exception):
    pass


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


class _Progress:
    def __init__(self, enabled: bool, every_s: float = 2.0) -> None:
        self.enabled = enabled
        self.every = every_s
        self.last = time.perf_counter()

    def say(self, msg: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if force or now - self.last >= self.every:
            self.last = now
            print(f"[dp] {msg}", file=sys.stderr, flush=True)


def build_tables(problem: Problem, arr: _Arrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                 deadline: float | None = None, progress: _Progress | None = None) -> DPTables:
    """Stage tables for every ideal pair, in chunks (time limit and progress between chunks)."""
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
            problem.microbatches, problem.bandwidth, problem.memory_per_device, mode,
            arr.opt_start, arr.opt_cnt, arr.tp, arr.tw, arr.ta, arr.tb, arr.in_ptr, arr.in_src, arr.out_ptr,
            arr.out_dst, arr.inb_ptr, arr.inb, arr.outb_ptr, arr.outb))
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

    def __init__(self, tables: DPTables, S: int, deadline: float | None, progress: _Progress) -> None:
        self.tb = tables
        self.S = S
        n_ideals = len(tables.ideals)
        self.g = np.empty((n_ideals, S + 1), dtype=np.int64)
        self.f_ent = np.empty((n_ideals, S + 1), dtype=np.int64)
        self.best_s = np.empty((n_ideals, S + 1), dtype=np.int64)
        self.cands = np.unique(tables.s_val)
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


def _curve_points(problem: Problem, options: Options) -> list[int]:
    k = problem.devices
    explicit = options.params.get("curve_points")
    if explicit is not None:
        return sorted({int(x) for x in explicit if 1 <= int(x) <= k})
    mode = options.params.get("curve", None)
    if mode is False:
        return []
    if mode is True or k <= 64:
        return list(range(1, k + 1))
    pts = {k}
    p = 1
    while p < k:
        pts.add(p)
        p *= 2
    return sorted(pts)


def _reconstruct(problem: Problem, arr: _Arrays, search: _Search, idx: int, mode: int) -> tuple[Plan, float]:
    """The plan behind m(cands[idx]) (re-running that test to fill the choice tables)."""
    tb = search.tb
    T = float(search.cands[idx])
    _test(T, len(tb.ideals), tb.e_i, tb.e_j, tb.e_t, tb.e_d, tb.e_s0, tb.e_s1, tb.s_lo, tb.s_hi, tb.s_val,
          search.S, search.g, search.f_ent, search.best_s)
    ideals = tb.ideals
    words = ideals.words
    t_index = {int(t): i for i, t in enumerate(arr.ts)}
    stages: list[Stage] = []
    worst = 0.0
    cur = ideals.full
    s = int(search.best_s[cur, search.S])
    while cur != 0:
        e = int(search.f_ent[cur, s])
        if e < 0:
            raise SolverError(f"internal error: DP reconstruction lost its way at ideal {cur}, budget {s}")
        J, t, d = int(tb.e_j[e]), int(tb.e_t[e]), int(tb.e_d[e])
        y = -(-s // d)
        nodes, chosen, val = _stage_choice(
            words[cur], words[J], arr.n, t_index[t], d, y, problem.microbatches, problem.bandwidth,
            problem.memory_per_device, mode, arr.opt_start, arr.opt_cnt, arr.tp, arr.tw, arr.ta, arr.tb,
            arr.in_ptr, arr.in_src, arr.out_ptr, arr.out_dst, arr.inb_ptr, arr.inb, arr.outb_ptr, arr.outb)
        worst = max(worst, float(val))
        ids = tuple(problem.nodes[int(v)].id for v in nodes)
        names = {problem.nodes[int(v)].id: arr.labels[int(q)][2] for v, q in zip(nodes, chosen)}
        stages.append(Stage(ids, d, t, names))
        cur = J
        if cur != 0:
            s = int(search.best_s[cur, s - d])
    return Plan(tuple(stages)), worst


def solve_dp(problem: Problem, options: Options | None = None) -> Result:
    """Piper's DP (exact or greedy knapsack per ``options.knapsack``); see the module docstring.

    Result: ``objective`` = the DP's value (max stage value of its plan), ``tps`` =
    the evaluator's score of the plan, ``stats`` with ``ideals``, ``ideal_pairs``,
    ``curve`` ([k', best TPS or None]), ``entries``, ``segments``, ``candidates``,
    ``tests`` and phase timings.
    """
    options = options or Options()
    start = time.perf_counter()
    deadline = None if options.time_limit_s is None else start + options.time_limit_s
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    if options.knapsack not in ("exact", "greedy"):
        raise SolverError(f"unknown knapsack mode {options.knapsack!r}; use 'exact' or 'greedy'")
    mode = EXACT if options.knapsack == "exact" else GREEDY
    progress = _Progress(options.progress)
    cand = candidates(problem, options)
    stats: dict = {"knapsack": options.knapsack, "linearize": options.linearize}
    if cand.infeasible_reason is not None:
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
                           stats=stats, message=cand.infeasible_reason)
    ideals = enumerate_ideals(problem, options.max_ideals, linearize=options.linearize)
    pairs = ideal_pairs(ideals)
    stats.update(ideals=len(ideals), ideal_pairs=pairs.count)
    progress.say(f"{len(ideals)} ideals, {pairs.count} ideal pairs", force=True)
    arr = _arrays(problem, cand)
    S = min(problem.microbatches, problem.devices)
    try:
        t0 = time.perf_counter()
        tables = build_tables(problem, arr, ideals, pairs, mode, deadline, progress)
        stats.update(entries=tables.entries, segments=tables.segments, tables_s=time.perf_counter() - t0)
    except _TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=time.perf_counter() - start, stats=stats,
                           message=f"time limit ({options.time_limit_s} s) hit while building stage tables")
    search = _Search(tables, S, deadline, progress)
    stats["candidates"] = int(len(search.cands))
    t0 = time.perf_counter()
    best: int | None = None
    try:
        best = search.least_index(problem.devices)
    except _TimeUp:
        pass
    timed_out = best is None and deadline is not None and time.perf_counter() > deadline
    if best is None and not timed_out:
        stats.update(search_s=time.perf_counter() - t0, tests=search.tests, curve=_none_curve(problem, options))
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start, stats=stats,
                           message="no plan fits in memory on the available devices")
    if best is None:
        # time limit: the best threshold proven feasible so far, if any
        feas = [i for i, m in search.memo.items() if m <= problem.devices]
        if not feas:
            stats.update(tests=search.tests)
            return make_result(problem, name, Status.UNKNOWN, None, time_s=time.perf_counter() - start,
                               stats=stats, message=f"time limit ({options.time_limit_s} s) hit during the search")
        plan, obj = _reconstruct(problem, arr, search, min(feas), mode)
        stats.update(tests=search.tests)
        return make_result(problem, name, Status.FEASIBLE, plan, time_s=time.perf_counter() - start,
                           objective=obj, stats=stats, message=f"time limit ({options.time_limit_s} s)")
    stats["search_s"] = time.perf_counter() - t0
    plan, obj = _reconstruct(problem, arr, search, best, mode)
    message = ""
    t0 = time.perf_counter()
    try:
        pts = _curve_points(problem, options)
        if pts:
            idx = search.curve(pts)
            stats["curve"] = [[k, None if idx[k] is None else float(search.cands[idx[k]])] for k in pts]
    except _TimeUp:
        message = "time limit hit while computing the curve (stats['curve'] omitted)"
    stats.update(curve_s=time.perf_counter() - t0, tests=search.tests)
    status = Status.OPTIMAL if mode == EXACT else Status.FEASIBLE
    return make_result(problem, name, status, plan, time_s=time.perf_counter() - start, objective=obj,
                       stats=stats, message=message)


def _none_curve(problem: Problem, options: Options) -> list[list]:
    return [[k, None] for k in _curve_points(problem, options)]
