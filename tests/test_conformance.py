"""One conformance suite run against every registered solver (scikit-learn style).

``validate_result`` checks a Result independently of the solver that made it, with the
one public check :func:`piper.check_result` (plan valid, TPS the evaluator's, status /
plan / bound consistent, ablations honoured, the claims held to the solver's stated
tolerance and to the brute-force optimum).
"""

from __future__ import annotations

import math

import pytest

import baselines
from experiments.instances import random_problem
from piper import NO_AR, Options, Problem, Result, Status, check_result, evaluate

#: instances small enough for every exact solver in well under a second
INSTANCES = [random_problem(seed, n=3 + seed % 3, max_tmpcs=3, degrees=(1, 2, 4)) for seed in range(14)]
OPTIONS = {
    "default": Options(),
    "no-dp": Options(data_parallel=False),
    "no-tp": Options(tensor_parallel=False),
    "no-ar": Options(exclude_tmpcs=NO_AR),
}
REL = 1e-6  # exact solvers agree within this (CP-SAT's integer scaling is far below it here)


def validate_result(problem: Problem, options: Options, result: Result, optimum: float, exact: bool) -> None:
    """piper.check_result against the brute-force optimum; exact solvers also return a plan
    whenever one exists (unless stopped)."""
    issues = check_result(problem, options, result, exact=exact, optimum=optimum)
    assert not issues, f"{result.solver}: " + "; ".join(map(str, issues))
    assert result.time_s >= 0
    if exact and math.isfinite(optimum) and result.status is not Status.UNKNOWN:
        assert result.plan is not None


@pytest.fixture(scope="module")
def optima():
    return {(i, name): baselines.solve(p, o, solver="brute").tps
            for i, p in enumerate(INSTANCES) for name, o in OPTIONS.items()}


@pytest.mark.parametrize("solver", [s for s in baselines.solver_names() if s != "brute"])
@pytest.mark.parametrize("opt_name", list(OPTIONS))
def test_solver_conforms(solver, opt_name, optima):
    info = baselines.get_solver(solver)
    options = OPTIONS[opt_name]
    for i, problem in enumerate(INSTANCES):
        result = info(problem, options)
        validate_result(problem, options, result, optima[(i, opt_name)], info.exact)
        if info.exact:
            assert result.status in (Status.OPTIMAL, Status.INFEASIBLE), f"{solver} on instance {i}: {result.status}"


def test_suite_has_both_feasible_and_infeasible_instances(optima):
    values = list(optima.values())
    assert any(math.isinf(v) for v in values) and sum(math.isfinite(v) for v in values) >= 10


def test_brute_force_matches_unpruned_enumeration_on_tiny_graphs():
    """The oracle itself: branch and bound vs. plain enumeration of every plan via the evaluator."""
    import itertools

    from piper import Plan, PlanError, Stage, candidates

    checked = 0
    for seed in range(40):
        problem = random_problem(seed, n=3, degrees=(1, 2), max_tmpcs=2)
        cand = candidates(problem)
        ids = [nd.id for nd in problem.nodes]
        best = math.inf
        # every assignment of nodes to stage numbers 0..n-1, keep the ones with no empty stage
        for labels in itertools.product(range(len(ids)), repeat=len(ids)):
            L = max(labels) + 1
            if set(labels) != set(range(L)):
                continue
            groups = [tuple(v for v, lab in zip(ids, labels) if lab == s) for s in range(L)]
            for degs in itertools.product(itertools.product(cand.ts, cand.ds), repeat=L):
                choice_lists = [
                    list(itertools.product(*[[c.id for _, c in cand.tmpcs[v].get(t, ())] for v in g]))
                    for g, (t, _) in zip(groups, degs)
                ]
                for choice in itertools.product(*choice_lists):
                    plan = Plan(tuple(Stage(g, d, t, dict(zip(g, names)))
                                      for g, (t, d), names in zip(groups, degs, choice)))
                    try:
                        best = min(best, evaluate(problem, plan).tps)
                    except PlanError:
                        pass
        got = baselines.solve(problem, solver="brute").tps
        assert got == pytest.approx(best, rel=1e-12) or (math.isinf(got) and math.isinf(best))
        checked += math.isfinite(best)
    assert checked >= 10


def test_a_layer_that_fits_nowhere_makes_every_solver_say_infeasible_and_name_it():
    """A layer whose every TMPC has a + b > M cannot sit in any stage (y >= 1): every
    solver must say so at once and name the layer; the evaluator agrees on the plans a
    user would try. With a + b == M for one TMPC the same graph is feasible."""
    from tests.helpers import plan, problem, tmpc

    M = 100.0

    def graph(tight_b: float):
        nodes = {
            0: {1: [tmpc(p=1.0, a=1.0, b=1.0)]},
            1: {1: [tmpc(p=2.0, a=10.0, b=95.0), tmpc("activation recomp", p=3.0, a=2.0, b=tight_b)],
                2: [tmpc(p=1.0, a=5.0, b=96.0)]},
            2: {1: [tmpc(p=1.0, a=1.0, b=1.0)]},
        }
        return problem(nodes, [(0, 2, 1.0), (2, 1, 1.0)], k=4, M=M, N=4)  # layer 1 last

    bad = graph(99.0)  # least a + b = 101 > M
    for stages in ([([0, 1, 2], 1, 1, "vanilla")],
                   [([0], 1, 1, "vanilla"), ([2], 1, 1, "vanilla"), ([1], 1, 1, "activation recomp")],
                   [([0, 2], 1, 1, "vanilla"), ([1], 1, 2, "vanilla")]):
        assert evaluate(bad, plan(*stages)).oom  # (valid plans: PlanError otherwise)
    for name in baselines.solver_names():
        result = baselines.get_solver(name)(bad, Options())
        assert result.status is Status.INFEASIBLE, f"{name}: {result.status}"
        assert result.plan is None and "layer 1" in result.message and "a + b" in result.message, (name, result.message)

    ok = graph(98.0)  # activation recomp: a + b = 100 = M, alone in the last stage (y = 1)
    for name in baselines.solver_names():
        result = baselines.get_solver(name)(ok, Options())
        assert result.plan is not None, f"{name}: {result.status} {result.message}"
        assert not evaluate(ok, result.plan).oom
