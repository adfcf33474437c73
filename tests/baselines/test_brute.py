"""Brute force on clusters of nodes (G, B_in, f, sharded optimizer state) against the evaluator.

The brute force keeps its own formulas; here it is checked against a second, deliberately
naive oracle that scores *every* plan of a tiny instance with the evaluator.
"""

import itertools
import math
import random

import pytest

from experiments.lib.instances import random_problem
from piper import Plan, Problem, Stage, evaluate, problem_from_dict, solve
from piper.core.problem import CLUSTER_FEATURES
from tests.helpers import ordered_partitions, tmpc, with_random_cluster_keys, workload


def evaluator_optimum(problem: Problem) -> float:
    """min over every structurally valid plan of the evaluator's TPS (inf when none fits)."""
    k, n_mb = problem.devices, problem.microbatches
    ds = [d for d in range(1, min(k, n_mb) + 1) if n_mb % d == 0]
    best = math.inf
    for parts in ordered_partitions(problem, frozenset(nd.id for nd in problem.nodes)):
        per_stage = []
        for part in parts:
            ts = set.intersection(*(set(problem.node(v).tmpcs) for v in part))
            per_stage.append([(t, d) for t in sorted(ts) for d in ds if t * d <= k])
        for degrees in itertools.product(*per_stage):
            if sum(t * d for t, d in degrees) > k or sum(d for _, d in degrees) > n_mb:
                continue
            choices = [[c.id for c in problem.node(v).tmpcs[t]] for part, (t, _) in zip(parts, degrees) for v in part]
            flat = [v for part in parts for v in part]
            for combo in itertools.product(*choices):
                names = dict(zip(flat, combo))
                plan = Plan(tuple(Stage(tuple(part), d, t, {v: names[v] for v in part})
                                  for part, (t, d) in zip(parts, degrees)))
                best = min(best, evaluate(problem, plan).tps)
    return best


def tiny_cluster_cases(count: int, seed: int = 7):
    rng = random.Random(seed)
    for i in range(count):
        base = random_problem(1000 + i, n=rng.choice((2, 3, 3, 4)), devices=rng.choice((2, 3, 4, 4, 6, 8)),
                              microbatches=rng.choice((1, 2, 4, 8)), degrees=(1, 2))
        yield with_random_cluster_keys(base, rng)


CASES = list(tiny_cluster_cases(300))


def test_the_random_cases_exercise_every_extension():
    spans = fits = 0
    for p in CASES:
        assert set(p.active_features()) <= set(CLUSTER_FEATURES)
        spans += p.node_size < p.devices
        fits += p.node_size >= p.devices
    counts = {f: sum(f in p.active_features() for p in CASES) for f in CLUSTER_FEATURES}
    assert all(n >= 40 for n in counts.values()), counts
    assert spans >= 40 and fits >= 40


def test_brute_force_equals_the_evaluators_optimum_on_tiny_cluster_instances():
    disagreements = []
    optimal = infeasible = 0
    for p in CASES:
        res = solve(p, solver="brute")
        want = evaluator_optimum(p)
        if math.isinf(want):
            infeasible += 1
            ok = res.status.value == "infeasible" and res.plan is None
        else:
            optimal += 1
            ok = res.status.value == "optimal" and math.isclose(res.tps, want, rel_tol=1e-9, abs_tol=1e-12)
            # its own objective is the evaluator's score of its plan
            ok = ok and math.isclose(res.objective, res.tps, rel_tol=1e-9, abs_tol=1e-12)
        if not ok:
            disagreements.append((p.extra.get("name"), p.active_features(), res.status.value, res.tps, want))
    assert not disagreements, disagreements[:5]
    assert optimal >= 150 and infeasible >= 5, (optimal, infeasible)


def test_brute_force_is_no_worse_than_random_plans_on_larger_instances():
    rng = random.Random(11)
    for i in range(25):
        p = with_random_cluster_keys(random_problem(2000 + i, n=rng.choice((4, 5)), devices=8, microbatches=4, degrees=(1, 2)), rng)
        res = solve(p, solver="brute")
        order = list(p.topological_order)
        for _ in range(30):
            cut = rng.randint(1, len(order) - 1)
            parts = [order[:cut], order[cut:]]
            stages = []
            for part in parts:
                ts = sorted(set.intersection(*(set(p.node(v).tmpcs) for v in part)))
                if not ts:
                    break
                t = rng.choice(ts)
                stages.append(Stage(tuple(part), rng.choice((1, 2)), t,
                                    {v: rng.choice(p.node(v).tmpcs[t]).id for v in part}))
            else:
                score = evaluate(p, Plan(tuple(stages)))
                assert res.tps <= score.tps * (1 + 1e-9)


def test_brute_force_uses_the_node_boundary():
    """Two layers, k = 4, G = 2, B = 1, B_in = 100: the fast intra-node links decide the plan."""
    nodes = {0: {1: [tmpc(p=8.0, w=0.0, bw={"1": 0.0})]}, 1: {1: [tmpc(p=8.0, w=0.0, fw={"0": 0.0})]}}
    raw = workload(nodes, [(0, 1, 10.0)], k=4, N=4, B=1.0)
    raw.update(devicesPerNode=2, intraNodeBandwidth=100.0)
    p = problem_from_dict(raw)
    res = solve(p, solver="brute")
    # one stage on 2 devices (fits in a node, no cut edge): (8 + 8) / 2 = 8; two stages of d = 1
    # inside one node: 8 + 2 * 10 / 100 = 8.2; four devices span nodes: edges at B = 1 cost 20 / d
    # on 2 + 2: 4 + 10 = 14; one stage of d = 4: 16 / 4 = 4 (no cut edge, resync 0 since w = 0)
    assert res.tps == 4.0 and res.plan.stages[0].d == 4
    raw["nodes"][0]["TMPCs"]["1"][0]["parameterSize"] = 40.0
    raw["nodes"][1]["TMPCs"]["1"][0]["parameterSize"] = 40.0
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 0.0
    p = problem_from_dict(raw)
    # now d = 4 pays a resync across nodes: f (3) 80 / (4 * 4) = 60 bytes at B = 1 -> 4 + 15 = 19;
    # d = 2 (one node): 4 (1) 80 / (2 * 4) = 40 bytes at 100 -> 8 + 0.4 = 8.4
    res = solve(p, solver="brute")
    # and two stages of d = 1 inside one node resync nothing: 8 + 2 * 10 / 100 = 8.2 wins
    assert res.tps == pytest.approx(8.2) and [s.d for s in res.plan.stages] == [1, 1]
    assert res.score.fits_in_node
    assert evaluate(p, res.plan).tps == res.tps


def test_brute_force_with_a_slow_intra_node_link_prefers_a_plan_that_spans_nodes():
    """B_in = 1 < B = 10, G = 2 < k = 3, N = 2; memory forces two stages (b = 6 each, M = 10).

    (t=1, t=1): 2 devices, inside one node, its edge (2 * 10 bytes) at B_in: 8 + 20 / 1 = 28
    (t=1, t=2): 3 devices span nodes, the edge at B: max(2 + 2, 9 + 2) = 11, the optimum
    (scoring the first plan at B would give 10 < 11: the node boundary must be honoured)
    """
    nodes = {0: {1: [tmpc(p=2.0, b=6.0, bw={"1": 0.0})]},
             1: {1: [tmpc(p=8.0, b=6.0, fw={"0": 0.0})], 2: [tmpc(p=9.0, b=6.0, fw={"0": 0.0})]}}
    raw = workload(nodes, [(0, 1, 10.0)], k=3, N=2, B=10.0, M=10.0)
    raw.update(devicesPerNode=2, intraNodeBandwidth=1.0)
    p = problem_from_dict(raw)
    res = solve(p, solver="brute")
    assert res.tps == 11.0 and res.objective == 11.0 and not res.score.fits_in_node
    assert [(s.d, s.t) for s in res.plan.stages] == [(1, 1), (1, 2)]
