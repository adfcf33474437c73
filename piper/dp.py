"""Piper's two-level dynamic program: a threshold search, and the table itself.

The problem (``docs/problem.md``): split the DAG into stages S_1..S_L (differences of
nested ideals), give stage i degrees (t_i, d_i) and one TMPC per layer, to
minimise max_i TPS_i subject to sum d_i t_i <= k, sum d_i <= N and memory.

Piper's DP is  dp[I][k'][s] = min over J < I, (t, d) of
max(dp[J][k' - t d][s - d], K(I \\ J, t, d, ceil(s / d))), where K is the stage's
knapsack (:mod:`piper.knapsack`, ``Options.knapsack``) and s is a *budget* for the
sum of d of this and later stages (``algo.cpp``: "at most" semantics; y is
computed from the budget).  Stage cut edges: in-edges (u, v) with u outside I,
out-edges (v, x) with x in J (ideals are successor-closed).  Two engines compute it:

**Threshold engine** (default).  The objective is a bottleneck (a max), so:

* *stage tables*: for every ideal pair p = (I, J), allowed t (every layer of
  I \\ J has an allowed TMPC at t) and d (N mod d = 0, d <= S = min(N, k),
  t d <= k), the values K(p, t, d, y), y = 1..ceil(S / d), as runs of equal value
  ("segments").  Memory a y + b grows with y, so the exact K is non-decreasing
  in y and a run ends where its optimal choice stops fitting; when every layer's
  TMPCs share one parameter size w (all three paper workloads), cost(d) =
  cost(1) / d + a per-layer constant, so the optimal choices are computed once at
  d = 1 and priced at each d.  The greedy K is recomputed at every y (it need
  not be monotone); its d's are not merged (bit-for-bit reference semantics).
* *feasibility test* for a threshold T: g[I][s] = least devices (sum t d) to
  split ideal I into stages all of value <= T within budget s:
  f[I][s] = min over entries (J, t, d) with K(., ceil(s / d)) <= T of
  t d + g[J][s - d], g[I][s] = min_{s' <= s} f[I][s'], g[{}][.] = 0.
  A plan of value <= T exists iff g[V][S] <= k.
* *search*: the optimum is one of the table values: binary search over their
  sorted distinct values for the least feasible one.
* *bound* (exact knapsack, graphs of more than 64 layers, ``params["greedy_bound"]``
  to force or disable): the greedy DP's value U is solved first; then stage
  values above U are never computed (a (t, d) is dropped once its value, which
  grows with y, passes U) and the search runs over candidates <= U.
* *curve*: m(T) = g[V][S] is the least number of devices reaching T; the best
  TPS with at most k' devices is the least candidate T with m(T) <= k', found
  for all requested k' by divide and conquer over the candidates.

**Table engine** (``params["engine"] = "table"``; chosen automatically when the
stage tables would be large: ideal pairs x options > 20 M, e.g. GNMT): the
dp[I][k'][s] table itself, one pass over the ideal pairs, each stage's knapsacks
solved on the fly.  Per I, pass 1 enters the cheap values (all-fastest fits, and
for the exact knapsack the least-memory choice as an achievable upper bound);
pass 2 solves a knapsack only where the stage's lower bound could still improve
the table.  Unless a curve is requested, the linearized DP (n + 1 ideals) is
solved first and terms above its value are dropped.

Curve (``stats["curve"]`` = [[k', TPS or None], ...]): ``params["curve"]`` True =
every k' = 1..k, False = none, default = every k' when cheap (k <= 64 and at most
5000 ideal pairs, e.g. BERT), else none; ``params["curve_points"]`` = a list of k'.
Curve points use the budget bound S = min(N, k) of the full k: with the exact
knapsack each point is the optimum at k' devices.

**Version 2** (docs/problem.md §2.2; ``solve_dp``): a stage's knapsack at (t, d, y) prices
each TMPC with the resync factor f, its resync at B_in when t d <= G (else B), its cut
edges at the run's B_edge, and its memory as a y + b + s / d (summed as the evaluator
does).  The d-invariant shortcut above needs, in addition, no sharded state (s / d makes
the optimal choice depend on d); f and B_resync only add a per-node constant at each d,
so they keep it.  B_edge is a property of the whole plan (B_in iff sum d t <= G), so with
G < k the DP runs twice: over plans on at most G devices with edges at B_in, and over all
plans with edges at B (a plan inside one node is scored pessimistically there when
B_in >= B); the better plan wins (``stats["runs"]``; with B_in < B the second run's plan
inside one node only bounds the optimum from below: OPTIMAL when the first run's value is
no larger, else FEASIBLE with that bound).  With G >= k (always without the new keys)
there is one run at B_in = B, f = 4, s = 0, and every number is bit-for-bit the
version-1 number: the kernels keep the reference's arithmetic (E / d + R) / B + p / d
whenever B_resync = B_edge.

**Uniform plans** (``Options.uniform``, docs/problem.md §2.5): one DP (both runs) per
allowed (t, d) with only that pair allowed; the best wins; no curve.  Refused with a
SolverError when (t, d) pairs x runs x ideal pairs exceeds ``UNIFORM_MAX_WORK``.

Statuses: exact knapsack -> OPTIMAL (bound = TPS) or INFEASIBLE; greedy ->
FEASIBLE (bound 0) or INFEASIBLE; time limit -> FEASIBLE (best threshold proven
feasible so far) or UNKNOWN, message "time limit ...".

Units: times in the workload's time unit per sample, memory in bytes.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from .ideals import IdealPairs, Ideals, enumerate_ideals, ideal_pairs
from .knapsack import EXACT, GREEDY, _grow, _least, _total, knapsack
from .options import Candidates, Options, candidates
from .plan import Plan, Stage
from .problem import Problem
from .result import Result, SolverError, Status, make_result

__all__ = ["solve_dp", "DPTables", "build_tables"]

_BIG = np.int64(1) << np.int64(60)
#: table mode: achievable upper-bound values (greedy choices, galloping, shared across d)
HEUR = 2


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
    #: per (TMPC, index of d in ds): f (d - 1) w / d / N (resync bytes), p / d, B_resync (B_in when
    #: t d <= G, else B) and the cost when no edge is cut, rq / B_resync + pq (docs/problem.md §2.2)
    rq: np.ndarray
    pq: np.ndarray
    c0: np.ndarray
    rb: np.ndarray | None
    #: per (index of d in ds, TMPC): s / d, the sharded bytes each device holds; None when no TMPC
    #: has sharded state (rb likewise None when every B_resync == B_edge: version 1)
    sq: np.ndarray | None
    #: B_edge of this run, bytes/second: B_in for plans inside one node, else B
    bw_edge: float
    #: flat index -> (node id, t, TMPC id)
    labels: list[tuple[int, int, str]]


def _arrays(problem: Problem, cand: Candidates, bw_edge: float | None = None) -> _Arrays:
    """The flat arrays of ``problem`` under ``cand``; ``bw_edge`` = B_edge of the run in bytes/s
    (default B; docs/problem.md §2.2)."""
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
    tp, tw, ta, tb, tsh, tt, inb_ptr, outb_ptr = [], [], [], [], [], [], [], []
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
                tsh.append(c.memory_sharded)
                tt.append(t)
                inb_ptr.append(len(inb))
                for e in in_lists[v]:
                    inb.append(2 * (e.communication_cost + c.sync_fw[e.u]))
                outb_ptr.append(len(outb))
                for e in out_lists[v]:
                    outb.append(2 * (e.communication_cost + c.sync_bw[e.v]))
                labels.append((nd.id, t, c.id))
    f64 = lambda x: np.array(x, dtype=np.float64)  # noqa: E731
    i64 = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    n_mb, bw = problem.microbatches, problem.bandwidth
    bw_edge = bw if bw_edge is None else float(bw_edge)
    bw_in, g_node, f = problem.bandwidth_intra, problem.node_size, problem.resync_factor
    ds = [int(d) for d in cand.ds]
    if ds != sorted(ds) or len(set(ds)) != len(ds):
        raise SolverError("internal error: the data-parallel degrees must be distinct and ascending")
    # the reference's expressions, evaluated in the same order (IEEE doubles, as compiled code);
    # version 2 (docs/problem.md §2.2): factor f (4 by default: 4.0 (d - 1) == 4 (d - 1) exactly),
    # resync at B_in when the stage fits in a node (t d <= G), else at B; s / d more memory
    rq = f64([[f * (d - 1) * w / d / n_mb for d in ds] for w in tw]).reshape(len(tw), len(ds))
    pq = f64([[p / d for d in ds] for p in tp]).reshape(len(tp), len(ds))
    rb = f64([[bw_in if t * d <= g_node else bw for d in ds] for t in tt]).reshape(len(tt), len(ds))
    c0 = f64([[(f * (d - 1) * w / d / n_mb) / (bw_in if t * d <= g_node else bw) + p / d for d in ds]
              for w, p, t in zip(tw, tp, tt)]).reshape(len(tp), len(ds))
    sq = np.ascontiguousarray(f64([[x / d for x in tsh] for d in ds]).reshape(len(ds), len(tsh)))
    # None = not needed (no sharded state / one bandwidth, as in version 1): the kernels are
    # then compiled for None, with the version-1 loops only (numba prunes `x is None` branches)
    sq_opt: np.ndarray | None = None if not any(x != 0 for x in tsh) else sq
    rb_opt: np.ndarray | None = None if bool(np.all(rb == bw_edge)) else rb
    return _Arrays(
        n=n, ts=ts, ds=np.array(cand.ds, dtype=np.int64), opt_start=opt_start, opt_cnt=opt_cnt,
        tp=f64(tp), tw=f64(tw), ta=f64(ta), tb=f64(tb), in_ptr=in_ptr, in_src=in_src, out_ptr=out_ptr,
        out_dst=out_dst, inb_ptr=i64(inb_ptr), inb=f64(inb), outb_ptr=i64(outb_ptr), outb=f64(outb), rq=rq, pq=pq,
        c0=c0, rb=rb_opt, sq=sq_opt, bw_edge=bw_edge, labels=labels,
    )


# ---------------------------------------------------------------------------------
# compiled kernels: stage options, stage tables, the feasibility test
# ---------------------------------------------------------------------------------


@njit(cache=True)
def _membership(words_row: np.ndarray, n: int, out: np.ndarray) -> None:
    for v in range(n):
        out[v] = ((words_row[v >> 6] >> np.uint64(v & 63)) & np.uint64(1)) != 0


@njit(cache=True)
def _stage_nodes(words, I, J, n, in_i, in_j, nodes) -> int:
    """Fill in_i / in_j with the members of ideals I and J and nodes[:nx] with the
    stage I \\ J (ascending positions); return nx."""
    _membership(words[I], n, in_i)
    _membership(words[J], n, in_j)
    nx = 0
    for v in range(n):
        if in_i[v] and not in_j[v]:
            nodes[nx] = v
            nx += 1
    return nx


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
def _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, cost):
    """cost_q = E_q / (d B_edge) + R_q / B_resync + p_q / d (docs/problem.md §2.2), bw = B_edge.

    The pair-independent parts are precomputed per (TMPC, d): rq = f (d - 1) w / d / N
    (resync bytes), pq = p / d, rb = B_resync (B_in when t d <= G, else B) and
    c0 = rq / rb + pq (the cost when E_q = 0: 0 / (d bw) + x == x exactly).  When
    B_resync == B_edge (always in version 1) the reference's arithmetic is kept verbatim,
    (E_q / d + rq) / B + pq, so version-1 numbers are bit-for-bit unchanged."""
    di = 0
    while ds[di] != d:
        di += 1
    if rb is None:  # every B_resync == B_edge (version 1): the reference's loop, verbatim (compiled apart)
        for r in range(m):
            q = qidx[r]
            e = ebytes[r]
            if e == 0.0:
                cost[r] = c0[q, di]
            else:
                cost[r] = (e / d + rq[q, di]) / bw + pq[q, di]
        return
    for r in range(m):
        q = qidx[r]
        e = ebytes[r]
        if e == 0.0:
            cost[r] = c0[q, di]
        else:
            b = rb[q, di]
            if b == bw:
                cost[r] = (e / d + rq[q, di]) / bw + pq[q, di]
            else:
                cost[r] = e / (d * bw) + rq[q, di] / b + pq[q, di]


@njit(cache=True)
def _d_invariant(nx, off, qidx, tw, sq, di):
    """True when each node's options all have the same parameter size w and no option
    has sharded memory (sq[di] = s / ds[di]: 0 iff s = 0; memory s / d depends on d)."""
    if sq is None:  # no sharded state anywhere (compiled apart)
        for i in range(nx):
            w0 = tw[qidx[off[i]]]
            for j in range(off[i] + 1, off[i + 1]):
                if tw[qidx[j]] != w0:
                    return False
        return True
    for i in range(nx):
        w0 = tw[qidx[off[i]]]
        if sq[di, qidx[off[i]]] != 0.0:
            return False
        for j in range(off[i] + 1, off[i + 1]):
            if tw[qidx[j]] != w0 or sq[di, qidx[j]] != 0.0:
                return False
    return True


@njit(cache=True)
def _sharded(nx, off, qidx, sq, di):
    """True when some option of the stage has sharded memory s > 0 (sq[di] = s / ds[di])."""
    if sq is None:
        return False
    for j in range(off[nx]):
        if sq[di, qidx[j]] != 0.0:
            return True
    return False


@njit(cache=True)
def _mem_choice(nx, ch, qidx, ta, tb, sq, di, y):
    """The memory a y + b + s / d of the choice ch, summed over the stage's nodes (bytes);
    sq[di] = s / d of every TMPC at the stage's d = ds[di] (zeros without sharded state).  Summed as
    the evaluator does, (a y + b) + s / d per node in node order (docs/problem.md §2.2)."""
    mem = 0.0
    if sq is None:  # no sharded state anywhere (version 1; compiled apart)
        for i in range(nx):
            q = qidx[ch[i]]
            mem += ta[q] * y + tb[q]
        return mem
    for i in range(nx):
        q = qidx[ch[i]]
        mem += ta[q] * y + tb[q] + sq[di, q]
    return mem


@njit(cache=True)
def _fits(nx, ch, ta, tb, sq, di, qidx, y, M):
    return _mem_choice(nx, ch, qidx, ta, tb, sq, di, y) <= M


@njit(cache=True)
def _mem_at(m, qidx, ta, tb, sq, di, y, mem):
    """mem[j] = a y + b + s / d of the stage's j-th flat option, j < m (bytes)."""
    if sq is None:  # no sharded state anywhere (version 1; compiled apart)
        for j in range(m):
            q = qidx[j]
            mem[j] = ta[q] * y + tb[q]
        return
    for j in range(m):
        q = qidx[j]
        mem[j] = ta[q] * y + tb[q] + sq[di, q]


@njit(cache=True)
def _stage_scratch(n, max_opts):
    """Work arrays for one stage at a time: (in_i, in_j, nodes, off, qidx, ebytes, cost,
    mem, ch), sized for n nodes and max_opts flat options."""
    return (np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_), np.empty(n, dtype=np.int64),
            np.empty(n + 1, dtype=np.int64), np.empty(max_opts, dtype=np.int64), np.empty(max_opts),
            np.empty(max_opts), np.empty(max_opts), np.empty(n, dtype=np.int64))


@njit(cache=True)
def _push_segment(s_lo, s_hi, s_val, n_seg, lo, hi, val):
    """Append the segment (lo, hi, val) at index n_seg, growing the arrays as needed."""
    s_lo = _grow(s_lo, n_seg + 1)
    s_hi = _grow(s_hi, n_seg + 1)
    s_val = _grow(s_val, n_seg + 1)
    s_lo[n_seg] = lo
    s_hi[n_seg] = hi
    s_val[n_seg] = val
    return s_lo, s_hi, s_val


@njit(cache=True)
def _push_run(run_lo, run_hi, run_ch, n_run, lo, hi, ch, nx, n):
    """Append the run (y from lo to hi share the choice ch[:nx]) at index n_run; run r's
    choice is run_ch[r n : r n + nx]. Returns the arrays (grown as needed)."""
    run_lo = _grow(run_lo, n_run + 1)
    run_hi = _grow(run_hi, n_run + 1)
    run_ch = _grow(run_ch, (n_run + 1) * n)
    run_lo[n_run] = lo
    run_hi[n_run] = hi
    for i in range(nx):
        run_ch[n_run * n + i] = ch[i]
    return run_lo, run_hi, run_ch


@njit(cache=True)
def _push_entry(e_i, e_j, e_t, e_d, e_s0, n_ent, i, j, t, d, s0):
    """Append the entry (pair (i, j), t, d, first segment s0) at index n_ent."""
    e_i = _grow(e_i, n_ent + 1)
    e_j = _grow(e_j, n_ent + 1)
    e_t = _grow(e_t, n_ent + 1)
    e_d = _grow(e_d, n_ent + 1)
    e_s0 = _grow(e_s0, n_ent + 1)
    e_i[n_ent] = i
    e_j[n_ent] = j
    e_t[n_ent] = t
    e_d[n_ent] = d
    e_s0[n_ent] = s0
    return e_i, e_j, e_t, e_d, e_s0


@njit(cache=True)
def _choice_runs(nx, n, m, off, qidx, ta, tb, sq, M, cost, mem, ch, fast, kmode, heur, y_limit, ub, t, k, S, ds,
                 alive, costs_d, run_lo, run_hi, run_ch):
    """The d-invariant case (every node's options share w, so the optimal choice at a
    given y is the same for every d): with cost the options' costs at d = 1, solve the
    knapsack (kmode) at y = 1, 2, ... <= y_limit and record each run of y over which
    one choice stays optimal (it does while it fits: K is non-decreasing in y).

    heur: one greedy solve per block y in (2^(j-1), 2^j] (the HEUR table). With ub
    finite, alive[di] says whether (t, ds[di]) can still give a value <= ub (costs_d[di]
    holds its costs) and y_limit shrinks to the largest ceil(S / d) still alive.
    Returns (number of runs, run_lo, run_hi, run_ch), the arrays grown as needed."""
    n_run = 0
    y = 1
    while y <= y_limit:
        ys = y
        if heur:
            # one greedy solve per block y in (2^(j-1), 2^j], at the block's
            # largest feasible y: its choice fits (and is used) for the whole block
            y_end = 1
            while y_end < y:
                y_end *= 2
            y_end = min(y_end, y_limit)
            lo_y = y
            hi_y = y_end
            ys = y - 1
            while lo_y <= hi_y:
                mid = (lo_y + hi_y) // 2
                _mem_at(m, qidx, ta, tb, sq, 0, mid, mem)
                _least(off[: nx + 1], mem[:m], fast)
                if _mem_choice(nx, fast, qidx, ta, tb, sq, 0, mid) <= M:
                    ys = mid
                    lo_y = mid + 1
                else:
                    hi_y = mid - 1
            if ys < y:
                break
        _mem_at(m, qidx, ta, tb, sq, 0, ys, mem)
        val = knapsack(kmode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
        if val == np.inf:
            break
        if ub < np.inf:
            y_new = 0
            for di in range(ds.shape[0]):
                d = ds[di]
                if t * d > k:
                    break
                if alive[di] and (S + d - 1) // d >= y:
                    alive[di] = _total(ch[:nx], costs_d[di]) <= ub
                if alive[di]:
                    y_new = max(y_new, (S + d - 1) // d)
            y_limit = y_new
            if y > y_limit:
                break
        y2 = y + 1
        while y2 <= y_limit and _fits(nx, ch, ta, tb, sq, 0, qidx, y2, M):
            y2 += 1
        run_lo, run_hi, run_ch = _push_run(run_lo, run_hi, run_ch, n_run, y, y2 - 1, ch, nx, n)
        n_run += 1
        y = y2
    return n_run, run_lo, run_hi, run_ch


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


@njit(cache=True)
def _stage_choice(words, I, J, n, ti, d, y, ds, n_mb, bw, M, mode, opt_start, opt_cnt, tp, tw, ta, tb,
                  in_ptr, in_src, out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb, rq, pq, c0, rb, sq):
    """(node positions, chosen flat TMPC indices, knapsack value) of the stage I \\ J."""
    in_i, in_j, nodes, off, qidx, ebytes, cost, mem, ch = _stage_scratch(n, tp.shape[0] + 1)
    nx = _stage_nodes(words, I, J, n, in_i, in_j, nodes)
    ok = _stage_options(nodes[:nx], nx, ti, in_i, in_j, opt_start, opt_cnt, in_ptr, in_src, out_ptr, out_dst,
                        inb_ptr, inb, outb_ptr, outb, off, qidx, ebytes)
    chosen = np.full(nx, -1, dtype=np.int64)
    if not ok:
        return nodes[:nx].copy(), chosen, np.inf
    m = off[nx]
    _stage_costs(m, qidx, ebytes, d, ds, bw, rq, pq, c0, rb, cost)
    di = 0
    while ds[di] != d:
        di += 1
    _mem_at(m, qidx, ta, tb, sq, di, y, mem)
    val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
    if val == np.inf:
        return nodes[:nx].copy(), chosen, val
    for i in range(nx):
        chosen[i] = qidx[ch[i]]
    return nodes[:nx].copy(), chosen, val


# ---------------------------------------------------------------------------------
# the table engine: Piper's dp[I][k'][s] itself, one pass over the ideal pairs
# ---------------------------------------------------------------------------------


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


def _curve_points(problem: Problem, options: Options, pairs: int = 0) -> list[int]:
    """Device counts k' of the curve: ``params["curve_points"]``, or all 1..k with
    ``params["curve"] = True``, none with False; by default all 1..k when cheap
    (k <= 64 and at most 5000 ideal pairs, e.g. BERT), else none."""
    k = problem.devices
    explicit = options.params.get("curve_points")
    if explicit is not None:
        return sorted({int(x) for x in explicit if 1 <= int(x) <= k})
    mode = options.params.get("curve", None)
    if mode is False:
        return []
    if mode is True or (k <= 64 and pairs <= 5000):
        return list(range(1, k + 1))
    return []


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
            words, cur, J, arr.n, t_index[t], d, y, arr.ds, problem.microbatches, arr.bw_edge,
            problem.memory_per_device, mode, arr.opt_start, arr.opt_cnt, arr.tp, arr.tw, arr.ta, arr.tb,
            arr.in_ptr, arr.in_src, arr.out_ptr, arr.out_dst, arr.inb_ptr, arr.inb, arr.outb_ptr, arr.outb, arr.rq, arr.pq, arr.c0, arr.rb, arr.sq)
        worst = max(worst, float(val))
        ids = tuple(problem.nodes[int(v)].id for v in nodes)
        names = {problem.nodes[int(v)].id: arr.labels[int(q)][2] for v, q in zip(nodes, chosen)}
        stages.append(Stage(ids, d, t, names))
        cur = J
        if cur != 0:
            s = int(search.best_s[cur, s - d])
    return Plan(tuple(stages)), worst



def _with_slack(value: float) -> float:
    """A bound from another computation of the same plan value, loosened by 1e-9
    (relative) before it prunes: the linearized DP and the heuristic table add a
    stage's terms in another order than the table being pruned, so the same plan
    can come out a few ulps higher there (random_problem seed 679 of the table-engine
    sweep in ``tests/test_dp.py`` was declared infeasible when the bound was used as is)."""
    return value + 1e-9 * abs(value)


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


def _solve_run(problem: Problem, options: Options, bw_edge: float, cand: Candidates | None = None) -> Result:
    """One DP over the plans of ``problem`` (its ``devices`` is this run's device budget) with
    every cut edge at ``bw_edge`` bytes/s, under ``cand`` (default ``candidates(problem,
    options)``; a uniform run passes one (t, d)).  Result as :func:`solve_dp`'s."""
    start = time.perf_counter()
    deadline = None if options.time_limit_s is None else start + options.time_limit_s
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    if options.knapsack not in ("exact", "greedy"):
        raise SolverError(f"unknown knapsack mode {options.knapsack!r}; use 'exact' or 'greedy'")
    mode = EXACT if options.knapsack == "exact" else GREEDY
    progress = _Progress(options.progress)
    cand = candidates(problem, options) if cand is None else cand
    stats: dict = {"knapsack": options.knapsack, "linearize": options.linearize}
    if cand.infeasible_reason is not None:  # no plan on any number of devices: the curve is all None
        stats["curve"] = _none_curve(problem, options, 0)
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
                           stats=stats, message=cand.infeasible_reason)
    ideals = enumerate_ideals(problem, options.max_ideals, linearize=options.linearize)
    pairs = ideal_pairs(ideals)
    stats.update(ideals=len(ideals), ideal_pairs=pairs.count)
    progress.say(f"{len(ideals)} ideals, {pairs.count} ideal pairs", force=True)
    arr = _arrays(problem, cand, bw_edge)
    S = min(problem.microbatches, problem.devices)
    engine = _choose_engine(options, pairs, arr, problem.devices)
    stats["engine"] = engine
    if engine == "table":
        return _finish_table(problem, options, arr, ideals, pairs, mode, name, start, deadline, progress, stats, cand)
    pts = _curve_points(problem, options, pairs.count)
    ub = math.inf
    use_bound = options.params.get("greedy_bound", None)
    if use_bound is None:
        use_bound = problem.n > 64
    if mode == EXACT and not pts and use_bound:
        # large stages make exact knapsacks costly: bound the optimum first by a
        # cheap heuristic table (greedy choices, achievable values); then only stage
        # values <= that bound are computed exactly
        t0 = time.perf_counter()
        try:
            heur = build_tables(problem, arr, ideals, pairs, HEUR, deadline, progress)
            hs = _Search(heur, S, deadline, progress)
            idx = hs.least_index(problem.devices)
            if idx is not None:
                heur_value = float(hs.cands[idx])
                ub = _with_slack(heur_value)
        except _TimeUp:
            return make_result(problem, name, Status.UNKNOWN, None, time_s=time.perf_counter() - start, stats=stats,
                               message=f"time limit ({options.time_limit_s} s) hit while bounding the optimum")
        stats.update(heuristic_bound=None if math.isinf(ub) else heur_value, bound_s=time.perf_counter() - t0)
    try:
        t0 = time.perf_counter()
        tables = build_tables(problem, arr, ideals, pairs, mode, deadline, progress, ub)
        stats.update(entries=tables.entries, segments=tables.segments, tables_s=time.perf_counter() - t0)
    except _TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=time.perf_counter() - start, stats=stats,
                           message=f"time limit ({options.time_limit_s} s) hit while building stage tables")
    search = _Search(tables, S, deadline, progress, ub)
    stats["candidates"] = int(len(search.cands))
    t0 = time.perf_counter()
    best: int | None = None
    try:
        best = search.least_index(problem.devices)
    except _TimeUp:
        pass
    timed_out = best is None and deadline is not None and time.perf_counter() > deadline
    if best is None and not timed_out:
        stats.update(search_s=time.perf_counter() - t0, tests=search.tests,
                     curve=_none_curve(problem, options, pairs.count))
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
        if pts:
            idx = search.curve(pts)
            stats["curve"] = [[k, None if idx[k] is None else float(search.cands[idx[k]])] for k in pts]
    except _TimeUp:
        message = "time limit hit while computing the curve (stats['curve'] omitted)"
    stats.update(curve_s=time.perf_counter() - t0, tests=search.tests)
    status = Status.OPTIMAL if mode == EXACT else Status.FEASIBLE
    return make_result(problem, name, status, plan, time_s=time.perf_counter() - start, objective=obj,
                       stats=stats, message=message)


def _none_curve(problem: Problem, options: Options, pairs: int) -> list[list]:
    return [[k, None] for k in _curve_points(problem, options, pairs)]


def _choose_engine(options: Options, pairs: IdealPairs, arr: _Arrays, k: int) -> str:
    """``params["engine"]`` ("table" or "threshold"), else: the threshold search unless its
    stage tables would be large (ideal pairs x options > 20 M, e.g. GNMT), then the table."""
    engine = options.params.get("engine", "auto")
    if engine in ("table", "threshold"):
        return engine
    if engine != "auto":
        raise SolverError(f"unknown DP engine {engine!r}; use 'table', 'threshold' or 'auto'")
    n_opts = len(_options_arrays(arr, k)[0])
    return "table" if pairs.count * max(1, n_opts) > 20_000_000 else "threshold"


def _finish_table(problem: Problem, options: Options, arr: _Arrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                  name: str, start: float, deadline: float | None, progress: _Progress, stats: dict,
                  cand: Candidates) -> Result:
    t0 = time.perf_counter()
    want_curve = options.params.get("curve", None) is True or options.params.get("curve_points") is not None
    ub = math.inf
    if not want_curve and not ideals.linear:
        # a bound from the linearized problem (n + 1 ideals, cheap) prunes the full DP
        lin = _solve_run(problem, replace(options, linearize=True, time_limit_s=None, progress=False,
                                          params={**options.params, "curve": False, "engine": "auto"}),
                         arr.bw_edge, cand)
        ub = _with_slack(lin.objective) if lin.objective is not None else math.inf
        stats["linearized_tps"] = None if math.isinf(lin.tps) else lin.tps
    try:
        dpm, plan, obj = _solve_table(problem, arr, ideals, pairs, mode, deadline, progress, ub)
    except _TimeUp:
        return make_result(problem, name, Status.UNKNOWN, None, time_s=time.perf_counter() - start, stats=stats,
                           message=f"time limit ({options.time_limit_s} s) hit while filling the DP table")
    stats["table_s"] = time.perf_counter() - t0
    S = min(problem.microbatches, problem.devices)
    if want_curve or (math.isinf(ub) and options.params.get("curve", None) is not False):
        pts = _curve_points(problem, options) if options.params.get("curve_points") is not None else \
            list(range(1, problem.devices + 1))
        stats["curve"] = [[kk, None if math.isinf(dpm[ideals.full, kk, S]) else float(dpm[ideals.full, kk, S])]
                          for kk in pts]
    if plan is None:
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start, stats=stats,
                           message="no plan fits in memory on the available devices")
    status = Status.OPTIMAL if mode == EXACT else Status.FEASIBLE
    return make_result(problem, name, status, plan, time_s=time.perf_counter() - start, objective=obj, stats=stats)


# ---------------------------------------------------------------------------------
# version 2 (two edge-bandwidth runs) and uniform plans: the public entry point
# ---------------------------------------------------------------------------------

#: uniform plans: refuse when (DPs to run) x (ideal pairs of one DP) exceeds this. GNMT (k = 10,
#: 15.5 M ideal pairs, 4 (t, d) pairs: 62 M) took 336 s uniform (2 cores, under load) against
#: seconds for its ordinary DP: one (t, d) at a time defeats the table engine's pruning.
#: BERT-32 (k = 512: 68 DPs x 890 pairs) takes ~8 s.
UNIFORM_MAX_WORK = 20_000_000


def solve_dp(problem: Problem, options: Options | None = None) -> Result:
    """Piper's DP (exact or greedy knapsack per ``options.knapsack``); see the module docstring.

    Version 2 (docs/problem.md §2.2): B_edge is a property of the whole plan (B_in when
    sum d t <= G, else B), so the DP runs twice when G < k: once over plans with at most
    G devices and cut edges at B_in (exact for them), once over all plans with cut edges
    at B (exact for plans spanning nodes; with B_in >= B a plan inside one node is scored
    pessimistically there), and the better plan wins (:func:`_solve_edges`).  With G >= k
    (always in version 1) there is one run, at B_in (= B without the key): every number
    is then exactly the version-1 number.

    Uniform plans (``options.uniform``, docs/problem.md §2.5): one DP (both runs) per
    allowed (t, d) with only that pair allowed; the best wins (:func:`_solve_uniform`).

    Result: ``objective`` = the DP's value (max stage value of its plan), ``tps`` =
    the evaluator's score of the plan, ``stats`` with ``ideals``, ``ideal_pairs``,
    ``curve`` ([k', best TPS or None]), ``entries``, ``segments``, ``candidates``,
    ``tests`` and phase timings; with two runs also ``runs`` (one summary per run).
    """
    options = options or Options()
    if options.knapsack not in ("exact", "greedy"):
        raise SolverError(f"unknown knapsack mode {options.knapsack!r}; use 'exact' or 'greedy'")
    if options.uniform:
        return _solve_uniform(problem, options)
    return _solve_edges(problem, options)


def _edge_runs(problem: Problem) -> list[tuple[Problem, float]]:
    """(the run's problem, its B_edge in bytes/s): [(problem, B_in)] when G >= k; else
    [(problem with k = G, B_in), (problem, B)] (docs/problem.md §2.2)."""
    g, k = problem.node_size, problem.devices
    if g >= k:
        return [(problem, problem.bandwidth_intra)]
    return [(replace(problem, devices=g), problem.bandwidth_intra), (problem, problem.bandwidth)]


def _restrict(cand: Candidates, t: int, d: int) -> Candidates | None:
    """``cand`` with only the pair (t, d) allowed (None when some layer lacks t or d is not allowed)."""
    if t not in cand.ts or d not in cand.ds:
        return None
    tmpcs = {}
    for v, per_t in cand.tmpcs.items():
        if t not in per_t:
            return None
        tmpcs[v] = {t: per_t[t]}
    return Candidates(ts=(t,), ds=(d,), tmpcs=tmpcs, infeasible_reason=cand.infeasible_reason)


def _remaining(options: Options, start: float) -> Options:
    if options.time_limit_s is None:
        return options
    return replace(options, time_limit_s=max(0.0, options.time_limit_s - (time.perf_counter() - start)))


def _solve_edges(problem: Problem, options: Options, pair: tuple[int, int] | None = None) -> Result | None:
    """The DP with version 2's plan-level edge bandwidth (see :func:`solve_dp`); ``pair`` =
    (t, d): only that pair (a uniform run; None when no run allows it)."""
    start = time.perf_counter()
    runs = _edge_runs(problem)
    if pair is None and len(runs) == 1:
        return _solve_run(problem, options, runs[0][1])  # version 1 (and G >= k): one run, as ever
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    results: list[tuple[Result, Problem, float]] = []
    for prob, bw_edge in runs:
        cand = candidates(prob, options)
        if pair is not None:
            if cand.infeasible_reason is None:
                cand = _restrict(cand, *pair)
            if cand is None:
                continue
        results.append((_solve_run(prob, _remaining(options, start), bw_edge, cand), prob, bw_edge))
    if not results:
        return None
    if len(results) == 1:
        res, prob, _ = results[0]
        if prob is problem:
            return res
        return make_result(problem, name, res.status, res.plan, time_s=time.perf_counter() - start,
                           objective=res.objective, bound=res.bound if res.status != Status.OPTIMAL else None,
                           stats=res.stats, message=res.message)
    return _combine_edges(problem, options, name, results, start)


def _combine_edges(problem: Problem, options: Options, name: str, results: list[tuple[Result, Problem, float]],
                   start: float) -> Result:
    """The better of the run inside one node (k = G, edges at B_in) and the run over all
    plans (edges at B); see :func:`solve_dp`.  With B_in < B (allowed, if odd) the second
    run scores a plan inside one node optimistically: when its best plan is one, its value
    is only a lower bound on plans spanning nodes, and the result is then FEASIBLE with
    that bound unless the first run's optimum is already no larger."""
    (r1, p1, _), (r2, _, _) = results
    g = problem.node_size
    exact = options.knapsack == "exact"
    odd = problem.bandwidth_intra < problem.bandwidth
    plans = [(r, i) for i, r in enumerate((r1, r2)) if r.plan is not None]
    scored = [(make_result(problem, name, r.status, r.plan, time_s=0.0).tps, i, r) for r, i in plans]
    message = "; ".join(m for m in (r1.message, r2.message) if m)
    timed = any(r.status in (Status.UNKNOWN, Status.FEASIBLE) and "time limit" in r.message for r in (r1, r2))
    bound: float | None = None
    stats = dict((r2 if r2.plan is not None or r1.plan is None else r1).stats)
    stats["runs"] = [{"devices": p.devices, "edge_bandwidth": bw, "status": r.status.value, "objective": r.objective,
                      "tps": None if math.isinf(r.tps) else r.tps, "time_s": r.time_s} for r, p, bw in results]
    if not scored:
        status = Status.UNKNOWN if timed else Status.INFEASIBLE
        stats.pop("curve", None)
        return make_result(problem, name, status, None, time_s=time.perf_counter() - start, stats=stats,
                           message=message or "no plan fits in memory on the available devices")
    if exact:
        # the least DP value is the optimum (run 1 first on ties); run 2's plan inside one node
        # is never better than run 1's real optimum, so it only wins on value when B_in < B
        best = min(plans, key=lambda ri: (ri[0].objective, ri[1]))
        res = best[0]
        objective = res.objective
        if odd and r2.plan is not None and r2.plan.devices_used <= g:
            lower = r2.objective
            if r1.plan is not None and r1.status == Status.OPTIMAL and r1.objective <= lower:
                res, objective = r1, r1.objective
            else:
                # run 2's value is a lower bound only; keep the best real plan
                _, _, res = min(scored, key=lambda x: (x[0], x[1]))
                objective = make_result(problem, name, res.status, res.plan, time_s=0.0).tps
                bound = lower
                message = "; ".join(m for m in (message, "intraNodeBandwidth < bandwidth: plans spanning nodes are "
                                                "only bounded below (the DP scored a plan inside one node at B)") if m)
        statuses = {r1.status, r2.status}
        if bound is not None or timed or Status.FEASIBLE in statuses or Status.UNKNOWN in statuses:
            status = Status.FEASIBLE
            if bound is None:
                bound = 0.0
        else:
            status = Status.OPTIMAL
    else:
        _, _, res = min(scored, key=lambda x: (x[0], x[1]))
        objective = res.objective
        status = Status.FEASIBLE
    curve1, curve2 = r1.stats.get("curve"), r2.stats.get("curve")
    stats.pop("curve", None)
    if curve1 is not None and curve2 is not None and not odd:
        c1 = {int(a): v for a, v in curve1}
        c2 = {int(a): v for a, v in curve2}
        curve = []
        for kk in sorted(set(c1) | set(c2)):
            if min(kk, p1.devices) not in c1 or kk not in c2:
                continue
            vals = [v for v in (c1[min(kk, p1.devices)], c2[kk]) if v is not None]
            curve.append([kk, min(vals) if vals else None])
        stats["curve"] = curve
    return make_result(problem, name, status, res.plan, time_s=time.perf_counter() - start, objective=objective,
                       bound=bound, stats=stats, message=message)


def _solve_uniform(problem: Problem, options: Options) -> Result:
    """Uniform plans (docs/problem.md §2.5): the DP once per allowed (t, d), only that pair
    allowed (both edge runs of version 2 each); the best plan wins.  No curve."""
    start = time.perf_counter()
    name = "dp" if options.knapsack == "exact" else "dp-greedy"
    cand = candidates(problem, options)
    if cand.infeasible_reason is not None:
        return make_result(problem, name, Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
                           stats={"uniform": True}, message=cand.infeasible_reason)
    k = problem.devices
    pairs_td = [(t, d) for t in cand.ts for d in cand.ds if t * d <= k
                and all(t in per_t for per_t in cand.tmpcs.values())]
    ideals = enumerate_ideals(problem, options.max_ideals, linearize=options.linearize)
    n_pairs = ideal_pairs(ideals).count
    n_dps = len(pairs_td) * len(_edge_runs(problem))
    if n_dps * n_pairs > UNIFORM_MAX_WORK:
        raise SolverError(
            f"uniform plans need one DP per (t, d) pair: {len(pairs_td)} pairs x {len(_edge_runs(problem))} "
            f"edge-bandwidth run(s) = {n_dps} DPs over {n_pairs} ideal pairs each, more than "
            f"{UNIFORM_MAX_WORK:,} ideal-pair passes; use --linearize (n + 1 ideals), --no-dp / --no-tp, "
            f"or fewer devices")
    opts = replace(options, uniform=False, params={**options.params, "curve": False, "curve_points": None})
    found: list[tuple[Result, tuple[int, int]]] = []
    for t, d in pairs_td:
        res = _solve_edges(problem, _remaining(opts, start), (t, d))
        if res is not None:
            found.append((res, (t, d)))
    stats: dict = {"uniform": True, "uniform_pairs": len(pairs_td), "dps": n_dps, "ideal_pairs": n_pairs}
    with_plan = [(r, td) for r, td in found if r.plan is not None]
    timed = any("time limit" in r.message for r, _ in found)
    if not with_plan:
        status = Status.UNKNOWN if timed or any(r.status == Status.UNKNOWN for r, _ in found) else Status.INFEASIBLE
        return make_result(problem, name, status, None, time_s=time.perf_counter() - start, stats=stats,
                           message="no uniform plan fits in memory on the available devices"
                           if status == Status.INFEASIBLE else "time limit hit before any uniform plan was found")
    exact = options.knapsack == "exact"
    if exact:
        res, td = min(with_plan, key=lambda x: x[0].objective)
    else:
        res, td = min(with_plan, key=lambda x: x[0].tps)
    stats.update(t=td[0], d=td[1], runs=[{"t": t, "d": d, "status": r.status.value, "objective": r.objective}
                                          for r, (t, d) in found])
    if exact and all(r.status in (Status.OPTIMAL, Status.INFEASIBLE) for r, _ in found):
        status, bound = Status.OPTIMAL, None
    elif exact:
        status = Status.FEASIBLE
        # every (t, d)'s bound (a proven optimum or lower bound; 0 when unknown) bounds the optimum
        bound = min((r.bound for r, _ in found if r.status != Status.INFEASIBLE), default=0.0)
    else:
        status, bound = Status.FEASIBLE, None
    message = "; ".join(sorted({r.message for r, _ in found if r.message and r.plan is not None}))
    if timed:
        cut = sum("time limit" in r.message for r, _ in found)
        message = "; ".join(m for m in (message, f"time limit ({options.time_limit_s} s): {cut} of {len(found)} "
                                                 f"(t, d) pairs not solved to the end") if m)
    return make_result(problem, name, status, res.plan, time_s=time.perf_counter() - start, objective=res.objective,
                       bound=bound, stats=stats, message=message)
