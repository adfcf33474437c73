"""The exact models (milp, milp-highs, cpsat) minimize the batch time (docs/problem.md §9,
docs/formulations.md §9), against brute force.

Tiny random instances (``experiments.lib.instances.random_problem``: chains and branchy DAGs,
with and without the version-2 cluster keys, free and uniform plans): every solver's answer
passes ``check_result`` with brute force's batch-time optimum, its status is brute force's,
and an optimum is within the result's stated tolerance of brute force's. A warm start worse
than the optimum is improved and the optimum proven (cutoff, hint / MIP start, split). The
full sweep (a few hundred instances per solver) is marked ``slow``: ``pytest -m slow`` or ``--runslow``.
"""

from __future__ import annotations

import functools
import math
import random

import pytest

from baselines.brute import solve_brute
from baselines.cpsat.model import CpsatModel
from baselines.exact.guards import guarded_result
from baselines.exact.model_data import build_model_data
from baselines.exact.parts import node_parts
from experiments.lib.instances import random_problem
from piper import Options, Problem, evaluate, solve
from piper.core.checks import check_result
from piper.core.errors import SolverError
from piper.core.options import OBJECTIVES
from piper.core.result import Result, Status
from piper.solvers.registry import SOLVERS
from tests.helpers import brute_force_sweep, plan, problem, tmpc, with_random_cluster_keys

EXACT = ("milp-highs", "cpsat", "milp")
#: the fast set's cases per solver (cheap ones; CBC is the slow one): chains and DAGs,
#: version-2 keys with one and two parts, uniform plans, an infeasible instance
FAST = {"milp-highs": (1, 6, 11, 13, 27, 34), "cpsat": (1, 6, 11, 25, 27, 32), "milp": (1, 6, 7, 27)}
#: cases whose TPS optimum is worse in batch time than the batch-time optimum (one part, cheap)
WORSE_WARM = (14, 20)
SLOW = 200


@functools.cache
def case(i: int) -> tuple[Problem, Options]:
    """Instance i and its options: batch time, uniform plans on about a third."""
    rng = random.Random(40_009 * i + 3)
    base = random_problem(9100 + i, n=rng.choice((2, 3, 4, 4, 5, 5)), devices=rng.choice((1, 2, 3, 4, 4, 6, 8)),
                          microbatches=rng.choice((1, 2, 4, 8)), degrees=(1, 2), max_tmpcs=rng.choice((1, 2, 3)))
    p = with_random_cluster_keys(base, rng, shard_denominator=32) if rng.random() < 0.4 else base
    return p, Options(objective="batch-time", uniform=rng.random() < 0.3, threads=1)


@functools.cache
def oracle(i: int) -> Result:
    return solve_brute(*case(i))


def check(solver: str, i: int, options: Options | None = None) -> Result:
    """``solver`` on case i (with ``options`` instead of the case's, if given) agrees with brute force."""
    p, opts = case(i)
    opts = options or opts
    best = oracle(i)
    res = solve(p, opts, solver=solver)
    what = f"{solver} case {i} (n={p.n}, k={p.devices}, N={p.microbatches}, uniform={opts.uniform})"
    optimum = best.value if best.status == Status.OPTIMAL else math.inf
    assert best.status in (Status.OPTIMAL, Status.INFEASIBLE)
    assert res.status == best.status, (what, res.status, res.message)
    assert res.objective_kind == "batch-time"
    issues = check_result(p, opts, res, optimum=optimum)
    assert not issues, (what, [str(x) for x in issues])
    if best.status == Status.OPTIMAL:
        assert abs(res.value - optimum) <= res.tolerance + 1e-12 * optimum, (what, res.value, optimum, res.tolerance)
        assert res.bound <= optimum * (1 + 1e-12) and res.value == evaluate(p, res.plan).batch_time
    return res


def test_the_cases_exercise_shapes_keys_uniform_and_the_objective():
    """The cases mix chains and DAGs, version-2 keys, uniform plans, infeasible instances,
    and the batch-time optimum is not the TPS optimum's batch time on some (the objective matters)."""
    cases = [case(i) for i in range(80)]

    def chain(p: Problem) -> bool:
        return len(p.edges) == p.n - 1 and all(len(p.out_edges[v]) <= 1 and len(p.in_edges[v]) <= 1
                                               for v in p.node_by_id)

    assert sum(chain(p) for p, _ in cases) >= 20 and sum(not chain(p) for p, _ in cases) >= 20
    assert sum(bool(p.active_features()) for p, _ in cases) >= 15
    assert sum(len(node_parts(p)) == 2 for p, _ in cases) >= 8
    assert sum(o.uniform for _, o in cases) >= 15
    statuses = [oracle(i).status for i in range(80)]
    assert statuses.count(Status.INFEASIBLE) >= 3 and statuses.count(Status.OPTIMAL) >= 45
    differs = 0
    for i in range(80):
        p, opts = case(i)
        if oracle(i).status == Status.OPTIMAL:
            tps_best = solve_brute(p, Options(uniform=opts.uniform))
            differs += tps_best.batch_time > oracle(i).value * (1 + 1e-9)
    assert differs >= 5


def test_registry_declares_both_objectives_and_refuses_interleaved():
    for name in EXACT:
        info = SOLVERS[name]
        assert info.objectives == frozenset(OBJECTIVES) and info.schedules == frozenset({"1f1b"})
        with pytest.raises(SolverError) as err:
            solve(case(0)[0], Options(objective="batch-time", max_virtual_stages=2), solver=name)
        assert "interleaved" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("solver", EXACT)
def test_exact_models_agree_with_brute_force_on_the_batch_time(solver: str) -> None:
    for i in FAST[solver]:
        check(solver, i)
    assert {oracle(i).status for i in FAST[solver]} == {Status.OPTIMAL, Status.INFEASIBLE}


@pytest.mark.parametrize("solver", EXACT)
def test_a_worse_warm_start_is_improved_and_the_optimum_proven(solver: str) -> None:
    """Brute force's TPS-optimal plan, worse in batch time than the batch-time optimum, as
    the warm start: the cutoff search below it (and, for milp-highs and cpsat, the split over
    option sequences and the plain MIP start / hint) finds and proves the optimum."""
    for i in WORSE_WARM:
        p, opts = case(i)
        best = oracle(i)
        assert best.status == Status.OPTIMAL and len(node_parts(p)) == 1
        warm = solve_brute(p, Options(uniform=opts.uniform)).plan
        assert evaluate(p, warm).batch_time > best.value * (1 + 1e-6)
        res = check(solver, i, Options(objective="batch-time", uniform=opts.uniform, threads=1, warm_start=warm))
        assert res.value < evaluate(p, warm).batch_time
        assert "used" in res.stats["warm_start"] or "below the warm start" in res.stats["warm_start"]
        if solver != "milp":
            check(solver, i, Options(objective="batch-time", uniform=opts.uniform, threads=1, warm_start=warm,
                                     params={"split": "sequences"}))
            plain = {"cpsat": {"strict_cutoff": False}, "milp-highs": {"cutoff": False}}[solver]
            check(solver, i, Options(objective="batch-time", uniform=opts.uniform, threads=1, warm_start=warm,
                                     params=plain))


def test_an_optimal_warm_start_is_proven_by_the_split():
    """The batch-time optimum as the warm start: every option sequence is refuted below it."""
    for i in (13, 31):
        p, opts = case(i)
        best = oracle(i)
        assert best.status == Status.OPTIMAL and len(node_parts(p)) == 1
        for solver in ("milp-highs", "cpsat"):
            res = check(solver, i, Options(objective="batch-time", uniform=opts.uniform, threads=1,
                                           warm_start=best.plan, params={"split": "sequences"}))
            assert res.stats["split"]["mode"] == "sequences" and res.stats["split"]["sequences"] >= 2


def test_model_values_are_the_evaluators_batch_time():
    """``ModelData.model_value`` (the MILP's objective of a plan, units of τ) and CP-SAT's
    integer objective of a plan are the evaluator's batch time, within CP-SAT's ε."""
    checked = 0
    for i in range(60):
        p, opts = case(i)
        best = oracle(i)
        if best.status != Status.OPTIMAL:
            continue
        part = "inside" if best.plan.devices_used <= p.node_size else "spanning"
        data = build_model_data(p, opts, part=part)
        warm = data.slots_from_plan(best.plan)
        assert warm is not None and warm.value == evaluate(p, warm.plan).batch_time
        assert math.isclose(data.model_value(warm.assign) * data.tau, warm.value, rel_tol=1e-9)
        model = CpsatModel(data)
        assert abs(model.objective_int(warm) * data.tau / model.unit - warm.value) <= model.epsilon
        assert model.epsilon > p.microbatches * (p.n + len(p.edges)) * data.tau / model.unit / 2 * (1 - 1e-12)
        checked += 1
    assert checked >= 30


def test_the_exchange_rule_keeps_stage_times_under_the_batch_time():
    """Two layers with the same memory but different parameter sizes per TMPC: under TPS the
    exchange that lowers κ (the resync) but raises p is excluded; under the batch time, where
    σ counts p, it is not (the classes then need equal w), and every excluded pair lowers
    both κ and σ."""
    both = [tmpc("vanilla", p=1.0, w=0.0, a=2.0, b=1.0), tmpc("activation recomp", p=2.0, w=0.0, a=1.0, b=1.0)]
    other = [tmpc("vanilla", p=1.0, w=0.0, a=2.0, b=1.0), tmpc("activation recomp", p=1.0, w=10.0, a=1.0, b=1.0)]
    prob = problem({0: {1: both}, 1: {1: other}, 2: {1: both}}, [(0, 1, 0.0), (1, 2, 0.0)], k=2, N=2, B=1.0)
    tps_pairs = build_model_data(prob, Options()).tmpc_exclusions()
    assert tps_pairs
    data = build_model_data(prob, Options(objective="batch-time"))
    for cu, cv in data.tmpc_exclusions():
        by = {(c.node, c.opt, c.tmpc_index): c for c in data.choices[cu.node] + data.choices[cv.node]}
        ub, va = by[(cu.node, cu.opt, cv.tmpc_index)], by[(cv.node, cv.opt, cu.tmpc_index)]
        assert ub.kappa + va.kappa <= cu.kappa + cv.kappa and ub.sigma + va.sigma <= cu.sigma + cv.sigma
    assert {(cu.node, cv.node) for cu, cv in data.tmpc_exclusions()} <= {(0, 2)}
    assert any(1 in (cu.node, cv.node) for cu, cv in tps_pairs)
    opts = Options(objective="batch-time", threads=1)
    best = solve_brute(prob, opts)
    for name in EXACT:
        res = solve(prob, opts, solver=name)
        assert res.status == Status.OPTIMAL and abs(res.value - best.value) <= res.tolerance + 1e-12


def test_guards_compare_batch_times():
    """The guards hold a batch-time claim to the batch time: an "optimal" plan worse than the
    warm start in batch time is replaced by the warm start, as "feasible"."""
    for i in range(80):
        p, opts = case(i)
        best = oracle(i)
        if best.status != Status.OPTIMAL or len(node_parts(p)) > 1:
            continue
        worse = solve_brute(p, Options(uniform=opts.uniform)).plan
        if not evaluate(p, worse).batch_time > best.value * (1 + 1e-6):
            continue
        data = build_model_data(p, opts)
        warm = data.slots_from_plan(best.plan)
        value = evaluate(p, worse).batch_time
        res = guarded_result(data, "fake", Status.OPTIMAL, worse, time_s=0.0, objective=value, bound=value,
                             tolerance=0.0, warm=warm, stats={})
        assert res.status == Status.FEASIBLE and res.plan == warm.plan and res.objective_kind == "batch-time"
        assert res.bound <= best.value and "batch time" in res.message
        return
    pytest.fail("no case with a worse TPS optimum")


def test_tps_is_still_the_default_objective():
    p = problem({0: {1: [tmpc(p=1.0)]}, 1: {1: [tmpc(p=1.0)]}}, [(0, 1, 0.0)], k=2, N=4)
    for name in EXACT:
        res = solve(p, Options(threads=1), solver=name)
        assert res.objective_kind == "tps" and res.status == Status.OPTIMAL
        assert abs(res.objective - res.tps) <= res.tolerance
    # the worked check of docs/problem.md §9.4, 1F1B part: two stages of two layers beat one of four
    chain = problem({v: {1: [tmpc(p=1.0)]} for v in range(4)}, [(v, v + 1, 0.0) for v in range(3)], k=2, N=4)
    assert evaluate(chain, plan(([0, 1], 1, 1, "vanilla"), ([2, 3], 1, 1, "vanilla"))).batch_time == 10.0
    for name in EXACT:
        res = solve(chain, Options(objective="batch-time", threads=1), solver=name)
        assert res.status == Status.OPTIMAL and abs(res.value - solve_brute(chain, Options(
            objective="batch-time")).value) <= res.tolerance


# ----------------------------------------------------------------------------- full sweep


@pytest.mark.slow
@pytest.mark.parametrize("solver", EXACT)
def test_batch_time_full_sweep(solver: str) -> None:
    counts = brute_force_sweep(SLOW, lambda i: check(solver, i), oracle)
    assert counts["optimal"] >= 100 and counts["infeasible"] >= 10, counts
    print(f"{solver}: {counts} agree with brute force on the batch time")
