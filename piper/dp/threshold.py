"""The threshold engine: stage tables, the feasibility test and the search over thresholds.

See :mod:`piper.dp` for the method; the kernels take the bundles of :mod:`piper.dp.arrays`
and :mod:`piper.dp.stage`, and the tables below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit

from piper.core.problem import Problem
from piper.dp.arrays import BIG, HEUR, RunArrays, limits_of
from piper.dp.compile_clock import solve_clock
from piper.dp.ideals import IdealPairs, Ideals
from piper.dp.knapsack import GREEDY, ensure_room, knapsack, least_option, total_of
from piper.dp.limits import Progress, TimeUp, next_chunk, past, run_stoppable
from piper.dp.stage import (
    ChoiceRuns,
    choice_runs,
    d_invariant,
    fits_through,
    new_scratch,
    options_memory_at,
    stage_costs,
    stage_nodes,
    stage_options,
)


class Entries(NamedTuple):
    """Stage-table entries: entry e is the pair (ideal[e], sub[e]) at degrees (t[e], d[e]), with
    segments first_seg[e] .. (the next entry's first_seg) - 1; entries are grouped by ideal ascending."""

    ideal: np.ndarray
    sub: np.ndarray
    t: np.ndarray
    d: np.ndarray
    first_seg: np.ndarray


class Segments(NamedTuple):
    """Stage-table segments: the stage value is value[q] (time per sample) for y_lo[q] <= y <= y_hi[q]."""

    y_lo: np.ndarray
    y_hi: np.ndarray
    value: np.ndarray


class StageTableArrays(NamedTuple):
    """The stage tables as the feasibility test reads them: entry e's segments are
    ``entries.first_seg[e] .. seg_stop[e] - 1``."""

    entries: Entries
    seg_stop: np.ndarray
    segments: Segments


class FeasibilityTables(NamedTuple):
    """Filled by one feasibility test at threshold T, per (ideal, budget s): least_devices = g[I, s]
    (2^60 = impossible), entry = the entry attaining f[I, s] (-1: none), best_budget = the s' <= s
    attaining g[I, s]."""

    least_devices: np.ndarray
    entry: np.ndarray
    best_budget: np.ndarray


@njit(cache=True)
def _push_segment(segs, n_seg, lo, hi, val):
    """Append the segment (lo, hi, val) at index n_seg, growing the arrays as needed."""
    segs = Segments(ensure_room(segs.y_lo, n_seg + 1), ensure_room(segs.y_hi, n_seg + 1), ensure_room(segs.value, n_seg + 1))
    segs.y_lo[n_seg] = lo
    segs.y_hi[n_seg] = hi
    segs.value[n_seg] = val
    return segs


@njit(cache=True)
def _push_entry(ents, n_ent, i, j, t, d, s0):
    """Append the entry (pair (i, j), t, d, first segment s0) at index n_ent."""
    ents = Entries(ensure_room(ents.ideal, n_ent + 1), ensure_room(ents.sub, n_ent + 1), ensure_room(ents.t, n_ent + 1),
                   ensure_room(ents.d, n_ent + 1), ensure_room(ents.first_seg, n_ent + 1))
    ents.ideal[n_ent] = i
    ents.sub[n_ent] = j
    ents.t[n_ent] = t
    ents.d[n_ent] = d
    ents.first_seg[n_ent] = s0
    return ents


@njit(cache=True, nogil=True)
def _build_tables(lay, lim, words, p_i, p_j, mode, ub, stop):
    """Stage tables for the pairs (p_i[r], p_j[r]): entries (pair, t, d) with their
    segments (y_lo, y_hi, value), value = K(stage, t, d, y) for y_lo <= y <= y_hi.
    Returns (Entries, Segments), first_seg counted from this call's first segment; partial
    once ``stop[0]`` is set (:func:`piper.dp.limits.run_stoppable` drops them then).

    mode HEUR: achievable values only (greedy choices, reused while they fit and
    across d): a cheap table whose optimum bounds the exact one from above."""
    kmode = GREEDY if mode == HEUR else mode
    n, ts, ds = lay.n, lay.ts, lay.ds
    k, S, M = lim.devices, lim.budget, lim.memory
    n_ent = np.int64(0)  # int64, not a literal 0: one compiled _push_entry (piper.dp.stage)
    n_seg = np.int64(0)
    ents = Entries(np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.int64),
                   np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.int64))
    segs = Segments(np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.float64))
    sc = new_scratch(lay)
    off, cost, mem, ch, fast, alive, costs_d = sc.off, sc.cost, sc.mem, sc.ch, sc.fast, sc.alive, sc.costs_d
    runs = ChoiceRuns(np.empty(16, dtype=np.int64), np.empty(16, dtype=np.int64), np.empty(16 * n, dtype=np.int64))
    for r in range(p_i.shape[0]):
        if stop[0]:
            break
        I = p_i[r]
        J = p_j[r]
        nx = stage_nodes(words, I, J, n, sc)
        for ti in range(ts.shape[0]):
            t = ts[ti]
            if not stage_options(lay, sc, nx, ti):
                continue
            m = off[nx]
            if mode != GREEDY and d_invariant(lay, sc, nx):
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
                        stage_costs(lay, sc, m, d, costs_d[di])
                        least_option(off[: nx + 1], costs_d[di, :m], fast)
                        alive[di] = total_of(fast[:nx], costs_d[di]) <= ub
                        if alive[di]:
                            y_limit = max(y_limit, (S + d - 1) // d)
                stage_costs(lay, sc, m, ds[0], cost)
                n_run, runs = choice_runs(lay, lim, sc, nx, kmode, mode == HEUR, y_limit, ub, t, runs)
                if n_run == 0:
                    continue
                for di in range(ds.shape[0]):
                    d = ds[di]
                    if t * d > k:
                        break
                    stage_costs(lay, sc, m, d, cost)
                    y_max = (S + d - 1) // d
                    seg_start = n_seg
                    for rr in range(n_run):
                        if runs.lo[rr] > y_max:
                            break
                        val = total_of(runs.ch[rr * n: rr * n + nx], cost)
                        if val > ub:
                            break  # and every later run (values grow with y)
                        hi = min(runs.hi[rr], y_max)
                        if n_seg > seg_start and segs.value[n_seg - 1] == val:
                            segs.y_hi[n_seg - 1] = hi
                        else:
                            segs = _push_segment(segs, n_seg, runs.lo[rr], hi, val)
                            n_seg += 1
                    if n_seg > seg_start:
                        ents = _push_entry(ents, n_ent, I, J, t, d, seg_start)
                        n_ent += 1
                continue
            for di in range(ds.shape[0]):
                d = ds[di]
                if t * d > k:
                    break
                stage_costs(lay, sc, m, d, cost)
                # fastest option of every node (first on ties), for the greedy fast path
                least_option(off[: nx + 1], cost, fast)
                y_max = (S + d - 1) // d
                if ub < np.inf and total_of(fast[:nx], cost) > ub:
                    continue  # even the all-fastest value exceeds the bound
                seg_start = n_seg
                y = np.int64(1)
                while y <= y_max:
                    options_memory_at(lay, sc, m, di, y)
                    val = knapsack(kmode, off[: nx + 1], cost[:m], mem[:m], M, ch[:nx])
                    if val == np.inf or val > ub:
                        break  # memory only grows with y (and exact values with it)
                    y2 = y + 1
                    if mode != GREEDY:
                        # the optimal choice stays optimal while it fits (K is non-decreasing)
                        y2 = fits_through(lay, sc, nx, ch, di, y + 1, y_max, M) + 1
                    else:
                        all_fast = True
                        for i in range(nx):
                            if ch[i] != fast[i]:
                                all_fast = False
                                break
                        if all_fast:
                            # the greedy returns the all-fastest choice whenever it fits
                            y2 = fits_through(lay, sc, nx, fast, di, y + 1, y_max, M) + 1
                    if n_seg > seg_start and segs.value[n_seg - 1] == val and segs.y_hi[n_seg - 1] == y - 1:
                        segs.y_hi[n_seg - 1] = y2 - 1
                    else:
                        segs = _push_segment(segs, n_seg, y, y2 - 1, val)
                        n_seg += 1
                    y = y2
                if n_seg > seg_start:
                    ents = _push_entry(ents, n_ent, I, J, t, d, seg_start)
                    n_ent += 1
    return (Entries(ents.ideal[:n_ent].copy(), ents.sub[:n_ent].copy(), ents.t[:n_ent].copy(), ents.d[:n_ent].copy(),
                    ents.first_seg[:n_ent].copy()),
            Segments(segs.y_lo[:n_seg].copy(), segs.y_hi[:n_seg].copy(), segs.value[:n_seg].copy()))


@njit(cache=True, nogil=True)
def _test(T, n_ideals, tab, S, out, stop):
    """Least devices per (ideal, budget) with every stage value <= T, into ``out``
    (:class:`FeasibilityTables`).

    g[I, s] = min_{s' <= s} f[I, s'],  f[I, s] = min over entries e of I whose value
    at y = ceil(s / d) is <= T of t d + g[J, s - d];  g[0, :] = 0.
    f_ent[I, s] = the entry attaining f[I, s]; best_s[I, s] = the s' attaining g[I, s].
    Entries are grouped by I ascending.  Returns g[n_ideals - 1, S]; -1 once ``stop[0]`` is
    set (each entry costs O(S): :func:`piper.dp.limits.run_stoppable` polls it).
    """
    g, f_ent, best_s = out.least_devices, out.entry, out.best_budget
    e_i, e_j, e_t, e_d, e_s0 = tab.entries.ideal, tab.entries.sub, tab.entries.t, tab.entries.d, tab.entries.first_seg
    e_s1 = tab.seg_stop
    s_lo, s_hi, s_val = tab.segments.y_lo, tab.segments.y_hi, tab.segments.value
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
            if stop[0]:
                return -1
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


@dataclass(frozen=True)
class DPTables:
    """Stage tables of all ideal pairs (see :mod:`piper.dp`)."""

    ideals: Ideals
    pairs: IdealPairs
    arrays: StageTableArrays

    @property
    def entries(self) -> int:
        return int(self.arrays.entries.ideal.shape[0])

    @property
    def segments(self) -> int:
        return int(self.arrays.segments.value.shape[0])


def build_tables(problem: Problem, run: RunArrays, ideals: Ideals, pairs: IdealPairs, mode: int,
                 deadline: float | None = None, progress: Progress | None = None, ub: float = math.inf) -> DPTables:
    """Stage tables for every ideal pair, in chunks (time limit and progress between chunks).
    With a finite ``ub`` (exact knapsack only), only stage values <= ub are guaranteed present."""
    n_ideals = len(ideals)
    counts = np.diff(pairs.ptr)
    p_i_all = np.repeat(np.arange(n_ideals, dtype=np.int64), counts)
    p_j_all = pairs.sub.astype(np.int64)
    total = p_i_all.shape[0]
    lim = limits_of(problem)
    parts: list[tuple[Entries, Segments]] = []
    chunk = 4096
    start = 0
    while start < total:
        stop = min(total, start + chunk)
        t0 = solve_clock()
        part = run_stoppable(lambda flag: _build_tables(run.layers, lim, ideals.words, p_i_all[start:stop],
                                                        p_j_all[start:stop], mode, ub, flag), deadline)
        parts.append(part)
        # aim at ~CHUNK_S seconds per chunk (interrupts are checked between chunks)
        dt = solve_clock() - t0
        chunk = next_chunk(chunk, dt, 64, 1 << 20)
        start = stop
        if progress is not None:
            progress.say(f"stage tables: {stop}/{total} ideal pairs")
        if past(deadline) and start < total:
            raise TimeUp()
    seg_base = 0
    fixed: list[tuple[Entries, Segments]] = []
    for ents, segs in parts:
        fixed.append((ents._replace(first_seg=ents.first_seg + seg_base), segs))
        seg_base += segs.value.shape[0]

    def cat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

    entries = Entries(*(cat([e[f] for e, _ in fixed], np.int64) for f in range(len(Entries._fields))))
    segments = Segments(cat([s.y_lo for _, s in fixed], np.int64), cat([s.y_hi for _, s in fixed], np.int64),
                        cat([s.value for _, s in fixed], np.float64))
    seg_stop = np.empty_like(entries.first_seg)
    if seg_stop.shape[0]:
        seg_stop[:-1] = entries.first_seg[1:]
        seg_stop[-1] = segments.value.shape[0]
    return DPTables(ideals, pairs, StageTableArrays(entries, seg_stop, segments))


class Search:
    """Feasibility tests m(T) = least devices for threshold T, memoised."""

    def __init__(self, tables: DPTables, S: int, deadline: float | None, progress: Progress,
                 ub: float = math.inf) -> None:
        self.tb = tables
        self.S = S
        n_ideals = len(tables.ideals)
        self.walk = FeasibilityTables(np.empty((n_ideals, S + 1), dtype=np.int64),
                                      np.empty((n_ideals, S + 1), dtype=np.int64),
                                      np.empty((n_ideals, S + 1), dtype=np.int64))
        # with a bound ub the tables are complete only up to ub: search below it
        values = tables.arrays.segments.value
        self.cands = np.unique(values if math.isinf(ub) else values[values <= ub])
        self.memo: dict[int, int] = {}
        self.deadline = deadline
        self.progress = progress
        self.tests = 0

    def devices(self, idx: int) -> int:
        """m(cands[idx]): least devices for threshold cands[idx] (2^60 = impossible)."""
        if idx in self.memo:
            return self.memo[idx]
        if past(self.deadline):
            raise TimeUp()
        m = self.run_test(idx)
        self.tests += 1
        self.memo[idx] = m
        self.progress.say(f"threshold test {self.tests}: T={self.cands[idx]:.6g} needs {m if m < BIG else 'no'} devices")
        return m

    def run_test(self, idx: int, timed: bool = True) -> int:
        """Run the feasibility test at cands[idx] (filling ``self.walk``): the least devices.
        ``timed`` False: without the deadline (the plan's reconstruction, after the search; a
        signal still stops it)."""
        return int(run_stoppable(lambda flag: _test(float(self.cands[idx]), len(self.tb.ideals), self.tb.arrays,
                                                    self.S, self.walk, flag), self.deadline if timed else None))

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
