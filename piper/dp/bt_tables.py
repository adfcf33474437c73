"""Stage tables for the batch-time objective: per ideal pair, (t, d) and y, the stage's value K
(its least TPS_i, time per sample), the tau_i of that choice, and a lower bound on tau_i.

docs/problem.md §2.4 and §9: batch_time = N TPS + sum_i tau_i - max_i tau_i with
tau_i = P_i + X_i / B_edge (the time one replica spends on one microbatch) and
TPS_i = tau_i / d + R_i / B_resync.  For one stage at (t, d, y) the knapsack's choice of least
TPS_i (:mod:`piper.dp.knapsack`) is also a choice of least tau_i when every node's TMPCs share
one parameter size w (R_i is then the same for every choice): the table entry (K, tau) is then
the stage's only useful point, and ``tau_low == tau``.  Otherwise ``tau_low`` is the least tau_i
of any choice that fits in memory (a second knapsack with tau as the cost), a lower bound that
:mod:`piper.dp.fronts` uses to bound the optimum from below (docs/dp.md, "batch time").

Entries and segments have the layout of :mod:`piper.dp.threshold` (entries grouped by ideal
ascending; a segment is a run of y with one value), with two more columns per segment.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from piper.dp.knapsack import EXACT, GREEDY, ensure_room, knapsack, total_of
from piper.dp.stage import (
    fits_through,
    has_experts,
    new_scratch,
    options_memory_at,
    stage_costs,
    stage_nodes,
    stage_options,
)

__all__ = ["BatchSegments", "BatchTables", "build_batch_tables", "same_w"]


class BatchSegments(NamedTuple):
    """Segment q: for y_lo[q] <= y <= y_hi[q] the stage's least TPS is value[q] (time per sample),
    tau[q] is the tau_i of that choice and tau_low[q] <= the tau_i of every choice that fits
    (time units per microbatch)."""

    y_lo: np.ndarray
    y_hi: np.ndarray
    value: np.ndarray
    tau: np.ndarray
    tau_low: np.ndarray


class BatchTables(NamedTuple):
    """Entries (ideal, sub, t, d, first_seg, seg_stop) and their segments; ``exact_tau`` is False
    when some stage's tau_low < tau (TMPCs of one node with different w)."""

    ideal: np.ndarray
    sub: np.ndarray
    t: np.ndarray
    d: np.ndarray
    first_seg: np.ndarray
    seg_stop: np.ndarray
    segments: BatchSegments
    exact_tau: bool


@njit(cache=True)
def same_w(lay, sc, nx):
    """True when each of the stage's nodes has one parameter size w over its options and none has
    expert terms (then every choice has the same resync bytes)."""
    off, qidx, tw = sc.off, sc.qidx, lay.tw
    if has_experts(lay, sc, nx):
        return False
    for i in range(nx):
        w0 = tw[qidx[off[i]]]
        for j in range(off[i] + 1, off[i + 1]):
            if tw[qidx[j]] != w0:
                return False
    return True


@njit(cache=True)
def _grow5(a, b, c, e, f, need):
    return ensure_room(a, need), ensure_room(b, need), ensure_room(c, need), ensure_room(e, need), ensure_room(f, need)


@njit(cache=True)
def _build(lay, lim, words, p_i, p_j, mode, t_max):
    """Entries and segments for the pairs (p_i[r], p_j[r]) (see the module docstring); values above
    ``t_max`` are left out (K is non-decreasing in y with the exact knapsack: y stops there)."""
    n, ts, ds = lay.n, lay.ts, lay.ds
    k, S, M = lim.devices, lim.budget, lim.memory
    bw = lay.bw_edge
    n_ent = 0
    n_seg = 0
    e_i = np.empty(256, dtype=np.int64)
    e_j = np.empty(256, dtype=np.int64)
    e_t = np.empty(256, dtype=np.int64)
    e_d = np.empty(256, dtype=np.int64)
    e_s = np.empty(256, dtype=np.int64)
    s_lo = np.empty(256, dtype=np.int64)
    s_hi = np.empty(256, dtype=np.int64)
    s_v = np.empty(256)
    s_tau = np.empty(256)
    s_low = np.empty(256)
    sc = new_scratch(lay)
    off, cost, mem, ch = sc.off, sc.cost, sc.mem, sc.ch
    tauv = np.empty(cost.shape[0])
    ch2 = np.empty(n, dtype=np.int64)
    exact_tau = True
    for r in range(p_i.shape[0]):
        I = p_i[r]
        J = p_j[r]
        nx = stage_nodes(words, I, J, n, sc)
        for ti in range(ts.shape[0]):
            t = ts[ti]
            if not stage_options(lay, sc, nx, ti):
                continue
            m = off[nx]
            for j in range(m):
                tauv[j] = lay.tp[sc.qidx[j]] + sc.ebytes[j] / bw
            shared = same_w(lay, sc, nx)
            for di in range(ds.shape[0]):
                d = ds[di]
                if t * d > k:
                    break
                stage_costs(lay, sc, m, d, cost)
                y_max = (S + d - 1) // d
                seg_start = n_seg
                y = np.int64(1)  # int64, not a literal 1: one compiled options_memory_at (piper.dp.stage)
                while y <= y_max:
                    options_memory_at(lay, sc, m, di, y)
                    val = knapsack(mode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                    if val == np.inf or val > t_max:
                        break
                    tau = total_of(ch[:nx], tauv)
                    low = tau
                    if not shared:
                        low = knapsack(np.int64(EXACT), off[: nx + 1], tauv[:m], mem[:m], M, ch2[:nx])
                        if low < tau:
                            exact_tau = False
                        else:
                            low = tau
                    y2 = y + 1
                    if mode != GREEDY:
                        # both choices stay optimal while they fit (memory grows with y)
                        y2 = fits_through(lay, sc, nx, ch, di, y + 1, y_max, M) + 1
                        if not shared:
                            y2 = min(y2, fits_through(lay, sc, nx, ch2, di, y + 1, y_max, M) + 1)
                    if n_seg > seg_start and s_v[n_seg - 1] == val and s_tau[n_seg - 1] == tau \
                            and s_low[n_seg - 1] == low and s_hi[n_seg - 1] == y - 1:
                        s_hi[n_seg - 1] = y2 - 1
                    else:
                        s_lo, s_hi, s_v, s_tau, s_low = _grow5(s_lo, s_hi, s_v, s_tau, s_low, n_seg + 1)
                        s_lo[n_seg] = y
                        s_hi[n_seg] = y2 - 1
                        s_v[n_seg] = val
                        s_tau[n_seg] = tau
                        s_low[n_seg] = low
                        n_seg += 1
                    y = y2
                if n_seg > seg_start:
                    e_i, e_j, e_t, e_d, e_s = _grow5(e_i, e_j, e_t, e_d, e_s, n_ent + 1)
                    e_i[n_ent] = I
                    e_j[n_ent] = J
                    e_t[n_ent] = t
                    e_d[n_ent] = d
                    e_s[n_ent] = seg_start
                    n_ent += 1
    return (e_i[:n_ent].copy(), e_j[:n_ent].copy(), e_t[:n_ent].copy(), e_d[:n_ent].copy(), e_s[:n_ent].copy(),
            BatchSegments(s_lo[:n_seg].copy(), s_hi[:n_seg].copy(), s_v[:n_seg].copy(), s_tau[:n_seg].copy(),
                          s_low[:n_seg].copy()), exact_tau)


def build_batch_tables(layers, lim, words: np.ndarray, p_i: np.ndarray, p_j: np.ndarray, mode: int,
                       t_max: float = np.inf) -> BatchTables:
    """The batch-time stage tables of the pairs (p_i[r], p_j[r]) (grouped by p_i ascending), with
    the knapsack ``mode`` (EXACT or GREEDY) and values above ``t_max`` left out."""
    e_i, e_j, e_t, e_d, e_s, segs, exact_tau = _build(layers, lim, words, p_i.astype(np.int64),
                                                      p_j.astype(np.int64), mode, float(t_max))
    stop = np.empty_like(e_s)
    if stop.shape[0]:
        stop[:-1] = e_s[1:]
        stop[-1] = segs.value.shape[0]
    return BatchTables(e_i, e_j, e_t, e_d, e_s, stop, segs, bool(exact_tau))

