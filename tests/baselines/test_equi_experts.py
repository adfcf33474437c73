"""The equi baseline under expert parallelism (docs/problem.md §11): candidates that break rule 6
are skipped (never an invalid plan), the expert terms come from the evaluator; by hand, and on
random MoE instances never better than brute force."""

from __future__ import annotations

import math

from experiments.lib.instances import random_moe_problem
from piper import Options, problem_from_dict, solve
from piper.core.checks import check_result
from piper.core.options import BATCH_TIME, TPS
from piper.core.result import Status
from tests.helpers import tmpc, workload


def test_hand_values():
    moe = {**tmpc("vanilla", p=4.0), "expertParallel": 2, "expertParameterSize": 8.0, "memoryUsageShardedExpertB": 16.0}
    # k = 4, N = 4, B = 1, f = 4: d = 1 breaks rule 6; d = 2: r = 1, TPS 2; d = 4: r = 2, TPS 1 + 4 = 5
    p = problem_from_dict(workload({0: {1: [moe]}}, [], k=4, N=4, B=1.0))
    res = solve(p, Options(), solver="equi")
    assert res.status == Status.FEASIBLE and res.tps == 2.0 and res.plan.stages[0].d == 2
    assert res.stats["candidates_breaking_rule_6"] >= 1
    one = problem_from_dict(workload({0: {1: [moe]}}, [], k=1, N=4, B=1.0))
    assert solve(one, Options(), solver="equi").status == Status.UNKNOWN


def test_random_moe_instances_valid_and_never_better_than_brute_force():
    for seed in range(12):
        p = random_moe_problem(500 + seed)
        for objective in (TPS, BATCH_TIME):
            options = Options(objective=objective)
            best = solve(p, options, solver="brute")
            res = solve(p, options, solver="equi")
            optimum = best.value if best.plan is not None else math.inf
            assert check_result(p, options, res, optimum=optimum) == [], (seed, objective)
            assert res.value >= optimum * (1 - 1e-12)
