"""Compiled kernels of one stage: its nodes, TMPC options, costs, memory and knapsack choices.

Every kernel takes the run's :class:`~piper.dp.arrays.LayerArrays` (``lay``), and the ones
that work on a stage its :class:`StageScratch` (``sc``): after :func:`stage_nodes` and
:func:`stage_options`, the stage I \\ J has ``nx`` nodes ``sc.nodes[:nx]`` and
``m = sc.off[nx]`` flat options ``sc.qidx[:m]`` (options of node i:
``sc.off[i] .. sc.off[i + 1] - 1``) with cut-edge bytes ``sc.ebytes[:m]``.

Numba's cache does not see edits of a callee in another file: after editing this module
(or :mod:`piper.dp.knapsack`), delete ``piper/dp/__pycache__`` so the engines recompile.

One compiled version per kernel: numba compiles a kernel again for every new tuple of argument
types, and a literal constant (``f(x, 0)``, or a variable set to one before a loop updates it)
is a type of its own, so the kernels here and their callers pass int64 scalars
(``np.int64(0)``), arrays of one dtype and layout, and :class:`~piper.dp.arrays.LayerArrays`
whose optional arrays are empty rather than None (``tests/dp/test_compile_once.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, types
from numba.extending import overload

from piper.dp.knapsack import ensure_room, knapsack, least_option, total_of


def _absent(x: np.ndarray | None) -> bool:
    """True when the optional array ``x`` of :class:`~piper.dp.arrays.LayerArrays` is not needed:
    empty (:func:`~piper.dp.arrays.absent_array`; a present one never is) or None.  The kernels
    then run their version-1 loops.  A run-time test (outside the loops), so that a run with and
    one without the array share one compiled kernel."""
    return x is None or x.size == 0


@overload(_absent, inline="always")
def _absent_compiled(x):
    if isinstance(x, types.NoneType):
        return lambda x: True
    return lambda x: x.size == 0


def entry_or_zero(a: np.ndarray | None, i: int, j: int) -> float:
    """a[i, j], for an optional 2-d array (0.0 when it is None; an empty array has no entries:
    callers test :func:`_absent` first)."""
    return 0.0 if a is None else float(a[i, j])


@overload(entry_or_zero, inline="always")
def _entry_compiled(a, i, j):
    if isinstance(a, types.NoneType):
        return lambda a, i, j: 0.0
    return lambda a, i, j: a[i, j]


class StageScratch(NamedTuple):
    """Work arrays for one stage at a time, sized for n nodes and max_opts flat options."""

    #: membership of the ideals I and J, by node position
    in_i: np.ndarray
    in_j: np.ndarray
    #: the stage's node positions (first nx), its options per node (off) and their flat TMPC indices
    nodes: np.ndarray
    off: np.ndarray
    qidx: np.ndarray
    #: per option: cut-edge bytes E, cost (time per sample), memory (bytes)
    ebytes: np.ndarray
    cost: np.ndarray
    mem: np.ndarray
    #: a choice (one option per node) and the all-fastest choice
    ch: np.ndarray
    fast: np.ndarray
    #: bound pruning of the d-invariant case: (t, ds[di]) still in play; its option costs
    alive: np.ndarray
    costs_d: np.ndarray


class ChoiceRuns(NamedTuple):
    """Runs of y sharing one optimal choice: run r covers y = lo[r] .. hi[r] with the choice
    ch[r n : r n + nx] (n = number of layers)."""

    lo: np.ndarray
    hi: np.ndarray
    ch: np.ndarray


@njit(cache=True)
def _stage_scratch(n, max_opts, n_ds):
    """A :class:`StageScratch` for n nodes, max_opts flat options and n_ds degrees d."""
    return StageScratch(np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_), np.empty(n, dtype=np.int64),
                        np.empty(n + 1, dtype=np.int64), np.empty(max_opts, dtype=np.int64), np.empty(max_opts),
                        np.empty(max_opts), np.empty(max_opts), np.empty(n, dtype=np.int64),
                        np.empty(n, dtype=np.int64), np.zeros(n_ds, dtype=np.bool_), np.empty((n_ds, max_opts)))


@njit(cache=True)
def new_scratch(lay):
    """A :class:`StageScratch` sized for ``lay``."""
    return _stage_scratch(lay.n, lay.tp.shape[0] + 1, lay.ds.shape[0])


@njit(cache=True)
def _membership(words_row: np.ndarray, n: int, out: np.ndarray) -> None:
    for v in range(n):
        out[v] = ((words_row[v >> 6] >> np.uint64(v & 63)) & np.uint64(1)) != 0


@njit(cache=True)
def stage_nodes(words, I, J, n, sc) -> int:
    """Fill sc.in_i / sc.in_j with the members of ideals I and J and sc.nodes[:nx] with the
    stage I \\ J (ascending positions); return nx."""
    in_i = sc.in_i
    in_j = sc.in_j
    nodes = sc.nodes
    _membership(words[I], n, in_i)
    _membership(words[J], n, in_j)
    nx = 0
    for v in range(n):
        if in_i[v] and not in_j[v]:
            nodes[nx] = v
            nx += 1
    return nx


@njit(cache=True)
def stage_options(lay, sc, nx, ti):
    """Options of the stage's nodes at degree ts[ti]: sc.off (nx+1), flat TMPC index
    sc.qidx and cut-edge bytes E (sc.ebytes) per option.  False if some node lacks degree ts[ti].

    E_q = sum over in-edges (u, v), u not in I, of 2 (c + sfw_q[u])
        + sum over out-edges (v, x), x in J, of 2 (c + sbw_q[x]).
    """
    nodes, in_i, in_j, off, qidx, ebytes = sc.nodes, sc.in_i, sc.in_j, sc.off, sc.qidx, sc.ebytes
    opt_start, opt_cnt, in_ptr, in_src = lay.opt_start, lay.opt_cnt, lay.in_ptr, lay.in_src
    out_ptr, out_dst, inb_ptr, inb, outb_ptr, outb = lay.out_ptr, lay.out_dst, lay.inb_ptr, lay.inb, lay.outb_ptr, lay.outb
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
def stage_costs(lay, sc, m, d, cost):
    """cost_q = E_q / (d B_edge) + R_q / B_resync + p_q / d (docs/problem.md §2.2) for the
    stage's m options at degree d, into cost.

    The pair-independent parts are precomputed per (TMPC, d): rq = f (d - 1) w / d / N
    (resync bytes), pq = p / d, rb = B_resync (B_in when t d <= G, else B) and
    c0 = rq / rb + pq (the cost when E_q = 0: 0 / (d bw) + x == x exactly).  When
    B_resync == B_edge (always in version 1) the reference's arithmetic is kept verbatim,
    (E_q / d + rq) / B + pq, so version-1 numbers are bit-for-bit unchanged."""
    qidx, ebytes, rq, pq, c0, bw = sc.qidx, sc.ebytes, lay.rq, lay.pq, lay.c0, lay.bw_edge
    ds = lay.ds
    di = 0
    while ds[di] != d:
        di += 1
    rb = lay.rb
    if _absent(rb):  # every B_resync == B_edge (version 1): the reference's loop, verbatim
        for r in range(m):
            q = qidx[r]
            e = ebytes[r]
            if e == 0.0:
                cost[r] = c0[q, di]
            else:
                cost[r] = (e / d + rq[q, di]) / bw + pq[q, di]
    else:
        _costs_two_bandwidths(lay, sc, m, d, di, cost)
    if not _absent(lay.ir):
        _add_iteration_terms(lay, sc, m, di, cost)


@njit(cache=True)
def _add_iteration_terms(lay, sc, m, di, cost):
    """docs/problem.md §10 (:mod:`piper.dp.iteration`): the options' costs leave the resync out (rq = 0);
    the stage's exposed resync and step, max(0, N R - H) / N + O / N, the same for every choice (each
    layer's options share the numbers they are made of), go onto every option of the stage's first
    layer, so that every choice's sum is the stage's value. The stage's layers are those of sc.off up
    to the one whose options end at m."""
    off, qidx, ir, io, ih = sc.off, sc.qidx, lay.ir, lay.io, lay.ih
    n_mb = lay.n_mb
    resync = 0.0
    hide = 0.0
    step = 0.0
    i = 0
    while off[i] < m:
        q = qidx[off[i]]
        resync += ir[q, di]
        hide += ih[q]
        step += io[q, di]
        i += 1
    extra = max(0.0, n_mb * resync - hide) / n_mb + step / n_mb
    for r in range(off[0], off[1]):
        cost[r] += extra


@njit(cache=True)
def _costs_two_bandwidths(lay, sc, m, d, di, cost):
    """:func:`stage_costs` when some B_resync differs from B_edge."""
    qidx, ebytes, rq, pq, c0, bw, rb = sc.qidx, sc.ebytes, lay.rq, lay.pq, lay.c0, lay.bw_edge, lay.rb
    for r in range(m):
        q = qidx[r]
        e = ebytes[r]
        if e == 0.0:
            cost[r] = c0[q, di]
        else:
            b = entry_or_zero(rb, q, di)
            if b == bw:
                cost[r] = (e / d + rq[q, di]) / bw + pq[q, di]
            else:
                cost[r] = e / (d * bw) + rq[q, di] / b + pq[q, di]


@njit(cache=True)
def has_experts(lay, sc, nx):
    """True when some option of the stage has expert-parallelism terms (docs/problem.md §11:
    its resync and memory, rule 6 included, depend on d otherwise than as cost(1) / d + a constant)."""
    xq, off, qidx = lay.xq, sc.off, sc.qidx
    for j in range(off[nx]):
        if xq[qidx[j]]:
            return True
    return False


@njit(cache=True)
def d_invariant(lay, sc, nx):
    """True when each node's options all have the same parameter size w, no option
    has sharded memory (memory s / d depends on d) and none has expert terms."""
    off, qidx, tw = sc.off, sc.qidx, lay.tw
    sq = lay.sq
    if has_experts(lay, sc, nx):
        return False
    if _absent(sq):  # no sharded state anywhere
        for i in range(nx):
            w0 = tw[qidx[off[i]]]
            for j in range(off[i] + 1, off[i + 1]):
                if tw[qidx[j]] != w0:
                    return False
        return True
    for i in range(nx):
        w0 = tw[qidx[off[i]]]
        if entry_or_zero(sq, 0, qidx[off[i]]) != 0.0:
            return False
        for j in range(off[i] + 1, off[i + 1]):
            if tw[qidx[j]] != w0 or entry_or_zero(sq, 0, qidx[j]) != 0.0:
                return False
    return True


@njit(cache=True)
def has_sharded(lay, sc, nx):
    """True when some option of the stage has sharded memory s > 0, or expert terms (whose
    memory s_x / r, or rule 6, depends on d)."""
    off, qidx, sq = sc.off, sc.qidx, lay.sq
    if _absent(sq):
        return False
    if has_experts(lay, sc, nx):
        return True
    for j in range(off[nx]):
        if entry_or_zero(sq, 0, qidx[j]) != 0.0:
            return True
    return False


@njit(cache=True)
def choice_memory(lay, sc, nx, ch, di, y):
    """The memory a y + b + s / d of the choice ch, summed over the stage's nodes (bytes), at the
    stage's d = ds[di].  Summed as the evaluator does, (a y + b) + s / d per node in node order
    (docs/problem.md §2.2)."""
    qidx, ta, tb, sq = sc.qidx, lay.ta, lay.tb, lay.sq
    mem = 0.0
    if _absent(sq):  # no sharded state anywhere (version 1)
        for i in range(nx):
            q = qidx[ch[i]]
            mem += ta[q] * y + tb[q]
        return mem
    for i in range(nx):
        q = qidx[ch[i]]
        mem += ta[q] * y + tb[q] + entry_or_zero(sq, di, q)
    return mem


@njit(cache=True)
def choice_fits(lay, sc, nx, ch, di, y, M):
    return choice_memory(lay, sc, nx, ch, di, y) <= M


@njit(cache=True)
def fits_through(lay, sc, nx, ch, di, y, y_limit, M):
    """The largest y2 in [y - 1, y_limit] with the choice ``ch`` fitting at every y' in [y, y2]
    (y - 1: it does not fit at y). Its memory a y + b + s / d grows with y (a >= 0; rounded sums
    and products are monotone too), so fitting holds up to some y and no further: galloping, then
    bisection, O(log(y2 - y)) memory sums where one per y' took minutes at S = 10^6 (the same y2)."""
    lo = y - 1  # fits at every y' in [y, lo]
    hi = y_limit + 1  # above the range, or the least y' known not to fit
    step = np.int64(1)
    while lo + step <= y_limit:
        if choice_fits(lay, sc, nx, ch, di, lo + step, M):
            lo += step
            step *= 2
        else:
            hi = lo + step
            break
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        if choice_fits(lay, sc, nx, ch, di, mid, M):
            lo = mid
        else:
            hi = mid
    return lo


@njit(cache=True)
def options_memory_at(lay, sc, m, di, y):
    """sc.mem[j] = a y + b + s / d of the stage's j-th flat option, j < m (bytes), d = ds[di]."""
    qidx, ta, tb, mem, sq = sc.qidx, lay.ta, lay.tb, sc.mem, lay.sq
    if _absent(sq):  # no sharded state anywhere (version 1)
        for j in range(m):
            q = qidx[j]
            mem[j] = ta[q] * y + tb[q]
        return
    for j in range(m):
        q = qidx[j]
        mem[j] = ta[q] * y + tb[q] + entry_or_zero(sq, di, q)


@njit(cache=True)
def _push_run(runs, n_run, lo, hi, ch, nx, n):
    """Append the run (y from lo to hi share the choice ch[:nx]) at index n_run; run r's
    choice is runs.ch[r n : r n + nx]. Returns the runs (arrays grown as needed)."""
    runs = ChoiceRuns(ensure_room(runs.lo, n_run + 1), ensure_room(runs.hi, n_run + 1), ensure_room(runs.ch, (n_run + 1) * n))
    runs.lo[n_run] = lo
    runs.hi[n_run] = hi
    for i in range(nx):
        runs.ch[n_run * n + i] = ch[i]
    return runs


@njit(cache=True)
def choice_runs(lay, lim, sc, nx, kmode, heur, y_limit, ub, t, runs):
    """The d-invariant case (every node's options share w, so the optimal choice at a
    given y is the same for every d): with sc.cost the options' costs at d = 1, solve the
    knapsack (kmode) at y = 1, 2, ... <= y_limit and record each run of y over which
    one choice stays optimal (it does while it fits: K is non-decreasing in y).

    heur: one greedy solve per block y in (2^(j-1), 2^j] (the HEUR table). With ub
    finite, sc.alive[di] says whether (t, ds[di]) can still give a value <= ub (sc.costs_d[di]
    holds its costs) and y_limit shrinks to the largest ceil(S / d) still alive.
    Returns (number of runs, runs), the arrays grown as needed."""
    n, ds = lay.n, lay.ds
    k, S, M = lim.devices, lim.budget, lim.memory
    off, cost, mem, ch, fast, alive, costs_d = sc.off, sc.cost, sc.mem, sc.ch, sc.fast, sc.alive, sc.costs_d
    m = off[nx]
    d0 = np.int64(0)  # the index of d = ds[0]
    n_run = np.int64(0)
    y = np.int64(1)
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
                options_memory_at(lay, sc, m, d0, mid)
                least_option(off[: nx + 1], mem[:m], fast)
                if choice_memory(lay, sc, nx, fast, d0, mid) <= M:
                    ys = mid
                    lo_y = mid + 1
                else:
                    hi_y = mid - 1
            if ys < y:
                break
        options_memory_at(lay, sc, m, d0, ys)
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
                    alive[di] = total_of(ch[:nx], costs_d[di]) <= ub
                if alive[di]:
                    y_new = max(y_new, (S + d - 1) // d)
            y_limit = y_new
            if y > y_limit:
                break
        y2 = fits_through(lay, sc, nx, ch, d0, y + 1, y_limit, M) + 1
        runs = _push_run(runs, n_run, y, y2 - 1, ch, nx, n)
        n_run += 1
        y = y2
    return n_run, runs


@njit(cache=True)
def stage_choice(lay, lim, words, I, J, ti, d, y, mode):
    """(node positions, chosen flat TMPC indices, knapsack value) of the stage I \\ J at
    (ts[ti], d) and y microbatches in flight."""
    sc = new_scratch(lay)
    nx = stage_nodes(words, I, J, lay.n, sc)
    nodes = sc.nodes
    ok = stage_options(lay, sc, nx, ti)
    chosen = np.full(nx, -1, dtype=np.int64)
    if not ok:
        return nodes[:nx].copy(), chosen, np.inf
    m = sc.off[nx]
    stage_costs(lay, sc, m, d, sc.cost)
    ds = lay.ds
    di = 0
    while ds[di] != d:
        di += 1
    options_memory_at(lay, sc, m, di, y)
    val = knapsack(mode, sc.off[: nx + 1], sc.cost[:m], sc.mem[:m], lim.memory, sc.ch[:nx])
    if val == np.inf:
        return nodes[:nx].copy(), chosen, val
    for i in range(nx):
        chosen[i] = sc.qidx[sc.ch[i]]
    return nodes[:nx].copy(), chosen, val
