"""Compiled kernels of one stage: its nodes, TMPC options, costs, memory and knapsack choices."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..knapsack import _grow, _least, _total, knapsack


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
