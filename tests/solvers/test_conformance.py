"""One conformance suite run against every registered solver (scikit-learn's estimator
checks are the model): one test per (solver, instance, check), so that a failure names all
three, e.g. ``test_check[milp-highs-r04-no-dp-bound]``.

The checks (:data:`CHECKS`):

* the invariants of :func:`piper.check_result`, one test per named check
  (:data:`piper.core.checks.CHECKS`: status, plan, tps, options, objective, bound, optimum),
  against the brute-force optimum;
* ``exact``: an exact solver with no time limit proves (optimal or infeasible) and returns
  a plan whenever one exists;
* ``fields``: a :class:`Result` of the registered name, a non-negative time, the
  evaluator's breakdown of the plan as ``score``;
* ``tolerance``: the stated tolerance is a finite number >= 0 and small next to the TPS,
  and an optimal claim is the brute-force optimum within :data:`REL` whatever the tolerance;
* ``deterministic``: the same input solved again gives the same status, plan and TPS (a
  parallel exact search proving optimality: the same status and TPS, see :data:`PARALLEL_SEARCH`);
* ``no_mutation``: the Problem (with its cached views), the Options and a warm-start Plan
  are deep-equal before and after the solve;
* ``pickle``: the Problem, the Plan and the Result survive a pickle round trip;
* ``json``: ``Result.from_dict(result.to_dict(), problem)`` gives back the same result.

Every solve is made once per (solver, instance) and shared by that pair's checks.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
import pickle
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import pytest

from experiments.lib.instances import random_problem, with_expert_keys
from piper import (
    NO_AR,
    Options,
    Plan,
    Problem,
    Result,
    Status,
    check_result,
    evaluate,
    get_solver,
    solve,
    solver_names,
)
from piper.core.checks import CHECKS as RESULT_CHECKS
from piper.core.errors import SolverError
from piper.core.options import BATCH_TIME
from tests.helpers import with_random_cluster_keys

REL = 1e-6  # exact solvers agree within this (CP-SAT's integer scaling is far below it here)
#: a tolerance above this fraction of the plan's TPS would make an "optimal" claim say little
TOLERANCE_REL = 1e-5

SEEDS = range(14)
OPTIONS = {
    "default": Options(),
    "no-dp": Options(data_parallel=False),
    "no-tp": Options(tensor_parallel=False),
    "no-ar": Options(exclude_tmpcs=NO_AR),
    "uniform": Options(uniform=True),
    # version 3 (docs/problem.md §9): the batch-time objective, interleaved schedules
    "batch": Options(objective=BATCH_TIME),
    "batch-uniform": Options(objective=BATCH_TIME, uniform=True),
    "any-v3": Options(schedule="any", max_virtual_stages=3),
    "batch-any-v3": Options(objective=BATCH_TIME, schedule="any", max_virtual_stages=3),
}
#: instance name -> (seed, options name, keys: False, True (random cluster keys) or "moe" (random
#: expert-parallelism keys, docs/problem.md §11), warm start): every seed under the paper's
#: ablations; uniform plans, random cluster keys, MoE layers and a warm start on a few
CASES: dict[str, tuple[int, str, bool | str, bool]] = {
    **{f"r{s:02d}-{o}": (s, o, False, False) for s in SEEDS for o in ("default", "no-dp", "no-tp", "no-ar")},
    **{f"r{s:02d}-uniform": (s, "uniform", False, False) for s in (4, 6, 11, 12)},
    **{f"r{s:02d}-cluster": (s, "default", True, False) for s in (4, 5, 6, 11, 12, 13)},
    **{f"r{s:02d}-warm": (s, "default", False, True) for s in (4, 6, 11, 12, 13)},
    **{f"r{s:02d}-{o}": (s, o, s % 2 == 1, False) for s in (4, 5, 12)
       for o in ("batch", "batch-uniform", "any-v3", "batch-any-v3")},
    **{f"r{s:02d}-moe": (s, "default", "moe", False) for s in (0, 6, 12, 13)},
}


def base_problem(seed: int) -> Problem:
    return random_problem(seed, n=3 + seed % 3, max_tmpcs=3, degrees=(1, 2, 4))


@functools.cache
def warm_plan(seed: int) -> Plan:
    """A valid plan that is not necessarily optimal: equi's, else brute force's."""
    p = base_problem(seed)
    plan = solve(p, solver="equi").plan or solve(p, solver="brute").plan
    assert plan is not None, f"seed {seed} has no plan to start from"
    return plan


def build(case: str) -> tuple[Problem, Options]:
    """Fresh objects for ``case`` (every call builds new ones)."""
    seed, opt, cluster, warm = CASES[case]
    problem = base_problem(seed)
    if cluster == "moe":
        problem = with_expert_keys(problem, random.Random(seed))
    elif cluster:
        problem = with_random_cluster_keys(problem, random.Random(seed))
    options = OPTIONS[opt]
    if warm:
        options = replace(options, warm_start=copy.deepcopy(warm_plan(seed)))
    return problem, copy.deepcopy(options)


def deep_state(obj: Any) -> Any:
    """A plain nested value standing for everything reachable from ``obj``: every dataclass
    field (also those left out of ``==``, such as ``extra``), the computed cached views of a
    Problem, mappings in their order; floats by ``repr`` (so nan equals nan)."""
    if obj is None or isinstance(obj, (bool, int, str, Enum)):
        return obj
    if isinstance(obj, float):
        return ("float", repr(obj))
    if isinstance(obj, Mapping):
        return (type(obj).__name__, tuple((deep_state(k), deep_state(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(deep_state(v) for v in obj))
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, tuple(sorted((deep_state(v) for v in obj), key=repr)))
    if dataclasses.is_dataclass(obj):
        cls = type(obj)
        items = [(f.name, deep_state(getattr(obj, f.name))) for f in dataclasses.fields(obj)]
        items += [(name, deep_state(getattr(obj, name))) for name in sorted(vars(cls))
                  if isinstance(vars(cls)[name], functools.cached_property)]
        return (cls.__name__, tuple(items))
    if hasattr(obj, "__dict__"):
        return (type(obj).__name__, deep_state(vars(obj)))
    return (type(obj).__name__, repr(obj))


@dataclass
class Run:
    """One solve of one instance by one solver, with what the checks need."""

    solver: str
    case: str
    exact: bool
    problem: Problem
    options: Options
    result: Result
    #: deep_state of (problem, options) before and after the solve
    before: Any
    after: Any
    #: solves the same input again, on fresh objects
    again: Callable[[], Result]
    #: brute force's optimum of the instance (+inf: no plan)
    optimum: Callable[[], float]
    #: whether, with no time limit, the solver must prove (``check_exact``); an exact solver
    #: may claim an optimum even where it need not prove one
    must_prove: bool = True


def make_run(func: Callable[[Problem, Options], Result], solver: str, case: str, exact: bool,
             optimum: Callable[[], float]) -> Run:
    problem, options = build(case)
    before = deep_state((problem, options))
    result = func(problem, options)
    after = deep_state((problem, options))
    return Run(solver, case, exact, problem, options, result, before, after, lambda: func(*build(case)), optimum)


#: exact solvers that prove interleaved optima on every graph; Piper's DP proves them on chains
#: of identical layers only and says "feasible" with a bound elsewhere (docs/dp.md)
EXACT_OVER_INTERLEAVED = frozenset({"brute"})


@functools.cache
def registered_run(solver: str, case: str) -> Run:
    info = get_solver(solver)
    interleaved = max(OPTIONS[CASES[case][1]].virtual_stage_choices()) > 1
    run = make_run(info, solver, case, info.exact, functools.partial(optimum, case))
    return replace(run, again=functools.partial(second_result, solver, case),
                   must_prove=not interleaved or solver in EXACT_OVER_INTERLEAVED)


@functools.cache
def optimum(case: str) -> float:
    """Brute force's optimum of ``case`` under its objective (TPS or batch time; +inf: no plan)."""
    return solve(*build(case), solver="brute").value


@functools.cache
def second_result(solver: str, case: str) -> Result:
    return get_solver(solver)(*build(case))


# ---- the checks -----------------------------------------------------------------------------

def _result_check(name: str) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        issues = check_result(run.problem, run.options, run.result, exact=run.exact, optimum=run.optimum(), only=name)
        assert not issues, "; ".join(map(str, issues))
    check.__name__ = f"check_{name}"
    return check


def check_exact(run: Run) -> None:
    if not (run.exact and run.must_prove):
        return
    assert run.result.status in (Status.OPTIMAL, Status.INFEASIBLE), f"no time limit, yet {run.result.status}"
    if math.isfinite(run.optimum()):
        assert run.result.plan is not None, f"a plan of TPS {run.optimum()!r} exists, none returned"


def check_fields(run: Run) -> None:
    res = run.result
    assert isinstance(res, Result), type(res)
    assert res.solver == run.solver
    assert isinstance(res.time_s, (int, float)) and math.isfinite(res.time_s) and res.time_s >= 0, res.time_s
    assert res.plan is None or isinstance(res.plan, Plan), type(res.plan)
    if res.plan is None:
        assert res.score is None, "a score without a plan"
    else:
        assert res.score == evaluate(run.problem, res.plan), "score is not the evaluator's breakdown of the plan"


def check_tolerance(run: Run) -> None:
    res, best = run.result, run.optimum()
    tol, value = res.tolerance, res.value  # value: the plan under the case's objective
    assert isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0, f"tolerance {tol!r}"
    if math.isfinite(value):
        assert tol <= TOLERANCE_REL * value, f"tolerance {tol!r} is more than {TOLERANCE_REL} of the value {value!r}"
    assert not math.isnan(res.bound), "bound is nan"
    if res.status is Status.OPTIMAL:
        assert math.isfinite(best) and value <= best * (1 + REL), f"optimal {value!r}, the optimum is {best!r}"
        assert res.bound <= value + tol + REL * value, f"optimal {value!r} with a bound {res.bound!r} above it"


#: solvers whose search runs on several threads when Options.threads > 1 (CP-SAT's portfolio,
#: CBC's and HiGHS's parallel tree search): the order in which threads finish is not fixed, so
#: of several plans with the same optimal TPS either may come back (OR-Tools documents its
#: parallel search as non-deterministic). For them the check asks for the same status and the
#: same TPS; for every other solver, and for them with one thread, the very same plan.
PARALLEL_SEARCH = frozenset({"cpsat", "milp", "milp-highs"})


def check_deterministic(run: Run) -> None:
    a, b = run.result, run.again()
    if run.solver in PARALLEL_SEARCH and run.options.threads > 1 and a.status is Status.OPTIMAL:
        assert b.status is a.status and math.isclose(a.value, b.value, rel_tol=1e-9,
                                                     abs_tol=a.tolerance + b.tolerance), (
            f"first {a.status} {a.value!r}, then {b.status} {b.value!r}")
        return
    assert (a.status, a.plan, a.value) == (b.status, b.plan, b.value), (
        f"first {a.status} {a.tps!r} {a.plan}, then {b.status} {b.tps!r} {b.plan}")


def check_no_mutation(run: Run) -> None:
    problem_before, options_before = run.before
    problem_after, options_after = run.after
    assert problem_after == problem_before, "the solver changed the Problem (or its cached views)"
    assert options_after == options_before, "the solver changed the Options (or the warm-start Plan)"


def _round_trip(obj: Any) -> None:
    try:
        back = pickle.loads(pickle.dumps(obj))
    except Exception as exc:  # noqa: BLE001 - any failure to pickle is the finding
        raise AssertionError(f"{type(obj).__name__} does not pickle: {exc!r}") from exc
    assert back == obj and deep_state(back) == deep_state(obj), f"{type(obj).__name__} changed in a pickle round trip"


def check_pickle(run: Run) -> None:
    _round_trip(run.problem)
    _round_trip(run.result)
    if run.result.plan is not None:
        _round_trip(run.result.plan)


def check_json(run: Run) -> None:
    res = run.result
    back = Result.from_dict(res.to_dict(), run.problem)
    fields = ("solver", "status", "plan", "tps", "objective", "bound", "tolerance", "message", "score")
    for name in fields:
        got, want = getattr(back, name), getattr(res, name)
        assert got == want or deep_state(got) == deep_state(want), f"{name}: {want!r} came back as {got!r}"


CHECK_FUNCS: dict[str, Callable[[Run], None]] = {
    **{name: _result_check(name) for name in RESULT_CHECKS},
    "exact": check_exact,
    "fields": check_fields,
    "tolerance": check_tolerance,
    "deterministic": check_deterministic,
    "no_mutation": check_no_mutation,
    "pickle": check_pickle,
    "json": check_json,
}
CHECKS = tuple(CHECK_FUNCS)
SOLVERS = solver_names()


def graph_refused(solver: str, case: str) -> bool:
    """Whether ``solver`` takes only some graphs and not ``case``'s: ``aggregate`` plans chains
    of identical layers (at most 8 other end nodes, docs/formulations.md §10), not DAGs; it
    must refuse the others with one line (:func:`test_other_graphs_are_refused`)."""
    if solver != "aggregate":
        return False
    from baselines.aggregate.chain import detect_chain

    try:
        detect_chain(base_problem(CASES[case][0]))
    except SolverError:
        return True
    return False


@functools.cache
def features_refused(solver: str, case: str) -> bool:
    """Whether ``solver`` does not declare a workload feature of ``case``'s instance (e.g.
    ``aggregate`` and the expert-parallel keys): it must refuse it with one line
    (:func:`test_undeclared_features_are_refused`)."""
    return bool(get_solver(solver).unsupported(build(case)[0]))


def declared(solver: str, case: str) -> bool:
    """Whether ``solver`` declares the objective and schedules of ``case``'s options (the
    others must refuse them: :func:`test_undeclared_options_are_refused`), the features of its
    instance, and takes its graph."""
    return (get_solver(solver).refusal(OPTIONS[CASES[case][1]]) is None and not features_refused(solver, case)
            and not graph_refused(solver, case))


@pytest.mark.parametrize("solver, case, check", [
    pytest.param(s, c, k, id=f"{s}-{c}-{k}") for s, c, k in itertools.product(SOLVERS, CASES, CHECKS)
    if declared(s, c)])
def test_check(solver, case, check):
    CHECK_FUNCS[check](registered_run(solver, case))


@pytest.mark.parametrize("solver, case", [
    pytest.param(s, c, id=f"{s}-{c}") for s, c in itertools.product(SOLVERS, CASES)
    if graph_refused(s, c) and get_solver(s).refusal(OPTIONS[CASES[c][1]]) is None and not features_refused(s, c)])
def test_other_graphs_are_refused(solver, case):
    """A solver for some graphs only refuses the others with one line."""
    with pytest.raises(SolverError) as err:
        get_solver(solver)(*build(case))
    message = str(err.value)
    assert "\n" not in message and "chain" in message, message


@pytest.mark.parametrize("solver, case", [
    pytest.param(s, c, id=f"{s}-{c}") for s, c in itertools.product(SOLVERS, CASES) if features_refused(s, c)])
def test_undeclared_features_are_refused(solver, case):
    """A solver given a workload feature it does not declare refuses with one line naming the key."""
    with pytest.raises(SolverError) as err:
        get_solver(solver)(*build(case))
    message = str(err.value)
    missing = get_solver(solver).unsupported(build(case)[0])
    assert "\n" not in message and "does not support" in message and all(key in message for key in missing), message


@pytest.mark.parametrize("solver, case", [
    pytest.param(s, c, id=f"{s}-{c}") for s, c in itertools.product(SOLVERS, CASES)
    if get_solver(s).refusal(OPTIONS[CASES[c][1]]) is not None and not features_refused(s, c)])
def test_undeclared_options_are_refused(solver, case):
    """A solver asked for an objective or schedule it does not declare refuses with one line
    naming it, instead of answering another question."""
    with pytest.raises(SolverError) as err:
        get_solver(solver)(*build(case))
    message = str(err.value)
    assert "\n" not in message and ("batch-time" in message or "interleaved" in message), message


def test_every_solver_declares_the_batch_time_or_refuses_it():
    """The version-3 cases reach the exact solvers: each declares the batch time (issue 29)."""
    for name in ("dp", "brute", "milp", "milp-highs", "cpsat"):
        assert declared(name, "r04-batch") and declared(name, "r04-batch-uniform"), name


def test_suite_has_both_feasible_and_infeasible_instances():
    values = [optimum(c) for c in CASES]
    assert sum(math.isinf(v) for v in values) >= 10 and sum(math.isfinite(v) for v in values) >= 20
    assert sum(math.isfinite(optimum(c)) for c in CASES if c.endswith(("-cluster", "-uniform"))) >= 4
    moe = [c for c in CASES if c.endswith("-moe")]
    assert all("expertParallel" in build(c)[0].active_features() for c in moe)
    assert sum(math.isfinite(optimum(c)) for c in moe) >= 3 and sum(math.isinf(optimum(c)) for c in moe) >= 1


# ---- each new check fires on a solver that breaks it -------------------------------------

def _brute(problem: Problem, options: Options) -> Result:
    return get_solver("brute")(problem, options)


BREAKERS: dict[str, Callable[[Problem, Options], Result]] = {}


def breaks(check: str):
    def register(func):
        BREAKERS[check] = func
        return func
    return register


@breaks("exact")
def _gives_up(problem, options):
    return replace(_brute(problem, options), status=Status.UNKNOWN, plan=None, tps=math.inf, score=None, bound=0.0)


@breaks("fields")
def _negative_time(problem, options):
    return replace(_brute(problem, options), time_s=-1.0)


@breaks("tolerance")
def _vacuous_certificate(problem, options):
    res = _brute(problem, options)
    return replace(res, tolerance=0.5 * res.tps)


_calls = itertools.count()


@breaks("deterministic")
def _alternates(problem, options):
    res = _brute(problem, options)
    if next(_calls) % 2:
        stages = res.plan.stages
        merged = Plan((replace(stages[0], nodes=tuple(v for s in stages for v in s.nodes),
                               tmpcs={v: s.tmpcs[v] for s in stages for v in s.nodes}),))
        return replace(res, plan=merged if len(stages) > 1 else None, status=Status.FEASIBLE)
    return res


@breaks("no_mutation")
def _touches_the_inputs(problem, options):
    res = _brute(problem, options)
    problem.in_edges.clear()  # a cached view
    return res


@breaks("pickle")
def _unpicklable_stats(problem, options):
    return replace(_brute(problem, options), stats={"callback": lambda: None})


@breaks("json")
def _infinite_objective(problem, options):
    return replace(_brute(problem, options), objective=math.inf)


def test_every_new_check_has_a_breaker():
    assert set(BREAKERS) == set(CHECKS) - set(RESULT_CHECKS)


@pytest.mark.parametrize("check", sorted(BREAKERS))
def test_each_new_check_fires_on_a_solver_that_breaks_it(check):
    case = "r04-default"  # feasible, brute force's plan has two stages
    run = make_run(BREAKERS[check], "brute", case, True, functools.partial(optimum, case))
    with pytest.raises(AssertionError):
        CHECK_FUNCS[check](run)
    sound = make_run(_brute, "brute", case, True, functools.partial(optimum, case))
    CHECK_FUNCS[check](sound)  # and passes on the sound solver


MUTATIONS: dict[str, Callable[[Problem, Options], None]] = {
    "a TMPC's sync map": lambda p, o: p.nodes[1].tmpcs[1][0].sync_fw.update({p.nodes[0].id: 1.0}),
    "a node's extra keys": lambda p, o: p.nodes[0].extra.update(flops=1),
    "a cached view": lambda p, o: p.in_edges.clear(),
    "the options' params": lambda p, o: o.params.update(seen=True),
    "the warm start": lambda p, o: o.warm_start.stages[0].tmpcs.clear(),
}


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_no_mutation_sees_changes_to_each_input(what):
    def solver(problem, options):
        res = _brute(problem, options)
        MUTATIONS[what](problem, options)
        return res

    case = "r04-warm"
    run = make_run(solver, "brute", case, True, functools.partial(optimum, case))
    with pytest.raises(AssertionError):
        check_no_mutation(run)


# ---- the oracle and the infeasibility message ---------------------------------------------

def test_brute_force_matches_unpruned_enumeration_on_tiny_graphs():
    """The oracle itself: branch and bound vs. plain enumeration of every plan via the evaluator."""
    from piper import PlanError, Stage, candidates

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
        got = solve(problem, solver="brute").tps
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
    for name in solver_names():
        result = get_solver(name)(bad, Options())
        assert result.status is Status.INFEASIBLE, f"{name}: {result.status}"
        assert result.plan is None and "layer 1" in result.message and "a + b" in result.message, (name, result.message)

    ok = graph(98.0)  # activation recomp: a + b = 100 = M, alone in the last stage (y = 1)
    for name in solver_names():
        result = get_solver(name)(ok, Options())
        assert result.plan is not None, f"{name}: {result.status} {result.message}"
        assert not evaluate(ok, result.plan).oom
