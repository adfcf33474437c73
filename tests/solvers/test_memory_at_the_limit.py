"""A plan whose stage memory is exactly the limit M fits (docs/problem.md §3.3), whatever order a
solver sums the memory in: the evaluator and every solver test against the one cap M (1 +
MEMORY_RTOL). Before 2026-12-05 each tested against M itself, and a sum an ulp above M in a solver's
own order rejected the optimal plan: the DP certified 44 where 14 fits, the brute force 7.0 where
5.78 fits, ``aggregate`` 4.306 where 4.188 fits, and CP-SAT "infeasible" (its memory scaling rounded
1e9 - 0.4 bytes to 1e9; tests/baselines/test_certificates.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.lib.instances import random_moe_problem, random_problem
from piper import Options, Status, evaluate, load_problem, problem_from_dict, solve
from piper.core.limits import MEMORY_RTOL

DATA = Path(__file__).resolve().parents[1] / "data" / "memory_at_limit"
EXACT = ("brute", "dp", "milp", "cpsat")


def _agree(problem, options, solvers=EXACT) -> float:
    """Every solver's certificate against the brute force's optimum: an "optimal" claim within its
    tolerance of it, every bound at most it; returns the optimum."""
    best = solve(problem, options, solver="brute")
    assert best.status == Status.OPTIMAL
    for name in solvers:
        res = solve(problem, options, solver=name)
        if res.status == Status.OPTIMAL:
            assert abs(res.value - best.value) <= res.tolerance + 1e-12 * best.value, (name, res.value, best.value)
        if res.bound is not None:
            assert res.bound <= best.value * (1 + 1e-12), (name, res.bound, best.value)
        if res.plan is not None:
            assert not evaluate(problem, res.plan).oom, name
    return best.value


def test_the_memory_cap_is_m_plus_a_relative_hair() -> None:
    p = random_problem(3)
    assert p.memory_cap == p.memory_per_device * (1 + MEMORY_RTOL) and 0 < MEMORY_RTOL <= 1e-12
    plan = solve(p, Options(), solver="brute").plan
    peak = max(st.memory for st in evaluate(p, plan).stages)
    assert not evaluate(p.with_cluster(memory=peak), plan).oom  # exactly M fits
    assert not evaluate(p.with_cluster(memory=peak * (1 - 1e-13)), plan).oom  # a hair below, inside the cap
    assert evaluate(p.with_cluster(memory=peak * (1 - 1e-9)), plan).oom


def test_the_dp_keeps_a_plan_at_exactly_m_on_an_identical_chain() -> None:
    def node(i, p, a, b, s):
        c = {"id": "c0", "timePerSample": p, "parameterSize": 0.0, "memoryUsageA": a, "memoryUsageB": b,
             "syncTimeFw": {str(i - 1): 0.0} if i else {}, "syncTimeBw": {str(i + 1): 0.0} if i < 4 else {}}
        if s:
            c["memoryUsageShardedB"] = s
        return {"id": i, "TMPCs": {"1": [c]}}

    spec = [(7., 2., 3., 2.), (7., 2., 3., 2.), (0., 0., 1., 2.), (0., 0., 0., 1.), (0., 0., 1., 0.)]
    problem = problem_from_dict({
        "maxDevices": 3, "maxMemoryPerDevice": 14.333333333333334, "bandwidth": 2.0, "mbsInBatch": 3,
        "nodes": [node(i, *x) for i, x in enumerate(spec)],
        "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": [4.0, 4.0, 0.0, 0.0][i]} for i in range(4)]})
    options = Options(objective="batch-time", uniform=True)
    assert _agree(problem, options) == 14.0
    assert solve(problem, options, solver="dp").value == 14.0  # was 44.0, "optimal"


@pytest.mark.parametrize("name, options, solvers", [
    ("aggregate_chain.json", Options(objective="batch-time", uniform=True), ("brute", "dp", "milp", "aggregate")),
    ("brute_moe.json", Options(), EXACT),
])
def test_the_instances_of_the_certificate_pass(name, options, solvers) -> None:
    _agree(load_problem(DATA / name), options, solvers)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_every_solver_agrees_at_the_best_plans_own_memory(seed: int, moe: bool) -> None:
    """M set to exactly the evaluator's memory of the optimal plan's fullest stage: the optimum is
    unchanged (that plan still fits) and every solver's certificate agrees with it. The instance is
    the first from 9100 + 50 seed on that has a plan with room for every plan's memory."""
    options = Options(objective=("batch-time", "tps")[seed % 2], uniform=seed % 3 == 0)
    for i in range(9100 + 50 * seed, 9150 + 50 * seed):
        p = random_moe_problem(i) if moe else random_problem(i)
        p = p.with_cluster(memory=p.memory_per_device * 1e3)  # room for every plan
        roomy = solve(p, options, solver="brute")
        if roomy.status == Status.OPTIMAL:
            break
    else:
        raise AssertionError("no feasible instance in 50 seeds")
    peak = max(st.memory for st in evaluate(p, roomy.plan).stages)
    tight = p.with_cluster(memory=peak)
    assert _agree(tight, options) == pytest.approx(roomy.value, rel=1e-12)
