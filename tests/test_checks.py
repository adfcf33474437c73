"""piper.check_result fires on each broken invariant of a Result, and only then."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from experiments.instances import random_problem
from piper import NO_AR, Options, Plan, Stage, Status, check_result, solve
from piper.checks import CHECKS


@pytest.fixture(scope="module")
def case():
    for seed in range(60):
        problem = random_problem(seed, n=4, degrees=(1, 2))
        res = solve(problem, Options(), solver="brute")
        if res.status == Status.OPTIMAL and any(s.d > 1 or s.t > 1 for s in res.plan.stages):
            return problem, res
    raise AssertionError("no instance with d or t > 1")  # pragma: no cover


def checks(problem, res, options=None, **kw):
    return {i.check for i in check_result(problem, options, res, **kw)}


def test_a_sound_result_passes(case):
    problem, res = case
    assert checks(problem, res, exact=True, optimum=res.tps) == set()


@pytest.mark.parametrize("change, expected", [
    (dict(tps=1.0), "tps"),
    (dict(status=Status.INFEASIBLE), "plan"),
    (dict(plan=None), "plan"),
    (dict(bound=math.inf), "bound"),
    (dict(objective=-1.0), "objective"),
])
def test_each_broken_invariant_is_named(case, change, expected):
    problem, res = case
    assert expected in checks(problem, replace(res, **change), exact=True)


def test_optimal_claims(case):
    problem, res = case
    assert "status" in checks(problem, res, exact=False)  # a heuristic never proves
    assert "bound" in checks(problem, replace(res, bound=0.5 * res.tps), exact=True)
    # within the stated tolerance it stands
    assert checks(problem, replace(res, bound=res.tps - 1e-3, tolerance=2e-3), exact=True) == set()
    assert "optimum" in checks(problem, res, exact=True, optimum=0.9 * res.tps)
    assert "optimum" in checks(problem, res, exact=True, optimum=1.1 * res.tps)  # plan below the optimum
    assert "optimum" in checks(problem, replace(res, plan=None, tps=math.inf, status=Status.INFEASIBLE,
                                                bound=math.inf), exact=True, optimum=res.tps)


def test_options_are_honoured(case):
    problem, res = case
    assert "options" in checks(problem, res, Options(data_parallel=False, tensor_parallel=False), exact=True)
    named = {s.tmpcs[v] for s in res.plan.stages for v in s.nodes}
    assert "options" in checks(problem, res, Options(exclude_tmpcs=frozenset(named)), exact=True)
    if len({(s.d, s.t) for s in res.plan.stages}) > 1:
        assert "options" in checks(problem, res, Options(uniform=True), exact=True)
    assert "options" not in checks(problem, res, Options(exclude_tmpcs=NO_AR - named), exact=True)


def test_invalid_plan(case):
    problem, res = case
    bad = Plan((Stage((problem.nodes[0].id,), 1, 1, {problem.nodes[0].id: "vanilla"}),))  # misses nodes
    assert "plan" in checks(problem, replace(res, plan=bad), exact=True)


def test_only_reports_the_named_check(case):
    problem, res = case
    broken = replace(res, tps=1.0, objective=-1.0)
    assert {"tps", "objective"} <= checks(problem, broken, exact=True)
    assert [i.check for i in check_result(problem, None, broken, exact=True, only="tps")] == ["tps"]
    assert [i.check for i in check_result(problem, None, broken, exact=True, only="objective")] == ["objective"]
    assert check_result(problem, None, broken, exact=True, only="bound") == []
    with pytest.raises(ValueError, match="unknown check 'nope'"):
        check_result(problem, None, res, only="nope")


def test_every_issue_is_named_by_a_listed_check(case):
    problem, res = case
    found = set()
    for change in (dict(tps=1.0), dict(status=Status.INFEASIBLE), dict(bound=math.inf), dict(objective=-1.0),
                   dict(status="done")):
        found |= checks(problem, replace(res, **change), Options(data_parallel=False, tensor_parallel=False),
                        exact=False, optimum=0.5 * res.tps)
    assert found == set(CHECKS)
