"""The exact models (milp, milp-highs, cpsat) on clusters of nodes and with uniform plans,
against brute force.

Tiny random instances with the cluster keys (``experiments.lib.instances.random_problem``
plus nodes of G in {1, 2, 4, 8} devices, intra-node bandwidth B_in = B * {4..20} (sometimes
B / {2..4}), all-reduce factor f in {2, 4}, random sharded optimizer state s): every claim
is checked against the brute-force oracle: "optimal" within the result's stated tolerance
of brute force's optimum, "infeasible" only when brute force says so, and the bound never
above the optimum. Uniform plans (``options.uniform``) are checked against a naive
evaluator-scored enumeration of uniform plans, itself checked against brute force. The full
sweep (a few hundred instances per solver) is marked ``slow`` and runs with ``pytest -m
slow`` (or ``--runslow``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import random

import pytest

from baselines.brute import solve_brute
from baselines.exact.model_data import build_model_data
from baselines.exact.parts import node_parts
from experiments.lib.instances import random_problem
from piper import (
    Options,
    Plan,
    Problem,
    Stage,
    evaluate,
    problem_from_dict,
    problem_to_dict,
    solve,
)
from piper.core.problem import CLUSTER_FEATURES
from piper.core.result import Result, Status
from tests.helpers import brute_force_sweep, ordered_partitions, with_random_cluster_keys

EXACT = ("milp-highs", "cpsat", "milp")
#: instances per solver in the fast set (CBC is the slow one)
FAST = {"milp-highs": 80, "cpsat": 80, "milp": 60}
SLOW = 300


@functools.lru_cache(maxsize=None)
def case(i: int) -> Problem:
    rng = random.Random(90_001 * i + 17)
    base = random_problem(7000 + i, n=rng.choice((2, 3, 4, 4, 5)), devices=rng.choice((2, 3, 4, 4, 6, 8)),
                          microbatches=rng.choice((1, 2, 4, 8)), degrees=(1, 2), max_tmpcs=rng.choice((1, 2, 3)))
    return with_random_cluster_keys(base, rng, shard_denominator=32)  # smaller s: fewer infeasible cases


@functools.lru_cache(maxsize=None)
def brute(i: int) -> Result:
    return solve_brute(case(i))


def uniform_options(**kw) -> Options:
    return dataclasses.replace(Options(**kw), uniform=True)


def check_claim(problem: Problem, res: Result, best: Result, what: str) -> None:
    """``res``'s claim is consistent with the brute-force answer ``best``."""
    if best.status == Status.INFEASIBLE:
        assert res.status == Status.INFEASIBLE and res.plan is None, (what, res.status, res.message)
        return
    assert best.status == Status.OPTIMAL
    assert res.status == Status.OPTIMAL, (what, res.status, res.message)
    assert res.plan is not None
    assert abs(res.tps - best.tps) <= res.tolerance + 1e-12 * best.tps, (what, res.tps, best.tps, res.tolerance)
    assert res.bound <= best.tps + 1e-12 * best.tps, (what, res.bound, best.tps)
    assert res.bound <= res.tps
    assert not evaluate(problem, res.plan).oom


def run(solver: str, i: int, options: Options | None = None) -> None:
    p = case(i)
    what = f"{solver} case {i} (G={p.node_size}, k={p.devices}, features={p.active_features()})"
    check_claim(p, solve(p, options or Options(), solver=solver), brute(i), what)


def test_the_cases_exercise_every_extension_and_both_parts():
    cases = [case(i) for i in range(max(FAST.values()))]
    counts = {f: sum(f in p.active_features() for p in cases) for f in CLUSTER_FEATURES}
    assert all(n >= 15 for n in counts.values()), counts
    two_parts = sum(len(node_parts(p)) == 2 for p in cases)
    assert two_parts >= 30 and len(cases) - two_parts >= 10
    statuses = [brute(i).status for i in range(len(cases))]
    assert statuses.count(Status.INFEASIBLE) >= 3 and statuses.count(Status.OPTIMAL) >= 45


#: CBC's run (10-15 s on 2 cores) with the slow sweeps; HiGHS and CP-SAT run it in CI
@pytest.mark.parametrize("solver", [pytest.param("milp", marks=pytest.mark.slow) if s == "milp" else s for s in EXACT])
def test_exact_models_agree_with_brute_force_on_clusters_of_nodes(solver: str) -> None:
    for i in range(FAST[solver]):
        run(solver, i)


@pytest.mark.parametrize("solver", ("milp-highs", "cpsat"))
def test_warm_start_in_one_part_only(solver: str) -> None:
    """Brute force's plan as the warm start: a cutoff in its part, a plain solve in the other
    (and the split over option sequences, which needs a warm start, runs unsplit there)."""
    done = 0
    for i in range(40):
        best = brute(i)
        if best.plan is None or len(node_parts(case(i))) < 2:
            continue
        run(solver, i, Options(warm_start=best.plan))
        run(solver, i, Options(warm_start=best.plan, params={"split": "sequences"}))
        done += 1
    assert done >= 8


def test_instances_without_cluster_keys_keep_one_part_and_their_coefficients():
    """With none of the cluster keys there is one part, budget k, edges and resync at B."""
    for seed in range(10):
        p = random_problem(seed, n=4, devices=8, microbatches=4, degrees=(1, 2))
        assert node_parts(p) == ("inside",)
        data = build_model_data(p, Options())
        assert data.devices == p.devices and data.min_devices == 0 and data.edge_bandwidth == p.bandwidth


def test_spanning_part_uses_the_slow_links():
    """Two layers, k = 4, G = 2, B = 1, B_in = 100 (tests/baselines/test_brute.py's hand case): the
    exact models find the same plan value as brute force."""
    raw = problem_to_dict(random_problem(3, n=2, devices=4, microbatches=4, degrees=(1,)))
    raw.update(devicesPerNode=2, intraNodeBandwidth=raw["bandwidth"] * 50)
    p = problem_from_dict(raw)
    want = solve_brute(p)
    for name in EXACT:
        res = solve(p, solver=name)
        check_claim(p, res, want, name)
        assert set(res.stats["parts"]) == {"inside", "spanning"}


# ----------------------------------------------------------------------------- uniform plans


@functools.lru_cache(maxsize=None)
def uniform_optimum(i: int) -> float:
    """min over uniform plans of the evaluator's TPS (inf when none fits). Given the stages
    and the common (t, d), each stage's time and memory depend only on its own TMPCs, so
    each stage's TMPCs are chosen on their own (the others held at their first TMPC)."""
    p = case(i)
    k, n_mb = p.devices, p.microbatches
    ds = [d for d in range(1, min(k, n_mb) + 1) if n_mb % d == 0]
    best = math.inf
    for parts in ordered_partitions(p, frozenset(nd.id for nd in p.nodes)):
        ts = set.intersection(*(set(p.node(v).tmpcs) for v in p.node_by_id))
        n_st = len(parts)
        for t in sorted(ts):
            for d in ds:
                if n_st * t * d > k or n_st * d > n_mb:
                    continue
                base = {v: p.node(v).tmpcs[t][0].id for v in p.node_by_id}
                worst = 0.0
                for s_idx, part in enumerate(parts):
                    stage_best = math.inf
                    for combo in itertools.product(*[[c.id for c in p.node(v).tmpcs[t]] for v in part]):
                        names = {**base, **dict(zip(part, combo))}
                        plan = Plan(tuple(Stage(tuple(q), d, t, {v: names[v] for v in q}) for q in parts))
                        st = evaluate(p, plan).stages[s_idx]
                        if not st.oom:
                            stage_best = min(stage_best, st.tps)
                    worst = max(worst, stage_best)
                best = min(best, worst)
    return best


def check_uniform(solver: str, i: int, options: Options) -> None:
    p = case(i)
    want = uniform_optimum(i)
    res = solve(p, options, solver=solver)
    what = f"{solver} uniform case {i} (G={p.node_size}, k={p.devices})"
    if math.isinf(want):
        assert res.status == Status.INFEASIBLE and res.plan is None, (what, res.status, res.message)
        return
    assert res.status == Status.OPTIMAL, (what, res.status, res.message)
    assert len({(st.t, st.d) for st in res.plan.stages}) == 1, (what, res.plan)
    assert abs(res.tps - want) <= res.tolerance + 1e-12 * want, (what, res.tps, want, res.tolerance)
    assert res.bound <= want * (1 + 1e-12), (what, res.bound, want)


def test_uniform_oracle_agrees_with_brute_force():
    for i in range(40):
        want = uniform_optimum(i)
        res = solve_brute(case(i), uniform_options())
        if math.isinf(want):
            assert res.status == Status.INFEASIBLE
        else:
            assert res.status == Status.OPTIMAL and math.isclose(res.tps, want, rel_tol=1e-9)


@pytest.mark.parametrize("solver", EXACT)
def test_uniform_plans_agree_with_the_oracle(solver: str) -> None:
    count = {"milp": 25, "milp-highs": 40, "cpsat": 40}[solver]
    differs = 0
    for i in range(count):
        check_uniform(solver, i, uniform_options())
        differs += brute(i).plan is not None and uniform_optimum(i) > brute(i).tps * (1 + 1e-9)
    assert differs >= 3  # uniformity binds on some cases


@pytest.mark.parametrize("solver", ("milp-highs", "cpsat"))
def test_uniform_split_and_warm_start(solver: str) -> None:
    """A non-uniform warm start is ignored (not used as a cutoff); the split over option
    sequences only enumerates constant sequences."""
    done = 0
    for i in range(40):
        best = brute(i)
        if best.plan is None:
            continue
        check_uniform(solver, i, uniform_options(warm_start=best.plan))
        if len({(st.t, st.d) for st in best.plan.stages}) == 1:
            check_uniform(solver, i, uniform_options(warm_start=best.plan, params={"split": "sequences"}))
        done += 1
    assert done >= 20


# ----------------------------------------------------------------------------- full sweep


@pytest.mark.slow
@pytest.mark.parametrize("solver", EXACT)
def test_clusters_of_nodes_full_sweep(solver: str) -> None:
    counts = brute_force_sweep(SLOW, lambda i: run(solver, i), brute)
    for i in range(100):
        check_uniform(solver, i, uniform_options())
    assert counts["optimal"] >= 150 and counts["infeasible"] >= 10, counts
    print(f"{solver}: {counts} agree with brute force; 100 uniform cases agree with the oracle")
