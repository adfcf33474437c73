"""The DP's ``upper_bound`` knob (piper/dp/schedules.py): only plans better than it are searched;
an exhaustive search that finds none says "unknown" with that bound (a proof no plan is better),
checked against brute force's optimum; above the optimum the answer is unchanged."""

from __future__ import annotations

import math

import pytest

from experiments.lib.instances import random_problem
from piper import Options, solve
from piper.core.checks import check_result
from piper.core.errors import SolverError
from piper.core.options import BATCH_TIME
from piper.core.result import Status
from tests.dp.identical_chains import identical_chain_problem

CASES = [("chain", seed, identical_chain_problem(seed)) for seed in (3, 4, 5)] + \
        [("dag", seed, random_problem(seed, n=4, devices=4, microbatches=4, degrees=(1, 2))) for seed in range(3)]
OPTIONS = [Options(objective=BATCH_TIME), Options(objective=BATCH_TIME, uniform=True),
           Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=3)]


@pytest.mark.parametrize("kind, seed, problem", CASES, ids=[f"{k}{s}" for k, s, _ in CASES])
@pytest.mark.parametrize("options", OPTIONS, ids=["free", "uniform", "any-v3"])
def test_upper_bound_at_above_and_below_the_optimum(kind, seed, problem, options) -> None:
    brute = solve(problem, options, solver="brute")
    if brute.plan is None:
        pytest.skip("no plan")
    best = brute.value
    plain = solve(problem, options)
    above = solve(problem, Options(**{**options.__dict__, "params": {"upper_bound": best * 1.5}}))
    # above the optimum: the same answer as without the knob
    assert (above.status, above.value) == (plain.status, plain.value)
    at = solve(problem, Options(**{**options.__dict__, "params": {"upper_bound": best}}))
    assert not check_result(problem, options, at, optimum=best)
    if at.plan is None:
        # nothing strictly better than the optimum exists: a proof only from an exhaustive search
        assert at.status == Status.UNKNOWN and at.bound <= best * (1 + 1e-9)
        if kind == "chain" or options.max_virtual_stages == 1:
            assert math.isclose(at.bound, best, rel_tol=1e-12)
    below = solve(problem, Options(**{**options.__dict__, "params": {"upper_bound": best * 0.9}}))
    # the interleaved heuristic (not an identical chain) may still return a plan, never a better one
    assert below.plan is None or below.value >= best * (1 - 1e-9)
    assert below.plan is not None or below.bound <= best * (1 + 1e-9)
    assert not check_result(problem, options, below, optimum=best)


def test_upper_bound_is_refused_by_the_tps_dp() -> None:
    with pytest.raises(SolverError, match="upper_bound"):
        solve(identical_chain_problem(0), Options(params={"upper_bound": 1.0}))


@pytest.mark.parametrize("value", [0, -1.0, math.nan])
def test_upper_bound_must_be_positive(value) -> None:
    with pytest.raises(SolverError, match="upper_bound"):
        solve(identical_chain_problem(0), Options(objective=BATCH_TIME, params={"upper_bound": value}))
