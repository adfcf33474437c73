"""The exact models (milp, milp-highs, cpsat) under expert parallelism (docs/problem.md §11,
rule 6; docs/formulations.md): hand values, the model data's choices and coefficients, and
agreement with brute force on tiny random MoE instances (both objectives, free and uniform
plans): the same status, an optimum within the result's stated tolerance, a bound never above
it, check_result clean. A fast subset runs in CI, the sweep with -m slow."""

from __future__ import annotations

import functools
import math
import random

import pytest

from baselines.brute import solve_brute
from baselines.exact.model_data import build_model_data
from experiments.lib.instances import random_moe_problem
from piper import Options, Problem, problem_from_dict, solve
from piper.core.options import BATCH_TIME, TPS
from piper.core.result import Result, Status
from tests.helpers import check_against_oracle, tmpc, with_random_cluster_keys, workload

EXACT = ("milp-highs", "cpsat", "milp")


def one_layer(k: int, M: float = 1e6):
    ep2 = {**tmpc("ep2", p=4.0), "expertParallel": 2, "expertParameterSize": 8.0, "memoryUsageShardedExpertB": 16.0}
    return problem_from_dict(workload({0: {1: [tmpc("dense", p=8.0), ep2]}}, [], k=k, N=4, B=1.0, M=M))


def test_model_data_choices_and_coefficients():
    # k = 4, N = 4, f = 4, B = 1: options d in {1, 2, 4}; ep2 has no choice at d = 1 (rule 6);
    # at d = 2 kappa = 4 / 2 (r = 1), memory 16; at d = 4 kappa = 1 + 4 (2 - 1) 8 / (2 4) = 5, memory 8
    data = build_model_data(one_layer(4), Options())
    # memory in units of the memory test's cap, M (1 + MEMORY_RTOL) (docs/problem.md §3.3)
    got = {(data.opts[c.opt].d, c.tmpc.id): (c.kappa * data.tau, pytest.approx(c.mem_b * data.problem.memory_cap,
                                                                                rel=1e-15))
           for c in data.choices[0]}
    assert got == {(1, "dense"): (8.0, 0.0), (2, "dense"): (4.0, 0.0), (4, "dense"): (2.0, 0.0),
                   (2, "ep2"): (2.0, 16.0), (4, "ep2"): (5.0, 8.0)}


@pytest.mark.parametrize("solver", EXACT)
def test_hand_values(solver: str):
    for k, M, want, d, name in ((4, 1e6, 2.0, 2, "ep2"), (1, 1e6, 8.0, 1, "dense"), (4, 15.0, 2.0, 4, "dense")):
        res = solve(one_layer(k, M), Options(), solver=solver)
        assert res.status == Status.OPTIMAL and res.tps == want, (k, M, res.tps)
        assert (res.plan.stages[0].d, res.plan.stages[0].tmpcs[0]) == (d, name)


@functools.cache
def case(i: int) -> tuple[Problem, Options]:
    rng = random.Random(60_013 * i + 5)
    p = random_moe_problem(8300 + i)
    if rng.random() < 0.35:
        p = with_random_cluster_keys(p, rng, shard_denominator=32)
    return p, Options(objective=rng.choice((TPS, BATCH_TIME)), uniform=rng.random() < 0.3, threads=1)


@functools.cache
def oracle(i: int) -> Result:
    return solve_brute(*case(i))


def check(solver: str, i: int) -> None:
    check_against_oracle(solver, *case(i), oracle(i), f"case {i}")


FAST = 10


def test_the_cases_use_the_keys():
    cases = [case(i) for i in range(FAST)]
    assert sum("expertParallel" in p.active_features() for p, _ in cases) >= 8
    statuses = [oracle(i).status for i in range(FAST)]
    assert statuses.count(Status.OPTIMAL) >= 6
    assert {o.objective for _, o in cases} == {TPS, BATCH_TIME}


@pytest.mark.parametrize("solver", EXACT)
def test_agree_with_brute_force(solver: str) -> None:
    for i in range(FAST if solver != "milp" else FAST // 2):
        check(solver, i)


@pytest.mark.slow
@pytest.mark.parametrize("solver", EXACT)
def test_agree_with_brute_force_sweep(solver: str) -> None:
    for i in range(FAST, FAST + 150):
        check(solver, i)
