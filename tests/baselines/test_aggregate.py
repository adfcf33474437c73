"""The aggregated exact model (solver ``aggregate``, docs/formulations.md §11) against brute
force and Piper's DP on tiny chains of identical layers, both objectives, uniform and free 1F1B
plans; its refusals; its time limit.  The expected values are brute force's (its own
enumeration, baselines/brute.py) and the DP's, never the model's own numbers.  A fast subset
runs in CI; the sweeps (a few hundred instances) with ``-m slow``."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from piper import Options, Problem, problem_from_dict, solve
from piper.core.checks import check_result
from piper.core.errors import SolverError
from piper.core.result import Status
from experiments.lib.instances import with_free_iteration_keys, with_iteration_keys
from tests.baselines.chains import identical_chain
from tests.dp.identical_chains import identical_chain_problem, worked_check_chain

OBJECTIVES = ("tps", "batch-time")


def _options(objective: str, uniform: bool, **kw) -> Options:
    return Options(objective=objective, uniform=uniform, threads=1, **kw)


def aggregate_disagreement(problem: Problem, options: Options, **params) -> str | None:
    """Why ``aggregate`` (with the knobs ``params``) disagrees with brute force and the DP (None
    when it agrees): the same status; an optimal plan within the result's tolerance of brute's
    optimum (and of the DP's, when the DP prices the instance); its claim and bound consistent (check_result with brute's optimum)."""
    agg = solve(problem, replace(options, params=params), solver="aggregate")
    brute = solve(problem, options, solver="brute")
    try:
        dp = solve(problem, options, solver="dp")
    except SolverError:  # iteration keys outside what the DP prices (piper/dp/iteration.py)
        dp = None
    name = problem.extra.get("name", "instance")
    optimum = brute.value if brute.plan is not None else math.inf
    issues = check_result(problem, options, agg, optimum=optimum)
    if issues:
        return f"{name}: {[str(i) for i in issues]}"
    if agg.status != brute.status:
        return f"{name}: aggregate {agg.status} {agg.value}, brute {brute.status} {optimum}"
    if brute.plan is None:
        return None if agg.plan is None else f"{name}: brute infeasible, aggregate {agg.value}"
    slack = agg.tolerance + 1e-9 * abs(optimum)
    if not optimum - 1e-9 * abs(optimum) <= agg.value <= optimum + slack:
        return f"{name}: aggregate {agg.value} (tolerance {agg.tolerance}), brute {optimum}"
    if not agg.bound <= optimum * (1 + 1e-9):
        return f"{name}: aggregate's bound {agg.bound} > brute's optimum {optimum}"
    if dp is not None and dp.status == Status.OPTIMAL and abs(dp.value - agg.value) > slack:
        return f"{name}: aggregate {agg.value}, dp {dp.value}"
    return None


def _case(seed: int) -> tuple[Problem, str, bool]:
    """Seed -> (instance, objective, uniform): even seeds from the DP's generator (tests/dp),
    odd ones from tests/baselines/chains.py (more end nodes, TMPC-dependent sync bytes)."""
    problem = identical_chain_problem(seed) if seed % 2 == 0 else identical_chain(seed)
    return problem, OBJECTIVES[(seed // 2) % 2], (seed // 4) % 2 == 1


@pytest.mark.parametrize("seed", range(20))
def test_agrees_with_brute_force_and_dp(seed: int) -> None:
    problem, objective, uniform = _case(seed)
    assert aggregate_disagreement(problem, _options(objective, uniform)) is None


@pytest.mark.parametrize("seed", range(2, 18, 2))
def test_free_model_agrees(seed: int) -> None:
    """max_sequences = 0: free plans by one model that chooses each stage's (t, d) and y,
    instead of one model per sequence of options."""
    problem, objective, _ = _case(seed + 1)
    assert aggregate_disagreement(problem, _options(objective, False), max_sequences=0) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 220))
@pytest.mark.parametrize("uniform", (False, True))
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_agrees_sweep(seed: int, objective: str, uniform: bool) -> None:
    problem, _, _ = _case(seed)
    assert aggregate_disagreement(problem, _options(objective, uniform)) is None
    if not uniform and seed % 4 == 0:
        assert unsound(problem, _options(objective, False, time_limit_s=10), max_sequences=0) is None


def _keyed_case(seed: int) -> tuple[Problem, str, bool]:
    """:func:`_case` with the iteration keys of docs/problem.md §10 (docs/formulations.md §12), the same
    on every inner layer: every third seed in the form the DP prices too (one set per layer and
    degree), the others drawn per TMPC (h, o, o_s differ between a layer's TMPCs; the DP refuses)."""
    problem, objective, uniform = _case(seed)
    rng = random.Random(90_000 + seed)
    if seed % 3 == 0:
        return with_iteration_keys(problem, rng, same_per_position=True), objective, uniform
    return with_free_iteration_keys(problem, rng, same_per_position=True), objective, uniform


@pytest.mark.parametrize("seed", range(12))
def test_iteration_keys_agree_with_brute_force(seed: int) -> None:
    problem, objective, uniform = _keyed_case(seed)
    assert problem.has_iteration_keys
    assert aggregate_disagreement(problem, _options(objective, uniform)) is None
    res = solve(problem, _options(objective, uniform), solver="aggregate")
    assert res.status != Status.OPTIMAL or res.tolerance <= 1e-5 * res.value  # a tight proof, not a loose bound


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12, 212))
def test_iteration_keys_sweep(seed: int) -> None:
    problem, objective, uniform = _keyed_case(seed)
    assert aggregate_disagreement(problem, _options(objective, uniform)) is None


def unsound(problem: Problem, options: Options, **params) -> str | None:
    """What is wrong with ``aggregate``'s result under a time limit (None: nothing): it passes
    check_result against brute force's optimum; "optimal" is that optimum within the tolerance;
    "feasible" has a bound at most the optimum. (The one free model, max_sequences = 0, is weak
    on the batch time: on some 5-layer chains it proves nothing in a minute.)"""
    agg = solve(problem, replace(options, params=params), solver="aggregate")
    brute = solve(problem, replace(options, time_limit_s=None), solver="brute")
    optimum = brute.value if brute.plan is not None else math.inf
    issues = check_result(problem, options, agg, optimum=optimum)
    if issues:
        return str([str(i) for i in issues])
    if agg.status == Status.OPTIMAL and not abs(agg.value - optimum) <= agg.tolerance + 1e-9 * optimum:
        return f"aggregate optimal {agg.value}, brute {optimum}"
    if agg.status == Status.INFEASIBLE and brute.plan is not None:
        return f"aggregate infeasible, brute {optimum}"
    if agg.status == Status.FEASIBLE and not agg.bound <= optimum * (1 + 1e-9):
        return f"aggregate's bound {agg.bound} > brute's optimum {optimum}"
    return None


def test_worked_check() -> None:
    """docs/problem.md §9.4: 4 layers of p = 1 on 2 devices, N = 4, d = 1 (no data
    parallelism): the best 1F1B plan has batch time 10 (two stages of two layers) and TPS 2;
    with d = 2 allowed, one stage on both devices: batch time 4 (4 / 2) = 8."""
    problem = worked_check_chain()
    batch = solve(problem, _options("batch-time", False, data_parallel=False), solver="aggregate")
    tps = solve(problem, _options("tps", True, data_parallel=False), solver="aggregate")
    both = solve(problem, _options("batch-time", False), solver="aggregate")
    assert batch.status == tps.status == both.status == Status.OPTIMAL
    assert batch.value == pytest.approx(10.0) and tps.value == pytest.approx(2.0)
    assert both.value == pytest.approx(8.0)


def _dag() -> Problem:
    tmpc = {"id": "a", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 0, "memoryUsageB": 0}
    nodes = [{"id": i, "TMPCs": {"1": [dict(tmpc, syncTimeFw={str(u): 0 for u in ins},
                                            syncTimeBw={str(v): 0 for v in outs})]}}
             for i, ins, outs in ((0, (), (1, 2)), (1, (0,), (3,)), (2, (0,), (3,)), (3, (1, 2), ()))]
    edges = [{"sourceId": u, "destId": v, "communicationCost": 0} for u, v in ((0, 1), (0, 2), (1, 3), (2, 3))]
    return problem_from_dict({"maxDevices": 2, "maxMemoryPerDevice": 1, "bandwidth": 1, "mbsInBatch": 2,
                              "nodes": nodes, "edges": edges})


def _single_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_refuses_other_graphs_and_interleaved_plans() -> None:
    with pytest.raises(SolverError) as exc:
        solve(_dag(), Options(), solver="aggregate")
    assert "chain" in _single_line(exc)
    # a chain whose layers all differ: the longest identical run leaves too many end nodes
    raw = {"maxDevices": 2, "maxMemoryPerDevice": 100, "bandwidth": 1, "mbsInBatch": 2,
           "nodes": [{"id": i, "TMPCs": {"1": [{"id": "a", "timePerSample": float(i + 1), "parameterSize": 0,
                                                "memoryUsageA": 0, "memoryUsageB": 0,
                                                "syncTimeFw": {str(i - 1): 0} if i else {},
                                                "syncTimeBw": {str(i + 1): 0} if i < 11 else {}}]}}
                     for i in range(12)],
           "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 0} for i in range(11)]}
    with pytest.raises(SolverError) as exc:
        solve(problem_from_dict(raw), Options(), solver="aggregate")
    assert "end nodes" in _single_line(exc)
    with pytest.raises(SolverError) as exc:
        solve(worked_check_chain(), Options(objective="batch-time", schedule="any", max_virtual_stages=2),
              solver="aggregate")
    assert "1f1b" in _single_line(exc).lower()


def test_time_limit_gives_no_false_certificate() -> None:
    """With no time at all nothing is proven: the status is feasible or unknown, never optimal."""
    problem = identical_chain_problem(3, n_inner=5)
    opts = _options("batch-time", False, time_limit_s=1e-6)
    result = solve(problem, opts, solver="aggregate")
    assert result.status in (Status.FEASIBLE, Status.UNKNOWN)
    assert not check_result(problem, opts, result)


def test_warm_start_is_beaten_or_kept() -> None:
    """A warm start (brute force's TPS optimum) under the batch-time objective: the answer is
    brute force's batch-time optimum, never worse than the warm start."""
    problem = identical_chain_problem(6)
    brute_tps = solve(problem, _options("tps", False), solver="brute")
    assert brute_tps.plan is not None
    opts = _options("batch-time", False, warm_start=brute_tps.plan)
    agg = solve(problem, opts, solver="aggregate")
    brute = solve(problem, _options("batch-time", False), solver="brute")
    assert agg.status == Status.OPTIMAL
    assert agg.value <= brute_tps.batch_time + 1e-9
    assert abs(agg.value - brute.value) <= agg.tolerance + 1e-9 * brute.value


def test_memory_on_a_grid_still_proves() -> None:
    """A front-end workload (a tiny transformer, memory in float bytes whose exact scaling passes
    2^53): memory is rounded down onto a grid, which keeps the model a relaxation, so the optimum
    is still proven; it agrees with brute force and the DP."""
    from experiments.lib.suites import models_suite

    problem = models_suite()[4].problem  # toy-l3-h1536-swiglu-2x4: 6 layers, 2 nodes of 4 devices
    for objective in OBJECTIVES:
        opts = _options(objective, True)
        assert aggregate_disagreement(problem, opts) is None
        result = solve(problem, opts, solver="aggregate")
        assert result.status == Status.OPTIMAL
        modelled = [p["verdict"] for p in result.stats["parts"] if p["solves"]]
        assert modelled and all("grid" in v for v in modelled), modelled


def test_memory_integers_round_down() -> None:
    """Exact when the scaled limit stays below 2^53; else every coefficient rounded down and the
    limit 2^40, so that any sum within the limit stays within it in integers."""
    from fractions import Fraction

    from baselines.aggregate.model import MEMORY_GRID_BITS, memory_integers

    ints, limit, exact = memory_integers([Fraction(3), Fraction(5, 2)], Fraction(10))
    assert exact and (ints, limit) == ([6, 5], 20)
    values = [Fraction(1, 3**k) * 10**9 for k in range(1, 6)]
    m = Fraction(79106749235.2)
    ints, limit, exact = memory_integers(values, m)
    assert not exact and limit == 2**MEMORY_GRID_BITS
    unit = m / 2**MEMORY_GRID_BITS
    assert all(i <= v / unit < i + 1 for i, v in zip(ints, values))


def test_precision_is_capped_where_cp_sat_refuted_a_feasible_part() -> None:
    """OR-Tools 9.15's presolve probing calls this feasible part (seed 20 of the keyed sweep, 3 uniform
    stages of t = d = 1) INFEASIBLE at 40 bits of time precision, the crude unit's bits before; the
    aggregated models now use at most 30 (CRUDE_BITS, params['precision_bits'], docs/formulations.md
    §11.4), where CP-SAT with the models' parameters solves it, and the solver finds brute force's
    optimum. (A part wrongly refuted made the solver answer "infeasible".)"""
    from ortools.sat.python import cp_model

    from baselines.aggregate.chain import detect_chain
    from baselines.aggregate.model import AggregateModel
    from baselines.aggregate.search import AGGREGATE_PARAMETERS, CRUDE_BITS, _solver
    from baselines.aggregate.solver import _crude_bound, _model_limit, _parts
    from baselines.cpsat.params import MAX_PRECISION_BITS
    from piper.core.options import candidates

    assert CRUDE_BITS == MAX_PRECISION_BITS == 30
    assert AGGREGATE_PARAMETERS == {"presolve_inclusion_work_limit": 0}
    problem, objective, uniform = _keyed_case(20)
    options = _options(objective, uniform)
    chain = detect_chain(problem)
    parts = _parts(problem, candidates(problem, options), chain, True, 2000)
    part = next(p for p in parts if p.space.label() == "t=1 d=1 L=3 inside")
    crude = _crude_bound(problem, chain, parts, False)

    def status(bits: int) -> int:
        model = AggregateModel(problem.microbatches, _model_limit(problem, chain), chain, part.space, part.inner,
                               part.ends, objective, crude / 2.0**bits, None)
        return _solver(options, 30.0, False).Solve(model.model)

    assert status(40) == cp_model.INFEASIBLE  # the bug (the cap may be revisited once this fails)
    assert status(CRUDE_BITS) == cp_model.OPTIMAL
    assert aggregate_disagreement(problem, options) is None
    assert solve(problem, options, solver="aggregate").status == Status.OPTIMAL
    with pytest.raises(SolverError, match=r"precision_bits'\] must lie in 16\.\.30, got 31"):
        solve(problem, replace(options, params={"precision_bits": 31}), solver="aggregate")
