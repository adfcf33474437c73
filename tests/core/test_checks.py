"""piper.check_result fires on each broken invariant of a Result, and only then."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from experiments.lib.instances import random_problem
from piper import NO_AR, Options, Plan, Stage, Status, check_result, solve
from piper.core.checks import CHECKS


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
    # (uniform: test_options_branches, on a plan known to mix (d, t) pairs)
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
    known = "status, plan, tps, options, objective, bound, optimum"
    with pytest.raises(ValueError, match=f"unknown check 'nope'; known: {known}$"):
        check_result(problem, None, res, only="nope")


def test_every_issue_is_named_by_a_listed_check(case):
    problem, res = case
    found = set()
    for change in (dict(tps=1.0), dict(status=Status.INFEASIBLE), dict(bound=math.inf), dict(objective=-1.0),
                   dict(status="done")):
        found |= checks(problem, replace(res, **change), Options(data_parallel=False, tensor_parallel=False),
                        exact=False, optimum=0.5 * res.tps)
    assert found == set(CHECKS)


# ---- every branch by hand, with the exact issues it must report (what mutation testing ------
# ---- showed missing): names, messages, and the boundaries of each comparison ---------------

def hand_problem():
    """0 -> 1 (c = 0), k = 4, N = 4, M = 10: node 0 p = 4 (a = b = 1) at t = 1, p = 2 at t = 2;
    node 1 p = 4 or ("activation recomp") 6 at t = 1, p = 2 at t = 2."""
    from tests.helpers import problem, tmpc

    nodes = {0: {1: [tmpc(p=4.0, a=1.0, b=1.0)], 2: [tmpc(p=2.0)]},
             1: {1: [tmpc(p=4.0), tmpc("activation recomp", p=6.0)], 2: [tmpc(p=2.0)]}}
    return problem(nodes, [(0, 1, 0.0)], k=4, N=4, M=10.0)


ONE = Plan((Stage((0, 1), 1, 1, {0: "vanilla", 1: "vanilla"}),))  # TPS 4 + 4 = 8
TWO = Plan((Stage((0,), 2, 1, {0: "vanilla"}), Stage((1,), 1, 2, {1: "vanilla"})))  # max(4 / 2, 2) = 2


def result(plan=ONE, tps=None, status=Status.FEASIBLE, solver="hand", **kw):
    from piper import Result

    if tps is None:
        tps = math.inf if plan is None else 8.0 if plan is ONE else 2.0
    return Result(solver=solver, status=status, plan=plan, tps=tps, objective=kw.pop("objective", None),
                  bound=kw.pop("bound", 0.0), time_s=0.0, **kw)


def issues(res, options=None, **kw):
    """[(check, message)], every message a non-empty string."""
    found = check_result(hand_problem(), options, res, **{"exact": True, **kw})
    for i in found:
        assert isinstance(i.check, str) and isinstance(i.message, str) and i.message, i
    return [(i.check, i.message) for i in found]


def names(res, options=None, **kw):
    return [c for c, _ in issues(res, options, **kw)]


def test_the_hand_results_are_sound():
    assert names(result()) == [] and names(result(TWO)) == []
    assert names(result(status=Status.OPTIMAL, bound=8.0), optimum=8.0) == []
    assert names(result(None, status=Status.INFEASIBLE, bound=math.inf), optimum=math.inf) == []
    assert names(result(None, status=Status.UNKNOWN)) == []


def test_status_branches():
    [(check, msg)] = issues(result(status="optimal"))  # a string, not a Status: nothing else is checked
    assert check == "status" and "'optimal'" in msg
    [(check, msg)] = issues(result(status=Status.OPTIMAL, bound=8.0), exact=False)
    assert check == "status" and "hand" in msg


def test_exact_defaults_to_the_registry():
    optimal = dict(status=Status.OPTIMAL, bound=8.0)
    assert names(result(solver="brute", **optimal), exact=None) == []
    assert names(result(solver="equi", **optimal), exact=None) == ["status"]
    assert names(result(solver="no-such-solver", **optimal), exact=None) == []  # unknown: may prove


def test_plan_branches():
    assert issues(result(None, status=Status.OPTIMAL, bound=8.0)) == [("plan", "status optimal but no plan")]
    assert names(result(None, status=Status.FEASIBLE)) == ["plan"]
    [(check, msg)] = issues(result(None, tps=3.0, status=Status.UNKNOWN))
    assert check == "tps" and "3.0" in msg
    assert issues(result(status=Status.INFEASIBLE, bound=math.inf)) == [("plan", "status infeasible with a plan")]
    assert names(result(status=Status.UNKNOWN)) == ["plan"]
    bad = Plan((Stage((1, 0), 1, 1, {0: "vanilla", 1: "vanilla"}),))  # fine: order inside a stage is free
    assert names(result(bad, tps=8.0)) == []
    bad = Plan((Stage((1,), 1, 1, {1: "vanilla"}), Stage((0,), 1, 1, {0: "vanilla"})))
    [(check, msg)] = issues(result(bad, tps=8.0))  # nothing after an invalid plan is checked
    assert check == "plan" and msg.startswith("structurally invalid: rule 2")


def test_out_of_memory_plan():
    # stage 1 at d = 1 with 1 + 2 replicas: y = 3, node 0 needs 1 * 3 + 1 = 4 bytes > M = 3.5
    p = hand_problem().with_cluster(memory=3.5)
    oom = Plan((Stage((0,), 1, 1, {0: "vanilla"}), Stage((1,), 2, 1, {1: "vanilla"})))
    found = check_result(p, None, result(oom, tps=math.inf), exact=True, optimum=math.inf)
    assert [(i.check, i.message) for i in found] == [("plan", "the plan is out of memory")]


def test_tps_branch():
    [(check, msg)] = issues(result(tps=7.0))
    assert check == "tps" and "7.0" in msg and "8.0" in msg


def test_options_branches():
    assert names(result(TWO)) == []
    [(check, msg)] = issues(result(TWO), Options(data_parallel=False))
    assert check == "options" and msg == "stage 1 has d=2 without data parallelism"
    [(check, msg)] = issues(result(TWO), Options(tensor_parallel=False))  # stage 1 has t = 1
    assert check == "options" and msg == "stage 2 has t=2 without tensor parallelism"
    assert issues(result(TWO), Options(exclude_tmpcs=frozenset({"vanilla", "x"}))) == [
        ("options", "stage 1 uses excluded TMPC(s) ['vanilla']"), ("options", "stage 2 uses excluded TMPC(s) ['vanilla']")]
    assert names(result(TWO), Options(exclude_tmpcs=NO_AR)) == []
    [(check, msg)] = issues(result(TWO), Options(uniform=True))
    assert check == "options" and "[(1, 2), (2, 1)]" in msg
    assert names(result(ONE), Options(uniform=True)) == []


def test_options_without_a_uniform_field_mean_not_uniform():
    from types import SimpleNamespace

    old = SimpleNamespace(data_parallel=True, tensor_parallel=True, exclude_tmpcs=frozenset())
    assert names(result(TWO), old) == []


def test_objective_boundary():
    def optimal(**kw):
        return result(status=Status.OPTIMAL, bound=8.0, **kw)

    for res in (optimal, result):  # below the plan's score: wrong whatever the status
        assert names(res(objective=7.5, tolerance=0.5), rtol=0.0) == []  # exactly the tolerance away
        [(check, msg)] = issues(res(objective=7.5 - 2**-20, tolerance=0.5), rtol=0.0)
        assert check == "objective" and "7.49999" in msg
        # rtol is relative to the TPS: 0.25 * 8 = 2
        assert names(res(objective=6.5), rtol=0.25) == []
        assert names(res(objective=5.5), rtol=0.25) == ["objective"]
        assert names(res(objective=None)) == []
    # above it: wrong for an optimal claim (its T is tight), honest for a stopped search
    assert names(optimal(objective=8.5, tolerance=0.5), rtol=0.0) == []
    [(check, msg)] = issues(optimal(objective=8.5 + 2**-20, tolerance=0.5), rtol=0.0)
    assert check == "objective" and "optimal" in msg and "8.5" in msg
    assert names(optimal(objective=10.5), rtol=0.25) == ["objective"]
    assert names(result(objective=8.5 + 2**-20, tolerance=0.5), rtol=0.0) == []
    assert names(result(objective=1e9)) == []


def test_bound_branches():
    [(check, msg)] = issues(result(None, status=Status.INFEASIBLE, bound=3.0))
    assert check == "bound" and "3.0" in msg
    assert issues(result(bound=math.inf)) == [("bound", "bound inf without an infeasibility proof")]
    assert names(result(bound=math.nan)) == ["bound"]
    assert names(result(None, status=Status.UNKNOWN, bound=math.inf)) == ["bound"]
    assert names(result(bound=8.0), rtol=0.0) == []  # equal to the TPS
    [(check, msg)] = issues(result(bound=8.0 + 2**-20), rtol=0.0)
    assert check == "bound" and "above the plan's TPS" in msg
    assert names(result(bound=9.0, tolerance=1.0), rtol=0.0) == []
    assert names(result(bound=9.5), rtol=0.25) == []  # 8 + 0.25 * 8 = 10
    # an optimal claim within the tolerance of its bound, exactly at it, and beyond it
    assert names(result(status=Status.OPTIMAL, bound=7.5, tolerance=0.5), rtol=0.0) == []
    [(check, msg)] = issues(result(status=Status.OPTIMAL, bound=7.5, tolerance=0.25), rtol=0.0)
    assert check == "bound" and "above its bound 7.5" in msg


def test_optimum_branches():
    # no plan exists: a finite plan is an oracle bug, an OOM or missing plan is not
    [(check, msg)] = issues(result(), optimum=math.inf)
    assert check == "optimum" and "8.0" in msg
    assert names(result(None, status=Status.UNKNOWN), optimum=math.inf) == []
    # a plan exists
    [(check, msg)] = issues(result(None, status=Status.INFEASIBLE, bound=math.inf), optimum=8.0)
    assert check == "optimum" and "8.0" in msg
    assert names(result(), optimum=8.0, rtol=0.0) == []  # the optimum itself
    [(check, msg)] = issues(result(), optimum=8.0 + 2**-20, rtol=0.0)  # a plan below the optimum
    assert check == "optimum" and "below the optimum" in msg
    assert names(result(), optimum=10.0, rtol=0.25) == []  # 10 - 0.25 * 10 = 7.5 < 8
    assert names(result(), optimum=4.0) == []  # a feasible plan may be worse than the optimum
    optimal = dict(status=Status.OPTIMAL, bound=7.5, tolerance=0.5)
    assert names(result(**optimal), optimum=7.5, rtol=0.0) == []  # within the tolerance
    beyond = issues(result(status=Status.OPTIMAL, bound=7.0, tolerance=0.5), optimum=7.0, rtol=0.0)
    assert [c for c, _ in beyond] == ["bound", "optimum"]  # (its own bound says so too)
    assert beyond[1][1] == "certifies 8.0 optimal, the optimum is 7.0 (tolerance 0.5)"
    both = issues(result(status=Status.OPTIMAL, bound=7.5, tolerance=0.5), optimum=7.25, rtol=0.0)
    assert [c for c, _ in both] == ["optimum", "optimum"] and "certifies 8.0 optimal" in both[0][1]
    assert "bound 7.5 above the optimum 7.25" in both[1][1]
    # the bound against the optimum, at and beyond it
    assert names(result(bound=8.0), optimum=8.0, rtol=0.0) == []
    assert names(result(bound=7.0), optimum=7.0, rtol=0.0) == []  # (a feasible plan above the optimum)
    assert names(result(bound=7.0 + 2**-20), optimum=7.0, rtol=0.0) == ["optimum"]
    assert names(result(bound=7.0), optimum=6.0, rtol=0.25) == []  # 6 + 0.25 * 6 = 7.5
