"""A group's option rows (piper.dp.groups._end_arrays, _identical_arrays): the rows that do not
depend on y kept once per layout and each y's memory row computed for every kind side by side
give, number for number, :func:`piper.dp.groups._options` of each kind of layer at that y (the
definition, docs/problem.md §9.2), with expert terms and with the cluster keys."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from piper.core.options import BATCH_TIME, Options, candidates
from piper.dp import groups
from piper.dp.chain import identical_chain
from tests.dp.identical_chains import identical_chain_problem


def _chain_cases():
    out = []
    for seed in range(30):
        problem = identical_chain_problem(seed, n_inner=3 + seed % 3, ends=(seed % 2, seed % 3),
                                          cluster=seed % 2 == 0)
        cand = candidates(problem, Options(objective=BATCH_TIME))
        chain = identical_chain(problem, cand)
        if chain is not None:
            out.append((problem, cand, chain))
    return out


def _reference(problem, chain, cand, lay, y, kinds):
    arrays = [groups._options(problem, chain, cand, lay, y, *kind) for kind in kinds]
    return arrays, [bool(np.all(a[3] == a[3, 0])) for a in arrays]


@pytest.mark.parametrize("case", range(30))
def test_rows_equal_options_at_each_y(case):
    cases = _chain_cases()
    if case >= len(cases):
        pytest.skip("fewer identical chains")
    problem, cand, chain = cases[case]
    lays = groups.layouts(problem, cand, chain.order, (1, 2, 3), True)
    n = chain.n
    end_positions = [p for p in range(n) if not chain.first <= p < chain.stop]
    for lay in lays[:6]:
        memo: dict = {}
        ys = [lay.y(g, problem.microbatches) for g in range(lay.groups)] + [1, 2.5, 3]
        ends_sets = [()] + [tuple((p, a, b) for p in sub for a, b in [(p > 0, p < n - 1)])
                            for r in (1, 2) for sub in itertools.combinations(end_positions, r)]
        for y in ys:
            cost, tau, mem, shared = groups._identical_arrays(problem, chain, cand, lay, y, memo)
            ref, same = _reference(problem, chain, cand, lay, y, groups._IDENTICAL_KINDS)
            for r, got in enumerate((cost, tau, mem)):
                assert got.tolist() == [a[r].tolist() for a in ref]
            assert shared.tolist() == same
            for ends in ends_sets:
                off, e_cost, e_tau, e_mem, e_shared = groups._end_arrays(problem, chain, cand, lay, y, ends, memo)
                ref, same = _reference(problem, chain, cand, lay, y, ends)
                assert off.tolist() == [0, *np.cumsum([a.shape[1] for a in ref]).tolist()]
                for r, got in enumerate((e_cost, e_tau, e_mem)):
                    assert got.tolist() == [x for a in ref for x in a[r].tolist()]
                assert e_shared == all(same)
