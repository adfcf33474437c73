"""Brute force under version 3 (docs/problem.md §9): the batch-time objective and interleaved
plans. The oracle is checked against the spec's worked check, against the evaluator (its
objective is the evaluator's number for its plan), and against random valid plans (none
beats it), with the metamorphic facts that a larger plan space never does worse."""

from __future__ import annotations

import math
import random

import pytest

from experiments.lib.instances import random_problem
from piper import Options, problem_from_dict, solve
from piper.core.checks import check_result
from piper.core.plan import INTERLEAVED, Schedule
from piper.core.result import Status
from tests.helpers import assert_no_random_plan_beats


def chain(n: int, k: int = 2, N: int = 4):
    def tmpc(i: int) -> dict:
        return {"id": "a", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 0, "memoryUsageB": 0,
                "syncTimeFw": {str(i - 1): 0} if i else {}, "syncTimeBw": {str(i + 1): 0} if i < n - 1 else {}}

    return problem_from_dict({"maxDevices": k, "maxMemoryPerDevice": 1, "bandwidth": 1, "mbsInBatch": N,
                              "nodes": [{"id": i, "TMPCs": {"1": [tmpc(i)]}} for i in range(n)],
                              "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 0} for i in range(n - 1)]})


def test_worked_check() -> None:
    """No data parallelism, 4 equal layers on 2 devices, N = 4: 1F1B gives 10, interleaved 9."""
    base = Options(objective="batch-time", data_parallel=False)
    one = solve(chain(4), base, solver="brute")
    assert one.status == Status.OPTIMAL and one.objective == one.batch_time == 10.0
    two = solve(chain(4), Options(objective="batch-time", data_parallel=False, max_virtual_stages=2), solver="brute")
    assert two.objective == two.batch_time == 9.0 and two.plan.schedule == Schedule(INTERLEAVED, 2)
    only = solve(chain(4), Options(objective="batch-time", data_parallel=False, schedule="interleaved",
                                   max_virtual_stages=2), solver="brute")
    assert only.objective == 9.0


@pytest.mark.parametrize("seed", range(30))
def test_brute_is_optimal_under_both_objectives_and_schedules(seed: int) -> None:
    rng = random.Random(seed)
    problem = random_problem(seed, n=rng.randint(3, 6), devices=rng.choice([2, 4]), microbatches=rng.choice([2, 4, 8]))
    results = {}
    for objective in ("tps", "batch-time"):
        for v in (1, 2, 3):
            options = Options(objective=objective, max_virtual_stages=v)
            res = solve(problem, options, solver="brute")
            results[objective, v] = res
            assert check_result(problem, options, res) == [], (objective, v)
            if res.plan is not None:
                assert res.objective == pytest.approx(res.value, rel=1e-12)  # its own number is the evaluator's
            # no random valid plan beats the oracle
            assert_no_random_plan_beats(problem, options, objective, v, res.value, rng, 150)
    for objective in ("tps", "batch-time"):  # more schedules never do worse
        values = [results[objective, v].value for v in (1, 2, 3)]
        assert values[0] >= values[1] >= values[2] or all(math.isinf(x) for x in values)
    for v in (1, 2, 3):  # each objective's optimum is best at its own number
        tps, batch = results["tps", v], results["batch-time", v]
        if tps.plan is not None:
            assert tps.tps <= batch.tps and batch.batch_time <= tps.batch_time


def test_interleaving_pays_off_with_few_microbatches_and_not_with_many() -> None:
    """The bubble is (L - 1) tau / v: with N = 2 per replica it decides, with N = 64 it does not
    matter and equal splits tie."""
    few = Options(objective="batch-time", data_parallel=False, max_virtual_stages=4)
    res = solve(chain(8, k=2, N=2), few, solver="brute")
    assert res.plan.schedule.interleaved
    many = solve(chain(8, k=2, N=64), few, solver="brute")
    assert many.batch_time <= solve(chain(8, k=2, N=64), Options(objective="batch-time", data_parallel=False),
                                    solver="brute").batch_time
