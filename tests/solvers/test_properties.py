"""Metamorphic property tests on random instances, for the exact solvers.

Facts that hold for the true optimum whatever the instance:
* it is no worse than any valid plan (random plans drawn here);
* more memory, more devices or more bandwidth never make it worse;
* an ablation (no DP, no TP, no AR) never makes it better.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.lib.instances import random_problem
from piper import NO_AR, Options, Plan, Problem, Stage, candidates, evaluate, solve

EXACT = ["brute", "dp"]


def random_plan(problem: Problem, rng: random.Random) -> Plan | None:
    """A random structurally valid plan (may be OOM), or None if the draw failed."""
    cand = candidates(problem)
    order = list(problem.topological_order)
    # contiguous segments of a topological order are always in pipeline order
    cuts = sorted(rng.sample(range(1, len(order)), rng.randint(0, len(order) - 1))) if len(order) > 1 else []
    bounds = [0, *cuts, len(order)]
    devices, d_left = problem.devices, problem.microbatches
    stages = []
    for a, b in zip(bounds, bounds[1:]):
        nodes = tuple(order[a:b])
        ts = [t for t in cand.ts if all(t in cand.tmpcs[v] for v in nodes)]
        opts = [(t, d) for t in ts for d in cand.ds if t * d <= devices and d <= d_left]
        if not opts:
            return None
        t, d = rng.choice(opts)
        devices -= t * d
        d_left -= d
        stages.append(Stage(nodes, d, t, {v: rng.choice(cand.tmpcs[v][t])[1].id for v in nodes}))
    return Plan(tuple(stages))


def opt(problem: Problem, solver: str, options: Options | None = None) -> float:
    return solve(problem, options or Options(), solver=solver).tps


def le(a: float, b: float) -> bool:
    """a <= b with a relative tolerance (inf <= inf)."""
    return a <= b * (1 + 1e-9) or math.isinf(b)


SEEDS = st.integers(min_value=0, max_value=10**6)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def exact_property(test):
    """``test(solver, seed)`` as a property: for every solver of EXACT, on 25 seeds drawn by hypothesis."""
    return pytest.mark.parametrize("solver", EXACT)(SETTINGS(given(seed=SEEDS)(test)))


def small_problem(seed: int) -> Problem:
    """3-6 layers, t in {1, 2}, at most 2 TMPCs: cheap enough to solve several times per seed."""
    return random_problem(seed, n=3 + seed % 4, degrees=(1, 2), max_tmpcs=2)


@exact_property
def test_optimum_beats_random_plans(solver, seed):
    problem = random_problem(seed, n=3 + seed % 4, degrees=(1, 2, 4), max_tmpcs=3)
    best = opt(problem, solver)
    rng = random.Random(seed)
    for _ in range(30):
        plan = random_plan(problem, rng)
        if plan is not None:
            assert le(best, evaluate(problem, plan).tps)


@exact_property
def test_more_resources_never_hurt(solver, seed):
    p = small_problem(seed)
    base = opt(p, solver)
    assert le(opt(p.with_cluster(memory=p.memory_per_device * 1.5), solver), base)
    assert le(opt(p.with_cluster(devices=p.devices + 1), solver), base)
    assert le(opt(p.with_cluster(bandwidth=p.bandwidth * 2), solver), base)


@exact_property
def test_ablations_never_help(solver, seed):
    p = small_problem(seed)
    base = opt(p, solver)
    for o in (Options(data_parallel=False), Options(tensor_parallel=False), Options(exclude_tmpcs=NO_AR)):
        assert le(base, opt(p, solver, o))
