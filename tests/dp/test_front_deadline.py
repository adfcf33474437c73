"""The batch-time front DP (piper/dp/batch_run.py) checks its deadline between small chunks of
ideals: a DeepSeek-V3 workload on 1,024 devices spent minutes in one kernel call over all its 65
ideals while the planner had given the solve a second or two. Here the clock runs out after the
first kernel call: the run must stop there (incomplete), not fill the remaining ideals."""

from __future__ import annotations

import math

import piper.dp.batch_run as batch_run_module
from experiments.lib.instances import random_problem
from piper.core.options import BATCH_TIME, Options, candidates
from piper.dp.batch_run import batch_run
from piper.dp.ideals import enumerate_ideals, ideal_pairs
from piper.dp.knapsack import EXACT


def test_fronts_stop_at_the_deadline_after_one_kernel_call(monkeypatch) -> None:
    problem = random_problem(7, n=8, devices=4, microbatches=4, degrees=(1, 2))
    cand = candidates(problem, Options(objective=BATCH_TIME))
    ideals = enumerate_ideals(problem)
    pairs = ideal_pairs(ideals)
    assert len(ideals) >= 4
    full = batch_run(problem, cand, math.inf, ideals, pairs, EXACT)
    assert full.complete

    calls = []
    real_pass = batch_run_module.front_pass

    def counted(*args):
        calls.append((args[3], args[4]))  # the ideals [lo, hi) of this call
        return real_pass(*args)

    monkeypatch.setattr(batch_run_module, "front_pass", counted)
    monkeypatch.setattr(batch_run_module, "past", lambda deadline: deadline is not None)
    cut = batch_run(problem, cand, math.inf, ideals, pairs, EXACT, deadline=0.0)
    assert not cut.complete and cut.plan is None and cut.lower == 0.0
    assert calls == [(1, 2)]  # one ideal, then the deadline
