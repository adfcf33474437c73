"""Brute force under expert parallelism (docs/problem.md §11, rule 6): hand values, rule 6
deciding the optimum, and random MoE instances where no random valid plan beats it and its
number is the evaluator's; the keys never make an instance cheaper."""

from __future__ import annotations

import math
import random

import pytest

from experiments.lib.instances import random_moe_problem, without_tmpc_keys
from piper import Options, problem_from_dict, solve
from piper.core.checks import check_result
from piper.core.result import Status
from tests.helpers import assert_no_random_plan_beats, tmpc, workload

EXPERT_KEYS = ("expertParallel", "expertTensorParallel", "expertParameterSize", "memoryUsageShardedExpertB")


def _one_layer(k: int, *, N: int = 4, M: float = 1e6):
    dense = tmpc("dense", p=8.0)
    ep2 = {**tmpc("ep2", p=4.0), "expertParallel": 2, "expertParameterSize": 8.0, "memoryUsageShardedExpertB": 16.0}
    return problem_from_dict(workload({0: {1: [dense, ep2]}}, [], k=k, N=N, B=1.0, M=M))


def test_hand_values():
    # k = 4, N = 4, f = 4, B = 1: d = 1 only "dense" (8); d = 2: ep2 r = 1 -> 4 / 2 = 2;
    # d = 4: ep2 r = 2 -> 1 + 4 (2 - 1) 8 / (2 4) = 5, dense 2
    res = solve(_one_layer(4), Options(), solver="brute")
    assert res.status == Status.OPTIMAL and res.tps == 2.0
    assert (res.plan.stages[0].d, res.plan.stages[0].tmpcs[0]) == (2, "ep2")
    # memory: ep2 at d = 2 holds s_x / 1 = 16 bytes; with M = 15 it does not fit there, and at
    # d = 4 it holds 8: 5 vs dense's 2 at d = 4
    res = solve(_one_layer(4, M=15.0), Options(), solver="brute")
    assert res.tps == 2.0 and (res.plan.stages[0].d, res.plan.stages[0].tmpcs[0]) == (4, "dense")


def test_rule_6_decides():
    # k = 1: only d = t = 1, where ep2 (e = 2) breaks rule 6; without the rule it would give 4
    res = solve(_one_layer(1), Options(), solver="brute")
    assert res.tps == 8.0 and res.plan.stages[0].tmpcs[0] == "dense"
    # no TMPC allowed anywhere: infeasible
    only = {**tmpc("ep2", p=4.0), "expertParallel": 2}
    p = problem_from_dict(workload({0: {1: [only]}}, [], k=1, N=4, B=1.0))
    assert solve(p, Options(), solver="brute").status == Status.INFEASIBLE


def _without_keys(problem):
    return without_tmpc_keys(problem, EXPERT_KEYS)


def test_the_random_cases_use_the_keys():
    assert sum("expertParallel" in random_moe_problem(seed).active_features() for seed in range(12)) >= 10


@pytest.mark.parametrize("seed", range(12))
def test_no_random_plan_beats_brute_on_moe_instances(seed: int) -> None:
    rng = random.Random(seed)
    problem = random_moe_problem(seed)
    for objective in ("tps", "batch-time"):
        for v in (1, 2):
            options = Options(objective=objective, max_virtual_stages=v)
            res = solve(problem, options, solver="brute")
            assert check_result(problem, options, res) == [], (objective, v)
            if res.plan is not None:
                assert res.objective == pytest.approx(res.value, rel=1e-12)
            best = res.value
            assert_no_random_plan_beats(problem, options, objective, v, best, rng, 120, (1, 2, 4))
            # the keys only restrict layouts and add bytes: never cheaper than without them
            plain = solve(_without_keys(problem), options, solver="brute").value
            assert best >= plain - 1e-9 * abs(plain) or math.isinf(plain) and math.isinf(best)
