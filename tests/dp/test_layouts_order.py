"""piper.dp.groups.layouts sorts plain tuples (lower, v, L, t, d, ...) and makes the Layouts after:
the same layouts in the same order as making every Layout and sorting by (lower, v, L, t, d), the
order the uniform search tries them in; least_layout_bound is its first layout's bound (what the
planner orders the workloads by)."""

from __future__ import annotations

import math

import pytest

from piper.core.options import BATCH_TIME, Options, candidates
from piper.dp import groups
from tests.dp.identical_chains import identical_chain_problem


def _made_then_sorted(problem, cand, positions, kinds, batch):
    rows = groups._layout_rows(problem, cand, positions, kinds, batch)
    out = [groups.Layout(t, d, L, v, bw_edge, bw_resync, lower) for lower, v, L, t, d, bw_edge, bw_resync in rows]
    out.sort(key=lambda lay: (lay.lower, lay.v, lay.groups, lay.t, lay.d))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_layouts_order_and_least_bound(seed):
    problem = identical_chain_problem(seed, n_inner=2 + seed % 5, cluster=seed % 3 == 0)
    cand = candidates(problem, Options(objective=BATCH_TIME))
    positions = tuple(range(problem.n))
    for kinds in ((1,), (2, 3, 4), (1, 2, 3)):
        for batch in (True, False):
            got = groups.layouts(problem, cand, positions, kinds, batch)
            assert got == _made_then_sorted(problem, cand, positions, kinds, batch)
            least = groups.least_layout_bound(problem, cand, positions, kinds, batch)
            assert least == (got[0].lower if got else math.inf)
