"""The group engine's configurations of a layout run by one kernel (piper.dp.groups._search_rows,
piper.dp.group_kernels.group_dp_rows) give what running them row by row in Python gave (the loop
before; docs/results/dp-speed.md, DeepSeek-V3): the same plan, value, bound and completeness,
the same number of group DPs, and the same curves left in the search's cache, with and without an
upper bound, for both objectives and schedules (curves computed ahead of a row that improves the
plan are taken back and computed again at the new t_max, as the row-by-row search computes them)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from piper.core.options import BATCH_TIME, Options, candidates
from piper.dp import groups
from piper.dp.chain import identical_chain
from piper.dp.group_kernels import group_dp
from piper.dp.knapsack import EXACT, GREEDY
from tests.dp.identical_chains import identical_chain_problem


def _row_by_row(problem, chain, cand, lay, mode, batch, search, cache, memos, rooms):
    """groups._solve_layout as it was: every configuration in Python, one group_dp call each."""
    n_mb = problem.microbatches
    L, v = lay.groups, lay.v
    table = groups._config_table(chain.n, chain.first, chain.stop, L, v)
    ys = [lay.y(g, n_mb) for g in range(L)]
    memo = memos.setdefault((lay.t, lay.d, lay.bw_edge, lay.bw_resync), {})
    least_memory = rooms.setdefault("least", {})
    inner = chain.inner
    room_of = []
    for sid, g in table.pairs:
        sh = table.shapes[sid]
        key = (sh.ends, ys[g], type(ys[g]), lay.t, lay.d)
        r = rooms.get(key)
        if r is None:
            r = rooms[key] = groups._room(problem, chain, cand, lay, ys[g], sh, least_memory)
        room_of.append(r)
    room = np.array(room_of, dtype=np.int64)[table.pair_index] if room_of else table.least.copy()
    fits = (room >= table.least).all(axis=1) & (room.sum(axis=1) >= inner)
    spare = inner - table.least.sum(axis=1)
    c_his = np.where(table.chunked, np.minimum(room, table.least + spare[:, None]), 0)
    rooms_passed = np.where(table.chunked, room, 0)
    curves, kept, kept_for = {}, {}, math.nan
    for row in np.flatnonzero(fits).tolist():
        conf = table.configs[table.live[row]]
        cap = search.best * (1 + groups.SLACK) if math.isfinite(search.best) else math.inf
        t_max = cap / n_mb if batch else cap
        if t_max != kept_for:
            kept.clear()
            kept_for = t_max
        points, exact_tau, empty = [], True, False
        for pair, c_hi, r in zip(conf.pairs, c_his[row].tolist(), rooms_passed[row].tolist()):
            seen = kept.get((pair, c_hi))
            if seen is None:
                got = curves.get(pair)
                if got is None or not (got[2] >= t_max and got[3] >= c_hi):
                    if got is not None:
                        kept.clear()
                    sid, g = pair
                    got = curves[pair] = groups._group_curves(problem, chain, cand, lay, ys[g], table.shapes[sid], r,
                                                              c_hi, t_max, mode, cache, memo)
                seen = kept[pair, c_hi] = (got[0].within(c_hi, t_max), got[1])
            exact_tau = exact_tau and seen[1]
            empty = empty or seen[0].c.shape[0] == 0
            points.append(seen[0])
        if empty:
            continue
        ptr = np.zeros(L + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([p.c.shape[0] for p in points])
        p_c = np.concatenate([p.c for p in points])
        p_k = np.concatenate([p.k for p in points])
        p_tau = np.concatenate([p.tau for p in points])
        value, picks = group_dp(ptr, p_c, p_k, p_tau, L, inner, float(n_mb), float(v), cap, batch)
        search.stats["group_dps"] = search.stats.get("group_dps", 0) + 1
        if picks.shape[0] and value < search.best:
            chosen = [int(picks[g]) - int(ptr[g]) for g in range(L)]
            search.best = float(value)
            search.plan = groups.build_plan(problem, chain, cand, lay, conf.chunks, conf.shapes, ys, points, chosen,
                                            mode, memo)
        if mode == EXACT and batch and not exact_tau:
            p_low = np.concatenate([p.low for p in points])
            low, _ = group_dp(ptr, p_c, p_k, p_low, L, inner, float(n_mb), float(v), cap, batch)
            search.lower = min(search.lower, float(low))


def _run(problem, kinds, batch, mode, ub, solve_layout, monkeypatch):
    """solve_groups with ``solve_layout``: its outcome and the curves its search left in its cache
    (None when the problem is not an identical chain)."""
    options = Options(objective=BATCH_TIME if batch else "tps")
    cand = candidates(problem, options)
    chain = identical_chain(problem, cand)
    if chain is None:
        return None
    seen = {}

    def recording(problem, chain, cand, lay, mode, batch, search, cache, memos, rooms):
        seen["cache"] = cache
        solve_layout(problem, chain, cand, lay, mode, batch, search, cache, memos, rooms)

    with monkeypatch.context() as m:
        m.setattr(groups, "_solve_layout", recording)
        oc = groups.solve_groups(problem, chain, cand, kinds, batch, mode, ub=ub)
    return oc, seen.get("cache", {})


def _summary(run):
    oc, cache = run
    plan = None if oc.plan is None else (oc.plan.schedule, [(s.nodes, s.d, s.t, tuple(sorted(s.tmpcs.items())))
                                                            for s in oc.plan.stages])
    curves = {key: (pts.c.tolist(), pts.k.tolist(), pts.tau.tolist(), pts.low.tolist(), pts.singles.tolist(), shared,
                    repr(t_max), room) for key, (pts, shared, t_max, room) in cache.items()}
    return (plan, repr(oc.value), repr(oc.lower), oc.complete, oc.stats.get("group_dps"), oc.stats.get("layouts_tried"),
            curves)


CASES = [(seed, kinds, batch, mode) for seed in range(40)
         for kinds, batch, mode in [((1,), True, EXACT), ((2, 3), True, EXACT), ((2, 3), False, EXACT),
                                    ((1,), True, GREEDY)]]


@pytest.mark.parametrize(("seed", "kinds", "batch", "mode"), CASES)
def test_kernel_rows_equal_row_by_row(seed, kinds, batch, mode, monkeypatch):
    problem = identical_chain_problem(seed, n_inner=3 + seed % 6, ends=(seed % 2, seed % 3), w_shared=seed % 4 != 0)
    for ub in (math.inf, None):
        if ub is None:  # a cutoff just above the best plan: the pruned searches the planner runs
            first = _run(problem, kinds, batch, mode, math.inf, groups._solve_layout, monkeypatch)
            if first is None or first[0].plan is None:
                continue
            ub = first[0].value * (1 + 1e-6)
        a = _run(problem, kinds, batch, mode, ub, groups._solve_layout, monkeypatch)
        b = _run(problem, kinds, batch, mode, ub, _row_by_row, monkeypatch)
        if a is None:
            assert b is None
            continue
        assert _summary(a) == _summary(b)
