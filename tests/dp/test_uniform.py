"""Uniform plans (docs/problem.md §2.5): every stage has the same (d, t).

The DP runs once per allowed (t, d) (both edge runs each: inside one node and across nodes); brute force filters;
equi's plans are uniform already.
"""

from __future__ import annotations

import math
import random

import pytest

import piper.dp.entry as dp_module
from experiments.lib.instances import random_problem
from piper import Options, Problem, SolverError, check_plan, solve
from tests.helpers import random_cluster_cases, same_tps


def mixed_cases(count: int, seed: int) -> list[Problem]:
    """Half without cluster keys, half with them (G, B_in >= B, f, sharded memory)."""
    rng = random.Random(seed)
    plain = [random_problem(seed * 1000 + i, n=rng.choice((2, 3, 4)), devices=rng.choice((2, 4, 6, 8)),
                            microbatches=rng.choice((1, 2, 4, 8)), degrees=(1, 2)) for i in range(count // 2)]
    return plain + random_cluster_cases(count - count // 2, seed=seed + 1)


CASES = mixed_cases(180, seed=41)


def pairs(res) -> set[tuple[int, int]]:
    return {(s.d, s.t) for s in res.plan.stages}


def test_uniform_dp_equals_uniform_brute_force():
    uni = Options(uniform=True)
    bad = []
    optimal = multi_stage = 0
    for p in CASES:
        dp, brute = solve(p, uni, solver="dp"), solve(p, uni, solver="brute")
        if brute.plan is None:
            ok = dp.plan is None and dp.status.value == "infeasible"
        else:
            optimal += 1
            multi_stage += len(dp.plan.stages) > 1
            ok = dp.status.value == "optimal" and same_tps(dp.tps, brute.tps) and len(pairs(dp)) == 1
            ok = ok and len(pairs(brute)) == 1
            check_plan(p, dp.plan)
        if not ok:
            bad.append((p.active_features(), dp.status.value, dp.tps, brute.tps))
    assert not bad, bad[:5]
    assert optimal >= 100 and multi_stage >= 20, (optimal, multi_stage)


def test_uniform_is_never_better_than_non_uniform():
    strictly_worse = 0
    for p in CASES:
        free, uni = solve(p, solver="dp"), solve(p, Options(uniform=True), solver="dp")
        assert uni.tps >= free.tps * (1 - 1e-9) or math.isinf(free.tps)
        strictly_worse += uni.tps > free.tps * (1 + 1e-9)
    assert strictly_worse >= 5  # the restriction bites on some instances


def test_uniform_greedy_dp_gives_uniform_plans_no_better_than_exact():
    for p in CASES[:80]:
        g = solve(p, Options(uniform=True), solver="dp-greedy")
        e = solve(p, Options(uniform=True), solver="dp")
        if g.plan is not None:
            assert len(pairs(g)) == 1 and g.status.value == "feasible"
            assert g.tps >= e.tps * (1 - 1e-9)


def test_uniform_with_the_table_engine_and_linearized():
    for p in CASES[:40]:
        want = solve(p, Options(uniform=True), solver="dp").tps
        assert same_tps(solve(p, Options(uniform=True, params={"engine": "table"}), solver="dp").tps, want)
        lin = solve(p, Options(uniform=True, linearize=True), solver="dp")
        assert lin.tps >= want * (1 - 1e-9) or math.isinf(want)


def test_equi_plans_are_uniform_and_uniform_option_changes_nothing():
    for p in CASES[:60]:
        a, b = solve(p, solver="equi"), solve(p, Options(uniform=True), solver="equi")
        assert a.tps == b.tps or (math.isinf(a.tps) and math.isinf(b.tps))
        if a.plan is not None:
            assert len(pairs(a)) == 1 and a.plan == b.plan


def test_too_many_uniform_dps_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(dp_module, "UNIFORM_MAX_WORK", 1)
    p = CASES[0]
    with pytest.raises(SolverError, match=r"uniform plans need one DP per \(t, d\) pair: .* ideal pairs each"):
        solve(p, Options(uniform=True), solver="dp")
