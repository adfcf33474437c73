"""Piper's DP minimizing the batch time over 1F1B plans (docs/problem.md §2.4 and §9): the spec's
worked check, and the brute-force oracle's optimum on tiny random instances (chains and DAGs,
with and without the version-2 cluster keys, free and uniform plans); every result passes
``check_result``.  TMPCs that differ in w make the least-TPS choice of a stage differ from its
least-tau choice: then the DP is exact or says "feasible" with a bound no larger than the optimum."""

from __future__ import annotations

import math
import random

import pytest

from experiments.lib.instances import random_problem
from piper import Options, Problem, solve
from piper.core.checks import check_result
from piper.core.options import BATCH_TIME, TPS
from piper.core.plan import INTERLEAVED, ONE_F_ONE_B, Schedule
from piper.core.result import Status
from piper.solvers.registry import SOLVERS
from tests.dp.identical_chains import (
    disagreement,
    identical_chain_problem,
    worked_check_chain,
)
from tests.helpers import with_random_cluster_keys

BATCH = Options(objective=BATCH_TIME)


def cases(count: int, seed: int) -> list[Problem]:
    """Tiny random instances: chains and DAGs of 2..5 layers, half of them with the cluster keys."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        p = random_problem(seed * 1000 + i, n=rng.choice((2, 3, 4, 5)), devices=rng.choice((2, 3, 4, 6, 8)),
                           microbatches=rng.choice((1, 2, 4, 8)), degrees=(1, 2))
        out.append(with_random_cluster_keys(p, rng) if i % 2 else p)
    return out


def test_dp_declares_both_objectives_and_both_schedules() -> None:
    for name in ("dp", "dp-greedy"):
        assert SOLVERS[name].objectives == frozenset({TPS, BATCH_TIME}), name
        assert SOLVERS[name].schedules == frozenset({ONE_F_ONE_B, INTERLEAVED}), name


def test_worked_check() -> None:
    """docs/problem.md §9.4 through piper.solve: 1F1B gives 10, interleaved (L = 2, v = 2) 9."""
    p = worked_check_chain()
    one = solve(p, Options(objective=BATCH_TIME, data_parallel=False), solver="dp")
    assert one.status == Status.OPTIMAL and one.objective_kind == BATCH_TIME
    assert one.objective == one.batch_time == one.bound == 10.0 and one.tps == 2.0
    assert one.plan.schedule == Schedule()
    for schedule in ("any", "interleaved"):
        options = Options(objective=BATCH_TIME, data_parallel=False, schedule=schedule, max_virtual_stages=2)
        two = solve(p, options, solver="dp")
        assert two.status == Status.OPTIMAL and two.objective == two.batch_time == 9.0
        assert two.plan.schedule == Schedule(INTERLEAVED, 2) and check_result(p, options, two) == []
    tps = solve(p, Options(data_parallel=False, max_virtual_stages=2), solver="dp")
    assert tps.status == Status.OPTIMAL and tps.objective == 2.0 and tps.objective_kind == TPS


FAST = cases(120, seed=3)


@pytest.mark.parametrize("uniform", [False, True])
def test_batch_time_equals_brute_force(uniform: bool) -> None:
    options = Options(objective=BATCH_TIME, uniform=uniform)
    bad = [why for p in FAST if (why := disagreement(p, options))]
    assert not bad, bad[:5]


def test_the_cases_have_plans_and_stages() -> None:
    found = [solve(p, BATCH, solver="brute") for p in FAST]
    assert sum(r.plan is not None for r in found) >= 60
    assert sum(r.plan is not None and len(r.plan.stages) > 1 for r in found) >= 20
    assert sum(r.plan is not None and not r.score.fits_in_node for r in found) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("uniform", [False, True])
def test_batch_time_equals_brute_force_sweep(uniform: bool) -> None:
    options = Options(objective=BATCH_TIME, uniform=uniform)
    bad = [why for p in cases(600, seed=11) if (why := disagreement(p, options))]
    assert not bad, bad[:5]


def test_identical_chains_1f1b_free_and_uniform() -> None:
    """The counts search (uniform) and the front DP over ideals with shared stage tables (free)."""
    bad = []
    for seed in range(40):
        p = identical_chain_problem(seed)
        for uniform in (False, True):
            why = disagreement(p, Options(objective=BATCH_TIME, uniform=uniform))
            if why:
                bad.append(why)
    assert not bad, bad[:5]


def test_tmpcs_with_different_w() -> None:
    """A stage whose TMPCs differ in w: its least-TPS choice need not be its least-tau choice. The
    DP is then exact or "feasible" with a bound <= the optimum, never a wrong "optimal"."""
    bad, loose = [], 0
    for seed in range(40):
        p = identical_chain_problem(seed, w_shared=False)
        for options in (BATCH, Options(objective=BATCH_TIME, uniform=True),
                        Options(objective=BATCH_TIME, max_virtual_stages=2)):
            why = disagreement(p, options)
            if why:
                bad.append(why)
            loose += solve(p, options, solver="dp").status == Status.FEASIBLE
    assert not bad, bad[:5]
    # the bound is what makes it honest; it is met on most cases
    assert loose < 40


def test_unequal_w_where_least_tps_is_not_least_tau() -> None:
    """Layer 0 has 'fast' (p 4, w 8) and 'lean' (p 6, w 0); layer 1 (p 20) is the bottleneck.
    k = N = 4, f = 4, B = 1; memory keeps the layers apart and layer 0's d at 2.  At d = 2 'lean'
    has the least TPS (3 against 2 + 4 = 6) but 'fast' the least tau (4 against 6), and layer 1's
    TPS (10) is the max either way: batch time 4 x 10 + tau_0 is 44 with 'fast', 46 with 'lean'.
    The DP's plan takes 'lean' (46); its bound (each stage at its least TPS and least tau) is 44,
    so it says "feasible", bound 44."""
    def tmpc(tid: str, p: float, w: float, a: float, b: float, fw: dict, bw: dict) -> dict:
        return {"id": tid, "timePerSample": p, "parameterSize": w, "memoryUsageA": a, "memoryUsageB": b,
                "syncTimeFw": fw, "syncTimeBw": bw}

    from piper import problem_from_dict

    p = problem_from_dict({
        "maxDevices": 4, "maxMemoryPerDevice": 2.5, "bandwidth": 1, "mbsInBatch": 4,
        "nodes": [{"id": 0, "TMPCs": {"1": [tmpc("fast", 4.0, 8.0, 1.0, 0.0, {}, {"1": 0.0}),
                                          tmpc("lean", 6.0, 0.0, 1.0, 0.0, {}, {"1": 0.0})]}},
                  {"id": 1, "TMPCs": {"1": [tmpc("only", 20.0, 0.0, 0.0, 2.0, {"0": 0.0}, {})]}}],
        "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 0.0}]})
    brute = solve(p, BATCH, solver="brute")
    assert brute.value == 44.0
    res = solve(p, BATCH, solver="dp")
    assert check_result(p, BATCH, res, optimum=44.0) == []
    assert res.status == Status.FEASIBLE and res.value == 46.0 and res.bound == 44.0


def test_dp_greedy_never_claims_an_optimum() -> None:
    bad = []
    for p in FAST[:60]:
        for options in (BATCH, Options(objective=BATCH_TIME, uniform=True)):
            res = solve(p, options, solver="dp-greedy")
            brute = solve(p, options, solver="brute")
            issues = check_result(p, options, res, optimum=brute.value if brute.plan else math.inf)
            if issues or res.status == Status.OPTIMAL:
                bad.append((p.extra.get("name"), res.status, [str(i) for i in issues]))
    assert not bad, bad[:5]


def test_time_limit_zero_is_honest() -> None:
    p = identical_chain_problem(3)
    for options in (Options(objective=BATCH_TIME, time_limit_s=0.0),
                    Options(objective=BATCH_TIME, max_virtual_stages=3, time_limit_s=0.0)):
        res = solve(p, options, solver="dp")
        assert res.status != Status.OPTIMAL or res.plan is not None
        assert check_result(p, options, res) == []
