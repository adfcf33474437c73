"""The memory floor of a uniform layout (piper.dp.groups._memory_floor): a lower bound on the value
of every plan of the layout, so that skipping a layout whose floor reaches the best value found
changes nothing. Checked against each layout's own search (its best plan's value and its tau-bound
DPs' least value) on random identical chains with tight memory, for both objectives and schedules,
and end to end: solve_groups gives the same plan, value, bound and completeness with the floor
as without it (docs/results/dp-speed.md, DeepSeek-V3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from piper.core.options import BATCH_TIME, Options, candidates
from piper.dp import groups
from piper.dp.chain import identical_chain
from piper.dp.knapsack import EXACT
from tests.dp.identical_chains import identical_chain_problem

SEEDS = range(60)


def _chain(seed: int):
    problem = identical_chain_problem(seed, n_inner=2 + seed % 7, ends=(seed % 2, (seed // 2) % 3),
                                      w_shared=seed % 3 != 0, cluster=seed % 4 == 0)
    cand = candidates(problem, Options(objective=BATCH_TIME))
    return problem, cand, identical_chain(problem, cand)


def test_least_cost_at_is_the_relaxation():
    cost = np.array([1.0, 2.0, 4.0])
    mem = np.array([10.0, 5.0, 1.0])
    got = groups._least_cost_at(cost, mem, np.array([20.0, 10.0, 7.5, 5.0, 3.0, 1.0, 0.5]))
    assert got.tolist() == pytest.approx([1.0, 1.0, 1.5, 2.0, 3.0, 4.0, math.inf])


@pytest.mark.parametrize("seed", SEEDS)
def test_floor_bounds_every_plan_of_the_layout(seed):
    problem, cand, chain = _chain(seed)
    if chain is None:
        pytest.skip("not an identical chain")
    for kinds, batch in (((1,), True), ((2, 3), True), ((2, 3), False)):
        for lay in groups.layouts(problem, cand, chain.order, kinds, batch):
            memos: dict = {}
            memo = memos.setdefault((lay.t, lay.d, lay.bw_edge, lay.bw_resync), {})
            w_sum = groups._least_work(problem, cand, chain.order, lay.t)[0]
            floor = groups._memory_floor(problem, chain, cand, lay, w_sum, batch, memo)
            search = groups._Search(best=math.inf)
            groups._solve_layout(problem, chain, cand, lay, EXACT, batch, search, {}, memos, {})
            if search.plan is None:
                continue
            assert not math.isinf(floor), (seed, lay)
            assert search.best >= floor * (1 - 1e-12), (seed, lay, search.best, floor)
            assert search.lower >= floor * (1 - 1e-12), (seed, lay, search.lower, floor)


def _outcome(problem, cand, chain, kinds, batch, ub):
    oc = groups.solve_groups(problem, chain, cand, kinds, batch, EXACT, ub=ub)
    plan = None if oc.plan is None else (oc.plan.schedule, [(s.nodes, s.d, s.t, tuple(sorted(s.tmpcs.items())))
                                                            for s in oc.plan.stages])
    return plan, repr(oc.value), repr(oc.lower), oc.complete


@pytest.mark.parametrize("seed", SEEDS)
def test_solve_groups_same_with_and_without_the_floor(seed, monkeypatch):
    problem, cand, chain = _chain(seed)
    if chain is None:
        pytest.skip("not an identical chain")
    for kinds, batch in (((1,), True), ((2, 3), True), ((2, 3), False), ((2, 4), True)):
        first = groups.solve_groups(problem, chain, cand, kinds, batch, EXACT)
        cutoffs = [math.inf] + ([] if first.plan is None else [first.value * (1 + 1e-6), first.value * 1.2,
                                                                 first.value * 0.9])
        for ub in cutoffs:
            with_floor = _outcome(problem, cand, chain, kinds, batch, ub)
            with monkeypatch.context() as m:
                m.setattr(groups, "_memory_floor", lambda *args: -math.inf)
                without = _outcome(problem, cand, chain, kinds, batch, ub)
            assert with_floor == without, (seed, kinds, batch, ub)
